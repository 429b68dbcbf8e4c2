"""Small durable files in a partition directory: offsets and the clean-shutdown marker.

Offset files use Kafka's checkpoint text shape (a version line, then the value) and are
replaced atomically: write a temp file, fsync it, rename over, fsync the directory. A reader
therefore sees the old value or the new one, never a torn one.
"""
from __future__ import annotations

import os
from pathlib import Path

LOG_START_OFFSET_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point-offset"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TMP_SUFFIX = ".tmp"
_VERSION = 0


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_unpublished(tmp: Path, data: bytes) -> None:
    """Write and fsync `tmp`; the caller renames it into place when it may."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    write_unpublished(tmp, data)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_offset(path: Path, offset: int) -> None:
    write_durably(path, f"{_VERSION}\n{offset}\n".encode())


def read_offset(path: Path) -> int | None:
    """The stored offset, or None if the file is missing or unreadable.

    Unreadable is treated as missing: both files only ever hold a lower bound that the
    log can fall back from (to its first segment, or to a full recovery).
    """
    try:
        lines = path.read_text().split()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    if len(lines) != 2 or lines[0] != str(_VERSION):
        return None
    try:
        value = int(lines[1])
    except ValueError:
        return None
    return value if value >= 0 else None
