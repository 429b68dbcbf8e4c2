"""RaftLog: the epoch cache, Fetch validation, truncation, snapshots and the unpersisted tail."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from core.raft.entries import Entry, OffsetAndEpoch, SnapshotId
from core.raft.log import LogError, RaftLog, ValidationKind


def entries(epochs: list[int], start: int = 0) -> list[Entry]:
    return [Entry(start + i, epoch, b"o%de%d" % (start + i, epoch))
            for i, epoch in enumerate(epochs)]


def log_of(epochs: list[int], snapshot: SnapshotId | None = None) -> RaftLog:
    start = snapshot.end_offset if snapshot else 0
    return RaftLog(snapshot, entries(epochs, start))


def test_empty_log() -> None:
    log = RaftLog()
    assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.validate_offset_and_epoch(0, 0).kind is ValidationKind.VALID
    assert not log.has_unpersisted


def test_end_offset_for_epoch_is_the_end_of_the_largest_epoch_not_above() -> None:
    log = log_of([1, 1, 3, 3, 5])
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(4, 3)
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(4, 3)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(5, 5)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(5, 5)


@pytest.mark.parametrize("offset, epoch, kind, answer", [
    (5, 5, ValidationKind.VALID, (5, 5)),         # caught up
    (3, 3, ValidationKind.VALID, (3, 3)),         # behind, same history
    (2, 1, ValidationKind.VALID, (2, 1)),
    (0, 0, ValidationKind.VALID, (0, 0)),         # empty follower
    (3, 1, ValidationKind.DIVERGING, (2, 1)),     # epoch 1 ends at 2 here
    (6, 3, ValidationKind.DIVERGING, (4, 3)),     # more of epoch 3 than we ever wrote
    (4, 2, ValidationKind.DIVERGING, (2, 1)),     # an epoch we never had
    (7, 5, ValidationKind.DIVERGING, (5, 5)),     # beyond our end
])
def test_validate_offset_and_epoch(offset, epoch, kind, answer) -> None:
    result = log_of([1, 1, 3, 3, 5]).validate_offset_and_epoch(offset, epoch)
    assert result.kind is kind
    assert tuple(result.offset_and_epoch) == answer


@pytest.mark.parametrize("offset, epoch, kind", [
    (2, 2, ValidationKind.SNAPSHOT),    # below the log start
    (4, 3, ValidationKind.VALID),       # exactly at the snapshot
    (4, 2, ValidationKind.SNAPSHOT),    # at the start but another epoch
    (5, 3, ValidationKind.VALID),
    (6, 4, ValidationKind.VALID),
    (5, 1, ValidationKind.SNAPSHOT),    # an epoch older than the snapshot's
])
def test_validate_against_a_log_that_starts_at_a_snapshot(offset, epoch, kind) -> None:
    log = log_of([3, 4], snapshot=SnapshotId(4, 3))
    result = log.validate_offset_and_epoch(offset, epoch)
    assert result.kind is kind
    if kind is ValidationKind.SNAPSHOT:
        assert result.offset_and_epoch == OffsetAndEpoch(4, 3)


def test_truncate_to_end_offset_keeps_the_shared_part_of_the_epoch() -> None:
    log = log_of([1, 2, 2, 2, 3])
    assert log.truncate_to_end_offset(OffsetAndEpoch(3, 2)) == 3
    assert log.last_epoch == 2


def test_truncate_to_end_offset_drops_an_epoch_the_leader_lacks() -> None:
    log = log_of([1, 1, 3, 3, 3])
    assert log.truncate_to_end_offset(OffsetAndEpoch(4, 2)) == 2
    assert (log.end_offset, log.last_epoch) == (2, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(2, 1)


def test_read_respects_the_byte_limit_but_returns_at_least_one_entry() -> None:
    log = RaftLog(None, [Entry(i, 1, b"x" * 10) for i in range(10)])
    assert len(log.read(0, 35)) == 3
    assert len(log.read(2, 10)) == 1
    assert len(log.read(2, 1)) == 1
    assert len(log.read(8, 1000)) == 2
    assert log.read(10, 1000) == ()
    with pytest.raises(LogError):
        log.read(11, 10)


def test_append_rejects_holes_and_epochs_going_back() -> None:
    log = log_of([1, 2])
    with pytest.raises(LogError):
        log.append([Entry(3, 2, b"")])
    with pytest.raises(LogError):
        log.append([Entry(2, 1, b"")])


def test_unpersisted_tail_reports_truncation_and_new_entries() -> None:
    log = log_of([1, 1, 1, 1])
    log.truncate_to(2)
    log.append(entries([2], start=2))
    truncate_to, tail = log.unpersisted()
    assert truncate_to == 2
    assert [e.offset for e in tail] == [2]
    log.mark_persisted()
    assert log.unpersisted() == (None, ())
    assert not log.has_unpersisted


def test_truncation_then_append_beyond_the_durable_end_is_one_truncation() -> None:
    log = log_of([1, 1])
    log.append(entries([1, 1], start=2))   # not durable yet
    log.truncate_to(3)
    truncate_to, tail = log.unpersisted()
    assert truncate_to is None                # nothing durable was dropped
    assert [e.offset for e in tail] == [2]


def test_advance_start_offset_forgets_covered_entries_and_keeps_epochs() -> None:
    log = log_of([1, 1, 2, 2, 3])
    log.advance_start_offset(SnapshotId(3, 2))
    assert (log.start_offset, log.start_epoch, log.end_offset) == (3, 2, 5)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 2)
    assert log.take_start_advanced() and not log.take_start_advanced()
    assert log.validate_offset_and_epoch(2, 2).kind is ValidationKind.SNAPSHOT
    with pytest.raises(LogError):
        log.truncate_to(2)


def test_advance_start_offset_checks_the_snapshot_matches() -> None:
    log = log_of([1, 1, 2])
    with pytest.raises(LogError):
        log.advance_start_offset(SnapshotId(2, 2))


def test_reset_to_snapshot_replaces_everything() -> None:
    log = log_of([1, 1, 2])
    log.reset_to_snapshot(SnapshotId(10, 4))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 4)
    assert log.unpersisted() == (None, ())
    log.append(entries([5], start=10))
    assert log.end_offset_and_epoch() == OffsetAndEpoch(11, 5)


# The log keeps its payloads end to end in one buffer and makes Entry objects on reads; a plain
# list of entries is the model. Random appends (control entries among them), truncations,
# snapshots that advance the start, and reads by bytes must give back exactly the entries the
# model holds, with their epochs and control flags.
_ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=12), st.booleans()),
                                          min_size=1, max_size=6)),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("advance"), st.integers(0, 40)),
    st.tuples(st.just("read"), st.integers(0, 40), st.integers(1, 30)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_the_compact_log_reads_back_what_a_list_of_entries_holds(ops) -> None:
    log, model, start, epoch = RaftLog(), [], 0, 1
    for op in ops:
        end = start + len(model)
        if op[0] == "append":
            new = []
            for step, payload, control in op[1]:
                epoch += step
                new.append(Entry(end + len(new), epoch, payload, control))
            log.append(new)
            model += new
        elif op[0] == "truncate" and start <= op[1] <= end:
            log.truncate_to(op[1])
            del model[op[1] - start:]
            epoch = max([epoch] + [e.epoch for e in model])
        elif op[0] == "advance" and start < op[1] <= end:
            log.advance_start_offset(SnapshotId(op[1], model[op[1] - start - 1].epoch))
            del model[:op[1] - start]
            start = op[1]
        elif op[0] == "read" and start <= op[1] <= end:
            got = log.read(op[1], op[2])
            want, size = [], 0
            for e in model[op[1] - start:]:
                if want and size + e.size > op[2]:
                    break
                want.append(e)
                size += e.size
            assert list(got) == want
        assert (log.start_offset, log.end_offset) == (start, start + len(model))
        assert list(log.slice(start, start + len(model))) == model
        for e in model:
            assert log.epoch_of(e.offset) == e.epoch
