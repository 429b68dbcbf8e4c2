"""The leader epoch cache: which leader epoch wrote which offsets (Kafka's LeaderEpochFileCache).

Each entry is (epoch, start offset): the first offset the leader of that epoch wrote. Entries
grow in both epoch and start offset; an epoch runs until the next entry starts, the last one
until the log end. The cache is what lets a follower find where its log and the leader's part
(Fetch's DivergingEpoch, OffsetForLeaderEpoch, KIP-101/KIP-279).

Pure and in memory. The driver writes the checkpoint file (`leader-epoch-checkpoint`) whenever
the replica reports a CheckpointEpochs action, and on start builds the cache from that file and
trims it to the log it recovered (ReplicaLog does the trimming).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

UNDEFINED_EPOCH = -1          # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1   # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """An epoch and the end (exclusive) of the offsets it wrote, as OffsetForLeaderEpoch says."""
    offset: int
    epoch: int


class LeaderEpochCache:
    def __init__(self, entries: Iterable[EpochEntry] = ()):
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    def __repr__(self) -> str:
        return "Epochs(" + ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries) + ")"

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed.

        A repeat of the latest epoch at or after its start changes nothing. Anything else first
        drops the entries from the end that would break monotonicity (an epoch not below the new
        one, or a start not below the new start): a new leader that wrote nothing in its epoch
        leaves an entry at the log end that the next epoch replaces.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries
        if entries and entries[-1].epoch == epoch and start_offset >= entries[-1].start_offset:
            return False
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
        entries.append(EpochEntry(epoch, start_offset))
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: the largest epoch at or below the one
        asked for, and the start of the first later epoch (the log end for the latest epoch).
        An epoch below every cached one answers itself with the first start offset (the data
        before it is gone); an unknown epoch or an empty cache answers UNDEFINED."""
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return undefined
        if entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in entries if e.epoch > requested_epoch), None)
        if higher is None:
            return undefined
        floor = None
        for entry in entries:
            if entry.epoch > requested_epoch:
                break
            floor = entry
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset`, or None if it is before every entry."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries that start at or after `end_offset` (the log was cut there)."""
        entries = self._entries
        changed = False
        while end_offset >= 0 and entries and entries[-1].start_offset >= end_offset:
            entries.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop the entries wholly before `start_offset`; the last of them now starts there."""
        entries = self._entries
        before = tuple(entries)
        removed = None
        while entries and entries[0].start_offset <= start_offset:
            removed = entries.pop(0)
        if removed is not None:
            entries.insert(0, EpochEntry(removed.epoch, start_offset))
        return tuple(entries) != before

    def clear(self) -> bool:
        changed = bool(self._entries)
        self._entries.clear()
        return changed
