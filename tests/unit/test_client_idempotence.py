"""The idempotent producer: the pure sequence/epoch state machine, the batch header it writes,
and the whole Producer against a simulated broker that loses responses and cuts connections.

Expected behaviour follows the Java producer's TransactionManager for a producer without a
transactional id (KIP-98, KIP-360), except where idempotence.py says we fail a batch that may
already be written instead of renumbering it.
"""
from __future__ import annotations

import asyncio
import random

import pytest

from core.broker.producer_state import ProducerState
from core.client.accumulator import ProducerBatch
from core.client.cluster import ClusterView
from core.client.errors import KafkaConnectionError
from core.client.idempotence import EPOCH_MAX, SEQUENCE_SPACE, Decision, IdempotenceState, PartitionSequences
from core.client.producer import Producer
from core.protocol import messages as m
from core.protocol.compression import Compression
from core.protocol.errors import ErrorCode
from core.protocol.records import iter_records, scan_batches

E = ErrorCode
TP = ("t", 0)


class B:
    """A batch as the state machine sees it."""

    def __init__(self, n: int = 1, name: str = ""):
        self.records = [None] * n
        self.name = name
        self.producer_id, self.producer_epoch, self.base_seq = -1, -1, None
        self.sent = self.outstanding = self.maybe_written = False

    def set_producer_state(self, pid, epoch, seq):
        self.producer_id, self.producer_epoch, self.base_seq = pid, epoch, seq

    def __repr__(self):
        return f"B({self.name} seq={self.base_seq} e={self.producer_epoch})"


def fresh(pid: int = 7, epoch: int = 0) -> IdempotenceState:
    s = IdempotenceState()
    s.set_producer_id(pid, epoch)
    return s


def send(s: IdempotenceState, tp, *batches):
    """Drain and send each batch, as the producer does."""
    for b in batches:
        assert s.may_send(tp, b), b
        if b.base_seq is None:
            s.assign(tp, b)
        s.on_send(tp, b)
    return batches


# --------------------------------------------------------------------------- sequences


def test_sequences_count_records_per_partition_and_survive_retries():
    s = fresh()
    a, b, c = send(s, TP, B(3), B(2), B(4))
    (x,) = send(s, ("t", 1), B(5))
    assert [(z.producer_id, z.producer_epoch, z.base_seq) for z in (a, b, c, x)] == \
        [(7, 0, 0), (7, 0, 3), (7, 0, 5), (7, 0, 0)]
    s.on_retriable(TP, a, maybe_written=True)   # lost answer: same sequence next time
    assert s.may_send(TP, a) and a.base_seq == 0
    send(s, TP, a)
    s.on_acknowledged(TP, a)
    s.on_acknowledged(TP, b)
    assert s.partitions[TP].last_acked == 4 and s.partitions[TP].in_flight == [c]


def test_sequences_wrap_past_int32_max():
    s = fresh()
    s.partitions[TP] = PartitionSequences(7, 0, next_seq=SEQUENCE_SPACE - 2)
    a, b = send(s, TP, B(3), B(1))
    assert (a.base_seq % SEQUENCE_SPACE, b.base_seq % SEQUENCE_SPACE) == (SEQUENCE_SPACE - 2, 1)
    s.on_acknowledged(TP, a)
    s.on_acknowledged(TP, b)
    assert s.partitions[TP].last_acked + 1 == s.partitions[TP].next_seq


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_batch_header_carries_producer_state_under_the_crc(anyio_backend):
    b = ProducerBatch("t", 0, (1,), 10.0)
    b.records = [(b"k", b"v%d" % i, None, 1000 + i) for i in range(3)]
    b.set_producer_state(42, 3, SEQUENCE_SPACE - 1)   # wraps on the wire: last sequence is 1
    data = b.encode(Compression.ZSTD)
    (info,) = scan_batches(data, verify_crc=True, from_client=True)
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 3, SEQUENCE_SPACE - 1)
    b.set_producer_state(42, 4, 0)   # renumbered after an epoch bump: patched, CRC still right
    (info,) = scan_batches(b.encoded, verify_crc=True, from_client=True)
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 4, 0)
    assert [r.value for r in iter_records(b.encoded)] == [b"v0", b"v1", b"v2"]


# --------------------------------------------------------------------------- what may be sent


def test_no_batch_before_the_producer_id():
    s = IdempotenceState()
    assert not s.may_send(TP, B())
    s.set_producer_id(1, 0)
    assert s.may_send(TP, B())


