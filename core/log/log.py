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
or flush.ms says so, and for rolled segments whatever the policy (Kafka's roll schedules a
flush of everything below the new segment). `flush_pending()` says, without I/O, whether
`maybe_flush` has work: the policy is due, a rolled segment awaits its fsync, or the
recovery-point checkpoint is stale. The owner polls it and runs `maybe_flush` in a thread.
`recovery-point-offset` is rewritten when a flush covers a rolled segment, and otherwise at
most every RECOVERY_CHECKPOINT_INTERVAL_MS (Kafka's log.flush.offset.checkpoint.interval.ms)
while it lags the flushed offset; truncation and close write it at once. On `close`
everything is flushed and the clean-shutdown marker written. `open` without the
marker re-checks, CRC and all, every segment from the one holding the recovery point to the
end, cuts the log at the first torn or corrupt batch (dropping later segments, whose order
can no longer be trusted, as Kafka does) and rebuilds those indexes. With the marker only
the active segment's tail framing is checked. Indexes of other segments are loaded lazily
and rebuilt from the log if they are missing or do not match it.

Compaction (cleanup.policy=compact) is cleaner.py's: it writes cleaned copies of closed
segments and `replace_segments` swaps them in (`.cleaned` -> `.swap` -> `.log`); `open`
completes or discards a swap a crash interrupted (recovery.finish_cleaner_swaps). Cleaned
segments have offset gaps, and may be empty. Truncation lowers the cleaner checkpoint.

Aborted transactions. Each segment may have a `.txnindex` (txn_index.py) holding the
aborted transactions whose abort markers it holds. The partition layer, which owns the
producer state, appends the marker batch and then, in the same serialized step,
`append_aborted_txn`; read_committed fetches ask `collect_aborted_txns`. The entries follow
the log through truncation, retention, DeleteRecords and compaction, are fsynced with their
segment, and are discarded by crash recovery for the segments it re-reads: see
`txn_index_complete_below` for what the partition must then do. While they are not
re-derived the recovery point stays at that offset, so a crash in between re-derives them
again rather than trusting a half-rebuilt index.

Descriptors. A segment holds one descriptor, its `.log` (reads pread it); the active
segment also keeps writers for its `.index` and `.timeindex`, opened by its first index
entry and closed when it rolls. Indexes of other segments are read whole into memory and
opened only for the moment of a write (a rebuild) or an fsync.

Failures. `append` is all or nothing: on OSError the segment's files are cut back to where
they were (best effort) and the error re-raised, so a retry reuses the same offsets safely.
Any OSError in flush/maybe_flush (an fsync that failed may have dropped dirty pages), in
roll, truncation, retention, DeleteRecords or close, or an append whose cut-back did not
work, marks the Log `failed` (Kafka takes the log directory offline): from then on append,
flush, maybe_flush, roll, truncate_to, truncate_fully_and_start_at, delete_records and
apply_retention raise OSError("log failed: ..."), flush_due and flush_pending say False,
flushed_offset never moves, and close only closes descriptors (no clean-shutdown marker, so
the next open recovers). Reads keep working. Reopen the directory to recover.

Concurrency. A Log is not thread-safe except as follows.
- The owner serializes, with each other and with flush/maybe_flush, every call that
  changes the log: append, roll, truncate_to, truncate_fully_and_start_at, delete_records,
  apply_retention, replace_segments (cleaner.commit), close and delete (the broker's
  per-partition lock); replace_segments also on the thread that reads. update_config only
  swaps settings and may be called any time.
- `flush` and `maybe_flush` may run in one worker thread at a time, concurrently with the
  read-only calls made from the owner's thread: read, offset_for_timestamp,
  max_timestamp_and_offset, segments, and the I/O-free properties and checks
  (log_start_offset, log_end_offset, flushed_offset, size_bytes, failed, flush_due,
  flush_pending; these may be momentarily stale). Reads never wait for an fsync: a flush
  never closes a `.log` descriptor or touches in-memory index entries. A read may still
  write: when an index entry does not point at its batch, the read rebuilds that index. Each
  segment's lock serializes all index file I/O (open, write, truncate, fsync, close) and the
  segment's sync bookkeeping between the two threads; such a read may wait for that
  segment's index fsync, never for a `.log` fsync. Lookups take no lock.
- The read-only calls themselves come from one thread at a time (the event loop).
"""
from __future__ import annotations

import bisect
import errno
import logging
import shutil
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Collection, Iterator

from core.protocol.records import (HEADER_SIZE, LAST_OFFSET_DELTA_AT, LENGTH_AT, LOG_OVERHEAD, BatchInfo, assign_offsets as _assign,
                                   scan_batches, set_log_append_time)

from . import recovery, retention
from .checkpoint import (CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE,
                         fsync_dir, read_offset, write_durably, write_offset)
from .config import INT32_MAX, LogConfig, now_ms
from .results import AppendResult, OffsetOutOfRange, OffsetsOutOfOrder, ReadResult
from .segment import Segment, SegmentInfo
from .txn_index import SUFFIX as TXN_INDEX_SUFFIX, AbortedTxn, collect_across, write_index_file

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
        self._checkpoint_ms = 0           # when recovery-point-offset was last written
        self._checkpointed_offset = -1    # what it holds (-1: unknown)
        self._closed = False
        self.failed = False               # an I/O error made the files untrustworthy
        self._failure = ""
        self.truncations = 0              # bumped by truncate_to/_fully (cleaner.commit checks)
        self._txn_complete_below = 0
        self._txn_segs: list[Segment] | None = None   # those with entries; None: recount

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
        stored = read_offset(d / RECOVERY_POINT_FILE)
        self._checkpointed_offset = -1 if stored is None else stored
        gap = loaded.txn_discarded_from
        self._txn_complete_below = (self._leo if gap is None else
                                    min(self._leo, max(gap, self._segments[0].base_offset)))
        if gap is not None:
            self._dir_dirty = True   # .txnindex files were removed
        if loaded.clean:
            # Gone before the first append, or a crash would be mistaken for a clean stop.
            (d / CLEAN_SHUTDOWN_FILE).unlink()
            fsync_dir(d)
        elif recover:
            self._flush(len(self._segments))   # what recovery kept is now durable
        if self._txn_complete_below < self._leo:
            # The segments from there on lack entries until the partition re-derives them;
            # the next flush makes those durable and moves the recovery point on.
            self._flushed_offset = self._txn_complete_below
        if (not loaded.clean and recover) or self._flushed_offset < self._leo:
            self._write_recovery_point(self._flushed_offset)

    def _activate(self, seg: Segment) -> None:
        seg.activate()
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
    def txn_index_complete_below(self) -> int:
        """Below this offset the aborted-transaction index is complete after `open`.

        It is the base offset of the first segment whose `.txnindex` crash recovery
        discarded, or the log end offset if none was (a clean shutdown, a new log). The
        partition layer must replay the batch headers from a producer snapshot at or below
        it (or from the log start) and `append_aborted_txn` for every abort marker at or
        after it, before anything else changes or flushes the log. Markers below it may be
        re-appended too: those are ignored. Until a flush makes the re-derived entries
        durable the recovery point stays here, so a crash meanwhile discards them again.
        truncate_to lowers it to the truncation offset; truncate_fully_and_start_at sets it
        to the new start (nothing is left to re-derive). It never rises otherwise.
        """
        return self._txn_complete_below

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

        On OSError nothing of the append remains (see Failures in the module docstring);
        with apply_flush_policy a failed fsync after the write fails the log instead.
        """
        self._check_usable()
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
        try:
            seg = self._maybe_roll(len(data), first, last, now)
            seg.append(data, batches, first if assign_offsets else None, now,
                       append_time if append_time >= 0 else None)
        except OSError as exc:
            # Segment.append cut its files back; if that did not work, or a roll failed
            # halfway, the files no longer match what the log believes.
            if not self._segments[-1].on_disk_matches():
                self._fail(exc)
            raise
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
        with self._io():
            if self._segments[-1].size:
                self._roll(self._leo)

    def _roll(self, base_offset: int) -> None:
        """The new segment is created before the old one changes role, so a failure leaves
        the old one active (perhaps with its closing time index entry, which is harmless)."""
        old = self._segments[-1]
        if old.size == 0 and old.base_offset == base_offset:
            return
        if old.size:
            old.seal()
        seg = Segment.create(self.directory, base_offset, self.config.index_interval_bytes,
                             self._clock())
        seg.activate()
        self._dir_dirty = True
        if old.size == 0:
            self._segments.pop()
            self._bases.pop()
            self._txn_segs = None
            try:
                old.delete()
            except OSError as exc:   # an empty file left behind holds no offsets
                log.error("%s: cannot delete empty segment: %s", old.log_path, exc)
        else:
            old.deactivate()
            self._rolled_unflushed = True
            self._rolled_since_checkpoint = True
        self._segments.append(seg)
        self._bases.append(base_offset)

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
            found = seg.locate(offset)
            if found is None:
                continue   # offset lies past this segment's data: a gap, or its very end
            pos, first_base, first_last, first_size = found
            if first_last >= limit:
                return empty
            if limit >= (segs[i + 1].base_offset if i + 1 < len(segs) else leo):
                end = seg.size
            else:
                end = seg.position_of(limit)
            budget = max(max_bytes, first_size) if min_one_batch else max_bytes
            n = min(end - pos, budget)
            if n < first_size:
                return empty
            data = seg.read(pos, n)
            whole, last_pos = _whole_batches(data)
            next_offset = (_BASE_OFFSET.unpack_from(data, last_pos)[0]
                           + _LENGTH.unpack_from(data, last_pos + LAST_OFFSET_DELTA_AT)[0] + 1)
            return ReadResult(data if whole == len(data) else memoryview(data)[:whole],
                              first_base, next_offset)
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

    # ------------------------------------------------- aborted transactions

    def append_aborted_txn(self, txn: AbortedTxn) -> bool:
        """Record an aborted transaction in the index of the segment holding its marker
        (`txn.last_offset`, already appended). Returns False when the entry was already
        there (a replay; see txn_index.py) or its segment is gone (below the log's first
        segment). Raises ValueError for a marker at or past the log end.

        Call it in the same serialized step as the marker's append: a flush in between would
        let the recovery point pass the marker without its entry. If one did (or the append
        itself flushed, flush.messages=1), the entry is fsynced here at once."""
        if txn.last_offset >= self._leo:
            raise ValueError(f"abort marker at {txn.last_offset} is not in the log "
                             f"(log end {self._leo})")
        if txn.last_offset < self._segments[0].base_offset:
            return False
        seg = self._segments[self._segment_index(txn.last_offset)]
        with self._io():
            created = not seg.txn_index.has_file
            if not seg.txn_index.append(txn):
                return False
            if created:
                self._dir_dirty = True
                self._txn_segs = None
            if txn.last_offset < self._flushed_offset:
                seg.txn_index.flush()
                if self._dir_dirty:
                    fsync_dir(self.directory)
                    self._dir_dirty = False
        return True

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset): their
        markers are at or after start_offset and their first offsets below upper_bound_offset
        (Kafka's collectAbortedTransactions). The search goes from the segment holding
        start_offset forward and stops at the first segment whose entries say it is complete
        (an abort written once the last stable offset had passed upper_bound_offset); a
        transaction may begin in the range and be aborted several segments later, so the
        next segment's base offset is no reason to stop. Segments without entries are
        skipped without a look; a log that has none answers at once."""
        with_entries = self._txn_segs
        if with_entries is None:
            with_entries = self._txn_segs = [s for s in self._segments
                                             if s.txn_index.may_have_entries]
        if not with_entries:
            return []
        first = self._bases[self._segment_index(start_offset)]
        i = bisect.bisect_left(with_entries, first, key=lambda s: s.base_offset)
        return collect_across((s.txn_index for s in with_entries[i:]), start_offset,
                              upper_bound_offset)

    # ----------------------------------------------------------------- flush

    def flush_due(self) -> bool:
        """Whether flush.messages or flush.ms asks for an fsync now (no I/O)."""
        if not self._unflushed_records or self.failed:
            return False
        assert self._first_unflushed_ms is not None   # set with the first unflushed record
        return (self._unflushed_records >= self.config.flush_messages
                or self._clock() - self._first_unflushed_ms >= self.config.flush_ms)

    def flush_pending(self) -> bool:
        """Whether maybe_flush has work now (no I/O): the flush policy is due, a rolled
        segment awaits its fsync, or the recovery-point checkpoint lags the flushed offset
        and is RECOVERY_CHECKPOINT_INTERVAL_MS old. False once the log failed or closed."""
        if self.failed or self._closed:
            return False
        if self._rolled_unflushed or self.flush_due():
            return True
        return (self._flushed_offset != self._checkpointed_offset
                and self._clock() - self._checkpoint_ms >= RECOVERY_CHECKPOINT_INTERVAL_MS)

    @property
    def closed(self) -> bool:
        return self._closed

    def has_flush_work(self) -> bool:
        """Whether flush_pending() may become true without another write: records not yet
        fsynced, a rolled segment, or a checkpoint behind the flushed offset."""
        if self.failed or self._closed:
            return False
        return bool(self._unflushed_records or self._rolled_unflushed
                     or self._flushed_offset != self._checkpointed_offset)

    def maybe_flush(self) -> bool:
        """Do what flush_pending() asks: apply the flush policy, fsync rolled segments (as
        Kafka does on roll) and rewrite the recovery-point checkpoint when a rolled segment
        got flushed or the checkpoint is stale. True if it fsynced or wrote anything."""
        with self._io():
            done = False
            if self.flush_due():
                self._flush(len(self._segments))
                done = True
            elif self._rolled_unflushed:
                self._flush(len(self._segments) - 1)
                done = True
            return self._maybe_checkpoint() or done

    def flush(self) -> None:
        """fsync every segment with unflushed data, and the directory if files came or went."""
        with self._io():
            self._flush(len(self._segments))
            self._maybe_checkpoint()

    def _flush(self, count: int) -> None:
        """fsync the first `count` segments. Raises OSError before moving flushed_offset."""
        segs = self._segments
        upto = self._leo if count >= len(segs) else segs[count].base_offset
        for seg in segs[:count]:
            if seg.dirty:
                seg.flush()
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self._flushed_offset = max(self._flushed_offset, upto)
        if count >= len(segs) - 1:
            self._rolled_unflushed = False
        if count >= len(segs):
            self._unflushed_records = 0
            self._first_unflushed_ms = None

    def _maybe_checkpoint(self) -> bool:
        """Rewrite recovery-point-offset if it lags the flushed offset and a rolled segment
        was flushed since it was written, or it is RECOVERY_CHECKPOINT_INTERVAL_MS old."""
        if self._flushed_offset == self._checkpointed_offset:
            return False
        if (not self._rolled_since_checkpoint
                and self._clock() - self._checkpoint_ms < RECOVERY_CHECKPOINT_INTERVAL_MS):
            return False
        self._write_recovery_point(self._flushed_offset)
        return True

    def _write_recovery_point(self, offset: int) -> None:
        write_offset(self.directory / RECOVERY_POINT_FILE, offset)
        self._checkpointed_offset = offset
        self._checkpoint_ms = self._clock()
        self._rolled_since_checkpoint = False

    # --------------------------------------------------------------- failure

    def _check_usable(self) -> None:
        if self.failed:
            raise OSError(errno.EIO, f"log failed: {self._failure}")

    def _fail(self, exc: OSError) -> None:
        if not self.failed:
            log.error("%s: I/O error, log marked failed until reopened: %s", self.directory, exc)
            self.failed = True
            self._failure = str(exc)

    @contextmanager
    def _io(self) -> Iterator[None]:
        """Refuse if failed; mark failed on OSError (the files may not match our state)."""
        self._check_usable()
        try:
            yield
        except OSError as exc:
            self._fail(exc)
            raise

    # ------------------------------------------------------------- deletion

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start up to before_offset (-1: the log end)."""
        if before_offset == -1:
            before_offset = self._leo
        if before_offset < 0 or before_offset > self._leo:
            raise OffsetOutOfRange(before_offset, self._log_start_offset, self._leo)
        with self._io():
            if before_offset > self._log_start_offset:
                self._set_log_start(before_offset)
                self._delete_segments_below_start()
        return self._log_start_offset

    def apply_retention(self, *, high_watermark: int | None = None) -> int:
        """Delete the oldest closed segments that retention.ms or retention.bytes condemn, or
        that lie wholly below the log start. A segment is deleted only if every offset in
        it is below high_watermark (default: the log end). Time and size retention apply
        only when cleanup.policy holds "delete". Returns how many were deleted."""
        with self._io():
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
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        self._dir_dirty = True
        self._txn_segs = None
        # Files that fail to go lie below the log start; the next open deletes them.
        error: OSError | None = None
        for seg in doomed:
            try:
                seg.delete()
            except OSError as exc:
                error = error or exc
        if error is not None:
            raise error

    def _set_log_start(self, offset: int) -> None:
        write_offset(self.directory / LOG_START_OFFSET_FILE, offset)
        self._log_start_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after `offset` (a batch holding it goes whole); the log
        end becomes `offset`. Below the log start this empties the log and starts it there."""
        if offset >= self._leo:
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self.truncations += 1
        with self._io():
            segs = self._segments
            self._txn_segs = None
            self._txn_complete_below = min(self._txn_complete_below, offset)
            while len(segs) > 1 and segs[-1].base_offset >= offset:
                self._bases.pop()
                self._dir_dirty = True
                segs.pop().delete()
            seg = segs[-1]
            seg.truncate_to(offset)   # its txn index too
            self._activate(seg)
            self._leo = offset
            self._lower_cleaner_checkpoint(offset)
            # Durable at once, so a crash cannot bring back batches a follower discarded.
            self._flushed_offset = min(self._flushed_offset, offset)
            self._flush(len(segs))
            self._write_recovery_point(self._flushed_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and continue empty at `offset` (a follower far behind)."""
        self.truncations += 1
        with self._io():
            old, self._segments, self._bases = self._segments, [], []
            self._dir_dirty = True
            self._txn_segs = None
            self._txn_complete_below = offset
            for seg in old:
                seg.delete()
            seg = Segment.create(self.directory, offset, self.config.index_interval_bytes,
                                 self._clock())
            seg.activate()
            self._segments = [seg]
            self._bases = [offset]
            self._leo = offset
            self._flushed_offset = offset
            self._unflushed_records = 0
            self._first_unflushed_ms = None
            self._rolled_unflushed = False
            self._set_log_start(offset)
            self._lower_cleaner_checkpoint(offset)
            self._flush(1)
            self._write_recovery_point(offset)

    # ------------------------------------------------------------ compaction

    def _lower_cleaner_checkpoint(self, offset: int) -> None:
        """After a truncation, data the cleaner checkpoint calls clean may be replaced by new
        data: move it down (Kafka's LogCleanerManager.maybeTruncateCheckpoint)."""
        path = self.directory / recovery.CLEANER_CHECKPOINT_FILE
        stored = read_offset(path)
        if stored is not None and stored > offset:
            write_offset(path, offset)

    def replace_segments(self, old: list[Segment], hook: Callable[[str], None] | None = None, *,
                         dropped_txns: Collection[tuple[int, int]] = ()) -> Segment:
        """Swap in the cleaned segment the cleaner wrote for `old` (see cleaner.py).

        `old` are consecutive closed segments of this log; `<old[0] base>.log.cleaned` and
        its `.index.cleaned`/`.timeindex.cleaned` are complete and fsynced. The cleaned
        segment inherits the aborted-transaction entries of `old` but those whose ABORT
        marker the clean removed (`dropped_txns`: (producer id, marker offset)): they are
        written here as `.txnindex.cleaned` (only if there are any), from the entries as
        they are now, since a replay may add some while the cleaner runs (and as an empty
        file when the first of `old` had entries and the clean dropped them all).
        Kafka's replaceSegments order: rename these to `.swap` (indexes first, the log last,
        which marks the swap as decided), fsync the directory; delete the old segments
        (the first one's files are replaced by the rename that follows); rename the
        `.swap` files to their final names (indexes first, the log last), fsync the
        directory. recovery.finish_cleaner_swaps completes a swap a crash interrupted.
        `hook(step)` is called after "swap", "deleted" and "renamed" (crash tests).
        Serialized with appends and reads like apply_retention (owner's thread)."""
        with self._io():
            i = next((k for k, s in enumerate(self._segments) if s is old[0]), None)
            if (i is None or self._segments[i:i + len(old)] != old
                    or i + len(old) >= len(self._segments)):
                raise ValueError("segments to replace are not consecutive closed segments")
            d = self.directory
            base = old[0].base_offset
            stem = old[0].log_path.stem
            txns = [t for seg in old for t in seg.txn_index.entries()
                    if (t.producer_id, t.last_offset) not in dropped_txns]
            # The first segment's `.txnindex` becomes the cleaned segment's. Whenever it holds
            # entries, its replacement goes through the swap too (empty if the clean dropped
            # them all), so no crash point leaves an entry behind its removed marker.
            swap_txns = bool(txns) or bool(old[0].txn_index.entries())
            kinds: tuple[str, ...] = ("index", "timeindex", "log")
            if swap_txns:
                write_index_file(d / f"{stem}{TXN_INDEX_SUFFIX}.cleaned", txns)
                kinds = ("index", "timeindex", TXN_INDEX_SUFFIX[1:], "log")
            for kind in kinds:
                (d / f"{stem}.{kind}.cleaned").replace(d / f"{stem}.{kind}.swap")
            fsync_dir(d)
            if hook:
                hook("swap")
            for seg in old:
                seg.close()
            if not swap_txns:
                old[0].txn_index.delete()   # no entries, so no file for the cleaned segment
            for seg in old[1:]:
                seg.delete()
            if hook:
                hook("deleted")
            for kind in kinds:
                (d / f"{stem}.{kind}.swap").replace(d / f"{stem}.{kind}")
            fsync_dir(d)
            if hook:
                hook("renamed")
            new = Segment.open(d, base, self.config.index_interval_bytes, txn_file=swap_txns)
            new.ensure_state()
            self._segments[i:i + len(old)] = [new]
            self._bases[i:i + len(old)] = [base]
            self._txn_segs = None
            return new

    # ----------------------------------------------------------------- close

    def close(self) -> None:
        """Flush, then mark the shutdown clean so the next open skips recovery."""
        if self._closed:
            return
        try:
            if not self.failed:   # a failed log must be recovered on the next open
                try:
                    self._segments[-1].seal()
                    self._flush(len(self._segments))
                    self._write_recovery_point(self._leo)
                    write_durably(self.directory / CLEAN_SHUTDOWN_FILE, b"")
                except OSError as exc:
                    self._fail(exc)
                    raise
        finally:
            self._close_files()

    def delete(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        self._close_files()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _close_files(self) -> None:
        self._closed = True
        for seg in self._segments:
            try:
                seg.close()
            except OSError as exc:
                log.error("%s: close failed: %s", seg.log_path, exc)

    def _abandon(self) -> None:
        """Close descriptors without flushing or marking: what a crash leaves (for tests)."""
        self._close_files()


def _whole_batches(data: bytes) -> tuple[int, int]:
    """(length of the leading whole batches, position of the last of them)."""
    pos = last = 0
    n = len(data)
    while n - pos >= HEADER_SIZE:
        size = _LENGTH.unpack_from(data, pos + LENGTH_AT)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > n:
            break
        last = pos
        pos += size
    return pos, last
