"""Bad input on the wire gets Kafka's answer, is logged once, and hurts no other client.

Each case speaks raw bytes to a real node process, so nothing in a client library can mask
what the node actually does. After every case a second connection must still be served.
"""
from __future__ import annotations

import socket
import struct
import time

import pytest

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch
from tests.support.node import SeawayNode
from tests.support.wire import call, connect, create_topic, frame, produce, read_frame

pytestmark = pytest.mark.integration

MAX_REQUEST = 1_000_000
MAX_MESSAGE = 10_000


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("badinput"), {
        "socket.request.max.bytes": str(MAX_REQUEST),
        "message.max.bytes": str(MAX_MESSAGE),
        "auto.create.topics.enable": "false",
    }) as n:
        yield n


def assert_closed(s: socket.socket) -> None:
    s.settimeout(10)
    try:
        assert s.recv(1) == b"", "node answered where Kafka closes the connection"
    except ConnectionResetError:
        pass


def assert_still_serving(node) -> None:
    resp = call(node, 18, 3, m.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert resp.error_code == 0


def log_count(node, needle: str) -> int:
    return sum(needle in line for line in node.log_path.read_text().splitlines())


def wait_log(node, needle: str, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and log_count(node, needle) < count:
        time.sleep(0.05)
    assert log_count(node, needle) == count, f"expected {count} log lines with {needle!r}"


def test_size_prefix_over_socket_request_max_bytes_closes_without_allocating(node):
    before = log_count(node, "socket.request.max.bytes")
    with connect(node) as s:
        s.sendall(struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
        assert_closed(s)
    with connect(node) as s:
        s.sendall(struct.pack(">i", -5))
        assert_closed(s)
    wait_log(node, "socket.request.max.bytes", before + 2)
    assert_still_serving(node)


def test_truncated_body_closes_connection(node):
    whole = frame(3, 9, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="abc")]))
    body = whole[4:-3]  # cut inside the request, then frame what is left consistently
    before = log_count(node, "malformed Metadata v9")
    with connect(node) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert_closed(s)
    wait_log(node, "malformed Metadata v9", before + 1)
    assert_still_serving(node)


def test_frame_cut_off_by_disconnect_is_dropped_quietly(node):
    with connect(node) as s:
        s.sendall(struct.pack(">i", 500) + b"\x00\x12\x00\x00")
    assert_still_serving(node)


def test_unknown_api_key_closes_connection(node):
    before = log_count(node, "unknown API key 999")
    payload = struct.pack(">hhi", 999, 0, 7) + b"\x00\x00"
    with connect(node) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert_closed(s)
    wait_log(node, "unknown API key 999", before + 1)
    assert_still_serving(node)


def test_unsupported_version_closes_connection(node):
    before = log_count(node, "Produce version 99 is not supported")
    payload = struct.pack(">hhi", 0, 99, 7) + b"\x00\x00"
    with connect(node) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert_closed(s)
    wait_log(node, "Produce version 99 is not supported", before + 1)
    assert_still_serving(node)


def test_api_versions_in_unknown_version_gets_v0_answer_with_our_ranges(node):
    payload = struct.pack(">hhi", 18, 77, 7) + b"\x00\x00" + b"\x00" * 4
    with connect(node) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        data = read_frame(s)
    hdr, pos = m.RESPONSE_HEADER.decode(0, data, whole=False)
    resp = m.API[18].response.decode(0, data, pos)
    assert hdr.correlation_id == 7
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[18] == (0, 4) and ranges[0][1] >= 9


def test_wrong_crc_is_corrupt_message(node):
    create_topic(node, "crc")
    batch = bytearray(build_batch([(b"k", b"v" * 50, [], 1000)]))
    batch[-1] ^= 0xFF
    pr = produce(node, "crc", bytes(batch))
    assert pr.error_code == ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in (pr.error_message or "")
    good = produce(node, "crc", build_batch([(b"k", b"v", [], 1000)]))
    assert good.error_code == 0 and good.base_offset == 0, "the bad batch must not have been stored"


