"""Data-driven interaction scripts (etcd-raft's testdata style), for any state machine.

A script is a sequence of blocks:

    # comments start with '#'
    command arg key=value ...
    ----
    expected output lines
    (a blank line ends the block)

A state machine's scripts run on its own ScriptEnv subclass, which adds its commands as
methods `cmd_<command>(args)` ('-' in a command becomes '_'; args are the words after it) that
append what happened to `self.out`, one line each; a command that prints nothing prints 'ok'.
The commands every environment has:

    clock +MS                               move the clock; nobody is ticked
    deliver [from=ID] [to=ID] [type=Name]   deliver the matching queued messages, in order
    drop [from=ID] [to=ID] [type=Name]      drop them
    pending                                 list the queued messages
    stabilize [verbose]                     deliver until no message is left; print how each
                                            node ended up (or everything, with 'verbose')

Messages wait in one FIFO queue (`self.queue`) until delivered. An environment says who a
message is from and to (`message_route`), its type name (`message_type`), how it prints
(`message_text`), how it is delivered (`deliver_message`), and for `stabilize` what a node's
state is (`node_states`) and how a changed node prints (`settled_line`).

tests/raft/interaction.py (scripts in tests/raft/testdata), tests/replication/interaction.py
(tests/replication/testdata) and tests/groups/interaction.py (tests/groups/testdata) are the
environments so far. A test runs every script of a
directory with `script_paths` and `check_script`; with the rewrite variable set to 1 the actual
output is written back into the scripts, for review as a diff.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Hashable


class ScriptEnv:
    """The environment a script's commands run in; see the module doc."""

    def __init__(self) -> None:
        self.now = 0
        self.queue: list = []
        self.out: list[str] = []

    def _clock(self) -> int:
        return self.now

    def execute(self, line: str) -> list[str]:
        self.out = []
        words = line.split()
        command, args = words[0], words[1:]
        handler = getattr(self, "cmd_" + command.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {command!r}")
        handler(args)
        return self.out or ["ok"]

    @staticmethod
    def _options(args: list[str]) -> tuple[list[str], dict[str, str]]:
        positional = [a for a in args if "=" not in a]
        options = dict(a.split("=", 1) for a in args if "=" in a)
        return positional, options

    def cmd_clock(self, args: list[str]) -> None:
        self.now += int(args[0].lstrip("+"))
        self.out.append(f"t={self.now}")

    # --- messages: what an environment says about its own ---------------------------------------

    def message_route(self, message) -> tuple[Hashable, Hashable]:
        raise NotImplementedError

    def message_type(self, message) -> str:
        return type(message).__name__

    def message_text(self, message) -> str:
        raise NotImplementedError

    def deliver_message(self, message) -> None:
        raise NotImplementedError

    def node_states(self) -> dict[Hashable, Hashable]:
        """Each running node's state, as far as `stabilize` reports a change of it."""
        raise NotImplementedError

    def settled_line(self, node_id: Hashable) -> str:
        raise NotImplementedError

    # --- messages: the commands ------------------------------------------------------------------

    def _matching(self, args: list[str]) -> list:
        _, options = self._options(args)
        selected = []
        for message in self.queue:
            source, destination = self.message_route(message)
            if "from" in options and str(source) != options["from"]:
                continue
            if "to" in options and str(destination) != options["to"]:
                continue
            if "type" in options and self.message_type(message) != options["type"]:
                continue
            selected.append(message)
        return selected

    def cmd_deliver(self, args: list[str]) -> None:
        for message in self._matching(args):
            self.queue.remove(message)
            self.deliver_message(message)

    def cmd_stabilize(self, args: list[str]) -> None:
        """Deliver messages until none are left; print only how each node ended up (or
        everything, with 'verbose'). Nobody is ticked."""
        verbose = "verbose" in args
        before = self.node_states()
        for _ in range(100):
            if not self.queue:
                break
            self.cmd_deliver([])
        else:
            raise RuntimeError("stabilize: messages keep coming")
        if verbose:
            return
        self.out = []
        after = self.node_states()
        for node_id in sorted(after):
            if before.get(node_id) != after[node_id]:
                self.out.append(self.settled_line(node_id))

    def cmd_drop(self, args: list[str]) -> None:
        for message in self._matching(args):
            self.queue.remove(message)
            source, destination = self.message_route(message)
            self.out.append(f"dropped {source}->{destination} {self.message_type(message)}")

    def cmd_pending(self, args: list[str]) -> None:
        for message in self.queue:
            self.out.append(self.message_text(message))


# --- scripts ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Block:
    line_number: int
    command: str
    expected: list[str]


def parse_script(text: str) -> list[Block]:
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        command = line
        i += 1
        if i >= len(lines) or lines[i].strip() != "----":
            raise ValueError(f"line {start}: expected '----' after the command")
        i += 1
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i].rstrip())
            i += 1
        blocks.append(Block(start, command, expected))
    return blocks


def run_script(path: Path, env: ScriptEnv, rewrite: bool = False) -> list[str]:
    """Run a script on `env`; return the mismatches (or rewrite the file with the actual
    output)."""
    text = path.read_text()
    failures = []
    rewritten = []
    lines = text.splitlines()
    blocks = parse_script(text)
    position = 0
    for block in blocks:
        actual = env.execute(block.command)
        if actual != block.expected:
            failures.append(f"{path.name}:{block.line_number}: {block.command}\n"
                            f"  expected:\n    " + "\n    ".join(block.expected) +
                            "\n  actual:\n    " + "\n    ".join(actual))
        # Everything up to and including '----' is kept as written.
        head_end = block.line_number + 1
        rewritten.extend(lines[position:head_end])
        rewritten.extend(actual)
        position = head_end + len(block.expected)
    rewritten.extend(lines[position:])
    if rewrite:
        path.write_text("\n".join(rewritten) + "\n")
        return []
    return failures


def script_paths(testdata: Path) -> list[Path]:
    """The scripts of a directory, in name order (parametrize with ids=[p.stem ...])."""
    return sorted(testdata.glob("*.txt"))


def check_script(path: Path, make_env: Callable[[], ScriptEnv], rewrite_variable: str) -> None:
    """Run one script on a fresh environment; with `rewrite_variable`=1 in the environment,
    write the actual output back instead."""
    failures = run_script(path, make_env(), rewrite=os.environ.get(rewrite_variable) == "1")
    assert not failures, "\n\n".join(failures)


def script_test(testdata: Path, make_env: Callable[[], ScriptEnv], rewrite_variable: str):
    """A pytest test that runs each script of `testdata` on a fresh `make_env()`, one case a
    script; a test module binds it to a test name:

        test_interaction_script = script_test(Path(__file__).parent / "testdata", Env, "SEAWAY_X_REWRITE")
    """
    import pytest
    scripts = script_paths(testdata)

    @pytest.mark.parametrize("script", scripts, ids=[p.stem for p in scripts])
    def test(script: Path) -> None:
        check_script(script, make_env, rewrite_variable)
    return test
