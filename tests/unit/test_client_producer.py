"""The producer's batching, routing and retry logic, against a scripted fake client.

A real broker rarely says NOT_LEADER_OR_FOLLOWER or MESSAGE_TOO_LARGE on cue; here the fake
client answers each Produce request from a script, so each error path runs deterministically.
"""
from __future__ import annotations

import asyncio

import pytest

from core.client.accumulator import Accumulator, estimate_size
from core.client.cluster import ClusterView
from core.client.errors import KafkaConnectionError
from core.client.producer import Producer
from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError
from core.protocol.records import iter_records

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def metadata(leaders: dict[int, int]):
    R = m.MetadataResponse
    return R(brokers=[R.MetadataResponseBroker(node_id=n, host="h", port=n) for n in (1, 2)],
             cluster_id="c", controller_id=1,
             topics=[R.MetadataResponseTopic(name="t", topic_id=b"\x01" * 16, partitions=[
                 R.MetadataResponsePartition(partition_index=p, leader_id=l, leader_epoch=0,
                                             replica_nodes=[l], isr_nodes=[l])
                 for p, l in leaders.items()])])


class FakeClient:
    request_timeout_ms = 30000
    retry_backoff_ms = 5
    metadata_max_age_ms = 300000

    def __init__(self, leaders=None, script=None):
        self.cluster = ClusterView()
        self.cluster.apply(metadata(leaders or {0: 1}), all_topics=True)
        self.script = list(script or [])  # per request: an error code, or an exception to raise
        self.requests: list[tuple[int, object, bool]] = []
        self.metadata_stale = False
        self.updates = 0

    async def start(self):
        return self

    async def ensure_topics(self, topics):
        self.metadata_stale = False
        return self.cluster

    def request_metadata_update(self):
        self.metadata_stale = True
        self.updates += 1

    def backoff_ms(self, attempt):
        return 5

    async def send(self, node, request, *, api_key=None, timeout_ms=None, expect_response=True):
        self.requests.append((node, request, expect_response))
        outcome = self.script.pop(0) if self.script else 0
        if isinstance(outcome, BaseException):
            raise outcome
        if not expect_response:
            return None
        R = m.ProduceResponse
        return R(responses=[R.TopicProduceResponse(name=t.name, partition_responses=[
            R.PartitionProduceResponse(index=p.index, error_code=outcome,
                                       base_offset=100 + 10 * p.index if outcome == 0 else -1)
            for p in t.partition_data]) for t in request.topic_data])


def record_counts(request) -> list[int]:
    return [sum(1 for _ in iter_records(p.records)) for t in request.topic_data for p in t.partition_data]


async def test_offsets_come_from_the_base_offset():
    client = FakeClient()
    async with Producer(client, linger_ms=1) as producer:
        futures = [await producer.send("t", b"v%d" % i, key=None, partition=0) for i in range(5)]
        metas = await asyncio.gather(*futures)
    assert [md.offset for md in metas] == [100, 101, 102, 103, 104]
    assert len(client.requests) == 1 and record_counts(client.requests[0][1]) == [5]


async def test_one_request_per_broker_with_all_ready_partitions():
    client = FakeClient(leaders={0: 1, 1: 1, 2: 2})
    async with Producer(client, linger_ms=20) as producer:
        futures = [await producer.send("t", b"x", partition=p) for p in (0, 1, 2, 0, 1, 2)]
        await asyncio.gather(*futures)
    by_node = {node: sorted(p.index for t in req.topic_data for p in t.partition_data)
               for node, req, _ in client.requests}
    assert by_node == {1: [0, 1], 2: [2]}
    assert len(client.requests) == 2


async def test_retriable_error_is_retried_after_metadata_refresh():
    client = FakeClient(script=[ErrorCode.NOT_LEADER_OR_FOLLOWER, KafkaConnectionError("gone"), 0])
    async with Producer(client) as producer:
        md = await (await producer.send("t", b"x", partition=0))
    assert md.offset == 100
    assert len(client.requests) == 3 and client.updates >= 1


async def test_fatal_error_fails_the_records():
    client = FakeClient(script=[ErrorCode.INVALID_TOPIC_EXCEPTION])
    async with Producer(client) as producer:
        fut = await producer.send("t", b"x", partition=0)
        with pytest.raises(KafkaError) as info:
            await fut
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert len(client.requests) == 1


async def test_message_too_large_splits_the_batch():
    client = FakeClient(script=[ErrorCode.MESSAGE_TOO_LARGE, 0, 0])
    async with Producer(client, linger_ms=20) as producer:
        futures = [await producer.send("t", b"v%d" % i, partition=0) for i in range(4)]
        metas = await asyncio.gather(*futures)
    assert [record_counts(req) for _, req, _ in client.requests] == [[4], [2], [2]]
    # each half got its own base offset from the (fake) broker, in order
    assert [md.offset for md in metas] == [100, 101, 100, 101]


async def test_delivery_timeout_fails_records_that_keep_failing():
    client = FakeClient(script=[ErrorCode.NOT_LEADER_OR_FOLLOWER] * 1000)
    async with Producer(client, delivery_timeout_ms=200) as producer:
        fut = await producer.send("t", b"x", partition=0)
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(fut, 5)
    assert info.value.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT)


async def test_acks_zero_expects_no_response():
    client = FakeClient()
    async with Producer(client, acks=0) as producer:
        md = await (await producer.send("t", b"x", partition=0))
    assert md.offset == -1
    assert client.requests[0][1].acks == 0 and client.requests[0][2] is False


async def test_in_flight_limit_per_broker():
    gate = asyncio.Event()
    client = FakeClient()
    real_send = client.send
    in_flight = max_seen = 0

    async def slow_send(*args, **kwargs):
        nonlocal in_flight, max_seen
        in_flight += 1
        max_seen = max(max_seen, in_flight)
        await gate.wait()
        try:
            return await real_send(*args, **kwargs)
        finally:
            in_flight -= 1

    client.send = slow_send
    async with Producer(client, batch_size=100, linger_ms=0, max_in_flight_per_broker=2) as producer:
        futures = [await producer.send("t", b"x" * 60, partition=0) for _ in range(8)]
        await asyncio.sleep(0.05)
        assert max_seen == 2
        gate.set()
        await asyncio.gather(*futures)
    assert len(client.requests) == 8


async def test_requeue_and_split_keep_partition_order():
    size = estimate_size(None, b"0", None)
    acc = Accumulator(batch_size=61 + 2 * size, delivery_timeout_ms=1000)  # header + 2 records
    loop = asyncio.get_running_loop()
    for i in range(6):
        acc.append("t", 0, (None, b"%d" % i, None, 0), size, loop.create_future())
    q = acc.queues[("t", 0)]
    assert [len(b.records) for b in q] == [2, 2, 2]
    b0, b1, b2 = q.popleft(), q.popleft(), q.popleft()
    acc.requeue(b1)
    acc.requeue(b0)  # an older batch goes back in front of a younger one
    half_a, half_b = b2.split(1.0)
    acc.add_split((half_b, half_a))
    assert list(q) == [b0, b1, half_a, half_b]
    assert [r[1] for r in half_a.records + half_b.records] == [b"4", b"5"]
    newest, _ = acc.append("t", 0, (None, b"6", None, 0), size, loop.create_future())
    assert list(q)[-1] is newest and newest not in (b0, b1, half_a, half_b)
    await asyncio.sleep(0)  # done-callbacks run on the next loop turn
    assert acc.buffered_bytes == 7 * size
