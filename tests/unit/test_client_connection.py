"""core/client/connection.py against a fake broker on a real loopback socket.

The fake broker speaks just enough Kafka: it answers ApiVersions from a table and hands every
other request to the test, which decides what bytes go back and when. That lets us check the
parts a real broker would never exercise: pipelining order, out-of-range size prefixes,
mismatched correlation ids, silence (timeouts), and a broker that does not know ApiVersions v3.
"""
from __future__ import annotations

import asyncio
import struct

import pytest

from core.client.connection import BrokerConnection
from core.client.errors import (KafkaConnectionError, ProtocolError, RequestTimedOutError,
                                UnsupportedVersionError)
from core.protocol import messages as m
from core.protocol.codegen import Writer
from core.protocol.errors import ErrorCode

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def encode_response(api_key: int, version: int, correlation_id: int, body) -> bytes:
    api = m.API[api_key]
    w = Writer()
    m.RESPONSE_HEADER.encode_into(api.response_header_version(version),
                                  m.ResponseHeader(correlation_id=correlation_id), w)
    api.response.encode_into(version, body, w)
    data = w.getvalue()
    return struct.pack(">i", len(data)) + data


def api_versions_body(error=0, versions=None, **kw):
    R = m.ApiVersionsResponse
    versions = versions or {k: (a.min_version, a.max_version) for k, a in m.API.items()}
    return R(error_code=error, api_keys=[R.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                         for k, (lo, hi) in sorted(versions.items())],
             throttle_time_ms=0, **kw)


def metadata_body(cluster_id="c"):
    return m.MetadataResponse(brokers=[], cluster_id=cluster_id, controller_id=1, topics=[])


class FakeBroker:
    """Reads frames; answers ApiVersions itself and queues every other request for the test."""

    def __init__(self, versions=None, api_versions_max: int = 4):
        self.versions = versions
        self.api_versions_max = api_versions_max
        self.requests: asyncio.Queue = asyncio.Queue()
        self.api_versions_seen: list[int] = []
        self.writer: asyncio.StreamWriter | None = None
        self.server = None
        self.port = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        if self.writer is not None:
            self.writer.close()
        self.server.close()
        await self.server.wait_closed()

    async def _handle(self, reader, writer):
        self.writer = writer
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                key, version, corr = struct.unpack_from(">hhi", frame)
                if key == 18:
                    self.api_versions_seen.append(version)
                    if version > self.api_versions_max:
                        # KIP-511: a v0 body with our range, whatever the request's version
                        body = api_versions_body(ErrorCode.UNSUPPORTED_VERSION,
                                                 {18: (0, self.api_versions_max)})
                        writer.write(encode_response(18, 0, corr, body))
                    else:
                        writer.write(encode_response(18, version, corr, api_versions_body(versions=self.versions)))
                    await writer.drain()
                    continue
                await self.requests.put((key, version, corr))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def reply(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()


async def connect(broker: FakeBroker, **kw) -> BrokerConnection:
    return await BrokerConnection("127.0.0.1", broker.port, **kw).connect()


async def test_api_versions_v3_then_highest_common_version():
    versions = {k: (a.min_version, a.max_version) for k, a in m.API.items()}
    versions[3] = (0, 9)   # the broker speaks Metadata up to v9 only
    async with FakeBroker(versions=versions) as broker:
        conn = await connect(broker)
        assert broker.api_versions_seen == [3]
        assert conn.version_for(3) == 9
        assert conn.version_for(3, max_version=4) == 4
        assert conn.version_for(0) == m.API[0].max_version
        await conn.close()


async def test_api_versions_unsupported_falls_back_to_broker_max():
    async with FakeBroker(api_versions_max=2) as broker:
        conn = await connect(broker)
        assert broker.api_versions_seen == [3, 2]
        assert conn.api_versions_version == 2
        await conn.close()


async def test_api_versions_falls_back_to_v0():
    async with FakeBroker(api_versions_max=0) as broker:
        conn = await connect(broker)
        assert broker.api_versions_seen == [3, 0]
        await conn.close()


async def test_no_common_version_is_unsupported():
    async with FakeBroker(versions={18: (0, 3), 3: (13, 14)}) as broker:
        conn = await connect(broker)
        with pytest.raises(UnsupportedVersionError):
            conn.version_for(3)
        with pytest.raises(UnsupportedVersionError):
            conn.version_for(0)  # not advertised at all
        assert not conn.supports(0)
        await conn.close()


async def test_pipelined_requests_are_matched_in_order():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        tasks = [asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
                 for _ in range(5)]
        seen = [await broker.requests.get() for _ in range(5)]  # all five arrive before any answer
        assert conn.in_flight == 5
        assert [c for _, _, c in seen] == sorted(c for _, _, c in seen)
        # Answer in one write, each with its own cluster id, so we can tell them apart.
        await broker.reply(b"".join(encode_response(3, 9, corr, metadata_body(f"c{i}"))
                                    for i, (_, _, corr) in enumerate(seen)))
        results = await asyncio.gather(*tasks)
        assert [r.cluster_id for r in results] == [f"c{i}" for i in range(5)]
        assert conn.in_flight == 0
        await conn.close()


async def test_frames_split_across_reads_and_large_frames():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        small = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        big = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        (_, _, c1), (_, _, c2) = await broker.requests.get(), await broker.requests.get()
        data = encode_response(3, 9, c1, metadata_body("small"))
        for i in range(len(data)):  # one byte at a time
            await broker.reply(data[i:i + 1])
        huge_id = "x" * 30000  # > half the scratch buffer after the flexible string: own buffer
        big_frame = encode_response(3, 9, c2, m.MetadataResponse(
            brokers=[m.MetadataResponse.MetadataResponseBroker(node_id=i, host=huge_id, port=1)
                     for i in range(20)], cluster_id="big", controller_id=1, topics=[]))
        assert len(big_frame) > 400_000
        for i in range(0, len(big_frame), 65536):
            await broker.reply(big_frame[i:i + 65536])
        assert (await small).cluster_id == "small"
        resp = await big
        assert resp.cluster_id == "big" and len(resp.brokers) == 20
        await conn.close()


@pytest.mark.parametrize("size", [1 << 20, -5, 2])
async def test_size_prefix_out_of_range_closes_connection(size):
    async with FakeBroker() as broker:
        conn = await connect(broker, max_response_size=64 * 1024)
        task = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        await broker.requests.get()
        await broker.reply(struct.pack(">i", size) + b"\x00" * 8)
        with pytest.raises(ProtocolError, match="size prefix"):
            await task
        assert conn.closed
        with pytest.raises(ProtocolError):
            await conn.send(m.MetadataRequest(topics=[]), version=9)


async def test_wrong_correlation_id_closes_connection():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        task = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        _, _, corr = await broker.requests.get()
        await broker.reply(encode_response(3, 9, corr + 7, metadata_body()))
        with pytest.raises(ProtocolError, match="correlation id"):
            await task
        assert conn.closed


async def test_request_timeout_fails_and_closes():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        first = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9, timeout_ms=150))
        second = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9, timeout_ms=5000))
        with pytest.raises(RequestTimedOutError, match="no response within 150 ms"):
            await first
        # The connection is no longer trustworthy: everything else on it fails too, at once.
        with pytest.raises(RequestTimedOutError):
            await asyncio.wait_for(second, 1)
        assert conn.closed and conn.close_error.retriable


