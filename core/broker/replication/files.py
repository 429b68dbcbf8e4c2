"""The two files replication keeps beside the logs, in Kafka's checkpoint text format.

* `leader-epoch-checkpoint`, one per partition directory: which leader epoch wrote from which
  offset. Written (durably, replaced atomically) whenever the replica's epoch cache changes and
  before the records that need the new entry, so after a crash it is never behind the log.
* `replication-offset-checkpoint`, one per log directory: each partition's high watermark.
  Written every replica.high.watermark.checkpoint.interval.ms; a stale value only makes the
  high watermark start lower after a restart (the leader moves it up again as followers fetch).

Format: a version line (0), a count line, then one entry per line. A file that does not parse
is treated as absent, as Kafka's reader does not: we prefer a slower start (rebuilding the
epoch cache from the batch headers) to refusing to start.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from core.log.checkpoint import write_durably

from . import EpochEntry

log = logging.getLogger(__name__)

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
_VERSION = "0"


def _read_entries(path: Path, fields: int) -> list[list[str]] | None:
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, UnicodeDecodeError, OSError):
        return None
    if len(lines) < 2 or lines[0].strip() != _VERSION:
        return None
    try:
        count = int(lines[1])
    except ValueError:
        return None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries) or any(len(e) != fields for e in entries):
        log.warning("%s: malformed checkpoint, ignoring it", path)
        return None
    return entries


def _write_entries(path: Path, entries: list[str]) -> None:
    write_durably(path, ("\n".join([_VERSION, str(len(entries)), *entries]) + "\n").encode())


def read_leader_epochs(directory: Path) -> list[EpochEntry] | None:
    """The entries, or None if the file is missing or unreadable."""
    entries = _read_entries(directory / LEADER_EPOCH_FILE, 2)
    if entries is None:
        return None
    try:
        return [EpochEntry(int(epoch), int(offset)) for epoch, offset in entries]
    except ValueError:
        return None


def write_leader_epochs(directory: Path, entries: Iterable[EpochEntry]) -> None:
    _write_entries(directory / LEADER_EPOCH_FILE, [f"{e.epoch} {e.start_offset}" for e in entries])


def read_high_watermarks(log_dir: Path) -> dict[tuple[str, int], int]:
    entries = _read_entries(log_dir / HIGH_WATERMARK_FILE, 3)
    result: dict[tuple[str, int], int] = {}
    for topic, partition, offset in entries or ():
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError:
            return {}
    return result


def write_high_watermarks(log_dir: Path, marks: dict[tuple[str, int], int]) -> None:
    _write_entries(log_dir / HIGH_WATERMARK_FILE,
                   [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(marks.items())])
