"""One log segment: a `.log` file of record batches, its two sparse indexes and its
aborted-transaction index (txn_index.py; usually no file at all).

A segment finds batches by header only: an index lookup gives a position at or before the
target, then `_walk` reads 61-byte headers forward (many per pread when batches are small,
one pread per batch when they are large) and never looks at records. Only recovery reads
whole batches, to check their CRCs.

A segment loaded from disk knows nothing about its contents until something asks
(`ensure_state`): then it loads its indexes and walks the few batches after the last index
entry to learn its next offset and largest timestamp. Closed segments of a long log are
therefore never read at startup.

Descriptors: a segment keeps its `.log` open (reads pread it); only the active segment
keeps writers for its indexes too, opened by its first index write and closed when it is
rolled (`deactivate`). See index.py. The `.txnindex` never keeps one.

The txn index follows the log: `truncate_to` cuts it with the log, a `rebuild` that cuts the
log drops the entries whose markers went, `flush` fsyncs it and `delete` removes it. It is
derived data that only the partition layer can re-derive, so the segment never discards it
on its own; recovery (recovery.py) does, for the segments it re-reads after a crash.

Threads: `flush` may run in a worker thread while the event loop reads, and a read may
rebuild a stale index (`_indexed_seek`). `_lock` (shared with both indexes) serializes every
index file operation and the segment's own sync bookkeeping; the `.log` fsync itself runs
outside it, and lookups take no lock.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from crc32c import crc32c

from core.protocol.records import CRC_START, HEADER_SIZE, MAGIC, BatchInfo, read_batch_header

from .config import INT32_MAX
from .index import IndexCorrupt, OffsetIndex, TimeIndex, datasync, write_all
from .txn_index import SUFFIX as TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

SCAN_CHUNK = 16 * 1024      # header walks: one pread covers many small batches
RECOVER_CHUNK = 1 << 20     # CRC recovery reads whole batches, so read big
TAIL_BATCHES = 64           # recent batches a segment finds without its index (Segment._tail)

_OFFSET_ENTRY = OffsetIndex.ENTRY
_TIME_ENTRY = TimeIndex.ENTRY


def file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogCorrupted(Exception):
    """The log file's framing breaks in the middle of data recovery already accepted."""

    def __init__(self, path: Path, position: int):
        super().__init__(f"{path}: no valid record batch at position {position}")
        self.path = path
        self.position = position


class _StaleIndex(Exception):
    pass


@dataclass
class SegmentInfo:
    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int
    path: Path


class _Tracker:
    """Decides index entries batch by batch, exactly as Kafka's LogSegment.append does; shared
    by append and rebuild so a rebuilt index equals the one appends would have written."""

    __slots__ = ("base", "interval", "bytes_since", "max_ts", "offset_of_max", "time_last_ts",
                 "idx", "tidx")

    def __init__(self, base: int, interval: int, bytes_since: int, max_ts: int,
                 offset_of_max: int, time_last_ts: int):
        self.base = base
        self.interval = interval
        self.bytes_since = bytes_since
        self.max_ts = max_ts
        self.offset_of_max = offset_of_max
        self.time_last_ts = time_last_ts
        self.idx = bytearray()
        self.tidx = bytearray()

    def add(self, position: int, last_offset: int, max_ts: int, size: int) -> None:
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.offset_of_max = last_offset
        if self.bytes_since > self.interval:
            self.idx += _OFFSET_ENTRY.pack(last_offset - self.base, position)
            self.time_entry()
            self.bytes_since = 0
        self.bytes_since += size

    def time_entry(self) -> None:
        if self.max_ts > self.time_last_ts:
            self.tidx += _TIME_ENTRY.pack(self.max_ts, self.offset_of_max - self.base)
            self.time_last_ts = self.max_ts


