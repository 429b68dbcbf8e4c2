"""Kafka's sparse segment indexes: `.index` and `.timeindex`.

`.index` entries are (int32 offset - segment base, int32 file position), keyed like Kafka's by
the *last* offset of the batch that starts at that position. `.timeindex` entries are (int64
timestamp, int32 relative offset): the largest timestamp seen so far in the segment and the
last offset of the batch that carried it. Both are big-endian and strictly increasing in
their key.

Here both files are append-only: nothing is preallocated, so the file length is the entry
count and nothing needs trimming on roll. Kafka's own files are preallocated and can end in
zeros after a crash, so `load` accepts an all-zero tail (and cuts it off); any other entry
that breaks the ordering raises IndexCorrupt and the segment rebuilds the index from its log.

The entries stay in memory as the file's bytes (0.2-0.3% of the log's size) and are searched
with `bisect` through a key function, so there are no per-entry Python objects. Lookups
never touch the file.

Descriptors. Only the active segment's indexes keep a writer open (`keep_open`), opened by
the first write. Every other index opens its file for one write or one fsync and closes it
again, so a closed segment costs one descriptor, its `.log`. Loading reads the file whole.

Threads. Every call that opens, writes, truncates, fsyncs or closes the file holds the lock
the segment passes in, because a flush thread and the event loop (a read that rebuilds an
index) may both get here; lookups and `load`'s read take no lock.
"""
from __future__ import annotations

import bisect
import os
import struct
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class IndexCorrupt(Exception):
    """An index file that cannot be trusted; rebuild it from the log."""


