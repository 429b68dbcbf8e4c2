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


def test_on_a_terminal_each_refresh_keeps_the_addresses_above_the_status(monkeypatch, capsys):
    class TwoRefreshes:
        returncode = 0
        polls = 0

        def poll(self):
            self.polls += 1
            return None if self.polls <= 2 else 0

    monkeypatch.setattr(cli, "_print_status", lambda *a: print("REGION CLUSTER ..."))
    monkeypatch.setattr(cli.time, "sleep", lambda s: None)
    monkeypatch.setattr(cli.sys.stdout, "isatty", lambda: True)
    header = ["platform 'p': state and logs in /s", "  eu  eu-1  bootstrap 127.0.0.1:1"]
    assert cli._show_status_until_interrupted(TwoRefreshes(), None, None, header) is False
    screens = capsys.readouterr().out.split("\033[2J\033[H")[1:]
    assert len(screens) == 2
    assert all(screen.splitlines()[:4] == [*header, "", "REGION CLUSTER ..."] for screen in screens), screens
