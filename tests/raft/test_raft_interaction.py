"""Interaction scripts in tests/raft/testdata/*.txt, etcd-raft testdata style.

Each script drives a few RaftNodes by hand (timeouts, message delivery, drops, crashes) and
compares what they did with the expected output written under each command. To regenerate the
expected output after an intended behaviour change, run

    SEAWAY_RAFT_REWRITE=1 python -m pytest -q tests/raft/test_raft_interaction.py

and review the diff. See tests/raft/interaction.py for the commands.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.raft.interaction import run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_interaction_script(script: Path) -> None:
    failures = run_script(script, rewrite=os.environ.get("SEAWAY_RAFT_REWRITE") == "1")
    assert not failures, "\n\n".join(failures)