class Segment:
    def __init__(self, directory: Path, base_offset: int, fd: int, size: int, index_interval: int,
                 *, txn_file: bool = False):
        self.base_offset = base_offset
        self.log_path = directory / f"{file_stem(base_offset)}.log"
        self.fd = fd
        self.size = size
        self.index_interval = index_interval
        self._lock = threading.RLock()  # index file I/O and sync bookkeeping (see above)
        self.index = OffsetIndex(self.log_path, self._lock)
        self.time_index = TimeIndex(self.log_path, self._lock)
        # Each entry needs a marker batch of its own in the .log: that bounds a sane file.
        self.txn_index = TransactionIndex(self.log_path.with_suffix(TXN_INDEX_SUFFIX), base_offset,
                                          file_exists=txn_file, lock=self._lock,
                                          max_entries=lambda: self.size // HEADER_SIZE)
        self.created_ms = 0            # segment.ms counts from here
        self.flushed_size = size       # bytes known to be fsynced
        self._needs_sync = False       # a truncation of the .log awaits an fsync
        self._next_offset: int | None = None   # None: state not loaded yet
        self._max_ts = -1
        self._offset_of_max = -1       # last offset of the batch holding _max_ts
        self._bytes_since_index = 0
        # The last batches appended: base offset -> what `locate` answers for it. Followers and
        # caught-up consumers read from where a recent batch starts, and find it here without
        # the index search and the walk of batch headers from disk.
        self._tail: dict[int, tuple[int, int, int, int]] = {}

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval: int, now: int) -> "Segment":
        path = directory / f"{file_stem(base_offset)}.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        seg = cls(directory, base_offset, fd, 0, index_interval)
        try:
            seg.index.reset()          # empty files now; writers open on the first entry
            seg.time_index.reset()
            seg.txn_index.discard()    # a leftover of an earlier segment at this offset
        except OSError:
            seg.delete()
            raise
        seg._next_offset = base_offset
        seg.created_ms = now
        return seg

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval: int, *,
             txn_file: bool | None = None) -> "Segment":
        """txn_file: whether `<stem>.txnindex` exists, when the caller already knows (a
        directory scan); None looks."""
        stem = file_stem(base_offset)
        if txn_file is None:
            txn_file = (directory / f"{stem}{TXN_INDEX_SUFFIX}").exists()
        fd = os.open(directory / f"{stem}.log", os.O_RDWR | os.O_APPEND)
        return cls(directory, base_offset, fd, os.fstat(fd).st_size, index_interval,
                   txn_file=txn_file)

    # ------------------------------------------------------------------ state

    @property
    def next_offset(self) -> int:
        return self.ensure_state()

    @property
    def max_timestamp(self) -> int:
        self.ensure_state()
        return self._max_ts

    @property
    def offset_of_max_timestamp(self) -> int:
        self.ensure_state()
        return self._offset_of_max

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.base_offset, self.next_offset, self.size, self.max_timestamp,
                           self.log_path)

    def ensure_state(self) -> int:
        """Load the state (indexes, next offset, max timestamp) if it is not yet; returns the
        next offset."""
        if self._next_offset is None and not self.load_state():
            log.warning("%s: index does not match the log; rebuilding it", self.log_path)
            self.rebuild(verify_crc=False)
        assert self._next_offset is not None   # set by load_state or rebuild
        return self._next_offset

    def load_state(self) -> bool:
        """Load the indexes and walk the batches after the last index entry.

        Returns False, leaving the state unknown, when an index is missing or corrupt or the
        tail does not end in a whole batch exactly at the end of the file.
        """
        try:
            if not self.index.loaded:
                self.index.load(self.size)
            if not self.time_index.loaded:
                self.time_index.load(self.size)
        except (FileNotFoundError, IndexCorrupt):
            return False
        entry = self.index.last_entry()
        start = entry[1] if entry else 0
        last_time = self.time_index.last_entry()
        max_ts, offset_of_max = ((last_time[0], self.base_offset + last_time[1])
                                 if last_time else (-1, -1))
        next_offset = self.base_offset
        end = start
        for pos, info in self._walk(start):
            last = info.base_offset + info.last_offset_delta
            if pos == start and entry is not None and last != self.base_offset + entry[0]:
                return False
            if info.max_timestamp > max_ts:
                max_ts, offset_of_max = info.max_timestamp, last
            next_offset = last + 1
            end = pos + info.size
        if end != self.size:
            return False
        self._next_offset = next_offset
        self._max_ts, self._offset_of_max = max_ts, offset_of_max
        self._bytes_since_index = self.size - start
        return True

    def rebuild(self, *, verify_crc: bool) -> int:
        """Re-derive the indexes from the log, cutting it at the first bad batch.

        With verify_crc every batch's CRC32C is checked (crash recovery); without, only the
        framing and offset order. Returns the number of bytes cut off the end.
        """
        self._tail = {}
        tracker = _Tracker(self.base_offset, self.index_interval, 0, -1, -1, -1)
        next_offset = self.base_offset
        end = 0
        chunk = RECOVER_CHUNK if verify_crc else SCAN_CHUNK
        for pos, info in self._walk(0, verify_crc=verify_crc, chunk=chunk):
            last = info.base_offset + info.last_offset_delta
            if info.base_offset < next_offset or last - self.base_offset > INT32_MAX:
                break
            tracker.add(pos, last, info.max_timestamp, info.size)
            next_offset = last + 1
            end = pos + info.size
        cut = self.size - end
        # Kafka appends this closing entry when a segment rolls; it makes the last time
        # index entry carry the segment's largest timestamp.
        tracker.time_entry()
        with self._lock:   # a read may get here while a flush thread syncs this segment
            if cut:
                os.ftruncate(self.fd, end)
                self.size = end
                self.flushed_size = min(self.flushed_size, end)
                self._needs_sync = True
                self.txn_index.truncate_to(next_offset)   # markers that went take their entries
            self.index.reset(tracker.idx)
            self.time_index.reset(tracker.tidx)
        self._next_offset = next_offset
        self._max_ts, self._offset_of_max = tracker.max_ts, tracker.offset_of_max
        self._bytes_since_index = tracker.bytes_since
        return cut

    def first_batch_timestamp(self) -> int:
        if self.size < HEADER_SIZE:
            return -1
        return read_batch_header(os.pread(self.fd, HEADER_SIZE, 0)).max_timestamp

    def last_modified_ms(self) -> int:
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def index_full(self, segment_index_bytes: int) -> bool:
        return (self.index.is_full(segment_index_bytes)
                or self.time_index.is_full(segment_index_bytes))

    # ----------------------------------------------------------------- writes

    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[BatchInfo],
               first_offset: int | None, now: int, append_time: int | None) -> None:
        """Write `data` (exactly `batches`, back to back) and index it.

        first_offset: the offset assigned to the first batch, the rest following on; None
        keeps each batch's own base offset. append_time overrides max timestamps
        (LogAppendTime). Data goes to the file before any index entry that points into it.
        """
        next_offset = self.ensure_state()
        last_time = self.time_index.last_entry()
        tracker = _Tracker(self.base_offset, self.index_interval, self._bytes_since_index,
                           self._max_ts, self._offset_of_max, last_time[0] if last_time else -1)
        start = self.size
        offset = first_offset
        last = next_offset - 1
        appended = []
        for b in batches:
            base = b.base_offset if offset is None else offset
            last = base + b.last_offset_delta
            tracker.add(start + b.position, last,
                        b.max_timestamp if append_time is None else append_time, b.size)
            appended.append((base, (start + b.position, base, last, b.size)))
            if offset is not None:
                offset = last + 1
        entries = len(self.index), len(self.time_index)
        try:
            write_all(self.fd, data)
            self.index.extend(tracker.idx)
            self.time_index.extend(tracker.tidx)
        except OSError:
            self._undo_append(start, *entries)
            raise
        if start == 0:
            self.created_ms = now
        self.size = start + len(data)
        self._next_offset = last + 1
        self._max_ts, self._offset_of_max = tracker.max_ts, tracker.offset_of_max
        self._bytes_since_index = tracker.bytes_since
        tail = self._tail
        tail.update(appended)
        if len(tail) > 2 * TAIL_BATCHES:
            self._tail = dict(list(tail.items())[-TAIL_BATCHES:])

    def _undo_append(self, size: int, index_entries: int, time_entries: int) -> None:
        """Best effort: cut the files back to where a failed append found them, so nothing
        of it survives to be recovered. The in-memory state was not touched yet; the caller
        checks with `on_disk_matches` whether the cut worked."""
        undos: tuple[Callable[[], None], ...] = (
            lambda: os.ftruncate(self.fd, size),
            lambda: self.index.truncate_entries(index_entries),
            lambda: self.time_index.truncate_entries(time_entries))
        for undo in undos:
            try:
                undo()
            except OSError as exc:
                log.error("%s: cannot undo a failed append: %s", self.log_path, exc)

    def on_disk_matches(self) -> bool:
        """Whether the .log file is exactly as long as the segment thinks."""
        try:
            return os.fstat(self.fd).st_size == self.size
        except OSError:
            return False

    def seal(self) -> None:
        """Add the closing time index entry (on roll and close), like Kafka."""
        if self._next_offset is None:
            return
        last_time = self.time_index.last_entry()
        if self._max_ts > (last_time[0] if last_time else -1):
            self.time_index.extend(_TIME_ENTRY.pack(self._max_ts,
                                                    self._offset_of_max - self.base_offset))

    def activate(self) -> None:
        """This is now the log's active segment: its indexes keep their writers."""
        with self._lock:
            self.index.keep_open = self.time_index.keep_open = True

    def deactivate(self) -> None:
        """Rolled: close the index writers; later index I/O opens the file per call."""
        with self._lock:
            self.index.keep_open = self.time_index.keep_open = False
            self.index.close()
            self.time_index.close()

    @property
    def active(self) -> bool:
        return self.index.keep_open

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= offset; returns the bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        pos = found[0]
        removed = self.size - pos
        self._tail = {}
        with self._lock:
            os.ftruncate(self.fd, pos)
            self.size = pos
            self.flushed_size = min(self.flushed_size, pos)
            self._needs_sync = True
        self.index.truncate_before_offset(offset - self.base_offset)
        self.time_index.truncate_before_offset(offset - self.base_offset)
        self.txn_index.truncate_to(offset)
        self._next_offset = None
        self.ensure_state()
        return removed

    def flush(self) -> None:
        """fsync the .log if it changed, then the indexes (the txn index too); on OSError
        nothing counts as flushed. The .log fsync runs outside the lock so a read's index
        rebuild need not wait for it; a rebuild that cuts the file meanwhile sets
        _needs_sync again."""
        with self._lock:
            size = self.size
            log_dirty = self.flushed_size != size or self._needs_sync
            self._needs_sync = False
        if log_dirty:
            try:
                datasync(self.fd)
            except OSError:
                self._needs_sync = True
                raise
        with self._lock:
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
            self.flushed_size = min(size, self.size)

    @property
    def dirty(self) -> bool:
        return (self.flushed_size != self.size or self._needs_sync
                or self.index.dirty or self.time_index.dirty or self.txn_index.dirty)

    def close(self) -> None:
        self._tail = {}
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            self.index.keep_open = self.time_index.keep_open = False
            self.index.close()
            self.time_index.close()
            self.txn_index.close()

    def delete(self) -> None:
        with self._lock:
            self.close()
            self.log_path.unlink(missing_ok=True)
            self.index.delete()
            self.time_index.delete()
            self.txn_index.delete()

    # ------------------------------------------------------------------ reads

    def find_batch(self, offset: int) -> tuple[int, BatchInfo] | None:
        """Position and header of the first batch whose last offset is >= offset."""
        if offset >= self.ensure_state():
            return None
        base = self.base_offset
        return self._indexed_seek(
            lambda: self.index.lookup(offset - base),
            lambda info: info.base_offset + info.last_offset_delta >= offset)

    def locate(self, offset: int) -> tuple[int, int, int, int] | None:
        """(position, base offset, last offset, size) of the first batch whose last offset is
        >= offset, as find_batch, from the recent batches when one starts at `offset`."""
        hit = self._tail.get(offset)
        if hit is not None:
            return hit
        found = self.find_batch(offset)
        if found is None:
            return None
        pos, info = found
        return pos, info.base_offset, info.base_offset + info.last_offset_delta, info.size

    def position_of(self, offset: int) -> int:
        """File position of the first batch whose last offset is >= offset (or the size)."""
        hit = self._tail.get(offset)
        if hit is not None:
            return hit[0]
        found = self.find_batch(offset)
        return self.size if found is None else found[0]

    def find_by_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, BatchInfo] | None:
        """The first batch with max timestamp >= timestamp and last offset >= min_offset."""
        next_offset = self.ensure_state()
        if self._max_ts < timestamp or next_offset <= min_offset:
            return None
        base = self.base_offset

        def locate() -> tuple[int, int] | None:
            by_time = self.time_index.lookup_before(timestamp)
            candidates = [self.index.lookup(min_offset - base)]
            if by_time is not None:
                candidates.append(self.index.lookup(by_time[1]))
            return max(candidates, key=lambda e: -1 if e is None else e[1])

        return self._indexed_seek(
            locate, lambda info: (info.max_timestamp >= timestamp
                                  and info.base_offset + info.last_offset_delta >= min_offset))

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def _indexed_seek(self, locate: Callable[[], tuple[int, int] | None],
                      match: Callable[[BatchInfo], bool]) -> tuple[int, BatchInfo] | None:
        try:
            return self._seek(locate(), match)
        except _StaleIndex:
            log.warning("%s: index entry does not point at its batch; rebuilding", self.log_path)
            self.rebuild(verify_crc=False)
        try:
            return self._seek(locate(), match)
        except _StaleIndex:
            raise LogCorrupted(self.log_path, 0) from None

    def _seek(self, entry: tuple[int, int] | None,
              match: Callable[[BatchInfo], bool]) -> tuple[int, BatchInfo] | None:
        start = entry[1] if entry else 0
        end = start
        for pos, info in self._walk(start):
            if (entry is not None and pos == start
                    and info.base_offset + info.last_offset_delta != self.base_offset + entry[0]):
                raise _StaleIndex
            if match(info):
                return pos, info
            end = pos + info.size
        if end != self.size:
            if end == start and entry is not None:
                raise _StaleIndex
            raise LogCorrupted(self.log_path, end)
        return None

    def _walk(self, pos: int, *, verify_crc: bool = False,
              chunk: int = SCAN_CHUNK) -> Iterator[tuple[int, BatchInfo]]:
        """Yield (position, header) for each well-formed batch from `pos` on.

        Stops quietly at the first bad one; callers compare where it stopped with where
        the file ends.
        """
        size = self.size
        fd = self.fd
        buf = b""
        view = memoryview(buf)
        buf_pos = pos
        while size - pos >= HEADER_SIZE:
            off = pos - buf_pos
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(chunk, size - pos), pos)
                view = memoryview(buf)
                buf_pos, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            info = read_batch_header(buf, off)
            bsize = info.size
            if (info.magic != MAGIC or bsize < HEADER_SIZE or bsize > size - pos
                    or info.last_offset_delta < 0):
                return
            if verify_crc:
                if off + bsize > len(buf):
                    buf = os.pread(fd, min(max(chunk, bsize), size - pos), pos)
                    view = memoryview(buf)
                    buf_pos, off = pos, 0
                    if len(buf) < bsize:
                        return
                if crc32c(view[off + CRC_START:off + bsize]) != info.crc:
                    return
            yield pos, info
            pos += bsize
