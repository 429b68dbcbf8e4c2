"""The producer's batching, routing and retry logic, against a scripted fake client.

A real broker rarely says NOT_LEADER_OR_FOLLOWER or MESSAGE_TOO_LARGE on cue; here the fake
client answers each Produce request from a script, so each error path runs deterministically.
"""
from __future__ import annotations

import asyncio

import pytest

from core.client.accumulator import Accumulator, estimate_size
from core.client.cluster import ClusterView
from core.client.errors import KafkaConnectionError, UnsupportedVersionError
from core.client.producer import Producer
from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError
from core.protocol.records import iter_records, scan_batches

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def metadata(leaders: dict[int, int]):
    R = m.MetadataResponse
    return R(brokers=[R.MetadataResponseBroker(node_id=n, host="h", port=n) for n in (1, 2)],
             cluster_id="c", controller_id=1,
             topics=[R.MetadataResponseTopic(name="t", topic_id=b"\x01" * 16, partitions=[
                 R.MetadataResponsePartition(partition_index=p, leader_id=ldr, leader_epoch=0,
                                             replica_nodes=[ldr], isr_nodes=[ldr])
                 for p, ldr in leaders.items()])])


class FakeClient:
    request_timeout_ms = 30000
    retry_backoff_ms = 5
    metadata_max_age_ms = 300000

    def __init__(self, leaders=None, script=None, init_script=None):
        self.cluster = ClusterView()
        self.cluster.apply(metadata(leaders or {0: 1}), all_topics=True)
        self.script = list(script or [])  # per request: an error code, or an exception to raise
        self.requests: list[tuple[int, object, bool]] = []  # Produce requests only
        # InitProducerId: per request an error code or an exception; then (producer id 1000+n, epoch 0)
        self.init_script = list(init_script or [])
        self.init_requests: list = []
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

    def least_loaded_node(self):
        return 1

    async def any_node(self):
        return 1

    async def refresh_metadata(self, topics=None):
        return self.cluster

    async def send(self, node, request, *, api_key=None, timeout_ms=None, expect_response=True):
        if api_key == 22:
            self.init_requests.append(request)
            outcome = self.init_script.pop(0) if self.init_script else 0
            if isinstance(outcome, BaseException):
                raise outcome
            R = m.InitProducerIdResponse
            if outcome:
                return R(throttle_time_ms=0, error_code=outcome, producer_id=-1, producer_epoch=-1)
            return R(throttle_time_ms=0, error_code=0, producer_id=1000 + len(self.init_requests) - 1,
                     producer_epoch=0)
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
        if kwargs.get("api_key") != 0:
            return await real_send(*args, **kwargs)
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


# --------------------------------------------------------------------------- idempotence


def headers(request) -> list[tuple[int, int, int, int]]:
    """(producer id, epoch, base sequence, record count) of each batch in a Produce request."""
    return [(i.producer_id, i.producer_epoch, i.base_sequence, i.records_count)
            for t in request.topic_data for p in t.partition_data for i in scan_batches(p.records)]


@pytest.mark.parametrize("kwargs, field", [
    ({"acks": 1}, "acks"),
    ({"acks": 0}, "acks"),
    ({"max_in_flight_per_broker": 6}, "max_in_flight_per_broker"),
    ({"retries": 0}, "retries"),
])
async def test_explicit_idempotence_refuses_conflicting_settings(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Producer(FakeClient(), enable_idempotence=True, **kwargs)
    assert not Producer(FakeClient(), **kwargs).idempotent   # the default just turns it off
    assert Producer(FakeClient()).idempotent                  # on by default with acks=all


async def test_idempotent_batches_carry_producer_id_epoch_and_sequences():
    client = FakeClient(script=[0, KafkaConnectionError("lost"), 0],
                        init_script=[ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
    async with Producer(client, linger_ms=0) as producer:
        first = [await producer.send("t", b"a%d" % i, partition=0) for i in range(3)]
        await asyncio.gather(*first)
        second = [await producer.send("t", b"b%d" % i, partition=0) for i in range(2)]
        await asyncio.gather(*second)
        assert producer.producer_id_and_epoch == (1003, 0)
    assert len(client.init_requests) == 4 and client.init_requests[-1].transactional_id is None
    reqs = [r for _, r, _ in client.requests]
    assert headers(reqs[0]) == [(1003, 0, 0, 3)]
    assert headers(reqs[1]) == [(1003, 0, 3, 2)]
    # the retry after the lost answer is the very same batch: same sequence, same bytes
    assert reqs[2].topic_data[0].partition_data[0].records == reqs[1].topic_data[0].partition_data[0].records


async def test_duplicate_sequence_number_counts_as_success():
    client = FakeClient(script=[ErrorCode.DUPLICATE_SEQUENCE_NUMBER])
    async with Producer(client) as producer:
        md = await (await producer.send("t", b"x", partition=0))
    assert md.offset == -1 and len(client.requests) == 1


async def test_out_of_order_sequence_bumps_the_epoch_and_resends_from_zero():
    client = FakeClient(script=[0, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 0])
    async with Producer(client, linger_ms=0) as producer:
        await (await producer.send("t", b"a", partition=0))
        md = await (await producer.send("t", b"b", partition=0))
        assert producer.producer_id_and_epoch == (1000, 1)
    assert md.offset == 100
    assert [headers(r) for _, r, _ in client.requests] == [
        [(1000, 0, 0, 1)], [(1000, 0, 1, 1)], [(1000, 1, 0, 1)]]
    assert len(client.init_requests) == 1          # a local bump, no new producer id


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
async def test_fenced_epoch_gets_a_new_producer_id(code):
    client = FakeClient(script=[code, 0])
    async with Producer(client) as producer:
        await (await producer.send("t", b"a", partition=0))
    assert [headers(r) for _, r, _ in client.requests] == [[(1000, 0, 0, 1)], [(1001, 0, 0, 1)]]


async def test_delivery_timeout_after_lost_answers_then_a_fresh_epoch():
    client = FakeClient(script=[KafkaConnectionError("lost")] * 1000)
    async with Producer(client, delivery_timeout_ms=300) as producer:
        fut = await producer.send("t", b"a", partition=0)
        with pytest.raises(KafkaError):
            await asyncio.wait_for(fut, 5)
        client.script = []
        await (await producer.send("t", b"b", partition=0))
    # "a" may or may not be in the log; "b" must not be taken for its retry: new epoch, sequence 0
    assert headers(client.requests[0][1]) == [(1000, 0, 0, 1)]
    assert headers(client.requests[-1][1]) == [(1000, 1, 0, 1)]


async def test_broker_without_init_producer_id():
    client = FakeClient(init_script=[UnsupportedVersionError("no InitProducerId")])
    async with Producer(client) as producer:            # on by default only: carry on without
        await (await producer.send("t", b"a", partition=0))
        assert not producer.idempotent
    assert headers(client.requests[0][1]) == [(-1, -1, -1, 1)]

    client = FakeClient(init_script=[UnsupportedVersionError("no InitProducerId")])
    async with Producer(client, enable_idempotence=True) as producer:  # asked for: fatal, as in Java
        fut = await producer.send("t", b"a", partition=0)
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(fut, 5)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
        with pytest.raises(KafkaError):
            await producer.send("t", b"b", partition=0)
    assert client.requests == []
