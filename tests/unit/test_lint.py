"""The code passes the checkers configured in pyproject.toml: ruff ([tool.ruff]) and mypy
([tool.mypy]: strict on core.protocol, core.log, core.raft, core.controller and
core.broker.replication; the rest of core/ with function bodies checked). On failure the message
is the checker's own report, naming each problem with its file and line; the same command from
the repository root shows the same.

Each checker runs in its own process, like import-linter in test_import_contracts.py. mypy keeps
its incremental cache in .mypy_cache at the repository root: a cold run takes seconds, a warm one
about one.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: pip install -e '.[test]'")
    return subprocess.run([sys.executable, "-m", module, *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing():
    """`python -m ruff check`: the rules and their scope are in [tool.ruff]."""
    run = run_module("ruff", "check", "--no-cache", "--output-format", "concise")
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_finds_nothing():
    """`python -m mypy`: the files, the strict packages and the flags are in [tool.mypy]."""
    run = run_module("mypy", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
