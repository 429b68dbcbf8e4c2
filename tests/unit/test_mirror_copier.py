"""mirror/copier.py's window against a scripted target leader that keeps producer state as
Kafka's idempotence does: which batches may be in flight together, and what the target's log
holds after a refusal of the first one.

The failure this guards against was found by the full DR drill: a new replica topic's first
Produce was refused (NOT_LEADER_OR_FOLLOWER, the leader not yet in place), the request
pipelined behind it was accepted (the target had no state of that producer, so any sequence
goes), the retry of the first was then refused as out of order, and the copier re-sent both
under a new producer id: five records twice in the partner's log."""
from __future__ import annotations

import time
from types import SimpleNamespace

import anyio
import pytest

from core.client.errors import KafkaError
from core.protocol.errors import ErrorCode
from core.protocol.records import iter_batch_headers, build_batch, decode_batch
from mirror.copier import PartitionCopier, ProducerIdentity, _InFlight

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

MIRROR_PID = 9000
APP_P, APP_Q = 100, 200


class TargetLeader:
    """One target partition's leader: its log, and per producer the last sequence written and
    the base sequences of its last five batches (duplicates are answered with their offset).
    The first `refuse` Produce requests get NOT_LEADER_OR_FOLLOWER."""

    def __init__(self, refuse: int = 0):
        self.refuse = refuse
        self.log: list[bytes] = []
        self.last_seq: dict[int, int] = {}
        self.recent: dict[int, dict[int, int]] = {}
        self.unanswered = 0
        self.unanswered_at_send: list[int] = []     # requests in flight as each one arrived
        self.next_pid = MIRROR_PID

    def append(self, batch: bytes) -> tuple[int, int]:
        info = next(iter_batch_headers(batch))
        pid, seq, count = info.producer_id, info.base_sequence, info.last_offset_delta + 1
        recent = self.recent.setdefault(pid, {})
        if seq in recent:
            return ErrorCode.NONE, recent[seq]
        last = self.last_seq.get(pid)
        if last is not None and seq != last + 1:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        offset = sum(len(self.records(b)) for b in self.log)
        self.log.append(batch)
        self.last_seq[pid] = seq + count - 1
        recent[seq] = offset
        return ErrorCode.NONE, offset

    @staticmethod
    def records(batch: bytes) -> list[bytes]:
        info = next(iter_batch_headers(batch))
        return [bytes(r.value) for r in decode_batch(batch, info)]

    def values(self) -> list[bytes]:
        return [v for b in self.log for v in self.records(b)]

    # -- the connection the copier sends on

    async def send(self, request, *, api_key, timeout_ms):
        self.unanswered_at_send.append(self.unanswered)
        self.unanswered += 1
        try:
            await anyio.sleep(0.005)      # on the wire: the copier may send more meanwhile
            batch = bytes(request.topic_data[0].partition_data[0].records)
            if self.refuse:
                self.refuse -= 1
                code, offset = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
            else:
                code, offset = self.append(batch)
            part = SimpleNamespace(error_code=code, base_offset=offset)
            return SimpleNamespace(responses=[SimpleNamespace(partition_responses=[part])])
        finally:
            self.unanswered -= 1


def target_client(leader: TargetLeader):
    async def ensure_topics(topics):
        return None

    async def connection(node):
        return leader

    async def any_node():
        return 1

    async def send(node, request, *, api_key):       # InitProducerId
        leader.next_pid += 1
        return SimpleNamespace(error_code=0, producer_id=leader.next_pid, producer_epoch=0)

    return SimpleNamespace(ensure_topics=ensure_topics, leader_for=lambda topic, partition: 1,
                           connection=connection, any_node=any_node, send=send,
                           request_metadata_update=lambda: None, backoff_ms=lambda attempt: 1,
                           request_timeout_ms=1000)


def batch(pid: int, seq: int, *values: str) -> bytes:
    return build_batch([(None, v.encode(), [], 1000) for v in values], producer_id=pid, producer_epoch=0,
                       base_sequence=seq)


