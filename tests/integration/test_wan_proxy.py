"""regions/wan.py's WanProxy on real loopback sockets: latency, bandwidth, a bandwidth shared
between connections, integrity, half-close, backpressure, refusal, cut and close.

The upstream is an echo server that, at EOF, answers with a trailer naming the sha256 of
everything it received, then closes: a client that half-closes can check the server saw all
of its bytes before the EOF. Timing bounds are generous below (the machine is shared and
noisy) but exact above: the model's delays are lower bounds a proxy must never beat.
"""
from __future__ import annotations

import hashlib
import os
import socket
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from regions.wan import CHUNK_BYTES, WanPipe, WanProxy, run_proxies

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.timeout(60)]

MBIT = 1_000_000
CLOSED = (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError)


@pytest.fixture
def anyio_backend():
    return "asyncio"


def trailer(received: bytes) -> bytes:
    return b"|eof:" + hashlib.sha256(received).hexdigest().encode()


async def echo(stream: SocketStream) -> None:
    async with stream:
        digest = hashlib.sha256()
        try:
            while True:
                try:
                    data = await stream.receive()
                except anyio.EndOfStream:
                    break
                digest.update(data)
                await stream.send(data)
            await stream.send(b"|eof:" + digest.hexdigest().encode())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


async def reset_on_first_bytes(stream: SocketStream) -> None:
    async with stream:
        await stream.receive()
        stream.extra(SocketAttribute.raw_socket).setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


async def serve_tcp(handler, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        task_status.started(listener.extra(SocketAttribute.local_port))
        await listener.serve(handler)


@asynccontextmanager
async def wan(forward: WanPipe, backward: WanPipe | None = None, handler=echo, proxies: int = 1, **kwargs):
    """An upstream server behind `proxies` proxies that share the same two pipes."""
    backward = backward or WanPipe(0.0)
    async with anyio.create_task_group() as tg:
        upstream_port = await tg.start(serve_tcp, handler)
        started = []
        for _ in range(proxies):
            proxy = WanProxy("127.0.0.1", upstream_port, forward_pipe=forward, backward_pipe=backward, **kwargs)
            await tg.start(proxy.serve)
            started.append(proxy)
        yield started if proxies > 1 else started[0]
        tg.cancel_scope.cancel()


async def receive_exactly(stream: SocketStream, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        data += await stream.receive()
    return bytes(data)


async def receive_to_eof(stream: SocketStream) -> bytes:
    data = bytearray()
    while True:
        try:
            data += await stream.receive()
        except anyio.EndOfStream:
            return bytes(data)


async def closed_soon(stream: SocketStream, within_s: float = 1.0) -> bool:
    """True if the peer closes or resets the stream within `within_s`; data is discarded."""
    with anyio.move_on_after(within_s):
        try:
            while True:
                await stream.receive()
        except CLOSED:
            return True
    return False


async def wait_until(condition, timeout_s: float = 5.0) -> None:
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.01)


async def send_and_echo(port: int, payload: bytes) -> float:
    """Seconds from connecting until the whole payload has come back through the echo."""
    started = anyio.current_time()
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.send, payload)
            assert await receive_exactly(stream, len(payload)) == payload
    return anyio.current_time() - started


async def test_round_trip_takes_both_one_way_latencies():
    async with wan(WanPipe(0.04), WanPipe(0.04)) as proxy:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            for i in range(3):
                started = anyio.current_time()
                await stream.send(b"ping %d" % i)
                assert await receive_exactly(stream, 6) == b"ping %d" % i
                elapsed = anyio.current_time() - started
                assert 0.08 <= elapsed < 1.0


async def test_two_megabytes_arrive_intact_and_in_order():
    payload = os.urandom(2_000_000)
    async with wan(WanPipe(0.04, 100 * MBIT), WanPipe(0.04, 100 * MBIT)) as proxy:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            async def send_in_uneven_pieces():
                offset = 0
                for size in [1, 1000, 65_535, 65_537, 300_000] * 100:
                    if offset >= len(payload):
                        break
                    await stream.send(payload[offset:offset + size])
                    offset += size
                await stream.send_eof()

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(send_in_uneven_pieces)
                    received = await receive_to_eof(stream)
    assert hashlib.sha256(received).digest() == hashlib.sha256(payload + trailer(payload)).digest()


async def test_bandwidth_limits_throughput():
    # 1 MB at 8 Mbit/s is 1 s on the wire.
    async with wan(WanPipe(0.0, 8 * MBIT)) as proxy:
        elapsed = await send_and_echo(proxy.port, os.urandom(1_000_000))
    assert 0.9 <= elapsed < 5.0


