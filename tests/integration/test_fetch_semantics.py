"""Fetch as Kafka defines it: long poll, min bytes, the max-bytes limits of KIP-74.

Raw protocol against a real node, so the assertions are about what the node does, not what
a client library makes of it.
"""
from __future__ import annotations

import threading
import time

import pytest

from core.protocol import messages as m
from core.protocol.records import build_batch, iter_batch_headers
from tests.support.node import SeawayNode
from tests.support.wire import call, create_topic, produce

pytestmark = pytest.mark.integration

F = m.FetchRequest


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("fetch")) as n:
        yield n


def fetch(node, parts, *, max_wait_ms=0, min_bytes=0, max_bytes=10**7, version=12):
    """parts: list of (topic, partition, offset, partition_max_bytes)."""
    topics = {}
    for topic, p, offset, pmax in parts:
        topics.setdefault(topic, []).append(F.FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=pmax))
    req = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
            topics=[F.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()])
    return call(node, 1, version, req)


def batch(n_records: int, size: int) -> bytes:
    return build_batch([(None, b"x" * size, [], 1000 + i) for i in range(n_records)])


def test_long_poll_waits_max_wait_ms_when_nothing_arrives(node):
    create_topic(node, "idle")
    t0 = time.monotonic()
    resp = fetch(node, [("idle", 0, 0, 10**6)], max_wait_ms=1500, min_bytes=1)
    elapsed = time.monotonic() - t0
    assert 1.2 <= elapsed < 10, elapsed
    assert len(resp.responses[0].partitions[0].records) == 0


def test_long_poll_returns_as_soon_as_min_bytes_arrive(node):
    create_topic(node, "wake")
    timer = threading.Timer(0.5, lambda: produce(node, "wake", batch(3, 100)))
    timer.start()
    t0 = time.monotonic()
    resp = fetch(node, [("wake", 0, 0, 10**6)], max_wait_ms=20_000, min_bytes=1)
    elapsed = time.monotonic() - t0
    timer.join()
    assert 0.3 <= elapsed < 10, elapsed
    assert len(resp.responses[0].partitions[0].records) > 0


def test_min_bytes_not_met_waits_then_returns_what_there_is(node):
    create_topic(node, "few")
    produce(node, "few", batch(1, 10))
    t0 = time.monotonic()
    resp = fetch(node, [("few", 0, 0, 10**6)], max_wait_ms=1000, min_bytes=10**6)
    assert time.monotonic() - t0 >= 0.8
    assert len(resp.responses[0].partitions[0].records) > 0


def test_partition_max_bytes_smaller_than_first_batch_still_returns_it(node):
    """KIP-74: a consumer must always make progress."""
    create_topic(node, "kip74")
    for _ in range(3):
        produce(node, "kip74", batch(10, 1000))  # ~10 KB batches
    resp = fetch(node, [("kip74", 0, 0, 100)])
    data = bytes(resp.responses[0].partitions[0].records)
    headers = list(iter_batch_headers(data))
    assert len(headers) == 1 and headers[0].base_offset == 0
    resp = fetch(node, [("kip74", 0, 0, 25_000)])
    assert len(list(iter_batch_headers(bytes(resp.responses[0].partitions[0].records)))) == 2


def test_response_max_bytes_spans_partitions(node):
    create_topic(node, "spread", partitions=3)
    for p in range(3):
        produce(node, "spread", batch(10, 1000), partition=p)
    resp = fetch(node, [("spread", p, 0, 10**6) for p in range(3)], max_bytes=15_000)
    sizes = [len(pd.records) for pd in resp.responses[0].partitions]
    assert 10_000 < sizes[0] < 15_000, "the first partition gets its (whole) batch"
    assert sizes[1:] == [0, 0], "what is left of max_bytes cannot hold another whole batch"
    resp = fetch(node, [("spread", p, 0, 10**6) for p in range(3)], max_bytes=10**6)
    assert all(len(pd.records) > 0 for pd in resp.responses[0].partitions)


def test_fetch_from_middle_of_a_batch_returns_the_whole_batch(node):
    create_topic(node, "mid")
    produce(node, "mid", batch(10, 10))
    resp = fetch(node, [("mid", 0, 7, 10**6)])
    headers = list(iter_batch_headers(bytes(resp.responses[0].partitions[0].records)))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 9)]
    hw = resp.responses[0].partitions[0].high_watermark
    assert hw == 10
    at_end = fetch(node, [("mid", 0, 10, 10**6)])
    assert at_end.responses[0].partitions[0].error_code == 0 and len(at_end.responses[0].partitions[0].records) == 0


def test_fetch_by_topic_id(node):
    create_topic(node, "byid")
    produce(node, "byid", batch(2, 10))
    md = call(node, 3, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="byid")]))
    topic_id = md.topics[0].topic_id
    assert topic_id != bytes(16)
    req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=10**6, topics=[
        F.FetchTopic(topic_id=topic_id, partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=10**6)])])
    resp = call(node, 1, 16, req)
    assert resp.responses[0].topic_id == topic_id
    assert [h.records_count for h in iter_batch_headers(bytes(resp.responses[0].partitions[0].records))] == [2]


@pytest.mark.parametrize("epoch, code", [(-1, 0), (0, 0), (3, 75)])  # 75 UNKNOWN_LEADER_EPOCH
def test_current_leader_epoch_is_checked(node, epoch, code):
    create_topic(node, "epochs")
    req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=10**6, topics=[F.FetchTopic(topic="epochs", partitions=[
        F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=10**6, current_leader_epoch=epoch)])])
    assert call(node, 1, 12, req).responses[0].partitions[0].error_code == code
    lo = m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(name="epochs", partitions=[
        m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=epoch)])])
    assert call(node, 2, 7, lo).topics[0].partitions[0].error_code == code


def test_long_poll_gathers_each_append_once_in_order(node):
    """While a long poll waits for min_bytes, every append is added to what it has, once."""
    create_topic(node, "gather")
    produce(node, "gather", batch(1, 100))

    def trickle():
        for _ in range(5):
            time.sleep(0.15)
            produce(node, "gather", batch(1, 100))

    t = threading.Thread(target=trickle)
    t.start()
    resp = fetch(node, [("gather", 0, 0, 10**6)], max_wait_ms=3000, min_bytes=10**6)
    t.join()
    headers = list(iter_batch_headers(bytes(resp.responses[0].partitions[0].records)))
    assert [h.base_offset for h in headers] == list(range(6))
    assert resp.responses[0].partitions[0].high_watermark == 6
