"""Offset translation: where a consumer group resumes on the target cluster.

Theory of operation
-------------------
**What a sync says.** The mirror forwards whole upstream batches and a batch keeps its offset
deltas, so an upstream batch with base offset b and last offset e, written downstream at base
D, occupies downstream [D, D + e - b], and upstream offset b + k sits at D + k. The mirror
records an offset sync for every batch it writes, (b, D), with the batch's *extent* e - b + 1
(the offsets it spans), and after each fetch's batches are acknowledged the end edge (e + 1,
D + e - b + 1) with extent 0. An upstream hole the mirror does not copy (batches removed by
compaction, transaction markers, aborted data) lies between one sync's extent and the next
sync. A batch the mirror had to rebuild (a compacted batch, whose offsets Kafka's Produce
renumbers, or one a fetch entered in the middle) does not keep its deltas: its sync has
extent 0, and translation inside it is conservative, as below. The extent travels with the
sync, in MM2's offset-sync record as a header MM2 ignores (mirror/records.py), so it holds
whatever else the store forgets.

A sync (u, d, x) is a *cut* between positions with a *run* after it, and promises:

  P1  every upstream record at offset >= u has (or, once mirrored, will have) a copy
      downstream at offset >= d;
  P2  every downstream copy of an upstream record at offset < u lies below d;
  P3  for 0 <= k < x, upstream offset u + k, if it holds a record, has its copy at d + k,
      and every copy of an upstream record at offset >= u + x lies at or above d + x.

P1 is what safety rests on; it holds even if the mirror re-forwards data after a restart or
something else writes to the target partition. P2 and P3 are what make translation exact; a
restart that forwards records below u again breaks P2, and the store drops exactly those syncs
(and shortens the run of a sync whose run it re-enters).

**Translation.** A group that committed c has consumed every upstream record below c and none
at or above it. `translate` takes the greatest sync (u1, d1, x1) with u1 <= c and answers
d1 + min(c - u1, x1):

* never past an unconsumed record: those are at upstream >= c; inside the run, by P3, their
  copies are at d1 + (r - u1) >= d1 + (c - u1); beyond it, at >= d1 + x1;
* exact when c <= u1 + x1: every record the group consumed has its copy below the answer (by
  P2 below u1, by P3 inside the run), and every one it did not is at or above it;
* otherwise (c past the run, in a hole or where the store forgot the syncs) the group re-reads
  at most the records in [u1 + x1, c): `redelivery_bound` returns that number. A hole holds no
  records, so a group that stopped in one re-reads nothing; only forgotten syncs cost.

It returns None, rather than guess, when c < 0 (Kafka's -1: no committed offset), when there is
no sync, when c is below the earliest sync kept (replication started after the group's
position), and when c is beyond the latest sync's run: the group is ahead of the mirror.
Answering the latest downstream offset there would not skip anything (P1), but the store knows
nothing of that part of the log (it may lag the offset-syncs topic, or the group's offset may
belong to a truncated or re-created topic); the next sync turns it into an exact answer.

Worked example: upstream batch [10, 14] is copied whole to [100, 104]; offsets 15..19 were
compacted away; batch [20, 24] is copied to [105, 109]; the fetch ends there. Syncs (10, 100,
5) and (20, 105, 5); the end edge (25, 110, 0) is where the second run ends, so the store adds
nothing for it. A group at c = 12 resumes at 102 (MM2 since 3.5, and Seaway before syncs
carried runs, answer 101 and 100: one and two records read again); at c = 17, in the hole, at
105 (it consumed 10..14, and upstream 20 is at 105); at c = 25 at 110.

**Why not MM2's `downstream + 1`.** Kafka's OffsetSyncStore.translateDownstream
(connect/mirror/src/main/java/org/apache/kafka/connect/mirror/OffsetSyncStore.java, since 3.5,
KAFKA-12468; before that MM2 answered d1 + (c - u1), which could skip records) answers d1 + 1
when c > u1. Its syncs name records: u1 is the offset of a record MM2 copied and d1 the offset
of that copy, so a group past u1 has consumed the record at d1. It cannot do better because a
sync does not say how far the copy runs. Seaway's syncs are cuts with runs: after a run ends,
the record at its end may be the first of a later batch whose upstream offset is beyond c (a
hole), and d1 + 1 would skip it (at c = 17 above MM2 answers 106 and skips upstream 20); and
inside a run d1 + (c - u1) is exact, where MM2 re-reads.

**The store.** `PartitionSyncs` keeps one source partition's syncs, strictly increasing
upstream and non-decreasing downstream, fed in the order the mirror wrote them (the offset-syncs
topic is read from its single partition, in order):

* a sync where the latest run ends, in both coordinates, extends that run (the two runs are
  one: for an uncompacted partition copied by one mirror, the store holds a single sync however
  long the history, and translation is exact everywhere in it);
* any other sync ahead in both coordinates is appended; one at the latest upstream offset
  replaces it (the later write is the better cut);
* upstream going back with downstream not going back means the mirror rewound and forwards again
  (a restart from an older committed position). Older syncs below the new upstream offset keep
  P1 (their copies still exist, new copies land above them) and P2 (only records at or above
  the new offset are copied again); a run that reaches past the new offset is cut there (its
  records beyond are copied again, above it: P3's second half would break). Syncs at or above
  it lose P2 and are dropped. (MM2 drops everything on any rewind.)
* downstream going back means the target partition lost data (unclean election, re-creation):
  any kept sync may promise copies that no longer exist, so only the new sync is kept.

Memory is bounded by `capacity` syncs (default 64, MM2's SYNCS_PER_PARTITION). The latest sync is
always kept, so a caught-up group stays exact, and so is the earliest, so coverage of lagging
groups only grows. When full, the store drops the inner sync whose removal costs least: the gap
it leaves (from the end of the previous sync's run to the next cut), divided by how far that
gap lies behind the head. Spacing then grows roughly
geometrically with age, as in MM2's store: a group lagging by L re-reads at most a small
multiple of the local sync spacing, which stays a fraction of L, and nothing when its position
falls inside a kept run. Eviction only removes cuts and their runs, so translation can only
fall back to an older sync: more duplicates, never a skip.

For one store state, translation is monotonic in c (a later commit never translates to an
earlier downstream offset). Over time, a fixed c may move back (eviction, a downstream reset) or
forward (a replaced sync), as in MM2.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Final, NamedTuple

from .records import OffsetSync

DEFAULT_CAPACITY: Final = 64


class Sync(NamedTuple):
    """Upstream offset `upstream` is at downstream offset `downstream` (a cut), and the next
    `extent` upstream offsets keep their distance from it downstream (a run: see above)."""
    upstream: int
    downstream: int
    extent: int = 0


def _upstream(sync: Sync) -> int:
    return sync.upstream


def _covering(syncs: Sequence[Sync], upstream_offset: int) -> Sync | None:
    """The greatest sync at or below upstream_offset, if translation is defined there."""
    if upstream_offset < 0 or not syncs or upstream_offset > syncs[-1].upstream + syncs[-1].extent:
        return None
    i = bisect_right(syncs, upstream_offset, key=_upstream)
    return syncs[i - 1] if i else None


def translate(syncs: Sequence[Sync], upstream_offset: int) -> int | None:
    """The downstream offset at which a group that committed `upstream_offset` resumes, or None.

    `syncs` must be sorted as a `PartitionSyncs` keeps them: upstream strictly increasing,
    downstream non-decreasing; the last one (with its run) is how far the mirror has got.
    """
    sync = _covering(syncs, upstream_offset)
    return None if sync is None else sync.downstream + min(upstream_offset - sync.upstream, sync.extent)


def redelivery_bound(syncs: Sequence[Sync], upstream_offset: int) -> int | None:
    """At most how many already-consumed records `translate` makes the group read again (0 at
    a sync point and inside its run), or None where `translate` declines."""
    sync = _covering(syncs, upstream_offset)
    return None if sync is None else max(0, upstream_offset - sync.upstream - sync.extent)


class PartitionSyncs:
    """The bounded, ordered syncs of one source partition."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._syncs: list[Sync] = []

    @property
    def syncs(self) -> tuple[Sync, ...]:
        return tuple(self._syncs)

    @property
    def mirrored_to(self) -> int | None:
        """The upstream offset the mirror has copied everything below (its latest sync's run end)."""
        return self._syncs[-1].upstream + self._syncs[-1].extent if self._syncs else None

    def __len__(self) -> int:
        return len(self._syncs)

    def observe(self, upstream: int, downstream: int, extent: int = 0) -> None:
        if upstream < 0 or downstream < 0 or extent < 0:
            raise ValueError(f"an offset sync needs non-negative offsets and extent, got upstream "
                             f"{upstream}, downstream {downstream}, extent {extent}")
        syncs = self._syncs
        new = Sync(upstream, downstream, extent)
        if syncs and syncs[-1].extent and (upstream, downstream) == (
                syncs[-1].upstream + syncs[-1].extent, syncs[-1].downstream + syncs[-1].extent):
            # The new run continues the last one in both coordinates: one longer run says the
            # same, and a mirror copying an uncompacted partition keeps a single sync.
            syncs[-1] = syncs[-1]._replace(extent=syncs[-1].extent + extent)
            return
        if syncs and downstream < syncs[-1].downstream:
            syncs.clear()
        elif syncs and upstream <= syncs[-1].upstream:
            del syncs[bisect_left(syncs, upstream, key=_upstream):]
        if syncs:
            last = syncs[-1]
            room = upstream - last.upstream
            # A run never reaches past the next cut (a rewind into it, or a batch that
            # started inside it), nor past where the next sync's copies begin downstream.
            room = min(room, downstream - last.downstream)
            if last.extent > room:
                syncs[-1] = last._replace(extent=room)
        syncs.append(new)
        if len(syncs) > self.capacity:
            _evict_one(syncs)

    def translate(self, upstream_offset: int) -> int | None:
        return translate(self._syncs, upstream_offset)

    def redelivery_bound(self, upstream_offset: int) -> int | None:
        return redelivery_bound(self._syncs, upstream_offset)


