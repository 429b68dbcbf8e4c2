"""Kafka's aborted-transaction index: one `.txnindex` file per segment.

Theory of operation
-------------------
An entry (`AbortedTxn`) names one aborted transaction of one producer: the offset of its first
record, the offset of its abort marker (the control batch; `last_offset`) and the partition's
last stable offset when the marker was written. An entry lives in the index of the segment
that holds its marker, so the entries of a segment run in marker order and the entries of a
log in segment order. A read_committed fetch of [fetch_offset, upper_bound) needs every
transaction that overlaps it: last_offset >= fetch_offset and first_offset < upper_bound. A
transaction may start many segments before its marker, so the search walks forward from the
fetch's segment and stops only at an entry whose last stable offset is >= upper_bound: that
marker was written after every transaction with records below upper_bound had completed, so
no later marker can concern the range (Kafka's TxnIndexSearchResult.isComplete).

File format: Kafka's, so Kafka's tools read ours and we read theirs. Entries of 34 bytes,
big-endian, back to back, no header, nothing preallocated: int16 version (0), int64
producerId, int64 firstOffset, int64 lastOffset, int64 lastStableOffset.

Costs. Most segments of most topics never see an abort: their index has no file and no
descriptor, and `may_have_entries` says so without I/O. The file is created by the first
entry. Entries are few, so a segment's are read whole on first use and kept in memory as
tuples; a fetch never reads the file. No descriptor is kept: each write or fsync opens the
file for the moment (aborts are rare), so a segment still costs one descriptor, its `.log`.

Idempotent append. An entry whose last_offset is not past the last one already there is
ignored (Kafka raises instead). The index is derived data: after a crash the partition layer
replays batch headers from a producer snapshot and re-appends an entry for every abort
marker it meets (see Log.txn_index_complete_below). That snapshot may lie below the first
segment recovery discarded, so the replay meets markers whose entries are already there;
since entries arrive in marker order, "not past the last one" means "already recorded", and
ignoring it keeps the replay from duplicating or reordering entries.

Damage. A crash can leave a torn last entry, and a filesystem a zero-filled tail. `load`
keeps the longest valid prefix (version 0, last offsets increasing and inside the segment,
first <= last, not all zeros), cuts the file there and logs a warning. The file size is
checked before anything is read: a segment cannot hold more markers than batch headers fit
in its `.log`, so only that many entries are read and the rest is cut as well.

Threads. File operations hold the lock the segment passes in (a flush thread fsyncs while
the event loop reads); lookups take no lock.
"""
from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from .index import datasync, write_all

log = logging.getLogger(__name__)

SUFFIX = ".txnindex"
VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size   # 34
_ZERO_ENTRY = bytes(ENTRY_SIZE)


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int           # the abort marker's offset
    last_stable_offset: int    # the partition's LSO when the marker was written

    def pack(self) -> bytes:
        return ENTRY.pack(VERSION, *self)


class TxnSearchResult(NamedTuple):
    aborted: list[AbortedTxn]
    complete: bool             # later segments need not be searched


def _last_offset(txn: AbortedTxn) -> int:
    return txn.last_offset


