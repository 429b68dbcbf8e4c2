"""Transactional producer state, against Kafka's ProducerStateManager / ProducerAppendInfo /
VerificationStateEntry and UnifiedLog.analyzeAndValidateProducerState.

Expected values are written from Kafka's behaviour, not from our module: a transaction starts at
its first transactional batch; a marker with an older producer epoch is INVALID_PRODUCER_EPOCH and
one with an older coordinator epoch TRANSACTION_COORDINATOR_FENCED; the first unstable offset
counts completed transactions until the high watermark passes their marker; an abort's index
entry carries lastStableOffset(completedTxn) = the earliest *other* ongoing transaction's first
offset, else marker + 1. A hypothesis model drives a leader through random interleavings and
checks it against a reference model and a follower that replays the log.
"""
from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings, strategies as st

from core.broker.producer_snapshots import latest_snapshot, write_snapshot
from core.broker.producer_state import (
    ABORT, COMMIT, AbortedTxnEntry, CompletedTxn, CorruptSnapshot, EndTxnMarker, ProducerState,
    read_end_txn_marker)
from core.protocol.errors import ErrorCode
from core.protocol.records import (
    ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchInfo, build_batch, iter_batch_headers)

FAST = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
E = ErrorCode
TXN = ATTR_TRANSACTIONAL
CTRL = ATTR_CONTROL | ATTR_TRANSACTIONAL


def hdr(pid: int = 1, epoch: int = 0, seq: int = 0, count: int = 1, base_offset: int = 0,
        ts: int = 1_000, txn: bool = True, control: bool = False) -> BatchInfo:
    attributes = (CTRL if control else 0) | (TXN if txn else 0)
    return BatchInfo(position=0, size=61 + 10 * count, base_offset=base_offset, partition_leader_epoch=0,
                     magic=2, crc=0, attributes=attributes, last_offset_delta=count - 1, base_timestamp=ts,
                     max_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                     base_sequence=-1 if control else seq, records_count=count)


class Leader:
    """A partition leader's use of the state: validate, append (assign offsets), update; markers
    through validate_marker + complete_txn. Keeps the log of headers and the markers' contents."""

    def __init__(self) -> None:
        self.state = ProducerState()
        self.log: list[BatchInfo] = []
        self.markers: dict[int, EndTxnMarker] = {}
        self.aborted: list[AbortedTxnEntry] = []
        self.end = 0

    def produce(self, pid: int, epoch: int, seq: int, count: int = 1, txn: bool = True, **kw):
        b = hdr(pid, epoch, seq, count, ts=1_000 + self.end, txn=txn)
        v = self.state.validate(b, **kw)
        if v.ok:
            self.state.update(b, self.end)
            self.log.append(b._replace(base_offset=self.end))
            self.end += count
        return v

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0):
        v = self.state.validate_marker(pid, epoch, coordinator_epoch)
        if not v.ok:
            return v, None
        offset, ts = self.end, 1_000 + self.end
        done = self.state.complete_txn(pid, epoch, coordinator_epoch, offset, commit, ts)
        self.log.append(hdr(pid, epoch, count=1, base_offset=offset, ts=ts, control=True))
        self.markers[offset] = EndTxnMarker(COMMIT if commit else ABORT, coordinator_epoch)
        if done is not None and done.aborted_entry() is not None:
            self.aborted.append(done.aborted_entry())
        self.end += 1
        return v, done

    def lookup(self, b: BatchInfo) -> EndTxnMarker | None:
        return self.markers.get(b.base_offset)


# --------------------------------------------------------------------------- ongoing transactions


# (name, produce steps (pid, seq, count, transactional), expected ongoing {pid: first offset})
START_CASES = [
    ("first transactional batch starts it", [(1, 0, 3, True)], {1: 0}),
    ("later batches do not move it", [(1, 0, 3, True), (1, 3, 2, True), (1, 5, 1, True)], {1: 0}),
    ("starts at the batch's own offset, after others' records",
     [(9, 0, 4, False), (2, 0, 2, True), (1, 0, 1, True)], {2: 4, 1: 6}),
    ("non-transactional batches start nothing", [(1, 0, 3, False), (2, 0, 1, False)], {}),
    ("a non-transactional producer beside a transaction", [(1, 0, 2, True), (9, 0, 1, False), (1, 2, 1, True)],
     {1: 0}),
]


