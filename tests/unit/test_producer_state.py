"""Idempotent-producer state, against Kafka's ProducerStateManager / ProducerAppendInfo.

Expected verdicts are written from Kafka's behaviour (storage/.../ProducerAppendInfo.java,
ProducerStateEntry.java, UnifiedLog.analyzeAndValidateProducerState and
TransactionCoordinator.handleInitProducerId), not from our module: table-driven cases for every
verdict, then rebuild/snapshot/expiry, the allocator, and a hypothesis model of a producer whose
sends are retried, duplicated and reordered.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.broker.producer_ids import ProducerIdAllocator, ProducerIdsExhausted
from core.broker.producer_snapshots import (delete_snapshots, latest_snapshot, list_snapshots, snapshot_path,
                                            write_snapshot)
from core.broker.producer_state import (
    NUM_BATCHES_TO_RETAIN, CorruptSnapshot, ProducerState, Verdict, batch_last_sequence, next_sequence)
from core.protocol.errors import ErrorCode
from core.protocol.records import ATTR_CONTROL, BatchInfo, build_batch, read_batch_header

FAST = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
MAX = 2**31 - 1
E = ErrorCode


def hdr(pid: int = 1, epoch: int = 0, seq: int = 0, count: int = 1, base_offset: int = 0,
        ts: int = 1_000, attributes: int = 0) -> BatchInfo:
    return BatchInfo(position=0, size=61 + 10 * count, base_offset=base_offset, partition_leader_epoch=0,
                     magic=2, crc=0, attributes=attributes, last_offset_delta=count - 1, base_timestamp=ts,
                     max_timestamp=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     records_count=count)


def state_from(sends) -> tuple[ProducerState, int]:
    """Append (pid, epoch, seq, count) batches in order, asserting each is accepted."""
    st_ = ProducerState()
    offset = 0
    for pid, epoch, seq, count in sends:
        b = hdr(pid, epoch, seq, count)
        v = st_.validate(b)
        assert v.ok, (b, v)
        st_.update(b, offset)
        offset += count
    return st_, offset


# --------------------------------------------------------------------------- verdict table
# (name, history of accepted (pid, epoch, seq, count), probe (pid, epoch, seq, count),
#  expected code, expected duplicate base offset or None)
CASES = [
    ("non-idempotent batch", [], (-1, -1, -1, 3), E.NONE, None),
    ("non-idempotent beside producers", [(1, 0, 0, 2)], (-1, -1, -1, 1), E.NONE, None),
    ("negative sequence with a producer id", [], (1, 0, -1, 1), E.INVALID_RECORD, None),
    ("unknown producer, seq 0", [], (1, 0, 0, 1), E.NONE, None),
    # KIP-360: no UNKNOWN_PRODUCER_ID any more; a producer without state is accepted at any seq.
    ("unknown producer, seq != 0", [], (1, 0, 42, 1), E.NONE, None),
    ("unknown producer, other producer known", [(2, 0, 0, 1)], (1, 3, 17, 1), E.NONE, None),
    ("next in sequence", [(1, 0, 0, 3)], (1, 0, 3, 2), E.NONE, None),
    ("gap", [(1, 0, 0, 3)], (1, 0, 4, 1), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("same first seq, different last seq", [(1, 0, 0, 3)], (1, 0, 0, 2), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("overlapping range", [(1, 0, 0, 3), (1, 0, 3, 3)], (1, 0, 2, 2), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("exact duplicate of last batch", [(1, 0, 0, 3), (1, 0, 3, 2)], (1, 0, 3, 2), E.NONE, 3),
    ("exact duplicate of first cached batch", [(1, 0, 0, 3), (1, 0, 3, 2)], (1, 0, 0, 3), E.NONE, 0),
    ("duplicate 5 batches back",
     [(1, 0, 0, 1), (1, 0, 1, 1), (1, 0, 2, 1), (1, 0, 3, 1), (1, 0, 4, 1)], (1, 0, 0, 1), E.NONE, 0),
    # Only 5 batches are cached: an older retry is not recognised and is out of order.
    ("duplicate 6 batches back",
     [(1, 0, i, 1) for i in range(6)], (1, 0, 0, 1), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("duplicate of other producer's range", [(2, 0, 0, 1), (1, 0, 0, 1)], (1, 0, 0, 1), E.NONE, 1),
    ("duplicate with stale epoch is fenced", [(1, 0, 0, 1), (1, 1, 0, 1)], (1, 0, 0, 1),
     E.INVALID_PRODUCER_EPOCH, None),
    ("lower epoch", [(1, 5, 0, 1)], (1, 4, 1, 1), E.INVALID_PRODUCER_EPOCH, None),
    ("lower epoch, seq 0", [(1, 5, 0, 1)], (1, 4, 0, 1), E.INVALID_PRODUCER_EPOCH, None),
    ("higher epoch at seq 0", [(1, 0, 0, 5)], (1, 1, 0, 1), E.NONE, None),
    ("higher epoch at seq != 0", [(1, 0, 0, 5)], (1, 1, 5, 1), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("much higher epoch at seq 0", [(1, 0, 0, 5)], (1, 100, 0, 1), E.NONE, None),
    ("after epoch bump, old range is not a duplicate", [(1, 0, 0, 1), (1, 1, 0, 1)], (1, 1, 0, 1), E.NONE, 1),
    ("after epoch bump, sequence continues", [(1, 0, 0, 1), (1, 1, 0, 1)], (1, 1, 1, 1), E.NONE, None),
    ("wraparound: MAX then 0", [(1, 0, MAX, 1)], (1, 0, 0, 1), E.NONE, None),
    ("wraparound: MAX then 1 is a gap", [(1, 0, MAX, 1)], (1, 0, 1, 1), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("wraparound inside a batch", [(1, 0, MAX - 1, 4)], (1, 0, 2, 1), E.NONE, None),
    ("duplicate of a wrapping batch", [(1, 0, MAX - 1, 4)], (1, 0, MAX - 1, 4), E.NONE, 0),
]


@pytest.mark.parametrize("name,history,probe,code,dup_offset", CASES, ids=[c[0] for c in CASES])
def test_verdicts(name, history, probe, code, dup_offset):
    state, _ = state_from(history)
    before = state.snapshot_bytes()
    v = state.validate(hdr(*probe))
    assert v.code == code, v
    assert v.is_duplicate == (dup_offset is not None)
    if dup_offset is not None:
        assert v.base_offset == dup_offset and not v.ok
        assert v.last_offset == dup_offset + probe[3] - 1
    else:
        assert v.ok == (code == E.NONE)
        assert v.message or v.ok
    assert state.snapshot_bytes() == before, "validate must not mutate"


# A DR pair's producers (core/protocol/dr.py): this cluster's own ids are [1000, 2000); a
# producer outside came from the partner, its state copied by the DR link, and may leave a
# forward gap (the records stranded by an unplanned failover). Nothing else changes for it.
OWN = range(1000, 2000)
FOREIGN_CASES = [
    ("own producer: a gap is an error", [(1500, 0, 0, 3)], (1500, 0, 4, 1), E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("partner's producer: a gap is accepted", [(7, 0, 0, 3)], (7, 0, 9, 1), E.NONE, None),
    ("partner's producer: in sequence", [(7, 0, 0, 3)], (7, 0, 3, 1), E.NONE, None),
    ("partner's producer: a retry is still a duplicate", [(7, 0, 0, 3), (7, 0, 3, 2)], (7, 0, 3, 2), E.NONE, 3),
    ("partner's producer: behind is still an error", [(7, 0, i, 1) for i in range(6)], (7, 0, 0, 1),
     E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("partner's producer: a gap across the wrap", [(7, 0, MAX - 1, 1)], (7, 0, 5, 1), E.NONE, None),
    ("partner's producer: half the space ahead is behind", [(7, 0, 10, 1)], (7, 0, 10 + 2**30 + 1, 1),
     E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("partner's producer: a stale epoch is still fenced", [(7, 3, 0, 1)], (7, 2, 9, 1), E.INVALID_PRODUCER_EPOCH, None),
    ("partner's producer: a new epoch still starts at 0", [(7, 0, 0, 1)], (7, 1, 9, 1),
     E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
]


@pytest.mark.parametrize("name,history,probe,code,dup_offset", FOREIGN_CASES, ids=[c[0] for c in FOREIGN_CASES])
def test_a_producer_from_the_dr_partner_may_skip_ahead_and_nothing_else(name, history, probe, code, dup_offset):
    state, _ = state_from(history)
    v = state.validate(hdr(*probe), OWN)
    assert v.code == code, v
    assert v.is_duplicate == (dup_offset is not None)
    if dup_offset is not None:
        assert v.base_offset == dup_offset


# A DR link's copy (`dr_copy`: the mirror writing a replica of its source): batches copied
# before, older than the five kept, are duplicates, not OUT_OF_ORDER (a restarted link sends
# again what it had not recorded). Only behind: a gap or a new epoch is judged as before.
COPY_CASES = [
    ("a copy older than the five kept is a duplicate", [(7, 0, i, 1) for i in range(8)], (7, 0, 1, 1),
     E.DUPLICATE_SEQUENCE_NUMBER, None),
    ("the whole of an older batch", [(7, 0, 0, 4), (7, 0, 4, 4)] + [(7, 0, 8 + i, 1) for i in range(5)],
     (7, 0, 0, 4), E.DUPLICATE_SEQUENCE_NUMBER, None),
    ("one of the five kept is answered with its offset", [(7, 0, i, 1) for i in range(8)], (7, 0, 6, 1), E.NONE, 6),
    ("a batch reaching past the last is not a duplicate", [(7, 0, i, 1) for i in range(8)], (7, 0, 1, 9),
     E.OUT_OF_ORDER_SEQUENCE_NUMBER, None),
    ("behind across the wrap", [(7, 0, MAX - 1, 1), (7, 0, MAX, 1)] + [(7, 0, i, 1) for i in range(5)],
     (7, 0, MAX - 1, 1), E.DUPLICATE_SEQUENCE_NUMBER, None),
    ("in sequence is appended", [(7, 0, i, 1) for i in range(8)], (7, 0, 8, 1), E.NONE, None),
    ("an own producer's copy too", [(1500, 0, i, 1) for i in range(8)], (1500, 0, 0, 1),
     E.DUPLICATE_SEQUENCE_NUMBER, None),
    ("an older epoch is still fenced", [(7, 3, i, 1) for i in range(8)], (7, 2, 0, 1), E.INVALID_PRODUCER_EPOCH, None),
]


@pytest.mark.parametrize("name,history,probe,code,dup_offset", COPY_CASES, ids=[c[0] for c in COPY_CASES])
def test_a_dr_links_copy_of_batches_it_copied_before_is_a_duplicate(name, history, probe, code, dup_offset):
    state, _ = state_from(history)
    v = state.validate(hdr(*probe), OWN, dr_copy=True)
    assert v.code == code, v
    assert v.is_duplicate == (dup_offset is not None) and not (v.ok and code != E.NONE)
    if dup_offset is not None:
        assert v.base_offset == dup_offset
    if code == E.DUPLICATE_SEQUENCE_NUMBER:
        assert state.validate(hdr(*probe), OWN).code == E.OUT_OF_ORDER_SEQUENCE_NUMBER, "only for a DR copy"


def test_verdict_constructors():
    v = Verdict.duplicate(7)
    assert v.is_duplicate and v.code == E.NONE and v.base_offset == 7 and not v.ok
    assert Verdict.accept().ok
    assert not Verdict.error(E.OUT_OF_ORDER_SEQUENCE_NUMBER, "x").ok


@pytest.mark.parametrize("seq,delta,last", [(0, 0, 0), (0, 9, 9), (MAX, 0, MAX), (MAX, 1, 0), (MAX - 2, 5, 2)])
def test_last_sequence_wraps(seq, delta, last):
    assert batch_last_sequence(hdr(seq=seq, count=delta + 1)) == last
    assert next_sequence(seq, delta) == last


def test_real_batch_header():
    raw = build_batch([(b"k", b"v", [], 5_000)] * 3, producer_id=9, producer_epoch=2, base_sequence=10)
    b = read_batch_header(raw)
    state = ProducerState()
    assert state.validate(b).ok
    state.update(b, 100)
    e = state.entry(9)
    assert (e.epoch, e.last_seq, e.last_offset, e.last_timestamp) == (2, 12, 102, 5_000)
    assert state.validate(b).base_offset == 100


def test_window_keeps_last_five_and_update_epoch_bump_clears():
    state, _ = state_from([(1, 0, i, 1) for i in range(8)])
    e = state.entry(1)
    assert len(e.batches) == NUM_BATCHES_TO_RETAIN
    assert [m.first_seq for m in e.batches] == [3, 4, 5, 6, 7]
    state.update(hdr(1, 1, 0, 2), 50)
    assert state.entry(1).epoch == 1 and [m.first_offset for m in state.entry(1).batches] == [50]


def test_control_batch_updates_epoch_and_time_only():
    state, _ = state_from([(1, 0, 0, 1)])
    state.update(hdr(1, 1, -1, 1, ts=9_999, attributes=ATTR_CONTROL), 5)
    e = state.entry(1)
    assert e.epoch == 1 and len(e.batches) == 0 and e.last_timestamp == 9_999
    # same epoch, nothing cached: Kafka's currentLastSeq is NO_SEQUENCE, so only seq 0 follows
    assert state.validate(hdr(1, 1, 0, 1)).ok
    assert state.validate(hdr(1, 1, 3, 1)).code == E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_update_ignores_non_idempotent_and_takes_clock():
    state = ProducerState()
    state.update(hdr(-1, -1, -1), 0)
    assert len(state) == 0
    state.update(hdr(3, 0, 0, ts=10), 0, timestamp_ms=77)
    assert state.entry(3).last_timestamp == 77 and state.entry(3).batches[0].max_timestamp == 10


# --------------------------------------------------------------------------- rebuild, expiry


def log_of(sends):
    """Headers as the log holds them: base offsets assigned, duplicates not appended."""
    state, log, offset = ProducerState(), [], 0
    for pid, epoch, seq, count, ts in sends:
        b = hdr(pid, epoch, seq, count, ts=ts)
        if state.validate(b).ok:
            state.update(b, offset)
            log.append(b._replace(base_offset=offset))
            offset += count
    return state, log


SENDS = st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 2), st.integers(0, 12), st.integers(1, 4),
                           st.integers(0, 10_000)), max_size=60)


@FAST
@given(SENDS)
def test_rebuild_from_headers_equals_incremental(sends):
    state, log = log_of(sends)
    assert ProducerState.rebuild(log) == state
    # snapshot at any point + replay of the rest gives the same state
    cut = len(log) // 2
    mid = ProducerState.rebuild(log[:cut])
    again = ProducerState.load_snapshot(mid.snapshot_bytes()).replay(log[cut:])
    assert again == state


@FAST
@given(SENDS)
def test_snapshot_round_trip(sends):
    state, _ = log_of(sends)
    data = state.snapshot_bytes()
    loaded = ProducerState.load_snapshot(data)
    assert loaded == state and loaded.snapshot_bytes() == data


def test_snapshot_round_trip_extremes():
    state = ProducerState()
    state.update(hdr(2**63 - 1, 2**15 - 1, MAX, 1, ts=-1), 2**62)
    state.update(hdr(0, -1, 0, 1, ts=2**62), 0)
    assert ProducerState.load_snapshot(state.snapshot_bytes()) == state
    assert ProducerState.load_snapshot(ProducerState().snapshot_bytes()) == ProducerState()


@FAST
@given(st.data())
def test_damaged_snapshot_is_refused(data):
    state, _ = state_from([(1, 0, 0, 3), (2, 4, 9, 1)])
    raw = bytearray(state.snapshot_bytes())
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


def test_snapshot_files(tmp_path):
    a, _ = state_from([(1, 0, 0, 1)])
    b, _ = state_from([(1, 0, 0, 1), (1, 0, 1, 1)])
    c, _ = state_from([(1, 0, 0, 1), (1, 0, 1, 1), (1, 0, 2, 1)])
    assert latest_snapshot(tmp_path) is None
    assert write_snapshot(a, tmp_path, 1) == snapshot_path(tmp_path, 1)
    write_snapshot(b, tmp_path, 2)
    write_snapshot(c, tmp_path, 3)
    assert sorted(os.listdir(tmp_path)) == [f"{o:020d}.snapshot" for o in (1, 2, 3)]
    assert latest_snapshot(tmp_path) == (3, c)
    assert latest_snapshot(tmp_path, max_offset=2) == (2, b)      # at or below the recovery point
    assert latest_snapshot(tmp_path, max_offset=0) is None
    # corrupt newest -> fall back to the older one
    p3 = snapshot_path(tmp_path, 3)
    raw = bytearray(p3.read_bytes())
    raw[-1] ^= 0xFF
    p3.write_bytes(bytes(raw))
    assert latest_snapshot(tmp_path) == (2, b)
    snapshot_path(tmp_path, 2).write_bytes(b"")                 # torn
    assert latest_snapshot(tmp_path) == (1, a)
    (tmp_path / "junk.snapshot").write_bytes(b"x")
    (tmp_path / f"{9:020d}.snapshot.tmp").write_bytes(b"x")     # a leftover temp file
    assert [o for o, _ in list_snapshots(tmp_path)] == [1, 2, 3]
    assert delete_snapshots(tmp_path, below=2, above=2) == [1, 3]
    assert [o for o, _ in list_snapshots(tmp_path)] == [2]
    assert latest_snapshot(tmp_path) is None                    # the only one left is torn
    assert latest_snapshot(tmp_path / "missing") is None


def test_restart_from_snapshot_then_scan(tmp_path):
    sends = [(p, 0, s, 2, 1000 + s) for s in range(0, 40, 2) for p in (1, 2)]
    state, log = log_of(sends)
    write_snapshot(ProducerState.rebuild(log[:10]), tmp_path, log[10].base_offset)
    write_snapshot(ProducerState.rebuild(log[:30]), tmp_path, log[30].base_offset)
    recovery_point = log[20].base_offset                        # the 30 snapshot is beyond it
    offset, loaded = latest_snapshot(tmp_path, max_offset=recovery_point)
    assert offset == log[10].base_offset
    loaded.replay(b for b in log if b.base_offset >= offset)
    assert loaded == state


EXPIRY = [
    # (last timestamp, now, expiration, expired?)  Kafka: now - lastTimestamp >= expiration
    (1_000, 1_000, 100, False),
    (1_000, 1_099, 100, False),
    (1_000, 1_100, 100, True),
    (1_000, 5_000, 100, True),
]


@pytest.mark.parametrize("last,now,ttl,expired", EXPIRY)
def test_expire(last, now, ttl, expired):
    state = ProducerState()
    state.update(hdr(1, 0, 0, ts=last), 0)
    state.update(hdr(2, 0, 0, ts=now), 1)
    assert state.expire(now, ttl) == ([1] if expired else [])
    assert (state.entry(1) is None) == expired and state.entry(2) is not None
    if expired:   # the producer comes back at any sequence (KIP-360)
        assert state.validate(hdr(1, 0, 7)).ok


# --------------------------------------------------------------------------- allocator


def test_init_producer_id_semantics():
    alloc = ProducerIdAllocator()
    alloc.use_block(0, 10)
    first = alloc.init_producer_id()
    # Kafka: without a transactional id, an existing (producer id, epoch) is ignored and a new
    # id with epoch 0 is handed out ("always blindly accept the request").
    again = alloc.init_producer_id(None, first.producer_id, first.producer_epoch)
    assert again.code == E.NONE and again.producer_id != first.producer_id and again.producer_epoch == 0
    assert alloc.init_producer_id("").code == E.INVALID_REQUEST
    with pytest.raises(NotImplementedError):
        alloc.init_producer_id("txn-1")


# --------------------------------------------------------------------------- model test
# One or more producers send numbered batches with up to 5 in flight. The network may deliver
# any in-flight request (reordering), deliver it again (duplicate/retry), or lose the response
# (the client retries later). A client sometimes resets - bumps its epoch and starts again at
# sequence 0, as the Java client does on KIP-360 brokers - and the requests it had in flight may
# still arrive later as zombies.
# Invariants: the log never holds the same (producer, epoch, seq) twice, within an epoch the
# accepted sequences are gapless from the first one, and a duplicate answer names the offset
# where that exact batch was first appended.


NEW, DELIVER, DELIVER_LOSE_RESPONSE, ZOMBIE, RESET = range(5)
STEP = st.tuples(st.integers(0, 2), st.sampled_from([NEW, NEW, DELIVER, DELIVER, DELIVER_LOSE_RESPONSE, ZOMBIE,
                                                     RESET]), st.integers(0, 9), st.integers(1, 4))


def run_model(n_producers: int, start_seq: int, steps) -> set:
    """Drive the model through (producer, action, index, count) steps; returns the verdicts seen."""
    state = ProducerState()
    log_offset = 0
    appended: dict[tuple[int, int, int], tuple[int, int]] = {}      # (pid, epoch, first) -> (offset, count)
    next_expected: dict[tuple[int, int], int] = {}                   # (pid, epoch) -> next seq
    clients = [{"epoch": 0, "seq": start_seq, "inflight": [], "zombies": []} for _ in range(n_producers)]
    seen = set()

    def deliver(pid, epoch, seq, count):
        nonlocal log_offset
        b = hdr(pid, epoch, seq, count)
        v = state.validate(b)
        seen.add((v.code, v.is_duplicate))
        if v.ok:
            assert (pid, epoch, seq) not in appended, "a duplicate was appended"
            exp = next_expected.get((pid, epoch))
            assert exp is None or exp == seq, f"gap: expected {exp}, appended {seq}"
            if exp is None and any(p == pid for p, _ in next_expected):
                assert seq == 0, "a known producer's new epoch must start at sequence 0"
            state.update(b, log_offset)
            appended[(pid, epoch, seq)] = (log_offset, count)
            next_expected[(pid, epoch)] = next_sequence(seq, count)
            log_offset += count
        elif v.is_duplicate:
            assert appended[(pid, epoch, seq)] == (v.base_offset, count)
            assert v.last_offset == v.base_offset + count - 1
        else:
            assert v.code in (E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.INVALID_PRODUCER_EPOCH), v
        return v

    for pid, action, index, count in steps:
        pid %= n_producers
        cl = clients[pid]
        if action == RESET:
            # the client resets (fatal error, restart with a local epoch bump): epoch + 1 from
            # sequence 0; what it had in flight may still arrive later as zombies
            cl["epoch"] += 1
            cl["seq"] = 0
            cl["zombies"] += cl["inflight"]
            cl["inflight"] = []
        elif action == ZOMBIE:
            if cl["zombies"]:
                deliver(pid, *cl["zombies"][index % len(cl["zombies"])])
        elif action == NEW or not cl["inflight"]:
            if len(cl["inflight"]) < 5:
                cl["inflight"].append((cl["epoch"], cl["seq"], count))
                cl["seq"] = next_sequence(cl["seq"], count)
        else:
            i = index % len(cl["inflight"])
            v = deliver(pid, *cl["inflight"][i])
            if (v.ok and action == DELIVER) or v.is_duplicate:
                cl["inflight"].pop(i)               # answered with success
            # errors and lost responses: it stays in flight and is retried later
    # everything accepted is also what a rebuild from the log would see
    log = sorted(((off, pid, ep, seq, cnt) for (pid, ep, seq), (off, cnt) in appended.items()))
    assert ProducerState.rebuild(hdr(pid, ep, seq, cnt, base_offset=off)
                                 for off, pid, ep, seq, cnt in log) == state
    return seen


@FAST
@given(st.integers(1, 3), st.sampled_from([0, 7, MAX - 6]), st.lists(STEP, max_size=300))
def test_model_never_duplicates_or_gaps(n_producers, start_seq, steps):
    run_model(n_producers, start_seq, steps)


@pytest.mark.parametrize("seed", range(10))
def test_model_seeded_runs_reach_every_verdict(seed):
    import random
    rng = random.Random(seed)
    steps = [(rng.randrange(3), rng.choice([NEW, NEW, DELIVER, DELIVER, DELIVER_LOSE_RESPONSE, ZOMBIE, RESET]),
              rng.randrange(10), rng.randint(1, 4)) for _ in range(3000)]
    seen = run_model(2, rng.choice([0, MAX - 6]), steps)
    assert {(E.NONE, False), (E.NONE, True), (E.OUT_OF_ORDER_SEQUENCE_NUMBER, False),
            (E.INVALID_PRODUCER_EPOCH, False)} <= seen, (seed, seen)


@FAST
@given(st.lists(st.integers(1, 5), min_size=1, max_size=40), st.sampled_from([0, MAX - 20]))
def test_model_in_order_stream_always_accepted_and_retries_are_duplicates(counts, start):
    state, offset, seq = ProducerState(), 0, start
    sent = []
    for count in counts:
        b = hdr(1, 0, seq, count)
        assert state.validate(b).ok
        state.update(b, offset)
        sent.append((b, offset))
        offset += count
        seq = next_sequence(seq, count)
        # every one of the last 5 batches retried now is a duplicate with its offset
        for old, off in sent[-NUM_BATCHES_TO_RETAIN:]:
            v = state.validate(old)
            assert v.is_duplicate and v.base_offset == off
        for old, _ in sent[:-NUM_BATCHES_TO_RETAIN]:
            assert state.validate(old).code == E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_allocator_uses_controller_blocks_and_never_goes_back():
    alloc = ProducerIdAllocator()
    assert alloc.needs_block()
    alloc.use_block(5000, 2)
    assert [alloc.allocate(), alloc.allocate()] == [5000, 5001]
    assert alloc.needs_block()
    with pytest.raises(ValueError):
        alloc.use_block(4000, 1000)     # below ids already handed out
    with pytest.raises(ValueError):
        alloc.use_block(7000, 0)
    alloc.use_block(7000, 1000)
    assert alloc.allocate() == 7000
    alloc.use_block(9000, 1)
    assert alloc.allocate() == 9000
    with pytest.raises(ProducerIdsExhausted):
        alloc.allocate()                   # until the controller hands out the next block
