"""Opening a partition directory: find the segments, clear crash leftovers, recover.

After a clean shutdown (the marker file is there) only the active segment's tail framing is
checked. Otherwise every segment from the one holding the recovery point to the end is read
in full with CRC checks and cut at the first torn, corrupt or out-of-order batch; if that
happens before the last segment, the later segments go too, because nothing after a hole
can be trusted to follow on (Kafka's LogLoader does the same).
"""
from __future__ import annotations

import bisect
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import (CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE,
                         TMP_SUFFIX, read_offset)
from .segment import Segment

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


@dataclass
class Loaded:
    segments: list[Segment]
    clean: bool                    # the clean-shutdown marker was present
    truncated_bytes: int           # what recovery cut off
    stored_log_start: int | None   # from the log-start-offset file
    created: bool                  # the directory held no segment; one was made


def load(directory: Path, index_interval: int, now: int, recover: bool) -> Loaded:
    directory.mkdir(parents=True, exist_ok=True)
    clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
    stored_start = read_offset(directory / LOG_START_OFFSET_FILE)
    segs = [Segment.open(directory, base, index_interval) for base in scan_directory(directory)]
    created = not segs
    if created:
        segs = [Segment.create(directory, stored_start or 0, index_interval, now)]
    truncated = 0
    if clean or not recover:
        if not segs[-1].load_state():
            truncated += segs[-1].rebuild(verify_crc=True)
    else:
        recovery_point = read_offset(directory / RECOVERY_POINT_FILE)
        first = 0 if recovery_point is None else max(
            0, bisect.bisect_right([s.base_offset for s in segs], recovery_point) - 1)
        for i in range(first, len(segs)):
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
    return Loaded(segs, clean, truncated, stored_start, created)


def scan_directory(directory: Path) -> list[int]:
    """Base offsets of the segments present, after clearing what a crash can leave behind."""
    logs: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        name = path.name
        if name.endswith(".deleted") or name in (LOG_START_OFFSET_FILE + TMP_SUFFIX,
                                                 RECOVERY_POINT_FILE + TMP_SUFFIX):
            path.unlink(missing_ok=True)
            continue
        m = _SEGMENT_FILE.match(name)
        if m is None:
            continue   # other modules' files (leader epochs, partition metadata) stay
        if m[2] == "log":
            logs.add(int(m[1]))
        else:
            indexes.append((int(m[1]), path))
    for base, path in indexes:
        if base not in logs:   # a segment's .log is deleted first; we crashed before the rest
            path.unlink(missing_ok=True)
    return sorted(logs)
