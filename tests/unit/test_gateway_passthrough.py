"""A client connection's answers, from two broker connections, reach the client in request
order and byte for byte, however the brokers' bytes are cut into reads: answers passed
through as they arrive (cut-through), answers rewritten (assembled first), and the gateway's
own answers (dropped) interleaved. The broker connections are real sockets to a listener that
never answers; the test feeds their data_received itself, in chunks hypothesis picks.

And requests for a broker that cannot be reached wait, in order, and go to the cluster active
when they are tried again, until they have waited too long; and a producer's requests follow
its unanswered ones, not the move."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from core.gateway import proxy
from core.gateway.metrics import GatewayMetrics
from core.gateway.proxy import ClientConnection, Reply, Upstream
from core.gateway.routing import RequestHead, View, encode_request, size_prefix
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey


class RecordingTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.writes = 0
        self.aborted = False

    def write(self, data) -> None:
        self.written += data
        self.writes += 1

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def client_connection(brokers: dict[str, tuple[str, int]] | None = None) -> tuple[ClientConnection, RecordingTransport]:
    gateway = SimpleNamespace(config=SimpleNamespace(max_request_bytes=1 << 20, sasl_mechanisms=(), pair="p",
                                                     envelopes=False, upstream=SimpleNamespace(ssl_context=None)),
                              metrics=GatewayMetrics("p"), connections=set(), held=[],
                              view=View("a"), space_frames_s=0,
                              broker_for=lambda cluster, slot: (brokers or {}).get(cluster))
    conn = ClientConnection(gateway, 0)
    transport = RecordingTransport()
    conn.transport = transport
    return conn, transport


def marked(frame: bytearray) -> bytearray:
    return frame + b"!"


# An answer: which broker connection (0 or 1) and how it is handled.
ANSWER = st.tuples(st.integers(0, 1), st.sampled_from(["through", "rewrite", "own"]),
                   st.binary(min_size=0, max_size=40))


async def _run(answers, cuts, interleave) -> tuple[bytes, bytes, ClientConnection, RecordingTransport]:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn, transport = client_connection()
    ups = [Upstream(conn, f"c{k}", "127.0.0.1", port) for k in (0, 1)]
    streams = [bytearray(), bytearray()]
    expected = bytearray()
    for k, (which, kind, payload) in enumerate(answers):
        frame = k.to_bytes(4, "big") + payload      # a correlation id, then a body
        if kind == "own":
            ups[which].waiting.append((None, None))
        else:
            reply = Reply(RequestHead(1, 0, k))
            conn.queue.append(reply)
            ups[which].waiting.append((reply, marked if kind == "rewrite" else None))
            expected += size_prefix(len(frame) + (kind == "rewrite")) + frame + (b"!" if kind == "rewrite" else b"")
        streams[which] += size_prefix(len(frame)) + frame
    # Each broker's bytes in reads cut where hypothesis says, the two brokers' reads interleaved.
    reads: list[list[bytes]] = [[], []]
    for which in (0, 1):
        data, at = bytes(streams[which]), 0
        for cut in cuts[which]:
            if at >= len(data):
                break
            reads[which].append(data[at:at + cut])
            at += cut
        if at < len(data):
            reads[which].append(data[at:])
    order = list(interleave) + [0] * len(reads[0]) + [1] * len(reads[1])
    for which in order:
        if reads[which]:
            ups[which].data_received(reads[which].pop(0))
    for up in ups:
        up.close()
    server.close()
    return bytes(transport.written), bytes(expected), conn, transport


@settings(max_examples=150, deadline=None)
@given(answers=st.lists(ANSWER, max_size=12),
       cuts=st.tuples(st.lists(st.integers(1, 30), max_size=40), st.lists(st.integers(1, 30), max_size=40)),
       interleave=st.lists(st.integers(0, 1), max_size=60))
def test_answers_reach_the_client_in_request_order_whatever_the_reads(answers, cuts, interleave):
    written, expected, conn, transport = asyncio.run(_run(answers, cuts, interleave))
    assert written == expected
    assert not conn.queue
    assert not transport.aborted


def test_answers_next_in_line_go_out_in_one_write_per_read():
    """Three answers to pass through that arrive in one read: one write, prefixes and all
    (the broker framed them as the client expects), not six."""
    answers = [(0, "through", b"a" * 10), (0, "through", b"b" * 1000), (0, "through", b"")]
    written, expected, _, transport = asyncio.run(_run(answers, ([10_000], []), []))
    assert written == expected
    assert transport.writes == 1


def test_an_answer_behind_a_slower_one_waits_for_it():
    """Broker 1's answer completes first but was asked for second: nothing is written until
    broker 0's arrives, then both, in request order."""
    async def run():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn, transport = client_connection()
        ups = [Upstream(conn, f"c{k}", "127.0.0.1", port) for k in (0, 1)]
        first, second = Reply(RequestHead(1, 0, 1)), Reply(RequestHead(1, 0, 2))
        conn.queue.extend([first, second])
        ups[0].waiting.append((first, None))
        ups[1].waiting.append((second, None))
        ups[1].data_received(size_prefix(5) + b"\0\0\0\2B")
        assert transport.written == b""
        ups[0].data_received(size_prefix(5) + b"\0\0\0\1A"[:3])
        assert transport.written == size_prefix(5) + b"\0\0\0"      # passed through as it comes
        ups[0].data_received(b"\1A")
        assert transport.written == size_prefix(5) + b"\0\0\0\1A" + size_prefix(5) + b"\0\0\0\2B"
        for up in ups:
            up.close()
        server.close()
    asyncio.run(run())


