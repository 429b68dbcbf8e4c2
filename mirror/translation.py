"""Offset translation: where a consumer group resumes on the target cluster.

Theory of operation
-------------------
**What a sync says.** The mirror forwards whole upstream batches and a batch keeps its offset
deltas, so an upstream batch with base offset b and last offset e, written downstream at base
D, occupies downstream [D, D + e - b], and upstream offset b + k sits at D + k. The mirror
records an offset sync at *both edges* of every batch it writes: (b, D) and (e + 1, D + e - b
+ 1). For back-to-back batches the end of one is the start of the next, so that is about one
sync per batch. An upstream hole the mirror does not copy (batches removed by compaction,
transaction markers, aborted data) shows as two syncs with the same downstream offset. The
end-edge sync matters: the latest sync is how far the mirror has got, and a caught-up group
(committed offset = e + 1) translates exactly only because that edge was recorded.

A sync (u, d) is a *cut* between positions, and promises:

  P1  every upstream record at offset >= u has (or, once mirrored, will have) a copy
      downstream at offset >= d;
  P2  every downstream copy of an upstream record at offset < u lies below d.

P1 is what safety rests on; it holds even if the mirror re-forwards data after a restart or
something else writes to the target partition. P2 is what makes a sync point exact; a restart
that forwards records below u again breaks it, and the store drops exactly those syncs.

**Translation.** A group that committed c has consumed every upstream record below c and none
at or above it. `translate` takes the greatest sync (u1, d1) with u1 <= c and answers d1:

* never past an unconsumed record: those are all at upstream >= c >= u1, so by P1 their copies
  are at >= d1;
* exact when c == u1: by P2 every record the group consumed (below c = u1) has its copies
  below d1, so none is delivered twice;
* otherwise the group re-reads the records in [u1, c): at most c - u1 duplicates (fewer on a
  compacted topic). `redelivery_bound` returns that number.

It returns None, rather than guess, when c < 0 (Kafka's -1: no committed offset), when there is
no sync, when c is below the earliest sync kept (replication started after the group's
position), and when c is above the latest sync: the group is ahead of the mirror. Answering the
latest downstream offset there would not skip anything (P1), but the store knows nothing of
that part of the log (it may lag the offset-syncs topic, or the group's offset may belong to a
truncated or re-created topic); the next sync turns it into an exact answer.

**Why not MM2's `downstream + 1`.** Kafka's OffsetSyncStore.translateDownstream
(connect/mirror/src/main/java/org/apache/kafka/connect/mirror/OffsetSyncStore.java, since 3.5,
KAFKA-12468; before that MM2 answered d1 + (c - u1), which could skip records) answers d1 + 1
when c > u1. Its syncs name records:
u1 is the offset of a record MM2 copied and d1 the offset of that copy, so a group past u1 has
consumed the record at d1. Seaway's syncs are cuts, not records: after an end-edge sync
(e + 1, D') the record at D' is the first of the next forwarded batch, whose upstream offset
may be beyond c (an upstream hole), and d1 + 1 would skip it. Example: upstream batch
[10, 14] is copied to [100, 104], then offsets 15..19 were compacted away and batch [20, 24] is
copied to [105, 109]; syncs (10, 100), (15, 105), (20, 105). A group at c = 17 has consumed
10..14 only; MM2's rule gives 106 and skips upstream 20 (downstream 105); ours gives 105.
Inside one batch d1 + (c - u1) would be exact too, but an offset sync does not carry a batch's
extent, and after eviction two neighbouring syncs need not belong to one batch.

**The store.** `PartitionSyncs` keeps one source partition's syncs, strictly increasing
upstream and non-decreasing downstream, fed in the order the mirror wrote them (the offset-syncs
topic is read from its single partition, in order):

* a sync ahead in both coordinates is appended; one at the latest upstream offset replaces it
  (the later write is the better cut);
* upstream going back with downstream not going back means the mirror rewound and forwards again
  (a restart from an older committed position). Older syncs below the new upstream offset keep
  P1 (their copies still exist, new copies land above them) and P2 (only records at or above
  the new offset are copied again). Syncs at or above it lose P2 and are dropped. (MM2 drops
  everything on any rewind.)
* downstream going back means the target partition lost data (unclean election, re-creation):
  any kept sync may promise copies that no longer exist, so only the new sync is kept.

Memory is bounded by `capacity` syncs (default 64, MM2's SYNCS_PER_PARTITION). The latest sync is
always kept, so a caught-up group stays exact, and so is the earliest, so coverage of lagging
groups only grows. When full, the store drops the inner sync whose removal costs least: the gap
it leaves, divided by how far that gap lies behind the head. Spacing then grows roughly
geometrically with age, as in MM2's store: a group lagging by L re-reads a small multiple of the
local sync spacing, which stays a fraction of L. Eviction only removes cuts, so translation can
only fall back to an older sync: more duplicates, never a skip.

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
    """Upstream offset `upstream` is at downstream offset `downstream` (a cut: see above)."""
    upstream: int
    downstream: int


def _upstream(sync: Sync) -> int:
    return sync.upstream


def _covering(syncs: Sequence[Sync], upstream_offset: int) -> Sync | None:
    """The greatest sync at or below upstream_offset, if translation is defined there."""
    if upstream_offset < 0 or not syncs or upstream_offset > syncs[-1].upstream:
        return None
    i = bisect_right(syncs, upstream_offset, key=_upstream)
    return syncs[i - 1] if i else None


def translate(syncs: Sequence[Sync], upstream_offset: int) -> int | None:
    """The downstream offset at which a group that committed `upstream_offset` resumes, or None.

    `syncs` must be sorted as a `PartitionSyncs` keeps them: upstream strictly increasing,
    downstream non-decreasing; the last one is how far the mirror has got.
    """
    sync = _covering(syncs, upstream_offset)
    return None if sync is None else sync.downstream


def redelivery_bound(syncs: Sequence[Sync], upstream_offset: int) -> int | None:
    """At most how many already-consumed records `translate` makes the group read again (0 at
    a sync point), or None where `translate` declines."""
    sync = _covering(syncs, upstream_offset)
    return None if sync is None else upstream_offset - sync.upstream


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
        """The upstream offset the mirror has copied everything below (its latest sync)."""
        return self._syncs[-1].upstream if self._syncs else None

    def __len__(self) -> int:
        return len(self._syncs)

    def observe(self, upstream: int, downstream: int) -> None:
        if upstream < 0 or downstream < 0:
            raise ValueError(f"an offset sync needs non-negative offsets, got upstream "
                             f"{upstream}, downstream {downstream}")
        syncs = self._syncs
        new = Sync(upstream, downstream)
        if syncs and downstream < syncs[-1].downstream:
            syncs.clear()
        elif syncs and upstream <= syncs[-1].upstream:
            del syncs[bisect_left(syncs, upstream, key=_upstream):]
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
        gap = syncs[i + 1].upstream - syncs[i - 1].upstream
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
        partition.observe(sync.upstream_offset, sync.downstream_offset)

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
