"""RaftLog: the replicated log as the state machine sees it (an in-memory model).

It holds the entries from the log start offset to the log end offset, the leader epoch cache
(the offset at which each epoch's entries begin: core/log/epochs.py, the one the partition
replicas use too) with the epoch of the entry just below the log start, and the latest snapshot
id. Everything below the log start offset lives only in a snapshot.

It also remembers which part of itself the driver has not made durable yet: the node turns that
into a Ready's truncation and entries, and marks it persisted on advance (etcd calls this the
"unstable" part of its raftLog).

Memory. The metadata log keeps up to metadata.log.max.record.bytes.between.snapshots (20 MiB)
of records here between snapshots, a few hundred thousand small entries. An Entry object per
entry, with its payload and its own offset and epoch ints, cost about 180 bytes beyond the
payload, so topic churn grew a node by tens of MiB (tests/benchmarks, the churn row). So the
payloads are kept end to end in one buffer, with their byte positions in an array; an entry's
offset follows from its index and its epoch from the epoch cache, and Entry objects are made
when entries are read (about 12 bytes per entry beyond the payload).
"""
from __future__ import annotations

import enum
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Iterable, Sequence

from core.log.epochs import LeaderEpochCache
from core.raft.entries import Entry, OffsetAndEpoch, SnapshotId

UNKNOWN_EPOCH_END = OffsetAndEpoch(-1, -1)


class ValidationKind(enum.Enum):
    VALID = "valid"            # the fetcher's log matches ours up to its fetch offset
    DIVERGING = "diverging"    # the fetcher must truncate to offset_and_epoch, then fetch again
    SNAPSHOT = "snapshot"      # we no longer have the entries it needs: it must fetch a snapshot


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    kind: ValidationKind
    offset_and_epoch: OffsetAndEpoch


class LogError(ValueError):
    """An operation that would break the log's own rules (a hole, an epoch going back...)."""