_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _SparseIndex:
    ENTRY: struct.Struct
    SUFFIX: str

    def __init__(self, log_path: Path, lock: "threading.RLock | None" = None):
        self.path = log_path.with_suffix(self.SUFFIX)
        self._buf: bytearray | None = None   # None until loaded: closed segments load lazily
        self._fd: int | None = None          # the kept writer (keep_open only)
        self._dirty = False                  # written since the last fsync
        self._lock = lock if lock is not None else threading.RLock()
        self.keep_open = False               # the active segment's: keep the writer

    # ----------------------------------------------------------------- state

    @property
    def loaded(self) -> bool:
        return self._buf is not None

    @property
    def dirty(self) -> bool:
        return self._dirty

    def _entries(self) -> bytearray:
        """The loaded entries: the segment loads (or resets) an index before it uses it."""
        buf = self._buf
        assert buf is not None, f"{self.path.name} is used before it is loaded"
        return buf

    def __len__(self) -> int:
        return len(self._entries()) // self.ENTRY.size

    def load(self, max_position: int) -> None:
        """Read and check the file (FileNotFoundError and IndexCorrupt propagate)."""
        data = bytearray(self.path.read_bytes())
        size = self.ENTRY.size
        valid = self._valid_prefix(data, len(data) // size, max_position)
        tail = bytes(data[valid * size:])
        if tail.count(0) != len(tail):
            raise IndexCorrupt(f"{self.path.name}: entry {valid} breaks the index order")
        if tail:
            del data[valid * size:]
            with self._lock:
                os.truncate(self.path, len(data))
        self._buf = data

    def reset(self, raw: bytes | bytearray = b"") -> None:
        """Replace the whole file (new segment, or an index rebuilt from the log)."""
        with self._writing() as fd:
            os.ftruncate(fd, 0)
            self._buf = bytearray()
            self._dirty = True
            if raw:
                self._write(fd, raw)

    def extend(self, raw: bytes | bytearray) -> None:
        """Append entries; if the write fails the file is cut back (best effort) and the
        in-memory entries stay as they were."""
        if raw:
            with self._writing() as fd:
                self._write(fd, raw)

    def entry(self, i: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._entries(), i * self.ENTRY.size)

    def last_entry(self) -> tuple[int, int] | None:
        n = len(self)
        return self.entry(n - 1) if n else None

    def is_full(self, max_bytes: int) -> bool:
        return len(self._entries()) + self.ENTRY.size > max_bytes

    def truncate_before_offset(self, rel_offset: int) -> None:
        """Drop entries whose relative offset is >= rel_offset."""
        keep = self._count_below(rel_offset)
        if keep < len(self):
            self.truncate_entries(keep)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries."""
        with self._writing() as fd:
            os.ftruncate(fd, count * self.ENTRY.size)
            del self._entries()[count * self.ENTRY.size:]
            self._dirty = True

    def flush(self) -> None:
        """fsync what was written since the last flush (through a short-lived descriptor
        when no writer is kept). A missing file has nothing to sync; the segment rebuilds it."""
        with self._lock:
            if not self._dirty:
                return
            fd = self._fd
            if fd is None:
                try:
                    fd = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    self._dirty = False
                    return
            try:
                datasync(fd)
            finally:
                if fd != self._fd:
                    os.close(fd)
            self._dirty = False

    def close(self) -> None:
        """Close the writer; the in-memory entries stay usable for lookups."""
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    def delete(self) -> None:
        with self._lock:
            self.close()
            self.path.unlink(missing_ok=True)

    # -------------------------------------------------------------- internals

    @contextmanager
    def _writing(self) -> Iterator[int]:
        """A descriptor to write through, under the lock: the kept writer, or one opened for
        this call alone (closed on the way out) when the index is not the active one's."""
        with self._lock:
            fd = self._fd
            if fd is None:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                if self.keep_open:
                    self._fd = fd
            try:
                yield fd
            finally:
                if fd != self._fd:
                    os.close(fd)

    def _write(self, fd: int, raw: bytes | bytearray) -> None:
        buf = self._entries()
        try:
            write_all(fd, raw)
        except OSError:
            try:
                os.ftruncate(fd, len(buf))   # no partial entry left behind
            except OSError:
                pass   # a torn tail fails load's check and the index is rebuilt
            raise
        buf += raw
        self._dirty = True

    def _valid_prefix(self, data: bytearray, n: int, max_position: int) -> int:
        raise NotImplementedError

    def _count_below(self, rel_offset: int) -> int:
        raise NotImplementedError


class OffsetIndex(_SparseIndex):
    ENTRY = struct.Struct(">ii")
    SUFFIX = ".index"

    def lookup(self, rel_offset: int) -> tuple[int, int] | None:
        """The entry with the largest relative offset <= rel_offset, or None."""
        buf = self._entries()
        i = bisect.bisect_right(range(len(buf) // 8), rel_offset,
                                key=lambda j: _I32.unpack_from(buf, j * 8)[0])
        return self.entry(i - 1) if i else None

    def _count_below(self, rel_offset: int) -> int:
        buf = self._entries()
        return bisect.bisect_left(range(len(buf) // 8), rel_offset,
                                  key=lambda j: _I32.unpack_from(buf, j * 8)[0])

    def _valid_prefix(self, data: bytearray, n: int, max_position: int) -> int:
        prev_rel = prev_pos = -1
        for i, (rel, pos) in enumerate(self.ENTRY.iter_unpack(memoryview(data)[:n * 8])):
            if rel <= prev_rel or pos <= prev_pos or pos >= max_position:
                return i
            prev_rel, prev_pos = rel, pos
        return n


class TimeIndex(_SparseIndex):
    ENTRY = struct.Struct(">qi")
    SUFFIX = ".timeindex"

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """The entry with the largest timestamp strictly below `timestamp`, or None.

        Every batch up to and including that entry's batch has max timestamp < `timestamp`,
        so a search for the first batch at or after `timestamp` may start there.
        """
        buf = self._entries()
        i = bisect.bisect_left(range(len(buf) // 12), timestamp,
                               key=lambda j: _I64.unpack_from(buf, j * 12)[0])
        return self.entry(i - 1) if i else None

    def _count_below(self, rel_offset: int) -> int:
        buf = self._entries()
        return bisect.bisect_left(range(len(buf) // 12), rel_offset,
                                  key=lambda j: _I32.unpack_from(buf, j * 12 + 8)[0])

    def _valid_prefix(self, data: bytearray, n: int, max_position: int) -> int:
        prev_ts = prev_rel = -1
        for i, (ts, rel) in enumerate(self.ENTRY.iter_unpack(memoryview(data)[:n * 12])):
            if ts <= prev_ts or rel < prev_rel:
                return i
            prev_ts, prev_rel = ts, rel
        return n


def datasync(fd: int) -> None:
    """fdatasync where the platform has it (Linux), fsync elsewhere."""
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view.nbytes:
        view = view[os.write(fd, view):]
