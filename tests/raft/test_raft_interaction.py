"""Interaction scripts in tests/raft/testdata/*.txt, etcd-raft testdata style.

Each script drives a few RaftNodes by hand (timeouts, message delivery, drops, crashes) and
compares what they did with the expected output written under each command. To regenerate the
expected output after an intended behaviour change, run

    SEAWAY_RAFT_REWRITE=1 python -m pytest -q tests/raft/test_raft_interaction.py

and review the diff. See tests/raft/interaction.py for the commands and
tests/support/interaction.py for the format and the runner.
"""
from __future__ import annotations

from pathlib import Path

from tests.raft.interaction import Env
from tests.support.interaction import script_test

test_interaction_script = script_test(Path(__file__).parent / "testdata", Env, "SEAWAY_RAFT_REWRITE")