def _evict_one(syncs: list[Sync]) -> None:
    n = len(syncs)
    if n < 3:
        del syncs[0]  # capacity 1: only the latest survives
        return
    head = syncs[-1].upstream
    # Compare gap/lag ratios by cross-multiplying: exact, and the same on every platform.
    best, best_gap, best_lag = 1, 0, 0
    for i in range(1, n - 1):
        # Without sync i, offsets between the end of the previous run and the next cut
        # translate back to the previous sync: that is the re-delivery its removal allows.
        gap = syncs[i + 1].upstream - syncs[i - 1].upstream - syncs[i - 1].extent
        lag = head - syncs[i + 1].upstream + 1
        if i == 1 or gap * best_lag < best_gap * lag:
            best, best_gap, best_lag = i, gap, lag
    del syncs[best]


class OffsetSyncStore:
    """Offset syncs of every source partition, and translation against them.

    The driver feeds it every record of the offset-syncs topic in order, and translates only
    once it has read that topic to its end (as MM2 does): before then, the latest sync of a
    partition may not be the mirror's real position.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._partitions: dict[tuple[str, int], PartitionSyncs] = {}

    def observe(self, sync: OffsetSync) -> None:
        key = (sync.topic, sync.partition)
        partition = self._partitions.get(key)
        if partition is None:
            partition = self._partitions[key] = PartitionSyncs(self.capacity)
        partition.observe(sync.upstream_offset, sync.downstream_offset, sync.extent)

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        syncs = self._partitions.get((topic, partition))
        return None if syncs is None else syncs.translate(upstream_offset)

    def syncs(self, topic: str, partition: int) -> tuple[Sync, ...]:
        syncs = self._partitions.get((topic, partition))
        return () if syncs is None else syncs.syncs

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._partitions)

    def forget(self, topic: str, partition: int) -> None:
        """Drop a partition's syncs (its topic was deleted or is no longer mirrored)."""
        self._partitions.pop((topic, partition), None)
