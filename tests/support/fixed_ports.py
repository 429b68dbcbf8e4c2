"""The default topology's fixed ports (the brokers' 19092.., the console's 9780, the mirror's
9781, the gateways' 31092..) are the addresses a newcomer's `regions up` and the compose file
both publish. A test that binds them holds this lock for as long as it does, so two such
modules on different xdist workers (the compose platform and the README's newcomer run) take
turns instead of failing on a port in use."""
from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path
from typing import IO

LOCK_FILE = Path(tempfile.gettempdir()) / "seaway-default-ports.lock"


class DefaultPorts:
    """Held from `acquire` (blocking) to `release`; both may be called more than once."""

    def __init__(self) -> None:
        self._file: IO | None = None

    def acquire(self) -> None:
        if self._file is None:
            file = open(LOCK_FILE, "a")
            fcntl.flock(file, fcntl.LOCK_EX)
            self._file = file

    def release(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            fcntl.flock(file, fcntl.LOCK_UN)
            file.close()

    def __enter__(self) -> "DefaultPorts":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