class TransactionIndex:
    """The aborted transactions whose markers lie in one segment (see the module docstring).

    `max_entries()` bounds what `load` reads (the segment's `.log` size / batch header size).
    `file_exists` says whether the file was there when the segment was opened (the
    directory scan knows), so a segment without one is never looked up on disk.
    """

    def __init__(self, path: Path, base_offset: int, *, file_exists: bool,
                 max_entries: Callable[[], int], lock: "threading.RLock | None" = None):
        self.path = path
        self.base_offset = base_offset
        self._max_entries = max_entries
        self._lock = lock if lock is not None else threading.RLock()
        self._file = file_exists
        # None until loaded; a segment without a file has nothing to load.
        self._txns: list[AbortedTxn] | None = None if file_exists else []
        self._max_lso: list[int] = []   # running max of last_stable_offset, for collect
        self._dirty = False             # written since the last fsync

    # ----------------------------------------------------------------- state

    @property
    def has_file(self) -> bool:
        return self._file

    @property
    def may_have_entries(self) -> bool:
        """False only when the index certainly has no entry (no I/O)."""
        return bool(self._txns) if self._txns is not None else self._file

    @property
    def dirty(self) -> bool:
        return self._dirty

    def entries(self) -> list[AbortedTxn]:
        """A copy of every entry, in marker order."""
        return list(self._loaded())

    # ----------------------------------------------------------------- reads

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnSearchResult:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search
        is complete, exactly as Kafka's collectAbortedTxns scanning from the first entry.

        Entries before the first with last_offset >= fetch_offset cannot overlap; the only
        thing Kafka's scan could learn from them is completeness, which the running maximum
        of their last stable offsets answers without visiting them."""
        txns = self._loaded()
        start = bisect.bisect_left(txns, fetch_offset, key=_last_offset)
        if start and self._max_lso[start - 1] >= upper_bound_offset:
            return TxnSearchResult([], True)
        found = []
        for txn in txns[start:]:
            if txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnSearchResult(found, True)
        return TxnSearchResult(found, False)

    # ---------------------------------------------------------------- writes

    def append(self, txn: AbortedTxn) -> bool:
        """Add `txn` unless its last_offset is not past the last entry's (then it is already
        recorded; see Idempotent append). Returns whether it was added. On OSError the file
        is cut back (best effort) and the entries stay as they were."""
        txns = self._loaded()
        if txns and txn.last_offset <= txns[-1].last_offset:
            return False
        if txn.last_offset < self.base_offset or txn.first_offset > txn.last_offset:
            raise ValueError(f"{self.path.name}: {txn} does not belong to this segment")
        raw = txn.pack()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._file = True
            try:
                try:
                    write_all(fd, raw)
                except OSError:
                    _cut_quietly(fd, len(txns) * ENTRY_SIZE)
                    raise
            finally:
                os.close(fd)
            self._push(txns, txn)
            self._dirty = True
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset`."""
        txns = self._loaded()
        keep = bisect.bisect_left(txns, offset, key=_last_offset)
        if keep == len(txns):
            return
        with self._lock:
            os.truncate(self.path, keep * ENTRY_SIZE)
            del txns[keep:]
            del self._max_lso[keep:]
            self._dirty = True

    def discard(self) -> None:
        """Forget every entry and remove the file (recovery: the partition re-derives them)."""
        self.delete()

    def flush(self) -> None:
        """fsync what was written or cut since the last flush."""
        with self._lock:
            if not self._dirty:
                return
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._dirty = False
                return
            try:
                datasync(fd)
            finally:
                os.close(fd)
            self._dirty = False

    def close(self) -> None:
        """Nothing to release: no descriptor is kept. The entries stay readable."""

    def delete(self) -> None:
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._file = False
            self._txns = []
            self._max_lso = []
            self._dirty = False

    # ------------------------------------------------------------------ load

    def _loaded(self) -> list[AbortedTxn]:
        txns = self._txns
        if txns is None:
            txns = self._txns = self._load()
        return txns

    def _load(self) -> list[AbortedTxn]:
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._file = False
                return []
            try:
                size = os.fstat(fd).st_size
                allowed = max(0, self._max_entries()) * ENTRY_SIZE
                data = os.pread(fd, min(size, allowed), 0) if size else b""
            finally:
                os.close(fd)
            txns = _valid_prefix(data, self.base_offset)
            keep = len(txns) * ENTRY_SIZE
            if keep != size:
                log.warning("%s: %d of %d bytes are not whole valid entries; cutting them off",
                            self.path, size - keep, size)
                os.truncate(self.path, keep)
                self._dirty = True
        self._max_lso = []
        out: list[AbortedTxn] = []
        for txn in txns:
            self._push(out, txn)
        return out

    def _push(self, txns: list[AbortedTxn], txn: AbortedTxn) -> None:
        top = self._max_lso[-1] if self._max_lso else txn.last_stable_offset
        self._max_lso.append(max(top, txn.last_stable_offset))
        txns.append(txn)


def _valid_prefix(data: bytes, base_offset: int) -> list[AbortedTxn]:
    """The entries before the first torn, zeroed or out-of-order one."""
    out: list[AbortedTxn] = []
    prev = -1
    whole = len(data) - len(data) % ENTRY_SIZE
    for i, (version, pid, first, last, lso) in enumerate(ENTRY.iter_unpack(data[:whole])):
        pos = i * ENTRY_SIZE
        if (version != VERSION or last < base_offset or last <= prev or first > last
                or data[pos:pos + ENTRY_SIZE] == _ZERO_ENTRY):
            break
        out.append(AbortedTxn(pid, first, last, lso))
        prev = last
    return out


def write_index_file(path: Path, txns: Iterable[AbortedTxn]) -> None:
    """Write `txns` (in marker order) as a complete, fsynced index file (cleaner swaps)."""
    raw = b"".join(t.pack() for t in txns)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, raw)
        datasync(fd)
    finally:
        os.close(fd)


def collect_across(indexes: Iterable[TransactionIndex], fetch_offset: int,
                   upper_bound_offset: int) -> list[AbortedTxn]:
    """Search consecutive segments' indexes in order until one says the search is complete
    (Kafka's LocalLog.collectAbortedTransactions)."""
    out: list[AbortedTxn] = []
    for index in indexes:
        found, complete = index.collect(fetch_offset, upper_bound_offset)
        out += found
        if complete:
            break
    return out


def _cut_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)   # no partial entry left behind
    except OSError:
        pass   # a torn tail is cut by the next load
