"""tests/support/faultnet.py, and the client.local.address binding it relies on.

An echo server stands for a node; test sockets bound to 127.0.1.N stand for node N's
outbound connections, unbound ones (127.0.0.1) for clients.
"""
from __future__ import annotations

import asyncio
import socket
import socketserver
import struct
import threading
import time

import pytest

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from core.protocol.codegen import Writer
from core.raft.config import QuorumConfig
from tests.support.faultnet import CLIENT, FaultNet

GREETING = b"hello\n"


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        if self.server.greet:
            self.request.sendall(GREETING)
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionError:     # the proxy resets connections on purpose
            pass


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, greet=False):
        super().__init__(("127.0.0.1", 0), _Echo)
        self.greet = greet
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self):
        return self.server_address[1]


@pytest.fixture
def net():
    with FaultNet(seed=1) as n:
        yield n


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.shutdown()
    server.server_close()


def connect(port: int, source: int | None = None, timeout: float = 2.0,
            host: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    if source is not None:
        s.bind((FaultNet.address_of(source), 0))
    s.settimeout(timeout)
    s.connect((host, port))
    return s


def roundtrip(s: socket.socket, data: bytes = b"ping") -> bytes:
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def is_dead(s: socket.socket, timeout: float = 2.0) -> bool:
    """The peer closed or reset the connection (an open, silent one times out instead)."""
    s.settimeout(timeout)
    try:
        s.sendall(b"x")
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def refused(port: int, source: int | None = None) -> bool:
    """A new connection is reset: at connect, or (the handshake being the kernel's) just after."""
    try:
        s = connect(port, source)
    except ConnectionError:
        return True
    with s:
        return is_dead(s)


# ---------------------------------------------------------------------- client.local.address

def test_node_addresses_are_loopback_without_setup():
    # All of 127/8 is loopback on Linux: binding 127.0.1.N needs no interface configuration.
    server = socket.socket()
    server.bind(("127.0.1.200", 0))
    server.listen()
    with server, connect(server.getsockname()[1], source=7, host="127.0.1.200") as c:
        _, peer = server.accept()
        assert peer[0] == "127.0.1.7"
        assert c.getsockname()[0] == "127.0.1.7"


def _api_versions_answer(frame: bytes) -> bytes:
    _, version, corr = struct.unpack_from(">hhi", frame)
    api = m.API[18]
    R = m.ApiVersionsResponse
    body = R(error_code=0, throttle_time_ms=0, api_keys=[
        R.ApiVersion(api_key=k, min_version=a.min_version, max_version=a.max_version)
        for k, a in sorted(m.API.items())])
    w = Writer()
    m.RESPONSE_HEADER.encode_into(0, m.ResponseHeader(correlation_id=corr), w)
    api.response.encode_into(version, body, w)
    data = w.getvalue()
    return struct.pack(">i", len(data)) + data


@pytest.mark.parametrize("local", ["127.0.0.9", None])
def test_broker_connection_binds_local_address(local):
    peers = []

    async def main():
        async def handle(reader, writer):
            peers.append(writer.get_extra_info("peername")[0])
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            writer.write(_api_versions_answer(await reader.readexactly(size)))
            await writer.drain()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port, local_address=local)
        await conn.connect()
        await conn.close()
        server.close()

    asyncio.run(main())
    assert peers == ["127.0.0.9" if local else "127.0.0.1"]


def test_quorum_config_carries_the_local_address():
    assert QuorumConfig.from_properties({"client.local.address": "127.0.1.3"}).local_address == "127.0.1.3"
    assert QuorumConfig.from_properties({"client.local.address": None}).local_address is None


# ---------------------------------------------------------------------- the proxy

def test_forwards_and_knows_the_source(net, echo):
    port = net.expose(2, echo.port)
    with connect(port, source=1) as a, connect(port) as c:
        assert roundtrip(a, b"from node 1") == b"from node 1"
        assert roundtrip(c, b"from a client") == b"from a client"
    assert net.links_seen() == {(1, 2), (CLIENT, 2)}
    assert net.counters()[("bytes", 2, 1)] == len(b"from node 1")


