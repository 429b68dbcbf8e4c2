"""Which of the oldest segments retention condemns (Kafka's deleteOldSegments)."""
from __future__ import annotations

from typing import Sequence

from .config import LogConfig
from .segment import Segment


def condemned(segs: Sequence[Segment], config: LogConfig, now: int, limit: int,
              log_start: int) -> int:
    """How many segments, oldest first, to delete.

    Only a prefix can go, and never the active (last) segment or one holding an offset at
    or above `limit` (the high watermark). retention.ms is checked first, then
    retention.bytes on what is left, then segments wholly below the log start; as in Kafka,
    the first segment a rule spares stops that rule. The first two apply only when
    cleanup.policy holds "delete" (Kafka's deleteOldSegments); the log start always does.
    """
    def deletable(i: int) -> bool:
        return i < len(segs) - 1 and segs[i + 1].base_offset <= limit

    n = 0
    delete = config.delete_enabled
    if delete and config.retention_ms >= 0:
        cutoff = now - config.retention_ms
        while deletable(n) and largest_timestamp(segs[n]) < cutoff:
            n += 1
    if delete and config.retention_bytes >= 0:
        excess = sum(s.size for s in segs[n:]) - config.retention_bytes
        while deletable(n) and excess - segs[n].size >= 0:
            excess -= segs[n].size
            n += 1
    while deletable(n) and segs[n + 1].base_offset <= log_start:
        n += 1
    return n


def largest_timestamp(seg: Segment) -> int:
    """The segment's largest batch timestamp, or its file's mtime if it has none (Kafka)."""
    ts = seg.max_timestamp
    return ts if ts >= 0 else seg.last_modified_ms()
