"""What the console does when someone acts: `dr plan`, `dr failover`, `dr failback` and `dr
drill`, run as the dr command itself (a child process with the serving process's own
configuration), and the audit log of every action.

Why a child process and not a call: the page then runs exactly what the CLI runs, the same
checks, the same controller lock (a failover from the page and one from a terminal exclude each
other), the same history rows, and its lines are the CLI's own progress lines, shown live. A
failover that outlives the page, or the console, is resumed as any other (`dr failover`).

One action at a time per console (the controller lock would refuse a second anyway, but a
person should be told "one is running" rather than read a lock error). Each action keeps at
most MAX_LINES lines of output; the history keeps the measured outcome.

The audit log is JSON lines in the state directory (`console-audit.log`): who, from where,
what, and how it ended, for every login, refused attempt and action.
"""
from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("seaway.dr.console")

MAX_LINES = 2000
KEEP_ACTIONS = 20
AUDIT_FILE = "console-audit.log"
KINDS = ("failover", "failback", "drill")


@dataclass
class Action:
    id: int
    kind: str                   # failover, failback, drill
    region: str
    force: bool
    user: str
    started_at: float
    state: str = "running"      # running, done, failed
    lines: list[str] = field(default_factory=list)
    exit_code: int | None = None
    ended_at: float | None = None

    def to_dict(self, since: int = 0) -> dict:
        return {"id": self.id, "kind": self.kind, "region": self.region, "force": self.force, "user": self.user,
                "started_at": self.started_at, "ended_at": self.ended_at, "state": self.state,
                "exit_code": self.exit_code, "lines": self.lines[since:], "line_count": len(self.lines)}


class Audit:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / AUDIT_FILE
        self._lock = threading.Lock()

    def write(self, user: str, remote: str, what: str, outcome: str, **detail) -> None:
        entry = {"time": time.time(), "user": user, "remote": remote, "what": what, "outcome": outcome, **detail}
        log.warning("console audit: %s", json.dumps(entry, sort_keys=True))
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as f:
                    f.write(json.dumps(entry, sort_keys=True) + "\n")
            except OSError as exc:      # the log line above still has it
                log.error("cannot write the console audit log %s: %s", self.path, exc)

    def tail(self, n: int = 50) -> list[dict]:
        with self._lock:
            try:
                lines = self.path.read_text().splitlines()[-n:]
            except OSError:
                return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out[::-1]


class Busy(Exception):
    pass


class Actions:
    """Runs the dr command. `dr_argv` is what selects the configuration (`--config F`, or
    `--platform --state-dir D`) and the timeout, as the serving process was started with."""

    def __init__(self, dr_argv: list[str], *, cwd: Path | None = None):
        self.dr_argv = list(dr_argv)
        self.cwd = cwd
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.actions: dict[int, Action] = {}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dr.cli", *self.dr_argv, *args]

    def plan(self, kind: str, region: str, force: bool, timeout_s: float = 60.0) -> tuple[bool, str]:
        """`dr plan`: (ready, its text). Runs in the caller's thread."""
        if kind == "drill":     # a drill changes no application's topic: what it does is the plan
            return True, (f"dr drill {region}: canary records to the pair's canary topic, which fails over from "
                          f"{region} to its partner and back under that traffic (dr drill's default rate and "
                          f"hold); then every acknowledged record is read back (lost, duplicated, reordered) and "
                          f"the RPO and RTO measured go to the history with the report. Application topics do "
                          f"not move.")
        args = ["plan", kind, region] + (["--force"] if force and kind == "failover" else [])
        try:
            out = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout_s, cwd=self.cwd)
        except subprocess.TimeoutExpired:
            return False, f"dr plan did not answer within {timeout_s:g} s"
        text = (out.stdout + out.stderr).strip()
        return out.returncode == 0, text

    def running(self) -> Action | None:
        with self._lock:
            return next((a for a in self.actions.values() if a.state == "running"), None)

    def start(self, kind: str, region: str, force: bool, user: str,
              on_end=lambda action: None) -> Action:
        with self._lock:
            if any(a.state == "running" for a in self.actions.values()):
                raise Busy("an action started from the console is still running")
            action = Action(next(self._ids), kind, region, force, user, time.time())
            self.actions[action.id] = action
            for old in sorted(self.actions)[:-KEEP_ACTIONS]:
                del self.actions[old]
        args = [kind, region] + (["--force"] if force and kind == "failover" else [])
        threading.Thread(target=self._run, args=(action, args, on_end), name=f"console-{kind}",
                         daemon=True).start()
        return action

    def _run(self, action: Action, args: list[str], on_end) -> None:
        try:
            proc = subprocess.Popen(self.command(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, bufsize=1, cwd=self.cwd, stdin=subprocess.DEVNULL)
        except OSError as exc:
            action.lines.append(f"cannot start dr {action.kind}: {exc}")
            action.state, action.exit_code, action.ended_at = "failed", -1, time.time()
            on_end(action)
            return
        assert proc.stdout is not None
        for line in proc.stdout:
            if len(action.lines) < MAX_LINES:
                action.lines.append(line.rstrip("\n"))
        action.exit_code = proc.wait()
        action.ended_at = time.time()
        action.state = "done" if action.exit_code == 0 else "failed"
        on_end(action)

    def get(self, action_id: int) -> Action | None:
        with self._lock:
            return self.actions.get(action_id)

    def recent(self) -> list[Action]:
        with self._lock:
            return sorted(self.actions.values(), key=lambda a: -a.id)