class RaftLog:
    def __init__(self, snapshot: SnapshotId | None = None, entries: Iterable[Entry] = ()):
        """A log that starts at `snapshot` (or at offset 0) holding `entries`, all durable."""
        start = snapshot if snapshot is not None else SnapshotId(0, 0)
        self._start_offset = start.end_offset
        # Entry i's payload is _data[_positions[i] - _positions[0]:_positions[i + 1] - _positions[0]].
        # _positions has one more item than there are entries, so a fetch's byte limit is a
        # bisect rather than a walk over the entries.
        self._data = bytearray()
        self._positions = array("q", [0])
        self._controls: set[int] = set()   # offsets of the control entries (one per epoch, about)
        # The epoch cache holds the epochs of the entries here; the epoch of the entry just
        # before the log start (the snapshot's, 0 for an empty log) is kept beside it.
        self._epochs = LeaderEpochCache()
        self._start_epoch = start.epoch
        self._latest_snapshot = snapshot
        self._start_advanced = False
        # What the driver has not made durable yet: entries from _dirty_from on, and a
        # truncation to _dirty_from if it is below _persisted_end. Set by mark_persisted().
        self._dirty_from: int
        self._persisted_end: int
        self.append(list(entries))
        self.mark_persisted()

    # --- positions ------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def start_epoch(self) -> int:
        """The epoch of the entry at start_offset - 1 (it lives in the snapshot), 0 if none."""
        return self._start_epoch

    @property
    def end_offset(self) -> int:
        return self._start_offset + len(self._positions) - 1

    @property
    def last_epoch(self) -> int:
        latest = self._epochs.latest_epoch
        return self._start_epoch if latest is None else latest

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.end_offset, self.last_epoch)

    @property
    def latest_snapshot(self) -> SnapshotId | None:
        return self._latest_snapshot

    def entry(self, offset: int) -> Entry:
        if not self._start_offset <= offset < self.end_offset:
            raise LogError(f"offset {offset} is outside [{self._start_offset}, {self.end_offset})")
        return self._entries_between(offset, offset + 1)[0]

    def epoch_of(self, offset: int) -> int:
        """The epoch of the entry at `offset`, which may be the one just below the log start."""
        if offset == self._start_offset - 1:
            return self._start_epoch
        if not self._start_offset <= offset < self.end_offset:
            raise LogError(f"offset {offset} is outside [{self._start_offset}, {self.end_offset})")
        epoch = self._epochs.epoch_for_offset(offset)
        assert epoch is not None      # the first entry's epoch starts at the log start
        return epoch

    def _entries_between(self, start: int, end: int) -> tuple[Entry, ...]:
        """The entries at offsets [start, end), made from the payloads and the epoch cache:
        one run of entries per epoch."""
        base, data, positions, controls = self._start_offset, self._data, self._positions, self._controls
        origin = positions[0]
        out: list[Entry] = []
        # One copy per payload (a bytearray slice would be a second); the view is released
        # before anything can resize the buffer.
        with memoryview(data) as view:
            for epoch, run_start, run_end in self._epochs.spans(start, end):
                out.extend(Entry(offset, epoch, bytes(view[positions[i] - origin:positions[i + 1] - origin]),
                                 offset in controls)
                           for i, offset in enumerate(range(run_start, run_end), run_start - base))
        return tuple(out)

    # --- the epoch cache -------------------------------------------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The end offset of the largest epoch <= `epoch` we know, with that epoch.

        UNKNOWN_EPOCH_END when `epoch` is older than everything since the log start.
        """
        found = self._epochs.floor(epoch, self.end_offset)
        if found is not None:
            return found
        if epoch < self._start_epoch:
            return UNKNOWN_EPOCH_END
        # Only the snapshot's epoch is at or below it: that epoch ends where the log's first
        # cached epoch starts (the log start, or the end of an empty log).
        first = self._epochs.earliest_entry
        return OffsetAndEpoch(self.end_offset if first is None else first.start_offset, self._start_epoch)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        """Does a fetcher whose log ends at `offset`, last epoch `epoch`, agree with ours?

        Entries are unique by (offset, epoch): only that epoch's leader wrote entries with that
        epoch. So if we hold `epoch` at least up to `offset`, the fetcher's last entry is ours and
        so is everything before it (the log matching property).
        """
        start = self._start_offset
        if start > 0 and (offset < start or epoch < self._start_epoch
                          or (offset == start and epoch != self._start_epoch)):
            # The entries it would need to compare against, or to fetch, are only in a snapshot.
            assert self._latest_snapshot is not None
            return ValidOffsetAndEpoch(ValidationKind.SNAPSHOT,
                                       OffsetAndEpoch(*self._latest_snapshot))
        end_of_epoch = self.end_offset_for_epoch(epoch)
        if end_of_epoch.epoch != epoch or end_of_epoch.offset < offset:
            return ValidOffsetAndEpoch(ValidationKind.DIVERGING, end_of_epoch)
        return ValidOffsetAndEpoch(ValidationKind.VALID, OffsetAndEpoch(offset, epoch))

    # --- reads -----------------------------------------------------------------------------------

    def read(self, from_offset: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from `from_offset` up to `max_bytes`, but at least one (as Kafka's fetch does,
        so that an entry larger than the limit still makes progress)."""
        i = from_offset - self._start_offset
        if i < 0 or from_offset > self.end_offset:
            raise LogError(f"read at {from_offset} outside "
                           f"[{self._start_offset}, {self.end_offset}]")
        if from_offset == self.end_offset:
            return ()
        limit = self._positions[i] + max_bytes
        j = max(i + 1, bisect_right(self._positions, limit, i + 1) - 1)
        return self._entries_between(from_offset, self._start_offset + j)

    def slice(self, from_offset: int, to_offset: int) -> tuple[Entry, ...]:
        base = self._start_offset
        if from_offset < base or to_offset > self.end_offset:
            raise LogError(f"slice [{from_offset}, {to_offset}) outside "
                           f"[{base}, {self.end_offset})")
        return self._entries_between(from_offset, to_offset)

    # --- writes ----------------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        if entries[0].offset != self.end_offset:
            raise LogError(f"append at {entries[0].offset} but the log ends at {self.end_offset}")
        expected = self.end_offset
        last_epoch = self.last_epoch
        for entry in entries:   # checked in full before anything changes
            if entry.offset != expected:
                raise LogError(f"entry offsets skip from {expected} to {entry.offset}")
            if entry.epoch < last_epoch:
                raise LogError(f"epoch {entry.epoch} at {entry.offset} after {last_epoch}")
            last_epoch = entry.epoch
            expected += 1
        # Compared with the cache's own latest (None when empty), so the first entry after the
        # log start always starts an epoch there, even the snapshot's epoch continued.
        epochs, cached_epoch = self._epochs, self._epochs.latest_epoch
        for entry in entries:
            if entry.epoch != cached_epoch:
                epochs.assign(entry.epoch, entry.offset)
                cached_epoch = entry.epoch
            if entry.control:
                self._controls.add(entry.offset)
        self._data += b"".join([e.payload for e in entries])
        positions = self._positions
        positions.extend(accumulate((e.size for e in entries), initial=positions[-1]))
        del positions[-len(entries) - 1]  # accumulate repeated the old last position

    def append_as_leader(self, payloads: Sequence[bytes], epoch: int,
                         control: bool = False) -> tuple[Entry, ...]:
        offset = self.end_offset
        entries = tuple(Entry(offset + i, epoch, payload, control)
                        for i, payload in enumerate(payloads))
        self.append(entries)
        return entries

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at `offset` and above."""
        if offset >= self.end_offset:
            return
        if offset < self._start_offset:
            raise LogError(f"truncation to {offset} is below the log start {self._start_offset}")
        i = offset - self._start_offset
        del self._data[self._positions[i] - self._positions[0]:]
        del self._positions[i + 1:]
        self._controls = {o for o in self._controls if o < offset}
        self._epochs.truncate_from_end(offset)
        self._dirty_from = min(self._dirty_from, offset)

    def truncate_to_end_offset(self, diverging: OffsetAndEpoch) -> int:
        """Truncate as a leader's DivergingEpoch asks; return the new end offset.

        If we hold the leader's epoch, keep it up to where the leader's copy ends. If we do not,
        everything after our largest smaller epoch was written by leaders the current leader does
        not descend from, so it goes; the next fetch re-validates what is left.
        """
        local = self.end_offset_for_epoch(diverging.epoch)
        if local.epoch == diverging.epoch:
            offset = min(local.offset, diverging.offset)
        else:
            offset = local.offset
        offset = max(offset, self._start_offset)
        self.truncate_to(offset)
        return self.end_offset

    # --- snapshots -------------------------------------------------------------------------------

    def snapshot_created(self, snapshot_id: SnapshotId) -> None:
        latest = self._latest_snapshot
        if latest is None or snapshot_id.end_offset > latest.end_offset:
            self._latest_snapshot = snapshot_id

    def advance_start_offset(self, snapshot_id: SnapshotId) -> None:
        """Forget the entries a snapshot now covers."""
        new_start = snapshot_id.end_offset
        if new_start <= self._start_offset:
            return
        if new_start > self.end_offset or self.epoch_of(new_start - 1) != snapshot_id.epoch:
            raise LogError(f"snapshot {snapshot_id} does not match the log")
        end = self.end_offset
        dropped = new_start - self._start_offset
        del self._data[:self._positions[dropped] - self._positions[0]]
        del self._positions[:dropped]
        self._controls = {o for o in self._controls if o >= new_start}
        if new_start == end:
            self._epochs.clear()          # no entry is left
        else:
            self._epochs.truncate_from_start(new_start)
        self._start_epoch = snapshot_id.epoch
        self._start_offset = new_start
        self._dirty_from = max(self._dirty_from, new_start)
        self._persisted_end = max(self._persisted_end, new_start)
        self._start_advanced = True
        self.snapshot_created(snapshot_id)

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Replace the whole log by a snapshot fetched from the leader."""
        self._data = bytearray()
        self._positions = array("q", [0])
        self._controls = set()
        self._epochs = LeaderEpochCache()
        self._start_epoch = snapshot_id.epoch
        self._start_offset = snapshot_id.end_offset
        self._latest_snapshot = snapshot_id
        # The snapshot install itself tells the driver to drop its old log.
        self._dirty_from = self._persisted_end = snapshot_id.end_offset
        self._start_advanced = False

    # --- what the driver still has to make durable ----------------------------------------------

    def unpersisted(self) -> tuple[int | None, tuple[Entry, ...]]:
        """(truncate the durable log to this offset first, or None; then append these)."""
        dirty_from = self._dirty_from
        truncate_to = dirty_from if dirty_from < self._persisted_end else None
        return truncate_to, self._entries_between(dirty_from, self.end_offset)

    @property
    def has_unpersisted(self) -> bool:
        return self._dirty_from != self.end_offset or self._dirty_from != self._persisted_end

    def take_start_advanced(self) -> bool:
        """True once after the log start moved forward (the driver may delete what is below)."""
        advanced, self._start_advanced = self._start_advanced, False
        return advanced

    @property
    def start_advanced(self) -> bool:
        return self._start_advanced

    @property
    def persisted_end_offset(self) -> int:
        return self._persisted_end

    def mark_persisted(self) -> None:
        self._persisted_end = self._dirty_from = self.end_offset
