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
with `bisect` through a key function, so there are no per-entry Python objects.
"""
from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path


class IndexCorrupt(Exception):
    """An index file that cannot be trusted; rebuild it from the log."""


_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _SparseIndex:
    ENTRY: struct.Struct
    SUFFIX: str

    def __init__(self, log_path: Path):
        self.path = log_path.with_suffix(self.SUFFIX)
        self._buf: bytearray | None = None   # None until loaded: closed segments load lazily
        self._fd: int | None = None          # opened on first write
        self._dirty = False

    # ----------------------------------------------------------------- state

    @property
    def loaded(self) -> bool:
        return self._buf is not None

    def __len__(self) -> int:
        return len(self._buf) // self.ENTRY.size

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
            os.truncate(self.path, len(data))
        self._buf = data

    def reset(self, raw: bytes | bytearray = b"") -> None:
        """Replace the whole file (new segment, or an index rebuilt from the log)."""
        fd = self._writer()
        os.ftruncate(fd, 0)
        if raw:
            write_all(fd, raw)
        self._buf = bytearray(raw)
        self._dirty = True

    def extend(self, raw: bytes | bytearray) -> None:
        if raw:
            write_all(self._writer(), raw)
            self._buf += raw
            self._dirty = True

    def entry(self, i: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._buf, i * self.ENTRY.size)

    def last_entry(self) -> tuple[int, int] | None:
        n = len(self)
        return self.entry(n - 1) if n else None

    def is_full(self, max_bytes: int) -> bool:
        return len(self._buf) + self.ENTRY.size > max_bytes

    def truncate_before_offset(self, rel_offset: int) -> None:
        """Drop entries whose relative offset is >= rel_offset."""
        keep = self._count_below(rel_offset)
        if keep < len(self):
            del self._buf[keep * self.ENTRY.size:]
            os.ftruncate(self._writer(), len(self._buf))
            self._dirty = True

    def flush(self) -> None:
        if self._dirty and self._fd is not None:
            datasync(self._fd)
        self._dirty = False

    def close(self) -> None:
        """Close the writer; the in-memory entries stay usable for lookups."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    # -------------------------------------------------------------- internals

    def _writer(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _valid_prefix(self, data: bytearray, n: int, max_position: int) -> int:
        raise NotImplementedError

    def _count_below(self, rel_offset: int) -> int:
        raise NotImplementedError


class OffsetIndex(_SparseIndex):
    ENTRY = struct.Struct(">ii")
    SUFFIX = ".index"

    def lookup(self, rel_offset: int) -> tuple[int, int] | None:
        """The entry with the largest relative offset <= rel_offset, or None."""
        buf = self._buf
        i = bisect.bisect_right(range(len(buf) // 8), rel_offset,
                                key=lambda j: _I32.unpack_from(buf, j * 8)[0])
        return self.entry(i - 1) if i else None

    def _count_below(self, rel_offset: int) -> int:
        buf = self._buf
        return bisect.bisect_left(range(len(buf) // 8), rel_offset,
                                  key=lambda j: _I32.unpack_from(buf, j * 8)[0])

    def _valid_prefix(self, data, n, max_position):
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
        buf = self._buf
        i = bisect.bisect_left(range(len(buf) // 12), timestamp,
                               key=lambda j: _I64.unpack_from(buf, j * 12)[0])
        return self.entry(i - 1) if i else None

    def _count_below(self, rel_offset: int) -> int:
        buf = self._buf
        return bisect.bisect_left(range(len(buf) // 12), rel_offset,
                                  key=lambda j: _I32.unpack_from(buf, j * 12 + 8)[0])

    def _valid_prefix(self, data, n, max_position):
        prev_ts = prev_rel = -1
        for i, (ts, rel) in enumerate(self.ENTRY.iter_unpack(memoryview(data)[:n * 12])):
            if ts <= prev_ts or rel < prev_rel:
                return i
            prev_ts, prev_rel = ts, rel
        return n


def datasync(fd: int) -> None:
    """fdatasync where the platform has it (Linux), fsync elsewhere."""
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view.nbytes:
        view = view[os.write(fd, view):]
