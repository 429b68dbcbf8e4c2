"""The partition log: an ordered list of segments in one directory.

Theory of operation
-------------------
A partition directory holds segments named by their 20-digit base offset
(`00000000000000000000.log`, `.index`, `.timeindex`) in Kafka's layout, plus three small
files of ours: `log-start-offset` (DeleteRecords must survive a restart),
`recovery-point-offset` (everything below it was fsynced) and `.kafka_cleanshutdown`.

Appends go to the last (active) segment as one write of the producer's bytes after the
base offsets are patched in place; index entries are made per batch, never per record. A
segment rolls when the next append would push it past segment.bytes, when it is older than
segment.ms, when its index is full, or when offsets would no longer fit its int32 relative
offsets. Reads bisect the segment list on base offsets, ask the segment's index for a
position at or before the target, walk batch headers to the batch holding the offset, and
return whole batches read with one pread.

Durability. Data is fsynced by `flush` only, which `maybe_flush` calls when flush.messages
or flush.ms says so, and for rolled segments (Kafka flushes a segment when it rolls). On
`close` everything is flushed and the clean-shutdown marker written. `open` without the
marker re-checks, CRC and all, every segment from the one holding the recovery point to the
end, cuts the log at the first torn or corrupt batch (dropping later segments, whose order
can no longer be trusted, as Kafka does) and rebuilds those indexes. With the marker only
the active segment's tail framing is checked. Indexes of other segments are loaded lazily
and rebuilt from the log if they are missing or do not match it.

Concurrency. A Log is not thread-safe. The owner serializes append, truncate_to,
delete_records, apply_retention, roll and close. `flush`/`maybe_flush` may run in a worker
thread (fsync must not block an event loop) while reads go on, but not while any of the
mutating calls run.
"""
from __future__ import annotations

import bisect
import logging
import shutil
import struct
from pathlib import Path
from typing import Callable

from core.protocol.records import (HEADER_SIZE, LOG_OVERHEAD, BatchInfo, assign_offsets as _assign,
                                   scan_batches, set_log_append_time)

from . import recovery, retention
from .checkpoint import (CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE,
                         fsync_dir, write_durably, write_offset)
from .config import INT32_MAX, LogConfig, now_ms
from .results import AppendResult, OffsetOutOfRange, OffsetsOutOfOrder, ReadResult
from .segment import Segment, SegmentInfo

log = logging.getLogger(__name__)

# Kafka's log.flush.offset.checkpoint.interval.ms: how stale the recovery point may get.
RECOVERY_CHECKPOINT_INTERVAL_MS = 60_000

_LENGTH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")