def test_at_most_five_sequenced_batches_per_partition():
    s = fresh()
    batches = send(s, TP, *[B() for _ in range(5)])
    assert not s.may_send(TP, B())
    assert s.may_send(("t", 1), B())
    s.on_acknowledged(TP, batches[0])
    assert s.may_send(TP, B())


def test_a_retry_waits_until_it_is_the_oldest_batch_in_flight():
    s = fresh()
    a, b, c = send(s, TP, B(name="a"), B(name="b"), B(name="c"))
    s.on_retriable(TP, b, maybe_written=False)    # b back first: a is still out
    assert not s.may_send(TP, b)
    s.on_retriable(TP, a, maybe_written=True)
    assert s.may_send(TP, a) and not s.may_send(TP, b)
    send(s, TP, a)
    s.on_acknowledged(TP, a)
    assert s.may_send(TP, b)


def test_a_sequenced_batch_never_sent_may_go_behind_outstanding_ones():
    s = fresh()
    (a,) = send(s, TP, B())
    b = B()
    s.assign(TP, b)          # drained, but did not fit in the request
    assert s.may_send(TP, b)


# --------------------------------------------------------------------------- answers


def state_with_three():
    """Three batches of 2 records in flight (a: 0-1, b: 2-3, c: 4-5)."""
    s = fresh()
    a, b, c = send(s, TP, B(2, "a"), B(2, "b"), B(2, "c"))
    return s, a, b, c


@pytest.mark.parametrize("code, which, decision, epoch, pid", [
    # the oldest batch is refused: a real gap -> bump the epoch, resend from 0
    (E.OUT_OF_ORDER_SEQUENCE_NUMBER, "a", Decision.RETRY, 1, 7),
    # a younger batch is refused while an older one is still out: wait, no bump
    (E.OUT_OF_ORDER_SEQUENCE_NUMBER, "b", Decision.RETRY, 0, 7),
    (E.UNKNOWN_PRODUCER_ID, "a", Decision.RETRY, 1, 7),
    (E.UNKNOWN_PRODUCER_ID, "c", Decision.RETRY, 1, 7),
    # the broker will not take this epoch: a new producer id
    (E.INVALID_PRODUCER_EPOCH, "a", Decision.RETRY, -1, -1),
    (E.PRODUCER_FENCED, "b", Decision.RETRY, -1, -1),
])
def test_sequence_errors(code, which, decision, epoch, pid):
    s, a, b, c = state_with_three()
    batch = {"a": a, "b": b, "c": c}[which]
    others = [x for x in (a, b, c) if x is not batch]
    for x in others:                               # every answer is back: the reset can happen
        s.on_retriable(TP, x, maybe_written=False)
    got, _message = s.on_sequence_error(TP, batch, code)
    assert got is decision
    assert (s.epoch, s.producer_id) == (epoch, pid)
    if (epoch, pid) != (0, 7):                     # reset: every batch lost its sequence, in order
        assert [x.base_seq for x in (a, b, c)] == [None] * 3
        assert s.partitions[TP].in_flight == [] and not s.take_failures()
        if pid == 7:
            resent = send(s, TP, a, b, c)
            assert [(x.producer_epoch, x.base_seq) for x in resent] == [(1, 0), (1, 2), (1, 4)]
    else:
        assert [x.base_seq for x in (a, b, c)] == [0, 2, 4]


