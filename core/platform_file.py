"""The running platform as its clients see it: `platform.json` in the state directory.

`regions up` (regions/supervisor.py) writes the file while the platform runs and removes it
when it stops. Everything that only needs to *find* a running platform reads it here: the
`seaway` CLI resolving `--cluster NAME`, `mirror status --platform`, `dr`. regions/ owns what
goes into the file; this module owns where it is and how to read the part those clients use,
so that core/ need not import regions/.

A file left behind by a supervisor that was killed names a pid that is gone: it counts as no
platform running. Reading never raises for a missing, stale or malformed file; it answers
None, and the caller says in one line what it needed.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

PLATFORM_FILE = "platform.json"
STATE_DIR_ENV = "SEAWAY_STATE_DIR"


def default_state_dir() -> Path:
    """$SEAWAY_STATE_DIR, else ~/.seaway/platform: where `regions up` keeps a platform."""
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".seaway" / "platform")


@dataclass(frozen=True)
class RunningCluster:
    name: str
    region: str
    bootstrap: str
    # The admin user's client properties on a secured platform (TLS and SCRAM), else None.
    client_properties: str | None


@dataclass(frozen=True)
class RunningPlatform:
    name: str
    state_dir: Path
    clusters: dict[str, RunningCluster]

    def listing(self) -> str:
        """`eu-west-1 (127.0.0.1:19092,...), us-east-1 (...)`: what a one-line answer names."""
        return ", ".join(f"{c.name} ({c.bootstrap})" for c in self.clusters.values())


def running_platform(state_dir: Path | None = None) -> RunningPlatform | None:
    """The platform whose supervisor is alive in `state_dir` (default_state_dir() if None)."""
    state_dir = state_dir or default_state_dir()
    try:
        data = json.loads((state_dir / PLATFORM_FILE).read_text())
        pid = int(data["supervisor_pid"])
        if not process_alive(pid):
            return None
        security = data.get("security") or None
        admin_properties = None
        if security:
            admin_properties = security.get("client_properties", {}).get(security.get("admin_user"))
        clusters = {name: RunningCluster(name, str(c.get("region", "")), str(c["bootstrap"]), admin_properties)
                    for name, c in data["clusters"].items()}
        return RunningPlatform(str(data.get("name", "")), state_dir, clusters)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def process_alive(pid: int | None) -> bool:
    """Whether `pid` is a running process (a zombie, exited but not yet reaped, is not)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True         # someone else's process: it exists
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True         # no /proc here: kill(0) is all there is
