"""ReplicaLog: the shape of the local log that replication reasons about (Kafka's UnifiedLog,
minus the bytes): log start, log end, high watermark and the leader epoch cache.

The driver owns the bytes (core/log); the replica owns these numbers and tells the driver, by
actions, how to change the bytes so the two stay equal. Rules kept from UnifiedLog:

- truncate_to(offset) never grows the log; it always trims the epoch cache to the log end (a
  leader that wrote nothing in its epoch leaves an entry there); it pulls the high watermark
  down with the log end and the log start down to the truncation point.
- the leader's high watermark only grows (maybe_increment_high_watermark); a follower's is
  whatever the leader says, clamped to [log start, log end] (update_high_watermark).
- the log start only grows, and never past the high watermark.
"""
from __future__ import annotations

from typing import Iterable

from core.log.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochCache, \
    OffsetAndEpoch


class ReplicaLog:
    def __init__(self, log_start_offset: int = 0, log_end_offset: int = 0,
                 high_watermark: int = 0, epochs: Iterable[EpochEntry] = ()):
        """The log as the driver recovered it: its start and end, the high watermark from the
        replication-offset-checkpoint file and the entries of leader-epoch-checkpoint (both may
        be stale after a crash; they are trimmed to the log here, as Kafka's log loading does)."""
        if not 0 <= log_start_offset <= log_end_offset:
            raise ValueError(f"bad log bounds [{log_start_offset}, {log_end_offset})")
        self.start_offset = log_start_offset
        self.end_offset = log_end_offset
        self.high_watermark = min(max(high_watermark, log_start_offset), log_end_offset)
        self.epochs = LeaderEpochCache(epochs)
        self.epochs.truncate_from_end(log_end_offset)
        self.epochs.truncate_from_start(log_start_offset)
        self.epochs_changed = False

    def __repr__(self) -> str:
        return (f"Log([{self.start_offset}, {self.end_offset}) hw={self.high_watermark} "
                f"{self.epochs!r})")

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        """UnifiedLog.endOffsetForEpoch: None when the cache cannot say."""
        found_epoch, offset = self.epochs.end_offset_for(epoch, self.end_offset)
        if offset == UNDEFINED_EPOCH_OFFSET:
            return None
        return OffsetAndEpoch(offset, found_epoch)

    def take_epochs_changed(self) -> bool:
        changed, self.epochs_changed = self.epochs_changed, False
        return changed

    # --- changes ----------------------------------------------------------------------------

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        if self.epochs.assign(epoch, start_offset):
            self.epochs_changed = True

    def append(self, base_offset: int, last_offset: int, epoch: int) -> None:
        """One batch at the log end (the caller checked base_offset == end_offset, or that the
        batch straddles an empty log's start)."""
        if last_offset < base_offset or last_offset < self.end_offset:
            raise ValueError(f"batch [{base_offset}, {last_offset}] does not extend {self!r}")
        if epoch != UNDEFINED_EPOCH:
            self.assign_epoch(epoch, base_offset)
        self.end_offset = last_offset + 1

    def truncate_to(self, offset: int) -> bool:
        """Cut the log at `offset`; True if it shrank."""
        if offset < 0:
            raise ValueError(f"cannot truncate to {offset}")
        if offset >= self.end_offset:
            if self.epochs.truncate_from_end(self.end_offset):
                self.epochs_changed = True
            return False
        self.end_offset = offset
        if self.epochs.truncate_from_end(offset):
            self.epochs_changed = True
        self.start_offset = min(self.start_offset, offset)
        self.high_watermark = min(self.high_watermark, offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.start_offset = self.end_offset = self.high_watermark = offset
        if self.epochs.clear():
            self.epochs_changed = True

    def maybe_increment_high_watermark(self, high_watermark: int) -> bool:
        if high_watermark > self.end_offset:
            raise ValueError(f"high watermark {high_watermark} beyond the log end {self!r}")
        if high_watermark <= self.high_watermark:
            return False
        self.high_watermark = high_watermark
        return True

    def update_high_watermark(self, high_watermark: int) -> bool:
        """A follower's: the leader's value clamped to the local log. True if it changed."""
        clamped = min(max(high_watermark, self.start_offset), self.end_offset)
        changed = clamped != self.high_watermark
        self.high_watermark = clamped
        return changed

    def maybe_increment_start_offset(self, offset: int) -> bool:
        if offset > self.high_watermark:
            raise ValueError(f"log start {offset} beyond the high watermark {self!r}")
        if offset <= self.start_offset:
            return False
        self.start_offset = offset
        if self.epochs.truncate_from_start(offset):
            self.epochs_changed = True
        return True
