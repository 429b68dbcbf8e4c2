"""Producer-state snapshot files in a partition's directory: `<20-digit offset>.snapshot`, as
Kafka names them (the format is ProducerState.snapshot_bytes, producer_state.py). Written
durably (temp file, fsync, rename, fsync dir); at a restart the newest readable one at or below
the recovery point is loaded, and the log is replayed from there (partition.py)."""
from __future__ import annotations

import os
from pathlib import Path

from core.log.checkpoint import TMP_SUFFIX, write_durably

from .producer_state import SNAPSHOT_SUFFIX, CorruptSnapshot, ProducerState


def write_snapshot(state: ProducerState, directory: str | os.PathLike, offset: int) -> Path:
    """Durably write `<offset>.snapshot` of `state`."""
    path = snapshot_path(directory, offset)
    write_durably(path, state.snapshot_bytes())
    return path


def snapshot_path(directory: str | os.PathLike, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in the directory, oldest first."""
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(SNAPSHOT_SUFFIX) or name.endswith(TMP_SUFFIX):
            continue
        stem = name[:-len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            out.append((int(stem), Path(directory) / name))
    out.sort()
    return out


def latest_snapshot(directory: str | os.PathLike,
                    max_offset: int | None = None) -> tuple[int, ProducerState] | None:
    """The newest readable snapshot at or below `max_offset` (the recovery point), as
    (offset, state); unreadable or corrupt ones are skipped (Kafka deletes them; this reader
    leaves files alone - call `delete_snapshots` for that). None means rebuild from the log."""
    for offset, path in reversed(list_snapshots(directory)):
        if max_offset is not None and offset > max_offset:
            continue
        try:
            return offset, ProducerState.load_snapshot(path.read_bytes())
        except (CorruptSnapshot, OSError):
            continue
    return None


def delete_snapshots(directory: str | os.PathLike, *, below: int | None = None,
                     above: int | None = None) -> list[int]:
    """Delete snapshots with offset < below and/or offset > above (truncation, retention).
    Returns the deleted offsets."""
    gone = []
    for offset, path in list_snapshots(directory):
        if (below is not None and offset < below) or (above is not None and offset > above):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            gone.append(offset)
    return gone
