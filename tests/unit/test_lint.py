"""The code passes the linters configured in pyproject.toml: ruff ([tool.ruff]). On failure the
message is the linter's own report, naming each violation with its file and line; the same
command from the repository root shows the same.

Each linter runs in its own process, like import-linter in test_import_contracts.py.
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
