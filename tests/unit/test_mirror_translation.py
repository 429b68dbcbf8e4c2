"""Offset translation (mirror/translation.py).

The rule under test: a translated offset never points past a record the group had not consumed
upstream, it is exact at sync points and anywhere inside a sync's run, it re-delivers at most
c - (u1 + x1) records otherwise ((u1, x1) the greatest sync at or below c and its run), and
translation returns None rather than guess.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mirror.records import OffsetSync
from mirror.translation import (
    DEFAULT_CAPACITY, OffsetSyncStore, PartitionSyncs, Sync, redelivery_bound, translate)


def syncs(*entries: tuple[int, ...]) -> list[Sync]:
    """Syncs from (upstream, downstream) or (upstream, downstream, extent) tuples."""
    return [Sync(*entry) for entry in entries]


# Upstream batch [10, 14] copied to [100, 104]; offsets 15..19 compacted away; batch [20, 24]
# copied to [105, 109]. The mirror records both edges of each batch: the hole is the pair
# (15, 105), (20, 105).
COMPACTED = syncs((10, 100), (15, 105), (20, 105), (25, 110))
RUNS = syncs((10, 100, 5), (20, 105, 5))     # the fetch's end edge (25, 110) is where a run ends

# --------------------------------------------------------------------------- the rule, by table

TRANSLATIONS = [
    # (syncs, committed upstream offset, downstream offset or None, re-delivery bound)
    pytest.param([], 0, None, None, id="empty-store"),
    pytest.param([], 5, None, None, id="empty-store-5"),
    pytest.param(syncs((0, 0)), 0, 0, 0, id="single-sync-exact"),
    pytest.param(syncs((0, 0)), 1, None, None, id="single-sync-beyond"),
    pytest.param(syncs((0, 0), (10, 10)), -1, None, None, id="no-committed-offset"),
    pytest.param(syncs((0, 0), (10, 10)), -5, None, None, id="negative"),
    pytest.param(syncs((0, 50), (10, 60), (20, 70)), 10, 60, 0, id="exact-hit-middle"),
    pytest.param(syncs((0, 50), (10, 60), (20, 70)), 0, 50, 0, id="exact-hit-first"),
    pytest.param(syncs((0, 50), (10, 60), (20, 70)), 20, 70, 0, id="caught-up-is-exact"),
    pytest.param(syncs((0, 50), (10, 60), (20, 70)), 11, 60, 1, id="just-past-a-sync"),
    pytest.param(syncs((0, 50), (10, 60), (20, 70)), 19, 60, 9, id="just-before-a-sync"),
    pytest.param(syncs((0, 50), (10, 60), (20, 70)), 21, None, None, id="ahead-of-the-mirror"),
    pytest.param(syncs((100, 7), (200, 9)), 99, None, None, id="before-the-first-sync"),
    pytest.param(syncs((100, 7), (200, 9)), 0, None, None, id="far-before-the-first-sync"),
    pytest.param(syncs((100, 7), (200, 9)), 150, 7, 50, id="inside-a-range"),
    # Compacted upstream: holes in the upstream offsets.
    pytest.param(COMPACTED, 12, 100, 2, id="compacted-inside-batch"),
    pytest.param(COMPACTED, 15, 105, 0, id="compacted-hole-start"),
    # MM2's rule (downstream + 1) would say 106 here and skip upstream 20, at downstream 105.
    pytest.param(COMPACTED, 17, 105, 2, id="compacted-inside-hole"),
    pytest.param(COMPACTED, 20, 105, 0, id="compacted-hole-end"),
    pytest.param(COMPACTED, 25, 110, 0, id="compacted-caught-up"),
    pytest.param(COMPACTED, 26, None, None, id="compacted-ahead"),
    # Something else wrote to the target partition: downstream jumps, upstream does not.
    pytest.param(syncs((0, 0), (5, 5), (6, 9)), 5, 5, 0, id="foreign-records-between"),
    # Runs (the module docstring's worked example): batches [10, 14] and [20, 24] copied whole
    # to [100, 104] and [105, 109], 15..19 compacted away.
    pytest.param(RUNS, 10, 100, 0, id="run-start"),
    pytest.param(RUNS, 12, 102, 0, id="inside-a-run-is-exact"),
    pytest.param(RUNS, 14, 104, 0, id="run-last-offset"),
    pytest.param(RUNS, 15, 105, 0, id="run-end-is-exact"),
    # In the hole: nothing lies in 15..19, so resuming at 105 re-reads nothing and skips
    # nothing (upstream 20 is at 105). MM2 would answer 101 (d1 + 1) and re-read 4 records;
    # the store cannot tell a hole from forgotten syncs, so its bound says 2.
    pytest.param(RUNS, 17, 105, 2, id="inside-a-hole"),     # the bound: 15..16 might hold records
    pytest.param(RUNS, 23, 108, 0, id="inside-the-second-run"),
    pytest.param(RUNS, 25, 110, 0, id="caught-up"),
    pytest.param(RUNS, 26, None, None, id="ahead-of-the-runs"),
    # The latest sync's run is how far the mirror has got: no end edge needed.
    pytest.param(syncs((0, 50, 10)), 10, 60, 0, id="latest-run-end"),
    pytest.param(syncs((0, 50, 10)), 11, None, None, id="past-the-latest-run"),
    # A batch rebuilt with fewer records than offsets has no run: conservative inside it.
    pytest.param(syncs((0, 0, 0), (10, 6, 0)), 4, 0, 4, id="rebuilt-batch-no-run"),
]


@pytest.mark.parametrize("table, c, expected, bound", TRANSLATIONS)
def test_translate(table, c, expected, bound):
    assert translate(table, c) == expected
    assert redelivery_bound(table, c) == bound
    # The store answers the same once it has seen the same syncs.
    store = PartitionSyncs()
    for sync in table:
        store.observe(*sync)
    assert store.syncs == tuple(table)
    assert store.translate(c) == expected
    assert store.redelivery_bound(c) == bound


def test_translate_accepts_any_sequence():
    assert translate(tuple(COMPACTED), 17) == 105


# --------------------------------------------------------------------------- how the store updates

UPDATES = [
    # (observed syncs in order, what the store keeps)
    pytest.param([(0, 0), (5, 5), (9, 9)], [(0, 0), (5, 5), (9, 9)], id="append"),
    pytest.param([(10, 100), (15, 105), (20, 105)], [(10, 100), (15, 105), (20, 105)],
                 id="upstream-hole-keeps-both-edges"),
    pytest.param([(0, 0), (5, 5), (5, 5)], [(0, 0), (5, 5)], id="same-sync-twice"),
    pytest.param([(0, 0), (5, 5), (5, 8)], [(0, 0), (5, 8)],
                 id="same-upstream-later-downstream-replaces"),
    pytest.param([(0, 0), (5, 5), (10, 10), (15, 15), (5, 15)], [(0, 0), (5, 15)],
                 id="upstream-rewind-drops-syncs-at-or-above"),
    pytest.param([(10, 10), (15, 15), (3, 15)], [(3, 15)], id="upstream-rewind-below-all"),
    pytest.param([(0, 0), (5, 5), (10, 10), (20, 7)], [(20, 7)],
                 id="downstream-rewind-resets"),
    pytest.param([(0, 0), (5, 5), (3, 4)], [(3, 4)], id="both-rewind-resets"),
]


RUN_UPDATES = [
    # Runs that continue each other are one run: an uncompacted history is a single sync.
    pytest.param([(0, 0, 5), (5, 5, 5)], [(0, 0, 10)], 10, id="back-to-back-runs-merge"),
    pytest.param([(0, 0, 5), (5, 5, 5), (10, 10, 0)], [(0, 0, 10)], 10, id="end-edge-after-a-run-adds-nothing"),
    pytest.param([(0, 0, 5), (5, 7, 5)], [(0, 0, 5), (5, 7, 5)], 10, id="foreign-records-break-a-run"),
    pytest.param([(0, 0, 5), (8, 5, 5)], [(0, 0, 5), (8, 5, 5)], 13, id="a-hole-breaks-a-run"),
    pytest.param([(0, 0, 5), (5, 5, 0), (5, 5, 5)], [(0, 0, 10)], 10, id="edge-then-run"),
    # A restart re-forwards from 3, inside the first run: the run is cut at 3 (records 3.. are
    # copied again at 20..) and what was at or above 3 is dropped.
    pytest.param([(0, 0, 10), (10, 12, 5), (3, 20, 7)], [(0, 0, 3), (3, 20, 7)], 10, id="rewind-into-a-run"),
    # A run never reaches past where the next sync's copies begin downstream.
    pytest.param([(0, 0, 10), (4, 2, 0)], [(0, 0, 2), (4, 2, 0)], 4, id="run-cut-by-downstream"),
    pytest.param([(0, 0, 10), (20, 5, 0)], [(0, 0, 5), (20, 5, 0)], 20, id="run-cut-by-a-lost-tail"),
]


@pytest.mark.parametrize("observed, kept, mirrored_to", RUN_UPDATES)
def test_store_updates_runs(observed, kept, mirrored_to):
    store = PartitionSyncs()
    for sync in observed:
        store.observe(*sync)
    assert store.syncs == tuple(syncs(*kept))
    assert store.mirrored_to == mirrored_to


@pytest.mark.parametrize("observed, kept", UPDATES)
def test_store_updates(observed, kept):
    store = PartitionSyncs()
    for u, d in observed:
        store.observe(u, d)
    assert store.syncs == tuple(syncs(*kept))
    assert store.mirrored_to == kept[-1][0]


def test_rewind_keeps_translation_below_the_rewind_point():
    """The mirror restarted from an older position and forwards [10, 20) again at 120.."""
    store = PartitionSyncs()
    for sync in [(0, 100), (10, 110), (20, 120)]:
        store.observe(*sync)
    store.observe(10, 120)
    assert store.translate(5) == 100        # its copies at 105.. still exist
    assert store.translate(10) == 120       # the newer copy: no duplicates
    assert store.translate(15) is None      # not re-forwarded yet: ahead of the mirror
    store.observe(20, 130)
    assert store.translate(15) == 120


@pytest.mark.parametrize("u, d, x", [(-1, 0, 0), (0, -1, 0), (0, 0, -1)])
def test_negative_sync_is_refused(u, d, x):
    with pytest.raises(ValueError, match="non-negative"):
        PartitionSyncs().observe(u, d, x)


@pytest.mark.parametrize("make", [PartitionSyncs, OffsetSyncStore])
def test_capacity_must_be_positive(make):
    with pytest.raises(ValueError, match="capacity must be at least 1, got 0"):
        make(0)


def test_empty_store():
    store = PartitionSyncs()
    assert store.syncs == () and store.mirrored_to is None and len(store) == 0
    assert store.translate(0) is None


# --------------------------------------------------------------------------- bounded memory

def test_memory_is_bounded_and_keeps_earliest_and_latest():
    store = PartitionSyncs(capacity=8)
    for i in range(1, 1001):
        store.observe(10 * i, 5 * i)
        assert len(store) <= 8
        assert store.syncs[0] == Sync(10, 5)
        assert store.syncs[-1] == Sync(10 * i, 5 * i)
    assert store.translate(10_000) == 5_000       # caught up: exact
    assert store.translate(10) == 5               # coverage only grows


def test_capacity_one_keeps_only_the_latest():
    store = PartitionSyncs(capacity=1)
    for i in range(5):
        store.observe(i, i)
    assert store.syncs == (Sync(4, 4),)
    assert store.translate(3) is None and store.translate(4) == 4


def test_eviction_keeps_translation_safe():
    """Eviction only removes syncs: every answer is one the full history would also justify,
    at or below the full history's answer (more duplicates, never a skip)."""
    bounded, full = PartitionSyncs(capacity=4), PartitionSyncs(capacity=10**6)
    u = d = 0
    for i in range(300):
        u += 1 + i % 7          # uneven batches
        d += 1 + i % 7 - (i % 3 == 0)  # and some upstream holes
        bounded.observe(u, d)
        full.observe(u, d)
        assert set(bounded.syncs) <= set(full.syncs)
    for c in range(-1, u + 3):
        b, f = bounded.translate(c), full.translate(c)
        assert (b is None) == (f is None)   # the earliest and latest are kept by both
        if b is not None:
            assert b <= f
            assert bounded.redelivery_bound(c) >= full.redelivery_bound(c)


