"""The leader epoch cache (Kafka's LeaderEpochFileCache, core/log/epochs.py, shared by the replicas
and the Raft log) and the replica's log shape."""
from __future__ import annotations

import pytest

from core.broker.replication import EpochEntry, LeaderEpochCache, OffsetAndEpoch, ReplicaLog

UNDEFINED = (-1, -1)


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(EpochEntry(e, o) for e, o in pairs)


def pairs(c: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in c.entries]


@pytest.mark.parametrize("before, assign, after, changed", [
    ([], (0, 0), [(0, 0)], True),
    ([(0, 0)], (1, 5), [(0, 0), (1, 5)], True),
    # the latest epoch again, at or after its start: nothing to do
    ([(0, 0), (1, 5)], (1, 5), [(0, 0), (1, 5)], False),
    ([(0, 0), (1, 5)], (1, 9), [(0, 0), (1, 5)], False),
    # the latest epoch earlier than recorded: it starts there now
    ([(0, 0), (1, 5)], (1, 3), [(0, 0), (1, 3)], True),
    # a new leader wrote nothing in its epoch: the next epoch at the same offset replaces it
    ([(0, 0), (2, 5)], (3, 5), [(0, 0), (3, 5)], True),
    # a later epoch starting before cached entries drops them (non-monotonic)
    ([(0, 0), (1, 5), (2, 8)], (3, 6), [(0, 0), (1, 5), (3, 6)], True),
    # an older epoch drops every entry of that epoch or later
    ([(0, 0), (1, 5), (2, 8)], (1, 9), [(0, 0), (1, 9)], True),
])
def test_assign(before, assign, after, changed):
    c = cache(*before)
    assert c.assign(*assign) is changed
    assert pairs(c) == after


@pytest.mark.parametrize("bad", [(-1, 0), (0, -1)])
def test_assign_rejects_negative(bad):
    with pytest.raises(ValueError):
        cache().assign(*bad)


# Cache [(1, 0), (3, 10), (5, 20)], log end 30.
@pytest.mark.parametrize("requested, expected", [
    (5, (5, 30)),           # the latest epoch ends at the log end
    (3, (3, 20)),           # ends where the next epoch starts
    (4, (3, 20)),           # unknown epoch: the largest below it, ending at the next start
    (1, (1, 10)),
    (0, (0, 0)),            # below every epoch: itself, ending at the first start
    (6, UNDEFINED),         # above every epoch
    (-1, UNDEFINED),        # UNDEFINED_EPOCH
])
def test_end_offset_for(requested, expected):
    assert cache((1, 0), (3, 10), (5, 20)).end_offset_for(requested, 30) == expected


def test_end_offset_for_empty_cache():
    assert cache().end_offset_for(0, 10) == UNDEFINED


@pytest.mark.parametrize("end, after, changed", [
    (25, [(1, 0), (3, 10), (5, 20)], False),
    (20, [(1, 0), (3, 10)], True),       # an entry starting at the cut goes
    (15, [(1, 0), (3, 10)], True),
    (10, [(1, 0)], True),
    (0, [], True),
])
def test_truncate_from_end(end, after, changed):
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.truncate_from_end(end) is changed
    assert pairs(c) == after


@pytest.mark.parametrize("start, after, changed", [
    (0, [(1, 0), (3, 10), (5, 20)], False),
    (5, [(1, 5), (3, 10), (5, 20)], True),      # the epoch holding the new start starts there
    (10, [(3, 10), (5, 20)], True),
    (12, [(3, 12), (5, 20)], True),
    (25, [(5, 25)], True),
])
def test_truncate_from_start(start, after, changed):
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.truncate_from_start(start) is changed
    assert pairs(c) == after


@pytest.mark.parametrize("offset, epoch", [(0, 1), (9, 1), (10, 3), (19, 3), (20, 5), (99, 5)])
def test_epoch_for_offset(offset, epoch):
    assert cache((1, 0), (3, 10), (5, 20)).epoch_for_offset(offset) == epoch


def test_epoch_for_offset_before_every_entry():
    assert cache((1, 5)).epoch_for_offset(4) is None


# --- ReplicaLog ------------------------------------------------------------------------------

# The Raft log's questions: the largest epoch at or below one, with where it ends.
@pytest.mark.parametrize("epoch, expected", [
    (0, None),            # every cached epoch is later
    (1, (10, 1)), (2, (10, 1)), (3, (20, 3)), (4, (20, 3)), (5, (30, 5)), (9, (30, 5)),
])
def test_floor(epoch, expected):
    found = cache((1, 0), (3, 10), (5, 20)).floor(epoch, log_end_offset=30)
    assert (None if found is None else tuple(found)) == expected


@pytest.mark.parametrize("start, end, runs", [
    (0, 30, [(1, 0, 10), (3, 10, 20), (5, 20, 30)]),
    (5, 12, [(1, 5, 10), (3, 10, 12)]),
    (10, 20, [(3, 10, 20)]),
    (25, 25, []),
])
def test_spans(start, end, runs):
    assert list(cache((1, 0), (3, 10), (5, 20)).spans(start, end)) == runs


def test_spans_refuse_an_offset_before_every_epoch():
    with pytest.raises(ValueError):
        list(cache((3, 10)).spans(5, 12))


def test_log_trims_a_stale_checkpoint_to_the_recovered_log():
    # A crash lost the tail: epochs starting at or after the recovered end are dropped, the
    # high watermark is clamped to the log.
    log = ReplicaLog(5, 12, 20, [EpochEntry(1, 0), EpochEntry(2, 8), EpochEntry(4, 12)])
    assert pairs(log.epochs) == [(1, 5), (2, 8)]
    assert log.high_watermark == 12
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(12, 2)
    assert log.end_offset_for_epoch(9) is None


def test_log_truncate_to_keeps_invariants():
    log = ReplicaLog(0, 20, 15, [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(3, 18)])
    assert log.truncate_to(12) is True
    assert (log.end_offset, log.high_watermark) == (12, 12)
    assert pairs(log.epochs) == [(1, 0), (2, 10)]
    assert log.take_epochs_changed()
    # beyond the end: nothing to cut, but an epoch entry at the log end still goes
    log.assign_epoch(4, 12)
    log.take_epochs_changed()
    assert log.truncate_to(30) is False
    assert pairs(log.epochs) == [(1, 0), (2, 10)]
    assert log.take_epochs_changed()


def test_log_truncate_below_start_restarts_there():
    log = ReplicaLog(10, 20, 15, [EpochEntry(1, 10)])
    assert log.truncate_to(4)
    assert (log.start_offset, log.end_offset, log.high_watermark) == (4, 4, 4)
    assert pairs(log.epochs) == []


def test_log_high_watermarks():
    log = ReplicaLog(0, 10, 4)
    assert not log.maybe_increment_high_watermark(3)       # a leader's never goes back
    assert log.maybe_increment_high_watermark(7)
    with pytest.raises(ValueError):
        log.maybe_increment_high_watermark(11)
    assert log.update_high_watermark(30) and log.high_watermark == 10   # a follower's: clamped
    assert log.update_high_watermark(2) and log.high_watermark == 2     # and may go back


def test_log_start_only_grows_and_stays_below_the_high_watermark():
    log = ReplicaLog(0, 10, 6, [EpochEntry(1, 0), EpochEntry(2, 5)])
    assert log.maybe_increment_start_offset(5)
    assert pairs(log.epochs) == [(2, 5)]
    assert not log.maybe_increment_start_offset(3)
    with pytest.raises(ValueError):
        log.maybe_increment_start_offset(7)
