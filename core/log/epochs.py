"""The leader epoch cache: which leader epoch wrote which offsets (Kafka's LeaderEpochFileCache).

One cache serves both logs that elect leaders: a data partition's replica
(core/broker/replication/log.py) and the Raft metadata log (core/raft/log.py), as in Kafka,
where KafkaMetadataLog answers from its UnifiedLog's cache.

Each entry is (epoch, start offset): the first offset the leader of that epoch wrote. Entries
grow in both epoch and start offset; an epoch runs until the next entry starts, the last one
until the log end. The cache is what lets a follower find where its log and the leader's part
(Fetch's DivergingEpoch, OffsetForLeaderEpoch, KIP-101/KIP-279, KIP-595).

Pure and in memory, kept as two parallel lists so that the epoch of an offset is a bisect: the
metadata log asks for it for every run of entries it reads. Whoever owns the log writes the
checkpoint file (`leader-epoch-checkpoint` for a partition; the Raft log is rebuilt from its
batches instead) and trims a recovered cache to the log it recovered.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

UNDEFINED_EPOCH = -1          # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1   # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class OffsetAndEpoch(NamedTuple):
    """A log position and the epoch of the entry just before it (Kafka's OffsetAndEpoch): the
    end (exclusive) of the offsets an epoch wrote, as OffsetForLeaderEpoch answers.

    Do not compare these with `<`: tuple order is offset first, but logs are ranked epoch
    first (see core/raft/election.py, log_is_up_to_date).
    """
    offset: int
    epoch: int


class LeaderEpochCache:
    def __init__(self, entries: Iterable[EpochEntry] = ()):
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    def __repr__(self) -> str:
        return "Epochs(" + ", ".join(f"{e}@{s}" for e, s in zip(self._epochs, self._starts)) + ")"

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(EpochEntry(e, s) for e, s in zip(self._epochs, self._starts))

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    # --- changes ---------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed.

        A repeat of the latest epoch at or after its start changes nothing. Anything else first
        drops the entries from the end that would break monotonicity (an epoch not below the new
        one, or a start not below the new start): a new leader that wrote nothing in its epoch
        leaves an entry at the log end that the next epoch replaces.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs, starts = self._epochs, self._starts
        if epochs and epochs[-1] == epoch and start_offset >= starts[-1]:
            return False
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            epochs.pop()
            starts.pop()
        epochs.append(epoch)
        starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries that start at or after `end_offset` (the log was cut there)."""
        epochs, starts = self._epochs, self._starts
        changed = False
        while end_offset >= 0 and starts and starts[-1] >= end_offset:
            epochs.pop()
            starts.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop the entries wholly before `start_offset`; the last of them now starts there."""
        starts = self._starts
        gone = bisect_right(starts, start_offset)     # entries starting at or before it
        if gone == 0 or (gone == 1 and starts[0] == start_offset):
            return False
        kept_epoch = self._epochs[gone - 1]
        self._epochs[:gone] = [kept_epoch]
        self._starts[:gone] = [start_offset]
        return True

    def clear(self) -> bool:
        changed = bool(self._epochs)
        self._epochs.clear()
        self._starts.clear()
        return changed

    # --- questions -------------------------------------------------------------------------------

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: the largest epoch at or below the one
        asked for, and the start of the first later epoch (the log end for the latest epoch).
        An epoch below every cached one answers itself with the first start offset (the data
        before it is gone); an unknown epoch or an empty cache answers UNDEFINED."""
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        epochs, starts = self._epochs, self._starts
        if requested_epoch == UNDEFINED_EPOCH or not epochs:
            return undefined
        if epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        i = bisect_right(epochs, requested_epoch)     # the first later epoch
        if i == len(epochs):
            return undefined
        if i == 0:
            return requested_epoch, starts[0]
        return epochs[i - 1], starts[i]

    def floor(self, epoch: int, log_end_offset: int) -> OffsetAndEpoch | None:
        """The largest cached epoch at or below `epoch`, with the end of its offsets (the next
        epoch's start, or the log end for the latest); None when every cached epoch is later.
        What a Raft leader compares a fetcher's last epoch with (KafkaRaftClient's
        endOffsetForEpoch)."""
        i = bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return None
        end = self._starts[i + 1] if i + 1 < len(self._starts) else log_end_offset
        return OffsetAndEpoch(end, self._epochs[i])

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset`, or None if it is before every entry."""
        i = bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def spans(self, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(epoch, first offset, end offset) of each epoch's run within [start, end), in order.
        `start` must be covered by an entry."""
        epochs, starts = self._epochs, self._starts
        k = bisect_right(starts, start) - 1
        if k < 0 and start < end:
            raise ValueError(f"offset {start} is before every epoch of {self!r}")
        while start < end:
            run_end = min(end, starts[k + 1]) if k + 1 < len(starts) else end
            yield epochs[k], start, run_end
            start, k = run_end, k + 1
