"""Per-log configuration, named and bounded like Kafka's topic configs."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# Kafka topic config name -> (field, lowest allowed value, highest allowed value).
# The bounds are Kafka's own validators (LogConfig.java); INT configs are 32-bit there.
_NUMERIC: dict[str, tuple[str, int, int]] = {
    "segment.bytes": ("segment_bytes", 14, INT32_MAX),
    "segment.ms": ("segment_ms", 1, INT64_MAX),
    "retention.bytes": ("retention_bytes", INT64_MIN, INT64_MAX),
    "retention.ms": ("retention_ms", -1, INT64_MAX),
    "flush.messages": ("flush_messages", 1, INT64_MAX),
    "flush.ms": ("flush_ms", 0, INT64_MAX),
    "index.interval.bytes": ("index_interval_bytes", 0, INT32_MAX),
    "segment.index.bytes": ("segment_index_bytes", 4, INT32_MAX),
    "file.delete.delay.ms": ("file_delete_delay_ms", 0, INT64_MAX),
    "delete.retention.ms": ("delete_retention_ms", 0, INT64_MAX),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0, INT64_MAX),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", 1, INT64_MAX),
}


@dataclass
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1          # < 0: unlimited
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: unlimited
    flush_messages: int = INT64_MAX    # Kafka's default: never fsync by count
    flush_ms: int = INT64_MAX          # ... nor by age
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    message_timestamp_type: str = "CreateTime"
    # Kafka's cleanup.policy. Without "delete", retention.ms and retention.bytes delete
    # nothing (only DeleteRecords moves the log start). With "compact", cleaner.py keeps
    # the last record of every key. Empty: neither.
    cleanup_policy: tuple[str, ...] = ("delete",)
    # Compaction (cleaner.py), Kafka's names and defaults.
    delete_retention_ms: int = 24 * 3600 * 1000   # how long tombstones stay readable
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    # Kept for config compatibility; segments are unlinked at once because no reader holds
    # a segment's descriptor across calls (see Log.delete_records).
    file_delete_delay_ms: int = 60000

    @classmethod
    def from_properties(cls, props: dict[str, str], base: "LogConfig | None" = None) -> "LogConfig":
        """Overlay Kafka topic properties on `base` (defaults if None).

        Keys this module does not own (min.insync.replicas, ...) are ignored so callers can
        pass a topic's whole config. A bad value raises ValueError naming the key.
        """
        changes: dict[str, Any] = {}   # field -> value: dataclasses.replace's keywords
        for key, raw in props.items():
            if key in _NUMERIC:
                name, low, high = _NUMERIC[key]
                changes[name] = _parse_int(key, raw, low, high)
            elif key == "message.timestamp.type":
                value = str(raw).strip()
                if value not in TIMESTAMP_TYPES:
                    raise ValueError(f"Invalid value {raw!r} for configuration {key}: "
                                     f"must be one of {', '.join(TIMESTAMP_TYPES)}")
                changes["message_timestamp_type"] = value
            elif key == "min.cleanable.dirty.ratio":
                changes["min_cleanable_dirty_ratio"] = _parse_ratio(key, raw)
            elif key == "cleanup.policy":
                changes["cleanup_policy"] = _parse_cleanup_policy(key, raw)
        return dataclasses.replace(base or cls(), **changes)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact_enabled(self) -> bool:
        """cleanup.policy holds "compact": the cleaner may rewrite closed segments."""
        return "compact" in self.cleanup_policy

    @property
    def delete_enabled(self) -> bool:
        """cleanup.policy holds "delete": retention.ms and retention.bytes apply."""
        return "delete" in self.cleanup_policy


def _parse_cleanup_policy(key: str, raw: object) -> tuple[str, ...]:
    """Kafka's LIST syntax: comma-separated, blanks around items ignored; each item one of
    CLEANUP_POLICIES (repeats collapse). An empty value is an empty list, as in Kafka."""
    if isinstance(raw, (list, tuple)):
        items = [str(x).strip() for x in raw]
    else:
        text = str(raw).strip()
        items = [x.strip() for x in text.split(",")] if text else []
    policy: list[str] = []
    for item in items:
        if item not in CLEANUP_POLICIES:
            raise ValueError(f"Invalid value {raw!r} for configuration {key}: "
                             f"each item must be one of {', '.join(CLEANUP_POLICIES)}")
        if item not in policy:
            policy.append(item)
    return tuple(policy)


def _parse_ratio(key: str, raw: object) -> float:
    """Kafka's DOUBLE in [0, 1]."""
    if isinstance(raw, bool):
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: not a number")
    try:
        value = float(str(raw).strip()) if not isinstance(raw, (int, float)) else float(raw)
    except ValueError:
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: "
                         f"must be between 0 and 1")
    return value


def _parse_int(key: str, raw: object, low: int, high: int) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: not a number")
    if isinstance(raw, int):
        value = raw
    else:
        try:
            value = int(str(raw).strip(), 10)
        except ValueError:
            raise ValueError(f"Invalid value {raw!r} for configuration {key}: not an integer") from None
    if not low <= value <= high:
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: "
                         f"must be between {low} and {high}")
    return value