def test_out_of_order_below_an_acknowledged_sequence_fails_the_batch():
    s, a, b, c = state_with_three()
    s.on_acknowledged(TP, b)                       # b landed, so a was probably written too
    decision, message = s.on_sequence_error(TP, a, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert decision is Decision.FAIL and "not resent" in message
    s.on_failed(TP, a)
    s.on_acknowledged(TP, c)
    assert s.epoch == 0 and s.may_send(TP, B())    # every sequence handed out is acknowledged


def test_reset_waits_for_outstanding_answers():
    s, a, b, c = state_with_three()
    s.on_sequence_error(TP, a, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert s.epoch == 0 and not s.may_send(TP, a)    # b and c are still out
    s.on_sequence_error(TP, b, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert s.epoch == 0
    s.on_acknowledged(TP, c)                         # impossible for a broker, but must not break
    assert s.epoch == 1 and a.base_seq is None and b.base_seq is None


def test_reset_fails_batches_that_may_already_be_written():
    s, a, b, c = state_with_three()
    s.on_retriable(TP, b, maybe_written=True)        # b's answer was lost
    s.on_retriable(TP, c, maybe_written=False)
    s.on_sequence_error(TP, a, E.UNKNOWN_PRODUCER_ID)
    failures = s.take_failures()
    assert [f[0] for f in failures] == [b]
    assert failures[0][1].code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and "duplicate" in str(failures[0][1])
    assert a.base_seq is None and c.base_seq is None
    assert [x.base_seq for x in send(s, TP, a, c)] == [0, 2]


def test_epoch_bump_at_epoch_max_asks_for_a_new_producer_id():
    s = fresh(epoch=EPOCH_MAX)
    (a,) = send(s, TP, B())
    s.on_sequence_error(TP, a, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert s.needs_producer_id and not s.may_send(TP, a)
    s.set_producer_id(8, 0)
    assert [(x.producer_id, x.producer_epoch, x.base_seq) for x in send(s, TP, a)] == [(8, 0, 0)]


@pytest.mark.parametrize("later_acked, bumped", [(True, False), (False, True)])
def test_a_failed_sequenced_batch_holds_the_partition_until_resolved(later_acked, bumped):
    s, a, b, c = state_with_three()
    s.on_failed(TP, a)                               # e.g. delivery timeout, outcome unknown
    assert not s.may_send(TP, B())                   # nothing new until b and c settle
    if later_acked:                                  # then a was written after all
        s.on_acknowledged(TP, b)
        s.on_acknowledged(TP, c)
    else:
        s.on_failed(TP, b)
        s.on_failed(TP, c)
    assert (s.epoch == 1) is bumped
    (d,) = send(s, TP, B())
    assert d.base_seq == (0 if bumped else 6)


def test_other_partitions_finish_their_old_epoch_then_restart_at_zero():
    s = fresh()
    (a,) = send(s, TP, B(2))
    x, y = send(s, ("t", 1), B(3), B(3))
    s.on_sequence_error(TP, a, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert s.epoch == 1
    z = B()
    assert not s.may_send(("t", 1), z)              # x and y still carry epoch 0
    s.on_retriable(("t", 1), x, maybe_written=True)
    assert s.may_send(("t", 1), x) and x.producer_epoch == 0   # resent as it was
    send(s, ("t", 1), x)
    s.on_acknowledged(("t", 1), x)
    s.on_acknowledged(("t", 1), y)
    assert [(b.producer_epoch, b.base_seq) for b in send(s, ("t", 1), z)] == [(1, 0)]


def test_split_takes_over_the_sequence_range_unless_maybe_written():
    s, a, b, c = state_with_three()
    a1, a2 = B(1), B(1)
    s.on_retriable(TP, b, maybe_written=False)
    assert s.on_split(TP, b, (a1, a2))
    assert [x.base_seq for x in s.partitions[TP].in_flight] == [0, 2, 3, 4]
    assert s.may_send(TP, a1)
    c.maybe_written = True
    assert not s.on_split(TP, c, (B(1), B(1)))


# --------------------------------------------------------------------------- whole producer, simulated broker


class SimBroker:
    """A KafkaClient stand-in whose broker validates sequences with the broker's own
    ProducerState. Requests are handled when sent (one pipelined connection) and answered
    later, in order. Faults: the connection is cut after the broker handled a request (every
    outstanding answer is lost), a request is refused before it arrives, or the partition
    answers NOT_LEADER_OR_FOLLOWER until the client refreshes its metadata."""

    request_timeout_ms = 30000
    retry_backoff_ms = 1
    metadata_max_age_ms = 300000

    def __init__(self, seed: int, partitions: int = 3, cut=0.08, refuse=0.03, not_leader=0.03):
        self.rng = random.Random(seed)
        self.cluster = ClusterView()
        R = m.MetadataResponse
        self.cluster.apply(R(brokers=[R.MetadataResponseBroker(node_id=1, host="h", port=1)], cluster_id="c",
                             controller_id=1, topics=[R.MetadataResponseTopic(
                                 name="t", topic_id=b"\x01" * 16, partitions=[
                                     R.MetadataResponsePartition(partition_index=p, leader_id=1, leader_epoch=0,
                                                                 replica_nodes=[1], isr_nodes=[1])
                                     for p in range(partitions)])]), all_topics=True)
        self.p_cut, self.p_refuse, self.p_not_leader = cut, refuse, not_leader
        self.logs: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.states = {p: ProducerState() for p in range(partitions)}
        self.metadata_stale = False
        self.not_leader = False
        self.outstanding: list[asyncio.Future] = []
        self.last_answer = 0.0
        self.stats = {"requests": 0, "cut": 0, "refused": 0, "not_leader": 0, "duplicate": 0}
        self.next_pid = 100

    async def start(self):
        return self

    async def ensure_topics(self, topics):
        self.metadata_stale = False
        return self.cluster

    async def refresh_metadata(self, topics=None):
        return self.cluster

    def request_metadata_update(self):
        self.metadata_stale = True
        self.not_leader = False

    def least_loaded_node(self):
        return 1

    async def any_node(self):
        return 1

    def backoff_ms(self, attempt):
        return 1

    def _append(self, p: int, records) -> tuple[int, int]:
        data = bytearray(records)
        (info,) = scan_batches(data, verify_crc=True, from_client=True)
        verdict = self.states[p].validate(info)
        if verdict.is_duplicate:
            self.stats["duplicate"] += 1
            return 0, verdict.base_offset
        if verdict.code:
            self.stats[verdict.code.name] = self.stats.get(verdict.code.name, 0) + 1
            return verdict.code, -1
        base = len(self.logs[p])
        self.logs[p].extend(r.value for r in iter_records(data))
        self.states[p].update(info, base)
        return 0, base

    async def send(self, node, request, *, api_key=None, timeout_ms=None, expect_response=True):
        if api_key == 22:
            self.next_pid += 1
            return m.InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=self.next_pid,
                                            producer_epoch=0)
        self.stats["requests"] += 1
        roll = self.rng.random()
        if roll < self.p_refuse:
            self.stats["refused"] += 1
            await asyncio.sleep(0)
            raise KafkaConnectionError("connection refused")
        if self.rng.random() < self.p_not_leader:
            self.not_leader = True
        R = m.ProduceResponse
        topics = []
        for t in request.topic_data:
            parts = []
            for pd in t.partition_data:
                if self.not_leader:
                    self.stats["not_leader"] += 1
                    code, base = E.NOT_LEADER_OR_FOLLOWER, -1
                else:
                    code, base = self._append(pd.index, pd.records)
                parts.append(R.PartitionProduceResponse(index=pd.index, error_code=code, base_offset=base))
            topics.append(R.TopicProduceResponse(name=t.name, partition_responses=parts))
        response = R(responses=topics, throttle_time_ms=0)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.outstanding.append(fut)
        if roll < self.p_refuse + self.p_cut:             # handled, but every answer is lost
            self.stats["cut"] += 1
            for f in self.outstanding:
                if not f.done():
                    f.set_exception(KafkaConnectionError("connection cut"))
            self.outstanding.clear()
        else:                                               # answers leave in order
            self.last_answer = max(self.last_answer, loop.time() + self.rng.uniform(0, 0.002))
            loop.call_at(self.last_answer, lambda: fut.done() or fut.set_result(response))
        try:
            return await fut
        finally:
            if fut in self.outstanding:
                self.outstanding.remove(fut)


async def produce_through_faults(broker: SimBroker, n: int = 600, **producer_kw):
    sent: dict[int, list[bytes]] = {p: [] for p in broker.logs}
    async with Producer(broker, linger_ms=0, batch_size=200, delivery_timeout_ms=60000,
                        **producer_kw) as producer:
        futures = []
        for i in range(n):
            p = i % len(broker.logs)
            value = b"%05d" % i
            sent[p].append(value)
            futures.append(await producer.send("t", value, partition=p))
            if i % 7 == 0:
                await asyncio.sleep(0.0005)
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 30)
    return sent, results


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("seed", range(6))
async def test_idempotent_producer_writes_everything_once_and_in_order(anyio_backend, seed):
    broker = SimBroker(seed)
    sent, results = await produce_through_faults(broker)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    assert broker.logs == sent, "every acknowledged record exactly once, in order"
    assert broker.stats["cut"] >= 3 and broker.stats["duplicate"] > 0 and broker.stats["not_leader"], broker.stats
    by_value = {v: (p, i) for p, log in broker.logs.items() for i, v in enumerate(log)}
    # the offsets the producer reported are where the records are (duplicates answered with the first)
    assert all(by_value[b"%05d" % i] == (md.partition, md.offset) for i, md in enumerate(results))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_control_without_idempotence_the_same_faults_write_duplicates(anyio_backend):
    broker = SimBroker(0)
    sent, results = await produce_through_faults(broker, enable_idempotence=False)
    assert not [r for r in results if isinstance(r, BaseException)]
    written = [v for log in broker.logs.values() for v in log]
    assert len(written) > len(set(written)), "lost answers make a plain producer write twice"
