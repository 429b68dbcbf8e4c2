"""A newcomer follows the README literally: the README's "What you have now" examples
(`<!-- readme-test: newcomer ... -->` blocks, tests/support/readme.py) run in order, as
written, in a fresh home directory: `regions up` of the shipped topology in one shell, then
in a second one the first topic with kcat and with Python, the copy in the other region,
`mirror status`, `regions status`, a region stopped and started, and `regions down`. Each
command must print what the README shows, not only exit 0.

The shipped topology fixes its ports (the ones the README gives), which the compose platform
publishes too: both hold tests/support/fixed_ports.py's lock while they run."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.fixed_ports import DefaultPorts
from tests.support.readme import Block, as_written, blocks, mismatch

pytestmark = pytest.mark.integration

UP_TIMEOUT_S = 120


def newcomer_env(home: Path) -> dict[str, str]:
    """A shell of someone who just installed Seaway: their own home, nothing of ours set, the
    suite's Python and its commands first on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEAWAY_")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


class Foreground:
    """The first shell: a command that keeps running, its output collected as it comes."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.output: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    def text(self) -> str:
        return "".join(self.output)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)


def run_step(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def run_session(block: Block, cwd: Path, env: dict[str, str], home: Path) -> str | None:
    """None if every command of the block exits 0 and prints what the README shows;
    otherwise what went wrong first."""
    for step in block.steps:
        done = run_step(step.command, cwd, env)
        if done.returncode != 0:
            return f"`{step.command}` exited {done.returncode}: {done.stderr.strip()[-2000:]}"
        if "Traceback" in done.stderr:
            return f"`{step.command}` printed a traceback: {done.stderr[-2000:]}"
        problem = mismatch(step.expected, as_written(done.stdout, home))
        if problem:
            return f"`{step.command}`: {problem}"
    return None


def test_a_newcomer_follows_the_readme_from_a_fresh_home(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = newcomer_env(home)
    tested = blocks("newcomer")
    kinds = [b.file or ("background" if b.background else "session") for b in tested]
    assert kinds[0] == "background" and "first_steps.py" in kinds and len(tested) >= 7, kinds
    commands = [s.command for b in tested if not b.file for s in b.steps]
    for needed in ("regions up", "mirror status", "regions status", "regions stop us-east", "regions start us-east",
                   "regions down", "python first_steps.py"):
        assert needed in commands, f"the README's newcomer examples lost `{needed}`"

    with DefaultPorts():
        first = None
        try:
            for block in tested:
                where = f"README.md:{block.line}"
                if block.file:
                    (work / block.file).write_text(block.text)
                elif block.background:
                    [step] = block.steps
                    first = Foreground(step.command, work, env)
                    deadline = time.monotonic() + UP_TIMEOUT_S
                    last = step.expected[-1]
                    while not any(line.rstrip() == last for line in first.output):
                        assert first.proc.poll() is None, f"{where}: `{step.command}` exited:\n{first.text()}"
                        assert time.monotonic() < deadline, f"{where}: no {last!r} in {UP_TIMEOUT_S}s:\n{first.text()}"
                        time.sleep(0.5)
                    problem = mismatch(step.expected, as_written(first.text(), home), prefix=True)
                    assert problem is None, f"{where}: `{step.command}`: {problem}"
                else:
                    deadline = time.monotonic() + block.retry_s
                    while (problem := run_session(block, work, env, home)) is not None:
                        assert time.monotonic() < deadline, f"{where}: {problem}"
                        time.sleep(2)
            # `regions down` in the second shell ended the first one's `regions up`, as the
            # README says: exit status 0, and why.
            assert first is not None
            first.proc.wait(timeout=90)
            first.reader.join(timeout=10)
            assert first.proc.returncode == 0, first.text()[-3000:]
            assert "the platform was stopped by `regions down`; its data stays in ~/.seaway/platform" in \
                as_written(first.text(), home), first.text()[-3000:]
            assert "Traceback" not in first.text()
        finally:
            if first is not None and first.proc.poll() is None:
                run_step("regions down", work, env)
                try:
                    first.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    first.kill()