def test_spacing_grows_with_age():
    """The kept syncs thin out geometrically behind the head, so the re-delivery bound stays a
    fraction of a group's lag rather than growing with it."""
    store = PartitionSyncs()
    for i in range(1, 20_001):
        store.observe(i, i)
    kept = store.syncs
    assert len(kept) == DEFAULT_CAPACITY
    head = kept[-1].upstream
    for older, newer in zip(kept[:-2], kept[1:-1]):
        gap, lag = newer.upstream - older.upstream, head - newer.upstream + 1
        assert gap <= lag, (older, newer)


# --------------------------------------------------------------------------- monotonicity

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 8)), max_size=40),
       st.integers(1, 8), st.integers(-2, 60), st.integers(-2, 60))
def test_a_later_commit_never_translates_earlier(observed, capacity, c1, c2):
    store = PartitionSyncs(capacity)
    for u, d, x in observed:
        store.observe(u, d, x)
    kept = store.syncs
    assert all(a.upstream < b.upstream and a.downstream <= b.downstream
               for a, b in zip(kept, kept[1:]))
    # Runs never overlap the next cut, in either coordinate.
    assert all(a.upstream + a.extent <= b.upstream and a.downstream + a.extent <= b.downstream
               for a, b in zip(kept, kept[1:]))
    c1, c2 = sorted((c1, c2))
    t1, t2 = store.translate(c1), store.translate(c2)
    if t1 is not None and t2 is not None:
        assert t1 <= t2


