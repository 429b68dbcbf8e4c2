"""Planning `seaway groups reset-offsets`: pure functions, no I/O.

The command gathers what the cluster knows (committed offsets, log start and end offsets,
offsets for a timestamp) and `plan_reset` turns one reset strategy into a new offset per
partition, with kafka-consumer-groups' rules:

  --to-earliest     the log start offset
  --to-latest       the log end offset
  --to-offset N     N, clamped to [log start, log end]
  --shift-by N      committed + N, clamped; a partition without a committed offset is an error
  --to-datetime T   the first offset whose timestamp is >= T; the log end where there is none
  --by-duration D   as --to-datetime with T = now - D

Every parse error is a ValueError whose message names the flag, ready for a one-line error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping, Sequence

TopicPartition = tuple[str, int]

STRATEGIES = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime", "by_duration")
FLAG = {s: "--" + s.replace("_", "-") for s in STRATEGIES}


@dataclass(frozen=True)
class ResetSpec:
    kind: str          # "earliest" | "latest" | "offset" | "shift" | "timestamp"
    value: int = 0     # the offset, the shift, or the timestamp in ms

    @property
    def needs_timestamps(self) -> bool:
        return self.kind == "timestamp"


@dataclass
class ResetPlan:
    offsets: dict[TopicPartition, int]
    notes: list[str] = field(default_factory=list)   # clamping and fallbacks, as Kafka warns


def parse_reset_spec(options: Mapping[str, str | bool | None], now_ms: int) -> ResetSpec:
    """`options` maps STRATEGIES to the raw flag values (True for the bare flags, None when
    absent). Exactly one must be given."""
    given = [s for s in STRATEGIES if options.get(s) not in (None, False)]
    if len(given) != 1:
        flags = ", ".join(FLAG[s] for s in STRATEGIES)
        if not given:
            raise ValueError(f"reset-offsets: give one of {flags}")
        raise ValueError(f"reset-offsets: give only one of {flags} (got {', '.join(FLAG[s] for s in given)})")
    which = given[0]
    raw = options[which]
    if which == "to_earliest":
        return ResetSpec("earliest")
    if which == "to_latest":
        return ResetSpec("latest")
    if which == "to_offset":
        offset = _int(raw, FLAG[which])
        if offset < 0:
            raise ValueError(f"{FLAG[which]}: {raw!r} is not an offset (it must be 0 or more)")
        return ResetSpec("offset", offset)
    if which == "shift_by":
        return ResetSpec("shift", _int(raw, FLAG[which]))
    if which == "to_datetime":
        return ResetSpec("timestamp", parse_datetime(str(raw)))
    return ResetSpec("timestamp", now_ms - parse_duration(str(raw)))


def _int(raw, flag: str) -> int:
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{flag}: {raw!r} is not an integer") from None


def parse_datetime(text: str) -> int:
    """ISO 8601 ("2024-05-01T12:00:00", "2024-05-01T12:00:00.000+02:00", "...Z") -> ms since
    the epoch. Without a zone the time is local, as kafka-consumer-groups reads it."""
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--to-datetime: {text!r} is not an ISO 8601 date-time "
                         f"(like 2024-05-01T12:00:00.000 or 2024-05-01T12:00:00Z)") from None
    return int(dt.timestamp() * 1000)  # naive datetimes are local time


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:[.,]\d{1,9})?)S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> int:
    """ISO 8601 duration PnDTnHnMnS (Java's Duration format: PT10M, P1DT12H, PT0.5S) -> ms."""
    s = text.strip()
    match = _DURATION.fullmatch(s)
    if not match or not any(match.groups()) or s.upper().endswith("T"):
        raise ValueError(f"--by-duration: {text!r} is not an ISO 8601 duration (like PT10M, PT1H30M or P1D)")
    days, hours, minutes, seconds = match.groups()
    ms = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1000
    ms += round(float((seconds or "0").replace(",", ".")) * 1000)
    return ms


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """--topic "orders" (every partition) or "orders:0,2" -> (topic, partitions or None)."""
    topic, sep, parts = spec.partition(":")
    topic = topic.strip()
    if not topic:
        raise ValueError(f"--topic: {spec!r} names no topic (use TOPIC or TOPIC:P,P)")
    if not sep:
        return topic, None
    partitions = []
    for item in parts.split(","):
        item = item.strip()
        if not item.isdigit():
            raise ValueError(f"--topic: {item!r} in {spec!r} is not a partition number (use TOPIC:0,1,2)")
        partitions.append(int(item))
    return topic, sorted(set(partitions))


def plan_reset(partitions: Sequence[TopicPartition], spec: ResetSpec, *,
               committed: Mapping[TopicPartition, int | None],
               log_start: Mapping[TopicPartition, int], log_end: Mapping[TopicPartition, int],
               offsets_for_time: Mapping[TopicPartition, int | None] | None = None) -> ResetPlan:
    """The new committed offset of each partition. `offsets_for_time` (for "timestamp")
    holds ListOffsets' answer for the spec's timestamp: -1 or None where no record is that
    recent."""
    plan = ResetPlan({})
    for tp in sorted(set(partitions)):
        start, end = log_start[tp], log_end[tp]
        name = f"{tp[0]}-{tp[1]}"
        if spec.kind == "earliest":
            new = start
        elif spec.kind == "latest":
            new = end
        elif spec.kind == "timestamp":
            found = (offsets_for_time or {}).get(tp)
            if found is None or found < 0:
                plan.notes.append(f"{name} has no record at or after the timestamp; it is reset to the "
                                  f"log end offset {end}")
                new = end
            else:
                new = found
        else:
            if spec.kind == "offset":
                new = spec.value
            elif spec.kind == "shift":
                current = committed.get(tp)
                if current is None:
                    raise ValueError(f"--shift-by: cannot shift {name}: the group has no committed offset there")
                new = current + spec.value
            else:
                raise ValueError(f"unknown reset strategy {spec.kind!r}")
            if new > end:
                plan.notes.append(f"new offset {new} is above the log end offset of {name}; it is set to {end}")
                new = end
            elif new < start:
                plan.notes.append(f"new offset {new} is below the log start offset of {name}; it is set to {start}")
                new = start
        plan.offsets[tp] = new
    return plan
