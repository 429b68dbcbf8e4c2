"""`regions up` in the foreground: Ctrl-C stops the live view even when it comes in the middle
of a status refresh (one that raised KeyboardInterrupt wherever the main thread was once left
the view running and the platform up)."""
from __future__ import annotations

import os
import signal

import anyio

from regions import cli


class RunningSupervisor:
    returncode = None

    def poll(self):
        return None


class ExitedSupervisor:
    returncode = 1

    def poll(self):
        return self.returncode


def test_ctrl_c_during_a_status_refresh_ends_the_view_after_that_refresh(monkeypatch):
    refreshes = []

    def refresh(state_dir, layout):
        refreshes.append(1)
        assert len(refreshes) == 1, "the view refreshed again after Ctrl-C"

        async def query():
            os.kill(os.getpid(), signal.SIGINT)
            with anyio.move_on_after(0.2):   # a query in flight, with its own timeout
                await anyio.sleep(1)
        anyio.run(query)

    monkeypatch.setattr(cli, "_print_status", refresh)
    before = signal.getsignal(signal.SIGINT)
    assert cli._show_status_until_interrupted(RunningSupervisor(), None, None) is True
    assert refreshes == [1]
    assert signal.getsignal(signal.SIGINT) is before, "Ctrl-C handling is given back"


def test_a_supervisor_that_exits_ends_the_view_without_an_interrupt(monkeypatch):
    monkeypatch.setattr(cli, "_print_status", lambda *a: None)
    assert cli._show_status_until_interrupted(ExitedSupervisor(), None, None) is False
