"""The README's exactly-once example (`<!-- readme-test: transactions ... -->`,
tests/support/readme.py), run as written against a node with `seaway node`'s settings: it must
print what the README shows."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.node import SeawayNode
from tests.support.readme import blocks, mismatch

pytestmark = pytest.mark.integration


def test_the_readme_exactly_once_example_prints_what_the_readme_shows(tmp_path):
    tested = blocks("transactions")
    assert [b.file for b in tested] == ["exactly_once.py", None], "the README's transactions example moved"
    work = tmp_path / "work"
    work.mkdir()
    with SeawayNode(tmp_path / "node") as node:     # `seaway node`'s defaults, on a free port
        env = dict(os.environ, BOOTSTRAP=node.bootstrap,
                   PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")
        for block in tested:
            if block.file:
                (work / block.file).write_text(block.text)
                continue
            for step in block.steps:
                try:
                    done = subprocess.run(["bash", "-c", step.command], cwd=work, env=env, capture_output=True,
                                          text=True, timeout=120)
                except subprocess.TimeoutExpired as exc:
                    # where the example stood, and what the node was doing, when it hung
                    pytest.fail(f"README.md:{block.line}: `{step.command}` ran over 120 s; it printed "
                                f"{_text(exc.stdout)!r}\nstderr: {_text(exc.stderr)[-2000:]}\n"
                                f"node log:\n{node.log_tail(200)}")
                assert done.returncode == 0, f"README.md:{block.line}: `{step.command}`: {done.stderr[-2000:]}"
                problem = mismatch(step.expected, done.stdout.splitlines())
                assert problem is None, f"README.md:{block.line}: `{step.command}`: {problem}"


def _text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