@pytest.mark.parametrize("proxies", [1, 2], ids=["one proxy", "two proxies, same pipes"])
async def test_connections_on_one_pipe_share_its_bandwidth(proxies):
    # Alone, 1 MB takes 1 s at 8 Mbit/s; two at once share the pipe, so both take ~2 s.
    async with wan(WanPipe(0.0, 8 * MBIT), proxies=proxies) as started:
        ports = [p.port for p in started] if proxies > 1 else [started.port] * 2
        elapsed: list[float] = []

        async def one(port):
            elapsed.append(await send_and_echo(port, os.urandom(1_000_000)))

        t0 = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for port in ports:
                tg.start_soon(one, port)
        together = anyio.current_time() - t0
    assert 1.8 <= together < 8.0
    assert min(elapsed) >= 1.3, f"the pipe was not shared fairly: {elapsed}"


async def test_half_close_delivers_the_eof_after_the_data_and_the_tail_still_arrives():
    payload = os.urandom(300_000)
    async with wan(WanPipe(0.04, 100 * MBIT), WanPipe(0.04, 100 * MBIT)) as proxy:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            await stream.send(payload)
            await stream.send_eof()
            with anyio.fail_after(5):
                received = await receive_to_eof(stream)
    # The trailer is only sent once the server has read its EOF, and names what came before.
    assert received == payload + trailer(payload)


async def test_refused_upstream_closes_the_client_promptly():
    with socket.socket() as s:      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    pipe = WanPipe(0.04)
    async with anyio.create_task_group() as tg:
        proxy = WanProxy("127.0.0.1", dead_port, forward_pipe=pipe, backward_pipe=pipe)
        await tg.start(proxy.serve)
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            assert await closed_soon(stream)
        await wait_until(lambda: proxy.open_connections == 0)
        proxy.close()


async def test_an_upstream_reset_closes_the_client():
    async with wan(WanPipe(0.01), WanPipe(0.01), handler=reset_on_first_bytes) as proxy:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            await stream.send(b"hello")
            assert await closed_soon(stream)
        await wait_until(lambda: proxy.open_connections == 0)


async def test_a_stalled_receiver_bounds_the_proxy_memory():
    limit = 512 * 1024
    # A listener nobody accepts from: the kernel completes the handshake and buffers a little,
    # then the upstream stops reading for good. (An anyio server would read eagerly until its
    # first receive() call.)
    with socket.create_server(("127.0.0.1", 0)) as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        pipe = WanPipe(0.0)
        proxy = WanProxy("127.0.0.1", stalled.getsockname()[1], forward_pipe=pipe, backward_pipe=pipe,
                         max_queued_bytes=limit)
        sent = 0

        async def flood():
            nonlocal sent
            chunk = bytes(CHUNK_BYTES)
            async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
                while sent < 256 * 1024 * 1024:
                    await stream.send(chunk)
                    sent += len(chunk)

        async with anyio.create_task_group() as tg:
            await tg.start(proxy.serve)
            tg.start_soon(flood)
            await wait_until(lambda: proxy.queued_bytes >= limit)
            await anyio.sleep(0.5)
            assert limit <= proxy.queued_bytes < limit + CHUNK_BYTES
            # The sender is held by TCP flow control: kernel buffers only, no more than that.
            stalled_at = sent
            await anyio.sleep(0.3)
            assert sent == stalled_at < 256 * 1024 * 1024
            tg.cancel_scope.cancel()


async def test_cut_resets_connections_and_refuses_new_ones_until_healed():
    async with wan(WanPipe(0.01), WanPipe(0.01)) as proxy:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            await stream.send(b"before")
            assert await receive_exactly(stream, 6) == b"before"
            proxy.cut()
            assert await closed_soon(stream)
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            assert await closed_soon(stream)
        await wait_until(lambda: proxy.open_connections == 0)
        proxy.heal()
        assert await send_and_echo(proxy.port, b"after") < 1.0


async def test_close_stops_listening_and_closes_every_connection():
    async with wan(WanPipe(0.01), WanPipe(0.01)) as proxy:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as a, \
                await anyio.connect_tcp("127.0.0.1", proxy.port) as b:
            await wait_until(lambda: proxy.open_connections == 2)
            proxy.close()
            assert await closed_soon(a)
            assert await closed_soon(b)
        assert proxy.open_connections == 0
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", proxy.port)


async def test_run_proxies_reports_every_port_and_cancellation_closes_them_all():
    a_to_b, b_to_a = WanPipe(0.02), WanPipe(0.02)
    async with anyio.create_task_group() as tg:
        upstream_port = await tg.start(serve_tcp, echo)
        proxies = [WanProxy("127.0.0.1", upstream_port, forward_pipe=a_to_b, backward_pipe=b_to_a)
                   for _ in range(2)]
        async with anyio.create_task_group() as proxy_group:
            ports = await proxy_group.start(run_proxies, proxies)
            assert ports == [p.port for p in proxies]
            for port in ports:
                assert 0.04 <= await send_and_echo(port, b"hi") < 1.0
            proxy_group.cancel_scope.cancel()
        for port in ports:
            with pytest.raises(OSError):
                await anyio.connect_tcp("127.0.0.1", port)
        tg.cancel_scope.cancel()
