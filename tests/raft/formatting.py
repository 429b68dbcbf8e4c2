"""Compact, stable text for Raft messages and entries, for traces and interaction scripts."""
from __future__ import annotations

import dataclasses
import enum

from core.raft.entries import Entry, OffsetAndEpoch, SnapshotId
from core.raft.messages import LeaderIdAndEpoch

# Fields that are the same in every request of a run; printing them would only add noise.
QUIET_FIELDS = {"cluster_id", "max_wait_ms", "max_bytes", "min_bytes", "partition_max_bytes",
                "replica_epoch"}


def format_value(value) -> str:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Entry):
        return f"{value.offset}@{value.epoch}" + ("*" if value.control else
                                                  f":{value.payload.decode(errors='replace')}")
    if isinstance(value, LeaderIdAndEpoch):
        return f"{value.leader_id}@{value.leader_epoch}"
    if isinstance(value, (SnapshotId, OffsetAndEpoch)):
        return f"{value[0]}@{value[1]}"
    if isinstance(value, tuple):
        return "[" + " ".join(format_value(v) for v in value) + "]"
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value))
    if dataclasses.is_dataclass(value):
        return format_message(value)
    return str(value)


def format_message(data, expected_cluster_id: str | None = None) -> str:
    """A message with only the fields that differ from their defaults. The cluster id shows
    only when it is not the expected one."""
    parts = []
    for f in dataclasses.fields(data):
        value = getattr(data, f.name)
        if f.name == "cluster_id":
            if value == expected_cluster_id:
                continue
        elif f.name in QUIET_FIELDS or (f.name == "log_start_offset" and value == 0):
            continue
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        parts.append(f"{f.name}={format_value(value)}")
    return f"{type(data).__name__}({', '.join(parts)})"


def format_entries(entries) -> str:
    return " ".join(format_value(e) for e in entries)
