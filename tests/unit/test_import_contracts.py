"""DESIGN.md's dependency rules hold: the import-linter contracts in pyproject.toml
([tool.importlinter]) are all kept. On failure the message is import-linter's report, naming
each forbidden import with its file and line; `lint-imports` from the repository root shows
the same.

import-linter runs in its own process: it configures logging and puts the working directory
on sys.path, neither of which should leak into the rest of the suite.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_dependency_rules_of_design_md_are_kept():
    if importlib.util.find_spec("importlinter") is None:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(REPO / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout, run.stdout
