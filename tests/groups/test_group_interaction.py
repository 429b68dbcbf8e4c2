"""Interaction scripts in tests/groups/testdata/*.txt, etcd-raft testdata style.

Each script drives the classic group coordinator by hand (consumers joining, syncing,
heartbeating and leaving, and the clock) and compares what it did with the expected output
written under each command. To regenerate the expected output after an intended behaviour
change, run

    SEAWAY_GROUPS_REWRITE=1 python -m pytest -q tests/groups/test_group_interaction.py

and review the diff. See tests/groups/interaction.py for the commands and
tests/support/interaction.py for the format and the runner.
"""
from __future__ import annotations

from pathlib import Path

from tests.groups.interaction import Env
from tests.support.interaction import script_test

test_interaction_script = script_test(Path(__file__).parent / "testdata", Env, "SEAWAY_GROUPS_REWRITE")