# --------------------------------------------------------------------------- OffsetSyncStore

def test_offset_sync_store_keeps_partitions_apart():
    store = OffsetSyncStore(capacity=4)
    store.observe(OffsetSync("orders", 0, 10, 100))
    store.observe(OffsetSync("orders", 1, 10, 7))
    store.observe(OffsetSync("payments", 0, 3, 3))
    assert store.translate("orders", 0, 10) == 100
    assert store.translate("orders", 1, 10) == 7
    assert store.translate("orders", 2, 10) is None
    assert store.translate("nope", 0, 0) is None
    assert store.syncs("orders", 1) == (Sync(10, 7),)
    assert store.syncs("nope", 0) == ()
    assert store.partitions() == [("orders", 0), ("orders", 1), ("payments", 0)]
    store.forget("orders", 1)
    store.forget("orders", 1)
    assert store.translate("orders", 1, 10) is None
    assert store.partitions() == [("orders", 0), ("payments", 0)]


# --------------------------------------------------------------------------- model-based property

@dataclass
class Mirror:
    """A model of the mirror copying an upstream partition: whole batches, offset deltas kept
    and a run as long as the batch, or rebuilt (records renumbered back to back, as Produce
    makes a compacted batch) with no run; a sync at both edges of each batch; with compaction
    holes, foreign writers on the target and restarts that forward batches again."""
    # upstream offset -> (downstream offset, index in `written` of the sync after which it exists)
    copies: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    written: list[Sync] = field(default_factory=list)           # syncs in the order written
    end: int = 0                                                # downstream log end offset

    def forward(self, base: int, span: int, records: list[int], foreign: int, rebuilt: bool) -> None:
        self.end += foreign
        self.written.append(Sync(base, self.end, 0 if rebuilt else span))
        for i, r in enumerate(records):
            # a batch's copies become visible with its end-edge sync, appended below
            at = self.end + (i if rebuilt else r - base)
            self.copies.setdefault(r, []).append((at, len(self.written)))
        self.end += len(records) if rebuilt else span
        self.written.append(Sync(base + span, self.end))

    def exact(self, c: int) -> int:
        """The greatest downstream offset a group that consumed everything below c may start
        at without missing a record: every record at or above c has (or, once the mirror has
        finished, will have) a copy at or above it."""
        later = [max(d for d, _ in copies) for r, copies in self.copies.items() if r >= c]
        return min(later, default=self.end)

    def redelivered(self, d: int, c: int, step: int) -> int:
        """How many records below c (consumed already) a group starting at d reads again, among
        the copies that exist once sync `step` is written. Copies a later restart writes again
        are the mirror's own duplicates, which every reader of the target sees."""
        return sum(1 for r, copies in self.copies.items()
                   if r < c and any(d2 >= d and when <= step for d2, when in copies))


