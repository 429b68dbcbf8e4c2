"""Interaction scripts in tests/replication/testdata/*.txt, etcd-raft testdata style.

Each script drives a partition's replicas and the controller by hand (produces, message
delivery, drops, crashes, the clock) and compares what they did with the expected output written
under each command. To regenerate the expected output after an intended behaviour change, run

    SEAWAY_REPLICATION_REWRITE=1 python -m pytest -q tests/replication/test_replication_interaction.py

and review the diff. See tests/replication/interaction.py for the commands and
tests/support/interaction.py for the format and the runner.
"""
from __future__ import annotations

from pathlib import Path

from tests.replication.interaction import Env
from tests.support.interaction import script_test

test_interaction_script = script_test(Path(__file__).parent / "testdata", Env, "SEAWAY_REPLICATION_REWRITE")
