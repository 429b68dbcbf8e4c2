"""Ports picked by any `regions up` on this machine in the last few minutes.

A port is picked while free and bound only later, when its node, proxy or gateway starts:
two platforms starting at once (another state directory, the test suite's parallel
workers) could pick the same one in between, and one of them then fails with "address
already in use". That happened in a full test run. So a platform picks while it holds an
exclusive lock on a small ledger under the system's temporary directory, skips the ports
any platform recorded there in the last HOLD_S seconds (at most MOST_HELD, the newest),
and records its own.

Best effort: a ledger that cannot be read or written is left out of the picking rather
than stopping a start (the pick is then as good as a random one, as before)."""
from __future__ import annotations

import fcntl
import json
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LEDGER = Path(tempfile.gettempdir()) / "seaway-picked-ports.json"
# A pick waits for its bind for seconds (a node's start); a minute or two covers a slow start.
HOLD_S = 120.0
# Never more than this many held, the newest kept: a burst of platforms (a test suite) must
# not leave too few ports to pick from (above Linux's ephemeral range there are 4,535).
MOST_HELD = 1000


@contextmanager
def recent_picks(path: Path = LEDGER, *, now: float | None = None) -> Iterator[tuple[set[int], set[int]]]:
    """(ports picked in the last HOLD_S seconds, a set to add this platform's ports to); the
    added ports are recorded on exit, under the same lock."""
    now = time.time() if now is None else now
    mine: set[int] = set()
    try:
        file = open(path, "a+")
    except OSError:
        yield set(), mine
        return
    with file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        try:
            entries = {int(p): float(t) for p, t in json.loads(file.read() or "{}").items()}
        except (ValueError, TypeError, AttributeError):
            entries = {}
        live = dict(sorted(((p, t) for p, t in entries.items() if now - t < HOLD_S),
                           key=lambda pt: pt[1])[-MOST_HELD:])
        yield set(live), mine
        live.update(dict.fromkeys(mine, now))
        live = dict(sorted(live.items(), key=lambda pt: pt[1])[-MOST_HELD:])
        try:
            file.seek(0)
            file.truncate()
            file.write(json.dumps({str(p): t for p, t in sorted(live.items())}))
            file.flush()
        except OSError:
            pass