@pytest.mark.parametrize("name,steps,ongoing", START_CASES, ids=[c[0] for c in START_CASES])
def test_a_transaction_starts_at_its_first_transactional_batch(name, steps, ongoing):
    leader = Leader()
    for pid, seq, count, txn in steps:
        assert leader.produce(pid, 0, seq, count, txn=txn).ok
    assert leader.state.ongoing_transactions() == ongoing
    for pid in {p for p, *_ in steps}:
        entry = leader.state.entry(pid)
        assert entry.current_txn_first_offset == ongoing.get(pid, -1)
        assert leader.state.in_transaction(pid) == (pid in ongoing)
    assert leader.state.first_unstable_offset() == (min(ongoing.values()) if ongoing else None)


def test_first_unstable_offset_over_several_producers_and_the_high_watermark():
    leader = Leader()
    assert leader.state.first_unstable_offset() is None
    leader.produce(9, 0, 0, 2, txn=False)          # 0-1 plain records
    leader.produce(1, 0, 0, 2)                     # 2-3 txn of 1
    leader.produce(2, 0, 0, 1)                     # 4   txn of 2
    leader.produce(3, 0, 0, 1)                     # 5   txn of 3
    leader.produce(1, 0, 2, 1)                     # 6
    fuo = leader.state.first_unstable_offset
    assert fuo() == 2
    _, done = leader.marker(1, 0, commit=True)     # marker at 7
    assert done == CompletedTxn(1, 2, 7, False, 4)
    # completed, but its marker is not replicated: still unstable (Kafka's unreplicatedTxns)
    assert fuo() == 2
    assert leader.state.last_stable_offset(high_watermark=7) == 2
    leader.state.on_high_watermark(7)              # marker at 7 is not below the HW yet
    assert fuo() == 2
    leader.state.on_high_watermark(8)
    assert fuo() == 4 and leader.state.last_stable_offset(8) == 4
    leader.marker(3, 0, commit=False)              # marker at 8: 3's txn (5) completes, 2 is first
    assert fuo() == 4
    leader.marker(2, 0, commit=True)               # marker at 9
    assert fuo() == 4                              # 2's txn is unreplicated now
    leader.state.on_high_watermark(9)              # drops 3's (marker 8) only
    assert fuo() == 4 and leader.state.unreplicated_transactions() == [(2, 4, 9)]
    leader.state.on_high_watermark(10)
    assert fuo() is None and leader.state.last_stable_offset(10) == 10


# (first unstable offset or None, high watermark, log start, expected LSO) - Kafka's
# UnifiedLog.lastStableOffset with the first unstable offset raised to the log start.
LSO_CASES = [
    (None, 10, 0, 10),
    (3, 10, 0, 3),
    (10, 10, 0, 10),
    (12, 10, 0, 10),
    (3, 10, 5, 5),           # the txn's start was deleted by retention
    (3, 2, 0, 2),            # never above the high watermark
]


@pytest.mark.parametrize("first,hw,start,lso", LSO_CASES)
def test_last_stable_offset(first, hw, start, lso):
    state = ProducerState()
    if first is not None:
        state.update(hdr(1, 0, 0), first)
    assert state.first_unstable_offset() == first
    assert state.last_stable_offset(hw, start) == lso


def test_log_start_offset_drops_unreplicated_transactions_below_it():
    leader = Leader()
    leader.produce(1, 0, 0, 2)
    leader.marker(1, 0, commit=False)              # txn 0-1, marker 2
    assert leader.state.first_unstable_offset() == 0
    leader.state.on_log_start_offset(2)
    assert leader.state.first_unstable_offset() == 0
    leader.state.on_log_start_offset(3)
    assert leader.state.first_unstable_offset() is None


