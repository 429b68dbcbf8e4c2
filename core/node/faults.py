"""Fault hooks for the tests, off unless the environment names them (as kfake's hooks).

SEAWAY_FAULT_BUSY_DATA_PLANE names a file. While it exists and holds "<busy ms> <period ms>",
the node's main loop (its data plane: client listeners, replication, groups) spins in Python,
holding the interpreter, for <busy ms> out of every <period ms>. What must keep its deadlines
meanwhile runs on the raft thread (core/raft/thread.py): the quorum, the controller and the
broker's heartbeats. tests/integration/test_quorum_thread.py arms it.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import anyio

log = logging.getLogger(__name__)

FAULT_BUSY_DATA_PLANE = "SEAWAY_FAULT_BUSY_DATA_PLANE"
_IDLE_CHECK_S = 0.2


def busy_data_plane_armed() -> bool:
    return bool(os.environ.get(FAULT_BUSY_DATA_PLANE))


def _read_plan(path: str) -> tuple[float, float] | None:
    try:
        busy_ms, period_ms = Path(path).read_text().split()
        return int(busy_ms) / 1000, int(period_ms) / 1000
    except (OSError, ValueError):
        return None


async def busy_data_plane() -> None:
    path = os.environ[FAULT_BUSY_DATA_PLANE]
    while True:
        plan = _read_plan(path)
        if plan is None:
            await anyio.sleep(_IDLE_CHECK_S)
            continue
        busy_s, period_s = plan
        log.warning("fault injection: the data plane's loop spins for %.1f s", busy_s)
        end = time.monotonic() + busy_s
        while time.monotonic() < end:
            sum(range(1000))   # Python work that holds the GIL between switch intervals
        await anyio.sleep(max(0.0, period_s - busy_s))