async def test_close_fails_pending_requests():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        task = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        await broker.requests.get()
        await conn.close()
        with pytest.raises(KafkaConnectionError, match="closed by the client"):
            await task


async def test_broker_closing_fails_pending_requests():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        task = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        await broker.requests.get()
        broker.writer.close()
        with pytest.raises(KafkaConnectionError, match="closed by the broker") as info:
            await asyncio.wait_for(task, 5)
        assert info.value.retriable


async def test_cancelled_caller_keeps_response_order():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        first = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        second = asyncio.create_task(conn.send(m.MetadataRequest(topics=[]), version=9))
        (_, _, c1), (_, _, c2) = await broker.requests.get(), await broker.requests.get()
        first.cancel()
        await broker.reply(encode_response(3, 9, c1, metadata_body("one"))
                           + encode_response(3, 9, c2, metadata_body("two")))
        assert (await second).cluster_id == "two"
        assert not conn.closed
        await conn.close()


async def test_no_response_expected():
    async with FakeBroker() as broker:
        conn = await connect(broker)
        req = m.ProduceRequest(acks=0, timeout_ms=1000, topic_data=[])
        assert await conn.send(req, expect_response=False) is None
        key, version, _ = await broker.requests.get()
        assert key == 0 and conn.in_flight == 0
        await conn.close()


async def test_connect_refused_is_retriable_connection_error():
    async with FakeBroker() as broker:
        port = broker.port
    with pytest.raises(KafkaConnectionError) as info:
        await BrokerConnection("127.0.0.1", port, connect_timeout_ms=2000).connect()
    assert info.value.retriable


@pytest.mark.parametrize("first, expected", [
    (b"HTTP/1.0 400 Bad Request\r\n", "an HTTP server answered"),
    (b"HTTP/1.1 404 Not Found\r\n", "an HTTP server answered"),
    (b"<!DOCTYPE HTML PUBLIC", "an HTTP server answered"),      # Python's http.server to a non-HTTP request
    (b"\x15\x03\x03\x00\x02\x02\x32", "a TLS server answered"),  # an alert
    (b"\x16\x03\x03\x00\x7a\x02", "a TLS server answered"),      # a handshake record
    (b"SSH-2.0-OpenSSH_9.2\r\n", "an SSH server answered"),
    (b"\x7f\xff\xff\xff\x00\x00", None),                         # just a bad size: no guess
    (b"\x00\x00", None),
])
def test_what_answered_where_kafka_was_expected(first, expected):
    from core.client.connection import not_kafka
    said = not_kafka(first)
    assert (said is None) if expected is None else said.startswith(expected), said