def test_delay_applies_to_its_link_only(net, echo):
    port = net.expose(2, echo.port)
    net.delay(1, 2, 150)
    with connect(port, source=1) as slow, connect(port, source=3) as fast:
        t = time.monotonic()
        assert roundtrip(slow) == b"ping"
        assert time.monotonic() - t >= 0.29       # 150 ms each way
        t = time.monotonic()
        assert roundtrip(fast) == b"ping"
        assert time.monotonic() - t < 0.1


def test_blackhole_holds_bytes_keeps_the_connection_and_delivers_on_heal(net, echo):
    port = net.expose(2, echo.port)
    with connect(port, source=1) as s:
        assert roundtrip(s) == b"ping"
        net.blackhole(1, 2)
        s.sendall(b"held")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):     # no answer, and no close either
            s.recv(10)
        net.heal(1, 2)
        s.settimeout(2)
        assert s.recv(10) == b"held"


def test_blackhole_is_per_direction(net):
    server = EchoServer(greet=True)
    try:
        port = net.expose(2, server.port)
        net.blackhole(1, 2, both=False)         # 1->2 held, 2->1 flows
        with connect(port, source=1) as s:
            assert s.recv(len(GREETING)) == GREETING
            s.sendall(b"ping")
            s.settimeout(0.5)
            with pytest.raises(TimeoutError):
                s.recv(10)
    finally:
        server.shutdown()
        server.server_close()


def test_cut_resets_existing_connections_and_refuses_new_ones(net, echo):
    port = net.expose(2, echo.port)
    with connect(port, source=1) as s, connect(port, source=3) as other:
        assert roundtrip(s) == b"ping"
        net.cut(2, 1)
        s.settimeout(2)         # reset at once, without waiting for traffic
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
        assert roundtrip(other) == b"ping"
    assert refused(port, source=1)
    net.heal(2, 1)
    with connect(port, source=1) as s:
        assert roundtrip(s) == b"ping"
    assert net.counters()[("refused", 1, 2)] == 1


def test_drop_resets_instead_of_losing_bytes_mid_stream(net, echo):
    port = net.expose(2, echo.port)
    net.drop(1, 2, 1.0)
    with connect(port, source=1) as s:
        s.sendall(b"lost")
        assert is_dead(s)
    assert net.counters()[("dropped", 1, 2)] == 1
    net.drop(1, 2, 0.0)
    with connect(port, source=1) as s:
        assert roundtrip(s) == b"ping"


def test_partition_isolate_and_heal_all(net, echo):
    ports = {n: net.expose(n, echo.port) for n in (1, 2, 3)}
    net.partition([1], [2, 3])
    with connect(ports[2], source=1) as s12, connect(ports[2], source=3) as s32, \
            connect(ports[1], source=2) as s21:
        assert roundtrip(s32) == b"ping"
        for s in (s12, s21):
            s.sendall(b"ping")
            s.settimeout(0.3)
            with pytest.raises(TimeoutError):
                s.recv(4)
        net.heal_all()
        s12.settimeout(2)
        assert s12.recv(4) == b"ping"
    net.isolate(3)
    with connect(ports[3], source=1) as s13, connect(ports[3]) as client:
        assert roundtrip(client) == b"ping"     # clients still reach an isolated node
        s13.sendall(b"ping")
        s13.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s13.recv(4)
    assert [text for _, text in net.events][:2] == ["partition [1] | [2, 3] (blackhole)", "heal all"]


def test_a_down_upstream_is_a_refused_connection(net):
    gone = EchoServer()
    port = gone.port
    gone.shutdown()
    gone.server_close()
    proxy = net.expose(1, port)
    assert refused(proxy)
    assert net.counters()[("refused", CLIENT, 1)] == 1