@pytest.mark.parametrize("damage", ["length_past_end", "length_short", "trailing_garbage", "count_mismatch"])
def test_inconsistent_lengths_are_refused(node, damage):
    create_topic(node, "lengths")
    batch = bytearray(build_batch([(b"k", b"v" * 20, [], 1000), (b"k2", b"v2", [], 1001)]))
    if damage == "length_past_end":
        struct.pack_into(">i", batch, 8, len(batch) + 100)
    elif damage == "length_short":
        struct.pack_into(">i", batch, 8, 20)
    elif damage == "trailing_garbage":
        batch += b"\x00" * 30
    elif damage == "count_mismatch":
        struct.pack_into(">i", batch, 57, 5)  # records count, inside the CRC: refresh it
        from crc32c import crc32c
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    pr = produce(node, "lengths", bytes(batch))
    assert pr.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), pr
    end = call(node, 2, 7, m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(
        name="lengths", partitions=[m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    assert end.topics[0].partitions[0].offset == 0, "nothing of a refused batch may be stored"


def test_batch_over_message_max_bytes(node):
    create_topic(node, "big")
    pr = produce(node, "big", build_batch([(None, b"x" * (MAX_MESSAGE + 1), [], 1000)]))
    assert pr.error_code == ErrorCode.MESSAGE_TOO_LARGE
    ok = produce(node, "big", build_batch([(None, b"x" * (MAX_MESSAGE - 200), [], 1000)]))
    assert ok.error_code == 0


def test_unknown_topic(node):
    pr = produce(node, "no-such-topic", build_batch([(None, b"x", [], 1000)]))
    assert pr.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    md = call(node, 3, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="no-such-topic")],
                                             allow_auto_topic_creation=True))
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # auto-create is off here
    fetch = call(node, 1, 12, m.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1000, topics=[
        m.FetchRequest.FetchTopic(topic="no-such-topic", partitions=[
            m.FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000)])]))
    assert fetch.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    fetch13 = call(node, 1, 13, m.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1000, topics=[
        m.FetchRequest.FetchTopic(topic_id=b"\x01" * 16, partitions=[
            m.FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000)])]))
    assert fetch13.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_fetch_offset_out_of_range(node):
    create_topic(node, "oor")
    produce(node, "oor", build_batch([(None, b"x", [], 1000)]))
    for offset in (5, -3):
        fetch = call(node, 1, 11, m.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1000, topics=[
            m.FetchRequest.FetchTopic(topic="oor", partitions=[
                m.FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1000)])]))
        p = fetch.responses[0].partitions[0]
        assert p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert p.high_watermark == 1


@pytest.mark.parametrize("codec, attr", [("zstd", 4), ("uncompressed", 0), ("gzip", 1)])
def test_topic_compression_type_reencodes_batches(node, codec, attr):
    """compression.type on the topic wins over the producer's codec; records are unchanged."""
    from core.protocol.compression import Compression
    from core.protocol.records import iter_batch_headers, iter_records
    name = f"recompress-{codec}"
    req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs=[
            m.CreateTopicsRequest.CreatableTopicConfig(name="compression.type", value=codec)])], timeout_ms=5000)
    assert call(node, 19, 7, req).topics[0].error_code == 0
    sent = [(b"k%d" % i, b"value-%d" % i * 20, [("h", b"%d" % i)], 1000 + i) for i in range(50)]
    assert produce(node, name, build_batch(sent, compression=Compression.LZ4)).error_code == 0
    fetch = call(node, 1, 12, m.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=10**6, topics=[
        m.FetchRequest.FetchTopic(topic=name, partitions=[
            m.FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=10**6)])]))
    data = bytes(fetch.responses[0].partitions[0].records)
    assert [b.compression for b in iter_batch_headers(data)] == [attr]
    got = [(r.key, r.value, r.headers, r.timestamp) for r in iter_records(data)]
    assert got == sent