def test_a_broker_answering_nothing_asked_or_framing_nonsense_closes_the_client_connection():
    async def run(data: bytes, asked: bool) -> bool:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn, transport = client_connection()
        up = Upstream(conn, "c0", "127.0.0.1", port)
        if asked:
            reply = Reply(RequestHead(1, 0, 1))
            conn.queue.append(reply)
            up.waiting.append((reply, None))
        up.data_received(data)
        server.close()
        return transport.aborted and up.closed
    assert asyncio.run(run(size_prefix(4) + b"\0\0\0\1", asked=False))
    assert asyncio.run(run(b"\xff\xff\xff\xff", asked=True))            # a negative size
    assert not asyncio.run(run(size_prefix(4) + b"\0\0\0\1", asked=True))


def closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_requests_for_a_broker_that_cannot_be_reached_wait_and_go_to_the_cluster_active_then():
    async def run():
        got: list[bytes] = []

        async def broker(reader, writer):
            while True:
                try:
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    got.append(await reader.readexactly(size))
                except asyncio.IncompleteReadError:
                    return
                if got[-1].startswith(b"answer me"):
                    writer.write(size_prefix(8) + b"\0\0\0\1done")
        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        conn, transport = client_connection({"a": ("127.0.0.1", closed_port()),
                                             "b": ("127.0.0.1", server.sockets[0].getsockname()[1])})
        first = Reply(RequestHead(0, 9, 1))
        conn._forward("a", bytearray(b"answer me"), first)
        conn._forward("a", bytearray(b"acks=0"), None)
        await asyncio.sleep(0.1)
        assert conn.parked == [(b"answer me", first), (b"acks=0", None)] and not transport.aborted
        conn._forward("a", bytearray(b"later"), None)            # behind them, not past them
        await asyncio.sleep(0.6)                                 # retried on a: still unreachable
        assert [f for f, _ in conn.parked] == [b"answer me", b"acks=0", b"later"]
        conn.gw.view = View("b")                                 # the gateway moves
        conn.retry_parked()
        for _ in range(50):
            if len(got) == 3 and transport.written:
                break
            await asyncio.sleep(0.05)
        assert got == [b"answer me", b"acks=0", b"later"]
        assert transport.written == size_prefix(8) + b"\0\0\0\1done" and not conn.queue
        assert conn.parked is None and conn.unreachable_since is None and not transport.aborted
        conn._close()
        server.close()
    asyncio.run(run())


def test_a_broker_unreachable_for_too_long_closes_the_clients_connection(monkeypatch):
    monkeypatch.setattr(proxy, "UNREACHABLE_MAX_S", 0.5)

    async def run():
        conn, transport = client_connection({"a": ("127.0.0.1", closed_port())})
        conn._forward("a", bytearray(b"x"), Reply(RequestHead(0, 9, 1)))
        for _ in range(60):
            if transport.aborted:
                break
            await asyncio.sleep(0.05)
        assert transport.aborted and conn.closed
    asyncio.run(run())


def produce(correlation_id: int, acks: int = -1) -> bytearray:
    P = m.ProduceRequest
    return encode_request(ApiKey.PRODUCE, 9, correlation_id, "producer", P(
        transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[P.TopicProduceData(
            name="orders", partition_data=[P.PartitionProduceData(index=0, records=b"\x00" * 70)])]))


def test_a_producers_requests_follow_its_unanswered_ones_not_the_move():
    """R1 and R2 went to cluster a; the gateway moves to b before R3 arrives. R3 goes to a
    too: sent to b it would arrive there first, with a gap before its sequence, and a client
    told R3 is written counts R1 and R2 written too. Once a has answered them, the next
    Produce goes to b; other requests never wait for that."""
    async def run():
        got: dict[str, list[int]] = {"a": [], "b": []}
        writers = {}

        def broker(name):
            async def serve(reader, writer):
                writers[name] = writer
                while True:
                    try:
                        size = int.from_bytes(await reader.readexactly(4), "big")
                        frame = await reader.readexactly(size)
                    except asyncio.IncompleteReadError:
                        return
                    got[name].append(int.from_bytes(frame[4:8], "big"))   # the correlation id
            return serve
        servers = {name: await asyncio.start_server(broker(name), "127.0.0.1", 0) for name in "ab"}
        conn, transport = client_connection({name: ("127.0.0.1", s.sockets[0].getsockname()[1])
                                             for name, s in servers.items()})

        async def arrived(name, n):
            for _ in range(100):
                if len(got[name]) >= n:
                    return
                await asyncio.sleep(0.02)

        conn._request(produce(1))
        conn._request(produce(2))
        await arrived("a", 2)
        conn.gw.view = View("b")
        conn._request(produce(3))
        conn._request(encode_request(ApiKey.API_VERSIONS, 3, 4, "producer", m.ApiVersionsRequest(
            client_software_name="t", client_software_version="1")))
        await arrived("a", 3)
        await arrived("b", 1)
        assert got == {"a": [1, 2, 3], "b": [4]}
        # a answers the three (NOT_LEADER_OR_FOLLOWER, as a fenced side would: the bytes do
        # not matter to the gateway, which passes them through).
        writers["a"].write(b"".join(size_prefix(5) + cid.to_bytes(4, "big") + b"!" for cid in (1, 2, 3)))
        for _ in range(100):
            if not any(r.head.api_key == ApiKey.PRODUCE for r in conn.queue):
                break
            await asyncio.sleep(0.02)
        conn._request(produce(5))
        conn._request(produce(6, acks=0))
        await arrived("b", 3)
        assert got == {"a": [1, 2, 3], "b": [4, 5, 6]}
        assert not transport.aborted
        conn._close()
        for s in servers.values():
            s.close()
    asyncio.run(run())