@st.composite
def upstream_batches(draw) -> list[tuple[int, int, list[int]]]:
    batches, offset = [], draw(st.integers(0, 5))
    for _ in range(draw(st.integers(1, 12))):
        offset += draw(st.integers(0, 3))                    # batches dropped: a hole
        span = draw(st.integers(1, 5))
        # compaction keeps a batch's base and last offset but may drop the records before
        # its last one (here the last record always survives)
        records = [r for r in range(offset, offset + span - 1) if draw(st.booleans())]
        batches.append((offset, span, records + [offset + span - 1]))
        offset += span
    return batches


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), upstream_batches(), st.integers(1, 6))
def test_translation_never_skips_and_is_exact_at_sync_points(data, batches, capacity):
    """Random upstream logs, mirrored with holes, rebuilt batches, foreign writes and restarts;
    the store sees the syncs in order with a small capacity. At any moment, for any committed
    offset c: translate(c) is None only where the rule says so; otherwise it is at or below the
    exact downstream position of c, re-delivers at most redelivery_bound(c) = c - (u1 + x1)
    records (or none), and re-delivers none when c is a sync point or inside a kept run."""
    mirror = Mirror()
    i, restarts = 0, 0
    while i < len(batches):
        if restarts < 2 and i > 0 and data.draw(st.integers(0, 5)) == 0:
            i, restarts = data.draw(st.integers(0, i - 1)), restarts + 1   # restart, re-forward
        base, span, records = batches[i]
        mirror.forward(base, span, records, foreign=data.draw(st.sampled_from([0, 0, 0, 1, 3])),
                       rebuilt=len(records) < span and data.draw(st.booleans()))
        i += 1

    store, full = PartitionSyncs(capacity), PartitionSyncs(10**6)
    top = batches[-1][0] + batches[-1][1]
    checks = data.draw(st.lists(st.integers(-1, top + 2), min_size=1, max_size=3))
    for step, sync in enumerate(mirror.written):
        store.observe(*sync)
        full.observe(*sync)
        assert set(store.syncs) <= set(full.syncs)
        final = step == len(mirror.written) - 1
        for c in (range(-1, top + 3) if final else checks):
            _check(mirror, store, c, step)


def _check(mirror: Mirror, store: PartitionSyncs, c: int, step: int) -> None:
    kept = store.syncs
    result = store.translate(c)
    undefined = c < 0 or not kept or c < kept[0].upstream or c > kept[-1].upstream + kept[-1].extent
    assert (result is None) == undefined, (kept, c)
    if result is None:
        return
    s1 = max((s for s in kept if s.upstream <= c), key=lambda s: s.upstream)
    assert result <= mirror.exact(c), (kept, c, mirror)
    bound = store.redelivery_bound(c)
    assert bound == max(0, c - s1.upstream - s1.extent)
    assert mirror.redelivered(result, c, step) <= bound, (kept, c, mirror)
    if c <= s1.upstream + s1.extent:
        assert bound == 0 and mirror.redelivered(result, c, step) == 0, (kept, c, mirror)