class Log:
    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]):
        self.directory = Path(directory)
        self.config = config
        self._clock = clock
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._leo = 0
        self.recovered_truncated_bytes = 0
        self._flushed_offset = 0
        self._unflushed_records = 0
        self._first_unflushed_ms: int | None = None
        self._rolled_unflushed = False    # a rolled segment awaits its fsync
        self._rolled_since_checkpoint = False
        self._dir_dirty = False           # segment files created or removed since the last fsync
        self._checkpoint_ms = 0
        self._closed = False

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, clock: Callable[[], int] = now_ms,
             recover: bool = True) -> "Log":
        """Open (creating if needed) and recover the log in `directory`.

        recover=False trusts the files as after a clean shutdown (only the active segment's
        tail framing is checked); for tools that must not spend time on CRCs.
        """
        self = cls(directory, config, clock)
        self._load(recover)
        return self

    def _load(self, recover: bool) -> None:
        d = self.directory
        loaded = recovery.load(d, self.config.index_interval_bytes, self._clock(), recover)
        segs = loaded.segments
        self.recovered_truncated_bytes = loaded.truncated_bytes
        self._dir_dirty = loaded.created or bool(loaded.truncated_bytes)
        self._segments = segs
        self._bases = [s.base_offset for s in segs]
        self._activate(segs[-1])
        self._leo = segs[-1].next_offset
        start = max(loaded.stored_log_start or 0, segs[0].base_offset)
        if start > self._leo:
            # Kafka does the same when data below a recorded log start went missing.
            log.warning("%s: log end %d is below the log start %d; starting empty there",
                        d, self._leo, start)
            self.truncate_fully_and_start_at(start)
        self._log_start_offset = start
        self._delete_segments_below_start()
        self._flushed_offset = self._leo
        self._checkpoint_ms = self._clock()
        if loaded.clean:
            # Gone before the first append, or a crash would be mistaken for a clean stop.
            (d / CLEAN_SHUTDOWN_FILE).unlink()
            fsync_dir(d)
        elif recover:
            self._flush(len(self._segments))   # what recovery kept is now durable
            write_offset(d / RECOVERY_POINT_FILE, self._flushed_offset)

    def _activate(self, seg: Segment) -> None:
        seg.ensure_state()
        now = self._clock()
        first_ts = seg.first_batch_timestamp()
        # segment.ms runs from the first batch; after a restart its timestamp is the best
        # estimate of when that was (Kafka uses it too).
        seg.created_ms = first_ts if 0 <= first_ts <= now else now

    # ------------------------------------------------------------ properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[SegmentInfo]:
        return [s.info() for s in self._segments]

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval = config.index_interval_bytes

    # ---------------------------------------------------------------- append

    def append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo] | None = None,
               *, assign_offsets: bool = True, apply_flush_policy: bool = True) -> AppendResult:
        """Append whole validated batches; see the module docstring.

        With assign_offsets, base offsets are patched in place when `data` is writable (a
        bytearray or writable memoryview), else in a copy; LogAppendTime is stamped then too.
        Without it (replication), the batches keep their offsets and their timestamps, and
        must start at or after the log end and run forward.
        apply_flush_policy=False leaves fsyncs to the caller's maybe_flush (in a thread).
        """
        if batches is None:
            batches = scan_batches(data)
        if not batches:
            raise ValueError("append needs at least one batch")
        now = self._clock()
        append_time = -1
        if assign_offsets:
            if not (isinstance(data, bytearray)
                    or (isinstance(data, memoryview) and not data.readonly)):
                data = bytearray(data)
            first = self._leo
            last = _assign(data, batches, first) - 1
            if self.config.log_append_time:
                set_log_append_time(data, batches, now)
                append_time = now
        else:
            first = batches[0].base_offset
            expected = self._leo
            for b in batches:
                if b.base_offset < expected:
                    raise OffsetsOutOfOrder(f"batch at offset {b.base_offset} does not follow "
                                            f"offset {expected - 1}")
                expected = b.base_offset + b.last_offset_delta + 1
            last = expected - 1
        seg = self._maybe_roll(len(data), first, last, now)
        seg.append(data, batches, first if assign_offsets else None, now,
                   append_time if append_time >= 0 else None)
        self._leo = last + 1
        records = sum(b.records_count for b in batches)
        self._unflushed_records += records
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now
        if apply_flush_policy and self.flush_due():
            self.flush()
        max_ts = append_time if append_time >= 0 else max(b.max_timestamp for b in batches)
        return AppendResult(first, last, append_time, max_ts, len(batches), records)

    def _maybe_roll(self, size: int, first: int, last: int, now: int) -> Segment:
        seg = self._segments[-1]
        cfg = self.config
        overflow = last - seg.base_offset > INT32_MAX
        if seg.size == 0:
            if overflow:
                self._roll(first)
        elif (seg.size + size > cfg.segment_bytes
              or now - seg.created_ms > cfg.segment_ms
              or seg.index_full(cfg.segment_index_bytes)
              or overflow):
            self._roll(first)
        return self._segments[-1]

    def roll(self) -> None:
        """Start a new segment at the log end (no-op if the active one is empty)."""
        if self._segments[-1].size:
            self._roll(self._leo)

    def _roll(self, base_offset: int) -> None:
        old = self._segments[-1]
        if old.size == 0:
            if old.base_offset == base_offset:
                return
            old.delete()
            self._segments.pop()
            self._bases.pop()
        else:
            old.seal()
            self._rolled_unflushed = True
            self._rolled_since_checkpoint = True
        seg = Segment.create(self.directory, base_offset, self.config.index_interval_bytes,
                             self._clock())
        self._segments.append(seg)
        self._bases.append(base_offset)
        self._dir_dirty = True

    # ------------------------------------------------------------------ read

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:
        """Whole batches from the one holding `offset`, up to max_bytes (at least one batch
        if min_one_batch, KIP-74), and only batches whose last offset is below max_offset.
        Reads stay within one segment, like Kafka's."""
        lso, leo = self._log_start_offset, self._leo
        if offset < lso or offset > leo:
            raise OffsetOutOfRange(offset, lso, leo)
        limit = leo if max_offset is None else min(max_offset, leo)
        empty = ReadResult(b"", offset, offset)
        if offset >= limit:
            return empty
        segs = self._segments
        for i in range(self._segment_index(offset), len(segs)):
            seg = segs[i]
            found = seg.find_batch(offset)
            if found is None:
                continue   # offset lies past this segment's data: a gap, or its very end
            pos, first = found
            if first.base_offset + first.last_offset_delta >= limit:
                return empty
            if limit >= (segs[i + 1].base_offset if i + 1 < len(segs) else leo):
                end = seg.size
            else:
                end = seg.position_of(limit)
            budget = max(max_bytes, first.size) if min_one_batch else max_bytes
            n = min(end - pos, budget)
            if n < first.size:
                return empty
            data = seg.read(pos, n)
            whole, last_pos = _whole_batches(data)
            next_offset = (_BASE_OFFSET.unpack_from(data, last_pos)[0]
                           + _LENGTH.unpack_from(data, last_pos + 23)[0] + 1)
            return ReadResult(data if whole == len(data) else memoryview(data)[:whole],
                              first.base_offset, next_offset)
        return empty

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first batch at or after the
        log start whose max timestamp is >= `timestamp`, or None.

        Kafka answers with the first *record* at or after the timestamp; records are not
        decoded here, so this is that record's batch: its base offset (raised to the log
        start if the batch straddles it) and its max timestamp. A consumer seeking there
        sees the record Kafka would name, after a few earlier ones of the same batch.
        """
        lso = self._log_start_offset
        for seg in self._segments[self._segment_index(lso):]:
            found = seg.find_by_timestamp(timestamp, lso)
            if found is not None:
                info = found[1]
                return max(info.base_offset, lso), info.max_timestamp
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP: (largest timestamp, base offset of the first batch that
        carries it, raised to the log start), or (-1, -1) if no batch has a timestamp."""
        best: Segment | None = None
        for seg in self._segments:
            if seg.size and seg.max_timestamp > (best.max_timestamp if best else -1):
                best = seg
        if best is None:
            return -1, -1
        found = best.find_batch(best.offset_of_max_timestamp)
        base = found[1].base_offset if found else best.offset_of_max_timestamp
        return best.max_timestamp, max(base, self._log_start_offset)

    # ----------------------------------------------------------------- flush

    def flush_due(self) -> bool:
        """Whether flush.messages or flush.ms asks for an fsync now (no I/O)."""
        if not self._unflushed_records:
            return False
        return (self._unflushed_records >= self.config.flush_messages
                or self._clock() - self._first_unflushed_ms >= self.config.flush_ms)

    def maybe_flush(self) -> bool:
        """Apply the flush policy, and fsync rolled segments as Kafka does. True if it fsynced."""
        if self.flush_due():
            self.flush()
            return True
        if self._rolled_unflushed:
            self._flush(len(self._segments) - 1)
            return True
        return False

    def flush(self) -> None:
        """fsync every segment with unflushed data, and the directory if files came or went."""
        self._flush(len(self._segments))

    def _flush(self, count: int) -> None:
        segs = self._segments
        upto = self._leo if count >= len(segs) else segs[count].base_offset
        for i, seg in enumerate(segs[:count]):
            if seg.dirty:
                seg.flush(close_index_writers=i < len(segs) - 1)
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self._flushed_offset = max(self._flushed_offset, upto)
        self._rolled_unflushed = False
        if count >= len(segs):
            self._unflushed_records = 0
            self._first_unflushed_ms = None
        now = self._clock()
        if self._rolled_since_checkpoint or now - self._checkpoint_ms >= RECOVERY_CHECKPOINT_INTERVAL_MS:
            write_offset(self.directory / RECOVERY_POINT_FILE, self._flushed_offset)
            self._checkpoint_ms = now
            self._rolled_since_checkpoint = False

    # ------------------------------------------------------------- deletion

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start up to before_offset (-1: the log end)."""
        if before_offset == -1:
            before_offset = self._leo
        if before_offset < 0 or before_offset > self._leo:
            raise OffsetOutOfRange(before_offset, self._log_start_offset, self._leo)
        if before_offset > self._log_start_offset:
            self._set_log_start(before_offset)
            self._delete_segments_below_start()
        return self._log_start_offset

    def apply_retention(self, *, high_watermark: int | None = None) -> int:
        """Delete the oldest closed segments that retention.ms or retention.bytes condemn, or
        that lie wholly below the log start. A segment is deleted only if every offset in
        it is below high_watermark (default: the log end). Returns how many were deleted."""
        limit = self._leo if high_watermark is None else min(high_watermark, self._leo)
        n = retention.condemned(self._segments, self.config, self._clock(), limit,
                                self._log_start_offset)
        if n:
            self._delete_oldest(n)
        return n

    def _delete_segments_below_start(self) -> None:
        segs = self._segments
        n = 0
        while n < len(segs) - 1 and segs[n + 1].base_offset <= self._log_start_offset:
            n += 1
        if n:
            self._delete_oldest(n)

    def _delete_oldest(self, n: int) -> None:
        new_start = self._segments[n].base_offset
        if new_start > self._log_start_offset:
            self._set_log_start(new_start)   # persisted before the files go
        for seg in self._segments[:n]:
            seg.delete()
        del self._segments[:n]
        del self._bases[:n]
        self._dir_dirty = True

    def _set_log_start(self, offset: int) -> None:
        self._log_start_offset = offset
        write_offset(self.directory / LOG_START_OFFSET_FILE, offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after `offset` (a batch holding it goes whole); the log
        end becomes `offset`. Below the log start this empties the log and starts it there."""
        if offset >= self._leo:
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        segs = self._segments
        while len(segs) > 1 and segs[-1].base_offset >= offset:
            segs.pop().delete()
            self._bases.pop()
            self._dir_dirty = True
        seg = segs[-1]
        seg.truncate_to(offset)
        self._activate(seg)
        self._leo = offset
        # Durable at once, so a crash cannot bring back batches a follower discarded.
        self._flushed_offset = min(self._flushed_offset, offset)
        self._flush(len(segs))
        write_offset(self.directory / RECOVERY_POINT_FILE, self._flushed_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and continue empty at `offset` (a follower far behind)."""
        for seg in self._segments:
            seg.delete()
        seg = Segment.create(self.directory, offset, self.config.index_interval_bytes,
                             self._clock())
        self._segments = [seg]
        self._bases = [offset]
        self._leo = offset
        self._flushed_offset = offset
        self._unflushed_records = 0
        self._first_unflushed_ms = None
        self._set_log_start(offset)
        self._dir_dirty = True
        self._flush(1)

    # ----------------------------------------------------------------- close

    def close(self) -> None:
        """Flush, then mark the shutdown clean so the next open skips recovery."""
        if self._closed:
            return
        self._segments[-1].seal()
        self._flush(len(self._segments))
        write_offset(self.directory / RECOVERY_POINT_FILE, self._leo)
        write_durably(self.directory / CLEAN_SHUTDOWN_FILE, b"")
        self._close_files()

    def delete(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        self._close_files()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _close_files(self) -> None:
        for seg in self._segments:
            seg.close()
        self._closed = True

    def _abandon(self) -> None:
        """Close descriptors without flushing or marking: what a crash leaves (for tests)."""
        self._close_files()


def _whole_batches(data: bytes) -> tuple[int, int]:
    """(length of the leading whole batches, position of the last of them)."""
    pos = last = 0
    n = len(data)
    while n - pos >= HEADER_SIZE:
        size = _LENGTH.unpack_from(data, pos + 8)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > n:
            break
        last = pos
        pos += size
    return pos, last
