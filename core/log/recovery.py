"""Opening a partition directory: find the segments, clear crash leftovers, recover.

After a clean shutdown (the marker file is there) only the active segment's tail framing is
checked. Otherwise every segment from the one holding the recovery point to the end is read
in full with CRC checks and cut at the first torn, corrupt or out-of-order batch; if that
happens before the last segment, the later segments go too, because nothing after a hole
can be trusted to follow on (Kafka's LogLoader does the same).

The aborted-transaction index (`.txnindex`) of every segment recovery re-reads or rebuilds
is discarded: entries written after the last fsync may be missing or torn, and only the
partition layer, which owns the producer state, can re-derive them (Kafka's
LogSegment.recover rebuilds it from the producer state it replays).
`Loaded.txn_discarded_from` tells the Log where that starts (Log.txn_index_complete_below).
"""
from __future__ import annotations

import bisect
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from core.protocol.records import HEADER_SIZE, read_batch_header

from .checkpoint import (CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE,
                         TMP_SUFFIX, fsync_dir, read_offset)
from .segment import Segment, file_stem
from .txn_index import SUFFIX as TXN_INDEX_SUFFIX

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CLEANER_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)\.(cleaned|swap)$")

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")


@dataclass
class Loaded:
    segments: list[Segment]
    clean: bool                    # the clean-shutdown marker was present
    truncated_bytes: int           # what recovery cut off
    stored_log_start: int | None   # from the log-start-offset file
    created: bool                  # the directory held no segment; one was made
    txn_discarded_from: int | None = None   # base of the first segment whose txn index went


def load(directory: Path, index_interval: int, now: int, recover: bool) -> Loaded:
    directory.mkdir(parents=True, exist_ok=True)
    clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
    stored_start = read_offset(directory / LOG_START_OFFSET_FILE)
    scan = scan_directory(directory)
    segs = [Segment.open(directory, base, index_interval, txn_file=base in scan.txn_indexes)
            for base in scan.bases]
    created = not segs
    if created:
        segs = [Segment.create(directory, stored_start or 0, index_interval, now)]
    truncated = 0
    discarded_from: int | None = None
    if clean or not recover:
        if not segs[-1].load_state():
            segs[-1].txn_index.discard()
            discarded_from = segs[-1].base_offset
            truncated += segs[-1].rebuild(verify_crc=True)
    else:
        recovery_point = read_offset(directory / RECOVERY_POINT_FILE)
        first = 0 if recovery_point is None else max(
            0, bisect.bisect_right([s.base_offset for s in segs], recovery_point) - 1)
        discarded_from = segs[first].base_offset
        for i in range(first, len(segs)):
            segs[i].txn_index.discard()   # first, so the rebuild's cut has nothing to read
            cut = segs[i].rebuild(verify_crc=True)
            truncated += cut
            if cut and i < len(segs) - 1:
                for seg in segs[i + 1:]:
                    truncated += seg.size
                    seg.delete()
                del segs[i + 1:]
                break
    if truncated:
        log.warning("%s: recovery cut %d bytes of torn or corrupt data", directory, truncated)
    return Loaded(segs, clean, truncated, stored_start, created, discarded_from)


class Scan(NamedTuple):
    bases: list[int]          # of the segments present, ascending
    txn_indexes: set[int]     # bases of those that have a .txnindex file


def scan_directory(directory: Path) -> Scan:
    """The segments present, after clearing what a crash can leave behind."""
    finish_cleaner_swaps(directory)
    logs: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        name = path.name
        if name.endswith(".deleted") or name in (LOG_START_OFFSET_FILE + TMP_SUFFIX,
                                                 RECOVERY_POINT_FILE + TMP_SUFFIX,
                                                 CLEANER_CHECKPOINT_FILE + TMP_SUFFIX):
            path.unlink(missing_ok=True)
            continue
        m = _SEGMENT_FILE.match(name)
        if m is None:
            continue   # other modules' files (leader epochs, partition metadata) stay
        if m[2] == "log":
            logs.add(int(m[1]))
        else:
            indexes.append((int(m[1]), path))
    txn_indexes: set[int] = set()
    for base, path in indexes:
        if base not in logs:   # a segment's .log is deleted first; we crashed before the rest
            path.unlink(missing_ok=True)
        elif path.suffix == TXN_INDEX_SUFFIX:
            txn_indexes.add(base)
    return Scan(sorted(logs), txn_indexes)


def finish_cleaner_swaps(directory: Path) -> None:
    """Complete or discard what a crash left of a cleaner swap (cleaner.py), as Kafka's
    LogLoader does: `.cleaned` files were never part of the log and go; a `<base>.log.swap`
    is a fsynced cleaned segment whose swap was decided, so every segment whose base offset
    lies in [base, the swap's next offset) is deleted and the swap renamed into place.
    A `.index.swap`/`.timeindex.swap` is installed with its log; if one is missing, the
    segment's index file is deleted (it may belong to the replaced segment) and rebuilt on
    load. Index swaps without a log swap are leftovers of an unfinished rename and go.

    The `.txnindex` cannot be rebuilt from the log, and needs no rebuild: a cleaned segment
    carries every entry of the segments it replaces but those whose marker it removed, and
    its `.txnindex` goes through the swap whenever it has entries or the first replaced
    segment had some (Log.replace_segments). So a missing `.txnindex.swap` means either that
    neither had any, and then `<base>.txnindex`, if any, is the first replaced segment's and
    empty, or that it was already renamed into place. Either way `<base>.txnindex` is right
    as it is."""
    found: dict[tuple[int, str, str], Path] = {}
    for path in directory.iterdir():
        m = _CLEANER_FILE.match(path.name)
        if m is not None:
            found[(int(m[1]), m[2], m[3])] = path
    if not found:
        return
    for (base, kind, state), path in found.items():
        if state == "cleaned":
            path.unlink(missing_ok=True)
    swaps = sorted(base for (base, kind, state) in found if kind == "log" and state == "swap")
    for (base, kind, state), path in found.items():
        if state == "swap" and kind != "log" and base not in swaps:
            path.unlink(missing_ok=True)
    for base in swaps:
        swap_log = directory / f"{file_stem(base)}.log.swap"
        end = _next_offset_of(swap_log, base)
        for path in directory.iterdir():
            m = _SEGMENT_FILE.match(path.name)
            if m is None:
                continue
            b = int(m[1])
            if b == base and m[2] not in ("log", "txnindex"):
                if (base, m[2], "swap") not in found:
                    path.unlink(missing_ok=True)   # may describe the replaced segment
            elif base < b < end:
                path.unlink(missing_ok=True)
        log.warning("%s: completing an interrupted cleaner swap at offset %d", directory, base)
        # The log last: its rename marks the swap done.
        for kind in ("index", "timeindex", "txnindex", "log"):
            swap = directory / f"{file_stem(base)}.{kind}.swap"
            if swap.exists():
                swap.replace(directory / f"{file_stem(base)}.{kind}")
    fsync_dir(directory)


def _next_offset_of(path: Path, base: int) -> int:
    """The offset after the last whole batch of a segment file (headers only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos, nxt = 0, base
        while size - pos >= HEADER_SIZE:
            info = read_batch_header(os.pread(fd, HEADER_SIZE, pos))
            if info.size < HEADER_SIZE or pos + info.size > size:
                break
            nxt = info.base_offset + info.last_offset_delta + 1
            pos += info.size
        return nxt
    finally:
        os.close(fd)