async def copy(leader: TargetLeader, batches: list[bytes], *, known: set[int] = frozenset()) -> PartitionCopier:
    """The copier's window holding `batches` (as one fetched answer), sent until all are
    acknowledged, retrying as the copier's loop does."""
    target = target_client(leader)
    copier = PartitionCopier(None, target, ProducerIdentity(target), source_topic="t", target_topic="t",
                             partition=0, start_offset=0, on_synced=lambda *sync: None, fetchers=None,
                             keep_producers=True)
    copier._pid, copier._epoch = await copier.producer.ensure()
    copier._known_producers.update(known)
    upstream = 0
    for data in batches:
        info = next(iter_batch_headers(data))
        copier._window.append(_InFlight(memoryview(bytearray(data)), info.base_sequence, upstream,
                                        info.last_offset_delta + 1, 1000))
        upstream += info.last_offset_delta + 1
    with anyio.fail_after(10):
        while copier._window:
            error = await copier._attempt(copier._drain_window, (KafkaError, OSError))
            if error is not None:
                assert isinstance(error, KafkaError), error
    return copier


@pytest.mark.parametrize("pids, known, in_flight_at_send", [
    # One producer the target already acknowledged: a window of requests at once.
    ([APP_P, APP_P, APP_P], {APP_P}, [0, 1, 2]),
    # Its first batch here goes alone; the rest follow it once it is answered.
    ([APP_P, APP_P, APP_P], set(), [0, 0, 1]),
    # Another producer's batch waits for the one before it, known or not.
    ([APP_P, APP_Q, APP_P], {APP_P, APP_Q}, [0, 0, 0]),
    ([APP_P, APP_P, APP_Q, APP_Q], {APP_P, APP_Q}, [0, 1, 0, 1]),
    ([APP_P, APP_Q, APP_Q], {APP_P}, [0, 0, 0]),
], ids=["known", "first-of-a-producer", "alternating", "runs", "new-after-known"])
async def test_which_batches_go_out_together(anyio_backend, pids, known, in_flight_at_send):
    seqs: dict[int, int] = {}
    batches = []
    for n, pid in enumerate(pids):
        batches.append(batch(pid, seqs.get(pid, 0), f"r{n}"))
        seqs[pid] = seqs.get(pid, 0) + 1
    leader = TargetLeader()
    await copy(leader, batches, known=known)
    assert leader.unanswered_at_send == in_flight_at_send
    assert leader.values() == [f"r{n}".encode() for n in range(len(pids))]


async def test_a_refused_first_batch_of_a_new_producer_is_written_once_and_in_order(anyio_backend):
    """The drill's failure: the first request refused, the ones behind it would be taken."""
    leader = TargetLeader(refuse=1)
    batches = [batch(APP_P, 5 * n, *(f"r{5 * n + k}" for k in range(5))) for n in range(4)]
    copier = await copy(leader, batches)
    assert leader.values() == [f"r{n}".encode() for n in range(20)]
    assert {next(iter_batch_headers(b)).producer_id for b in leader.log} == {APP_P}   # never re-stamped
    assert copier.stats.records == 20


async def test_a_refusal_in_a_window_of_a_known_producer_is_sent_again_in_order(anyio_backend):
    """Within one known producer the target's sequence check keeps a pipelined window in
    order: what follows a refused batch is refused as out of order, and all of it is sent
    again, each batch once."""
    leader = TargetLeader(refuse=1)
    leader.last_seq[APP_P] = 4
    batches = [batch(APP_P, 5 + 5 * n, *(f"r{5 * n + k}" for k in range(5))) for n in range(4)]
    await copy(leader, batches, known={APP_P})
    assert leader.values() == [f"r{n}".encode() for n in range(20)]
    assert leader.unanswered_at_send[:2] == [0, 1]          # it was pipelined


async def test_latency_ends_when_the_target_answered_not_when_the_copier_looked(anyio_backend):
    """A caught-up copier completes its window only when its next take times out (half a
    second later): the replication latency it reports must not include that wait."""
    leader = TargetLeader()
    target = target_client(leader)
    copier = PartitionCopier(None, target, ProducerIdentity(target), source_topic="t", target_topic="t",
                             partition=0, start_offset=0, on_synced=lambda *sync: None, fetchers=None)
    copier._pid, copier._epoch = await copier.producer.ensure()
    now_ms = int(time.time() * 1000)
    data = build_batch([(None, b"v", [], now_ms)], producer_id=copier._pid, producer_epoch=0, base_sequence=0)
    copier._window.append(_InFlight(memoryview(bytearray(data)), 0, 0, 1, now_ms))

    async def send_then_look_later():
        await copier._fill_window()          # sent; its answer comes in about 5 ms
        await anyio.sleep(0.5)
        await copier._drain_window()

    assert await copier._attempt(send_then_look_later, (KafkaError, OSError)) is None
    [(_, latency_ms)] = copier.stats.latencies_ms
    assert latency_ms < 300, latency_ms