def test_the_smallest_first_offset_stays_right_and_cheap_under_churn():
    """A long transaction holds the minimum while thousands start and end behind it: the answer
    must stay its first offset, then move on, and the lazy heap must not keep every dead entry."""
    leader = Leader()
    leader.produce(0, 0, 0, 1)                     # the long one, at 0
    for i in range(3000):
        pid = 1 + i % 7
        leader.produce(pid, 0, i // 7, 1)
        leader.marker(pid, 0, commit=bool(i % 2))
        leader.state.on_high_watermark(leader.end)
        assert leader.state.first_unstable_offset() == 0
    heap = leader.state._ongoing._heap
    assert len(heap) <= 2 * len(leader.state._ongoing) + 17
    leader.marker(0, 0, commit=True)
    leader.state.on_high_watermark(leader.end)
    assert leader.state.first_unstable_offset() is None
    assert len(leader.state._unreplicated_marker._heap) <= 17


# --------------------------------------------------------------------------- markers


def test_abort_yields_the_index_entry_kafka_writes():
    # Kafka's lastStableOffset(completedTxn): the first offset of the earliest ongoing
    # transaction of *another* producer, else marker + 1; completed-but-unreplicated ones do not
    # count.
    leader = Leader()
    leader.produce(1, 0, 0, 2)        # 0-1
    leader.produce(2, 0, 0, 1)        # 2
    leader.produce(3, 0, 0, 1)        # 3
    _, done = leader.marker(2, 0, commit=False)                       # marker 4
    assert done == CompletedTxn(2, 2, 4, True, 0)                     # 1's txn at 0 is earlier
    assert done.aborted_entry() == AbortedTxnEntry(2, 2, 4, 0)
    _, done = leader.marker(1, 0, commit=False)                       # marker 5
    assert done.aborted_entry() == AbortedTxnEntry(1, 0, 5, 3)        # 3's txn at 3, later than 0
    _, done = leader.marker(3, 0, commit=False)                       # marker 6, no other ongoing
    assert done.aborted_entry() == AbortedTxnEntry(3, 3, 6, 7)        # unreplicated 1 and 2 ignored
    assert leader.aborted == [AbortedTxnEntry(2, 2, 4, 0), AbortedTxnEntry(1, 0, 5, 3),
                              AbortedTxnEntry(3, 3, 6, 7)]


def test_commit_completes_without_an_index_entry():
    leader = Leader()
    leader.produce(1, 0, 0, 3)
    _, done = leader.marker(1, 0, commit=True)
    assert done == CompletedTxn(1, 0, 3, False, 4)
    assert done.aborted_entry() is None and leader.aborted == []
    assert not leader.state.in_transaction(1)


def test_a_marker_without_a_transaction_is_valid_and_completes_nothing():
    leader = Leader()
    v, done = leader.marker(5, 2, commit=False, coordinator_epoch=7)   # never wrote here
    assert v.ok and done is None and leader.state.first_unstable_offset() is None
    entry = leader.state.entry(5)
    assert (entry.epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (2, 7, -1)
    # that coordinator epoch now fences older coordinators
    assert leader.state.validate_marker(5, 2, 6).code == E.TRANSACTION_COORDINATOR_FENCED


# (name, entry (epoch, coordinator epoch) set by a first marker, probe (epoch, coordinator epoch), code)
MARKER_CASES = [
    ("same epochs", (3, 5), (3, 5), E.NONE),
    ("higher producer epoch (a bump)", (3, 5), (4, 5), E.NONE),
    ("higher coordinator epoch (coordinator moved)", (3, 5), (3, 6), E.NONE),
    ("older producer epoch", (3, 5), (2, 5), E.INVALID_PRODUCER_EPOCH),
    ("older coordinator epoch", (3, 5), (3, 4), E.TRANSACTION_COORDINATOR_FENCED),
    ("both older: the producer epoch is checked first", (3, 5), (2, 4), E.INVALID_PRODUCER_EPOCH),
    ("older coordinator epoch with a newer producer epoch", (3, 5), (4, 4), E.TRANSACTION_COORDINATOR_FENCED),
]


@pytest.mark.parametrize("name,first,probe,code", MARKER_CASES, ids=[c[0] for c in MARKER_CASES])
def test_marker_verdicts(name, first, probe, code):
    leader = Leader()
    leader.produce(1, first[0], 0, 2)
    leader.marker(1, first[0], commit=True, coordinator_epoch=first[1])
    leader.produce(1, first[0], 2, 1)                                 # a new txn, ongoing at 3
    before = leader.state.snapshot_bytes()
    v = leader.state.validate_marker(1, *probe)
    assert v.code == code, v
    assert leader.state.snapshot_bytes() == before, "validate_marker must not mutate"
    if code != E.NONE:
        v2, done = leader.marker(1, probe[0], commit=False, coordinator_epoch=probe[1])
        assert v2.code == code and done is None
        assert leader.state.snapshot_bytes() == before and leader.state.in_transaction(1)
        assert leader.state.first_unstable_offset() == 0     # the first txn's marker is not replicated
    else:
        _, done = leader.marker(1, probe[0], commit=False, coordinator_epoch=probe[1])
        assert done.first_offset == 3
        entry = leader.state.entry(1)
        assert (entry.epoch, entry.coordinator_epoch) == probe


def test_a_marker_with_a_bumped_epoch_starts_a_new_sequence_space():
    leader = Leader()
    leader.produce(1, 0, 0, 3)
    leader.marker(1, 1, commit=False)                                 # fenced: abort with epoch 1
    assert leader.produce(1, 0, 3, 1).code == E.INVALID_PRODUCER_EPOCH
    assert leader.produce(1, 1, 3, 1).code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leader.produce(1, 1, 0, 1).ok


# --------------------------------------------------------------------------- data batch verdicts


# (name, history (pid, epoch, seq, count, txn), probe (pid, epoch, seq, count, txn), code)
TXN_VERDICTS = [
    ("non-transactional write during the producer's transaction",
     [(1, 0, 0, 2, True)], (1, 0, 2, 1, False), E.INVALID_TXN_STATE),
    ("transactional write continues it", [(1, 0, 0, 2, True)], (1, 0, 2, 1, True), E.NONE),
    ("non-transactional write of another producer", [(1, 0, 0, 2, True)], (2, 0, 0, 1, False), E.NONE),
    ("non-transactional write after the commit", [(1, 0, 0, 2, True), "commit"], (1, 0, 2, 1, False), E.NONE),
    # Kafka checks the epoch and the sequence before the transaction state
    ("stale epoch during the transaction", [(1, 3, 0, 2, True)], (1, 2, 2, 1, False), E.INVALID_PRODUCER_EPOCH),
    ("gap during the transaction", [(1, 0, 0, 2, True)], (1, 0, 5, 1, False), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("higher epoch, still in the transaction", [(1, 0, 0, 2, True)], (1, 1, 0, 1, False), E.INVALID_TXN_STATE),
    ("duplicate of a transactional batch", [(1, 0, 0, 2, True), (1, 0, 2, 1, True)], (1, 0, 0, 2, True), E.NONE),
]


@pytest.mark.parametrize("name,history,probe,code", TXN_VERDICTS, ids=[c[0] for c in TXN_VERDICTS])
def test_data_batch_verdicts_in_transactions(name, history, probe, code):
    leader = Leader()
    for step in history:
        if step == "commit":
            leader.marker(1, 0, commit=True)
        else:
            pid, epoch, seq, count, txn = step
            assert leader.produce(pid, epoch, seq, count, txn=txn).ok
    before = leader.state.snapshot_bytes()
    pid, epoch, seq, count, txn = probe
    v = leader.state.validate(hdr(pid, epoch, seq, count, txn=txn))
    assert v.code == code, v
    assert leader.state.snapshot_bytes() == before
    if name.startswith("duplicate"):
        assert v.is_duplicate and v.base_offset == 0


# --------------------------------------------------------------------------- KIP-890 verification


def test_needs_verification():
    leader = Leader()
    s = leader.state
    assert s.needs_verification(hdr(1, 0, 0))                        # no txn here yet
    assert not s.needs_verification(hdr(1, 0, 0, txn=False))
    assert not s.needs_verification(hdr(1, 0, 0, control=True))
    assert not s.needs_verification(hdr(-1, -1, -1, txn=False))
    leader.produce(1, 0, 0, 1)
    assert not s.needs_verification(hdr(1, 0, 1))                    # ongoing: nothing to verify
    assert s.start_verification(1, 0, 1, now_ms=0) is None
    assert s.needs_verification(hdr(2, 0, 0))
    leader.marker(1, 0, commit=True)
    assert s.needs_verification(hdr(1, 0, 1))                        # next txn needs it again


def verify(state: ProducerState, b: BatchInfo, guard) -> ErrorCode:
    return state.validate(b, verification_guard=guard, require_verification=True).code


def test_verification_guard_lifecycle():
    leader = Leader()
    s = leader.state
    b = hdr(1, 0, 0, 2)
    assert verify(s, b, None) == E.INVALID_TXN_STATE                 # never verified
    guard = s.start_verification(1, 0, 0, now_ms=100)
    assert guard is not None and s.verification_guard_valid(1, guard)
    assert s.verification_guard(1) == guard
    assert verify(s, b, guard) == E.NONE
    assert verify(s, b, None) == E.INVALID_TXN_STATE                 # Kafka's SENTINEL never verifies
    assert not s.verification_guard_valid(2, guard)                  # another producer's
    assert s.validate(b).ok                                          # verification disabled: no guard needed
    # a second request of the same txn before the append: the same guard (computeIfAbsent)
    assert s.start_verification(1, 0, 0, now_ms=150) == guard
    assert leader.produce(1, 0, 0, 2, verification_guard=guard, require_verification=True).ok
    # the first append started the txn: the guard is gone, later batches need none
    assert not s.verification_guard_valid(1, guard) and s.verification_guard(1) is None
    assert leader.produce(1, 0, 2, 1, require_verification=True).ok


def test_a_marker_clears_the_guard_and_a_stale_guard_is_refused():
    """The ABA race KIP-890 closes: verified, then an abort marker is written before the append;
    the append with the old guard must fail, and a new verification gets a new guard."""
    leader = Leader()
    s = leader.state
    leader.produce(1, 0, 0, 1)
    leader.marker(1, 0, commit=True)                                 # txn 1 done
    old = s.start_verification(1, 0, 1, now_ms=0)                    # txn 2: verified ...
    leader.marker(1, 0, commit=False)                                # ... but the coordinator aborted it
    assert not s.verification_guard_valid(1, old)
    assert leader.produce(1, 0, 1, 1, verification_guard=old, require_verification=True).code == E.INVALID_TXN_STATE
    assert not s.in_transaction(1)
    new = s.start_verification(1, 0, 1, now_ms=1)
    assert new != old and not s.verification_guard_valid(1, old)
    assert leader.produce(1, 0, 1, 1, verification_guard=new, require_verification=True).ok


def test_an_epoch_bump_clears_the_guard():
    leader = Leader()
    s = leader.state
    leader.produce(1, 0, 0, 1, txn=False)
    guard = s.start_verification(1, 0, 1, now_ms=0)
    leader.produce(1, 1, 0, 1, txn=False)                            # epoch 1 recorded here
    assert not s.verification_guard_valid(1, guard)
    # a marker with a bumped epoch (the coordinator fencing the producer) clears it too
    guard = s.start_verification(1, 1, 1, now_ms=0)
    leader.marker(1, 2, commit=False)
    assert not s.verification_guard_valid(1, guard)
    # a non-transactional batch of the same epoch does not
    guard = s.start_verification(1, 2, 0, now_ms=0)
    s.update(hdr(1, 2, 0, txn=False), 100)
    assert s.verification_guard_valid(1, guard)


def test_a_verification_holds_back_higher_sequences():
    # Kafka's VerificationStateEntry.lowestSequence: while a verification is under way, a batch
    # whose first sequence is above the lowest one seen is out of order, even where the sequence
    # check alone would pass (a producer without state here takes any sequence, KIP-360).
    assert ProducerState().validate(hdr(1, 0, 4)).ok
    s = ProducerState()
    guard = s.start_verification(1, 0, 4, now_ms=0)
    assert s.start_verification(1, 0, 2, now_ms=0) == guard          # lower sequence: same guard
    assert verify(s, hdr(1, 0, 4), guard) == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert verify(s, hdr(1, 0, 2), guard) == E.NONE
    assert s.start_verification(1, 1, 7, now_ms=0) == guard          # higher epoch: its sequence
    assert s.start_verification(1, 0, 1, now_ms=0) == guard          # an older epoch changes nothing
    assert verify(s, hdr(1, 1, 2), guard) == E.NONE
    assert verify(s, hdr(1, 1, 8), guard) == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    s.update(hdr(1, 1, 7), 0)                                        # appended: verification over
    assert s.validate(hdr(1, 1, 8)).ok


def test_verification_guards_expire():
    s = ProducerState()
    guard = s.start_verification(1, 0, 0, now_ms=1_000)
    assert s.expire(1_099, 100) == [] and s.verification_guard_valid(1, guard)
    s.expire(1_100, 100)
    assert not s.verification_guard_valid(1, guard)


def test_stage_checks_several_batches_of_one_request():
    leader = Leader()
    s = leader.state
    guard = s.start_verification(1, 0, 0, now_ms=0)
    staged = s.stage([1, 2])
    first, second = hdr(1, 0, 0, 2), hdr(1, 0, 2, 1)
    assert verify(staged, first, guard) == E.NONE
    staged.update(first, 0)
    assert verify(staged, second, None) == E.NONE                    # ongoing in the scratch copy
    assert verify(staged, hdr(1, 0, 2, 1, txn=False), None) == E.INVALID_TXN_STATE
    # the real state is untouched
    assert not s.in_transaction(1) and s.verification_guard_valid(1, guard) and len(s) == 0
    leader.produce(1, 0, 0, 2, verification_guard=guard, require_verification=True)
    staged = s.stage([1])
    staged.update(hdr(1, 0, 2, 1), 2)
    assert s.entry(1).last_seq == 1 and staged.entry(1).last_seq == 2


# --------------------------------------------------------------------------- replay, snapshots


def test_replay_rebuilds_transactions_and_the_aborted_entries():
    leader = Leader()
    leader.produce(1, 0, 0, 2)
    leader.produce(2, 0, 0, 1)
    leader.marker(2, 0, commit=False, coordinator_epoch=3)
    leader.produce(3, 0, 0, 1)
    leader.marker(1, 0, commit=False, coordinator_epoch=4)
    leader.marker(3, 0, commit=True, coordinator_epoch=4)
    leader.produce(2, 0, 1, 1)
    follower = ProducerState()
    assert follower.replay_batches(leader.log, leader.lookup) == leader.aborted == [
        AbortedTxnEntry(2, 2, 3, 0), AbortedTxnEntry(1, 0, 5, 4)]
    assert follower == leader.state
    assert follower.entry(1).coordinator_epoch == 4 and follower.first_unstable_offset() == 0
    # without the markers' contents: the same transactions, but no outcome and no coordinator epoch
    blind = ProducerState()
    assert blind.replay_batches(leader.log) == []
    assert blind.ongoing_transactions() == leader.state.ongoing_transactions() == {2: 7}
    assert blind.unreplicated_transactions() == leader.state.unreplicated_transactions()
    assert blind.entry(1).coordinator_epoch == -1
    # an empty control batch (cleaned away) changes nothing
    before = follower.snapshot_bytes()
    follower.replay_batches([hdr(2, 0, base_offset=8, control=True)._replace(records_count=0)], leader.lookup)
    assert follower.snapshot_bytes() == before


def test_read_end_txn_marker_from_real_bytes():
    def marker_batch(control_type: int, coordinator_epoch: int, offset: int) -> bytes:
        return build_batch([(struct.pack(">hh", 0, control_type), struct.pack(">hi", 0, coordinator_epoch), [],
                             5_000)], base_offset=offset, producer_id=7, producer_epoch=1,
                           transactional=True, control=True)

    data = (build_batch([(b"k", b"v", [], 4_000)] * 2, producer_id=7, producer_epoch=1, base_sequence=0,
                        transactional=True)
            + marker_batch(ABORT, 12, 2)
            + build_batch([(b"k", b"v", [], 4_000)], base_offset=3, producer_id=7, producer_epoch=1,
                          base_sequence=2, transactional=True)
            + marker_batch(COMMIT, 13, 4))
    headers = list(iter_batch_headers(data))
    found = [read_end_txn_marker(data, h) for h in headers]
    assert found == [None, EndTxnMarker(ABORT, 12), None, EndTxnMarker(COMMIT, 13)]
    assert not found[1].is_commit and found[3].is_commit
    # the fixed positions the module's notes promise for a Kafka-written marker
    one = marker_batch(COMMIT, 0x01020304, 0)
    assert struct.unpack_from(">h", one, 68)[0] == COMMIT and struct.unpack_from(">i", one, 73)[0] == 0x01020304
    state = ProducerState()
    assert state.replay_batches(headers, lambda h: read_end_txn_marker(data, h)) == [AbortedTxnEntry(7, 0, 2, 3)]
    assert state.entry(7).coordinator_epoch == 13 and state.unreplicated_transactions() == [(7, 0, 2), (7, 3, 4)]


def v1_snapshot(entries) -> bytes:
    """A version-1 file written by hand from the documented layout (the pre-transaction format)."""
    body = struct.pack(">I", len(entries))
    for pid, epoch, ts, batches in entries:
        body += struct.pack(">qhqB", pid, epoch, ts, len(batches))
        for b in batches:
            body += struct.pack(">iiqqq", *b)
    return b"SWPS" + struct.pack(">HI", 1, crc32c(body)) + body


def test_snapshot_version_1_is_still_read():
    data = v1_snapshot([(1, 2, 5_000, [(0, 2, 10, 12, 4_000), (3, 3, 13, 13, 4_500)]), (4, 0, 6_000, [])])
    state = ProducerState.load_snapshot(data)
    e = state.entry(1)
    assert (e.epoch, e.last_seq, e.last_offset, e.last_timestamp) == (2, 3, 13, 5_000)
    assert (e.coordinator_epoch, e.current_txn_first_offset) == (-1, -1)
    assert state.first_unstable_offset() is None and state.entry(4) is not None
    assert state.validate(hdr(1, 2, 0, 3, txn=False)).base_offset == 10          # the window survived
    # written back, it is version 2 and reads the same
    again = state.snapshot_bytes()
    assert struct.unpack_from(">H", again, 4)[0] == 2 and ProducerState.load_snapshot(again) == state
    with pytest.raises(CorruptSnapshot):
        ProducerState.load_snapshot(v1_snapshot([(1, 0, 0, [])]) + b"\0")


def test_snapshot_version_2_keeps_transactions(tmp_path):
    leader = Leader()
    leader.produce(1, 0, 0, 2)
    leader.produce(2, 0, 0, 1)
    leader.marker(2, 0, commit=False, coordinator_epoch=9)   # unreplicated: txn 2-2, marker 3
    leader.produce(3, 0, 0, 1)
    write_snapshot(leader.state, tmp_path, leader.end)
    offset, loaded = latest_snapshot(tmp_path)
    assert offset == leader.end and loaded == leader.state
    assert loaded.ongoing_transactions() == {1: 0, 3: 4}
    assert loaded.unreplicated_transactions() == [(2, 2, 3)]
    assert loaded.entry(2).coordinator_epoch == 9
    assert loaded.validate_marker(2, 0, 8).code == E.TRANSACTION_COORDINATOR_FENCED
    assert loaded.validate(hdr(1, 0, 2, txn=False)).code == E.INVALID_TXN_STATE
    # the restarted state goes on exactly like the leader
    _, done = leader.marker(1, 0, commit=False)
    assert loaded.complete_txn(1, 0, 0, done.last_offset, False, 0) == done == CompletedTxn(1, 0, 5, True, 4)
    loaded.on_high_watermark(4)
    assert loaded.first_unstable_offset() == 0                  # 1's marker (5) is not replicated yet
    loaded.on_high_watermark(6)
    assert loaded.first_unstable_offset() == 4


@FAST
@given(st.data())
def test_damaged_v2_snapshot_is_refused(data):
    leader = Leader()
    leader.produce(1, 0, 0, 2)
    leader.produce(2, 0, 0, 1)
    leader.marker(2, 0, commit=False)
    raw = bytearray(leader.state.snapshot_bytes())
    kind = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if kind == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    else:
        raw += data.draw(st.binary(min_size=1, max_size=8))
    with pytest.raises(CorruptSnapshot):
        ProducerState.load_snapshot(bytes(raw))


def test_expiry_keeps_producers_with_an_ongoing_transaction():
    leader = Leader()
    leader.produce(1, 0, 0, 1)                                      # ts 1000, ongoing
    leader.produce(2, 0, 0, 1, txn=False)                           # ts 1001
    assert leader.state.expire(10_000, 100) == [2]
    assert leader.state.entry(1) is not None and leader.state.first_unstable_offset() == 0
    leader.marker(1, 0, commit=True)                                # ts 1002
    assert leader.state.expire(1_050, 100) == []
    assert leader.state.expire(1_102, 100) == [1]
    assert leader.state.first_unstable_offset() == 0               # the unreplicated txn stays until the HW
    leader.state.on_high_watermark(leader.end)
    assert leader.state.first_unstable_offset() is None


# --------------------------------------------------------------------------- model


DATA, NONTXN, COMMIT_OP, ABORT_OP, BUMP_ABORT, ZOMBIE_MARKER, RACE, HW = range(8)
OPS = st.lists(st.tuples(st.sampled_from(range(8)), st.integers(0, 2), st.integers(1, 3)), max_size=80)


def run_model(ops, verification: bool) -> Leader:
    """Three transactional producers against a leader, checked step by step against a reference
    model of Kafka's rules; returns the leader for the follower comparisons."""
    leader = Leader()
    s = leader.state
    epoch = [0, 0, 0]
    seq = [0, 0, 0]
    coordinator_epoch = 0
    hw = 0
    ongoing: dict[int, int] = {}                    # model: pid -> first offset
    txns: list[list] = []                           # model: [pid, first, marker or None]
    expected_aborted: list[AbortedTxnEntry] = []
    for op, pid, n in ops:
        if op in (DATA, NONTXN):
            txn = op == DATA
            b = hdr(pid, epoch[pid], seq[pid], n, txn=txn)
            guard = s.start_verification(pid, epoch[pid], seq[pid], 0) if txn and s.needs_verification(b) else None
            v = leader.produce(pid, epoch[pid], seq[pid], n, txn=txn, verification_guard=guard,
                               require_verification=verification)
            if not txn and pid in ongoing:
                assert v.code == E.INVALID_TXN_STATE
                continue
            assert v.ok, v
            if txn and pid not in ongoing:
                ongoing[pid] = leader.end - n
                txns.append([pid, leader.end - n, None])
            seq[pid] += n
        elif op in (COMMIT_OP, ABORT_OP, BUMP_ABORT):
            if n == 3:
                coordinator_epoch += 1              # the coordinator moved
            if op == BUMP_ABORT:
                epoch[pid] += 1
                seq[pid] = 0
            aborted = op != COMMIT_OP
            offset = leader.end
            others = [f for p, f in ongoing.items() if p != pid]
            v, done = leader.marker(pid, epoch[pid], commit=not aborted, coordinator_epoch=coordinator_epoch)
            assert v.ok
            if pid in ongoing:
                first = ongoing.pop(pid)
                lso = min(others) if others else offset + 1
                assert done == CompletedTxn(pid, first, offset, aborted, lso)
                next(t for t in txns if t[0] == pid and t[2] is None)[2] = offset
                if aborted:
                    expected_aborted.append(AbortedTxnEntry(pid, first, offset, lso))
            else:
                assert done is None
        elif op == ZOMBIE_MARKER:
            # a marker from a fenced coordinator, or for a fenced producer epoch: refused, no change
            entry = s.entry(pid)
            if entry is not None:
                assert entry.epoch == epoch[pid]
                before = s.snapshot_bytes()
                if entry.coordinator_epoch > 0:
                    v, _ = leader.marker(pid, epoch[pid], commit=n == 1,
                                         coordinator_epoch=entry.coordinator_epoch - 1)
                    assert v.code == E.TRANSACTION_COORDINATOR_FENCED
                if epoch[pid] > 0:
                    v, _ = leader.marker(pid, epoch[pid] - 1, commit=n == 1, coordinator_epoch=coordinator_epoch)
                    assert v.code == E.INVALID_PRODUCER_EPOCH
                assert s.snapshot_bytes() == before
        elif op == RACE and verification and pid not in ongoing:
            # verified, then the coordinator aborts before the append: the append must fail
            b = hdr(pid, epoch[pid], seq[pid], 1)
            guard = s.start_verification(pid, epoch[pid], seq[pid], 0)
            leader.marker(pid, epoch[pid], commit=False, coordinator_epoch=coordinator_epoch)
            assert leader.produce(pid, epoch[pid], seq[pid], 1, verification_guard=guard,
                                  require_verification=True).code == E.INVALID_TXN_STATE
            assert s.needs_verification(b)
        elif op == HW:
            hw = min(leader.end, hw + n * 2)
            s.on_high_watermark(hw)
        unstable = [f for p, f, m in txns if m is None or m >= hw]
        assert s.first_unstable_offset() == (min(unstable) if unstable else None)
        assert s.ongoing_transactions() == ongoing
    assert leader.aborted == expected_aborted
    leader.hw = hw
    return leader


@FAST
@given(OPS, st.booleans(), st.data())
def test_model_leader_follower_and_restart_agree(ops, verification, data):
    leader = run_model(ops, verification)
    # a follower replaying the whole log, in fetch-sized chunks
    follower = ProducerState()
    aborted = []
    cuts = sorted(data.draw(st.lists(st.integers(0, len(leader.log)), max_size=4)))
    for lo, hi in zip([0] + cuts, cuts + [len(leader.log)]):
        aborted += follower.replay_batches(leader.log[lo:hi], leader.lookup)
    follower.on_high_watermark(leader.hw)
    assert aborted == leader.aborted
    assert follower == leader.state
    assert follower.first_unstable_offset() == leader.state.first_unstable_offset()
    # a restart from a snapshot taken anywhere, then the rest of the log
    cut = data.draw(st.integers(0, len(leader.log)))
    head = ProducerState.rebuild(leader.log[:cut], leader.lookup)
    restarted = ProducerState.load_snapshot(head.snapshot_bytes())
    assert restarted == head
    tail_aborted = restarted.replay_batches(leader.log[cut:], leader.lookup)
    restarted.on_high_watermark(leader.hw)
    assert restarted == leader.state
    start = leader.log[cut].base_offset if cut < len(leader.log) else leader.end
    assert tail_aborted == [a for a in leader.aborted if a.last_offset >= start]


@pytest.mark.parametrize("seed", range(6))
def test_model_seeded_long_runs(seed):
    import random
    rng = random.Random(seed)
    ops = [(rng.choice([DATA, DATA, DATA, NONTXN, COMMIT_OP, ABORT_OP, BUMP_ABORT, ZOMBIE_MARKER, RACE, HW]),
            rng.randrange(3), rng.randint(1, 3)) for _ in range(1500)]
    leader = run_model(ops, verification=bool(seed % 2))
    assert leader.aborted, "a long run must abort something"
    follower = ProducerState()
    assert follower.replay_batches(leader.log, leader.lookup) == leader.aborted
    follower.on_high_watermark(leader.hw)
    assert follower == leader.state
