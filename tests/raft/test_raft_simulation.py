"""Deterministic simulation of KRaft quorums built from core.raft nodes.

Each seed builds a 3- or 5-voter quorum with 0-2 observers and runs it through a hostile
network (drops, delays, reordering, duplicates, symmetric and one-way partitions), crashes that
lose whatever was not persisted, torn writes, graceful resignations and snapshots, with clients
proposing to whoever leads; then heals everything and demands progress. Invariants are checked
after every event; see tests/raft/simulation.py for the model and tests/raft/invariants.py
for the checks. The event loop, the network, the seed chunks, the failure report and its replay
command are the generic ones of tests/support/simulation.py.

    python -m pytest -q tests/raft -k simulation_seeds                          # 1,000 seeds
    SEAWAY_RAFT_SEEDS=20000 python -m pytest -q tests/raft -k simulation_seeds  # more seeds
    SEAWAY_RAFT_SEED_START=100000 SEAWAY_RAFT_SEEDS=5000 python -m pytest ...   # other seeds
    SEAWAY_RAFT_SEED=1234 python -m pytest -q tests/raft -k replay -s           # replay one,
                                                                                # with its trace
"""
from __future__ import annotations

from tests.raft.simulation import Simulation
from tests.support.simulation import SeededSimulation

# What each chunk of the CI seeds must exercise, or the simulation quietly stopped testing it.
MUST_HAPPEN = (
    "VoteRequest", "BeginQuorumEpochRequest", "EndQuorumEpochRequest", "FetchSnapshotRequest",
    "snapshot installed", "truncation", "torn write", "resign",
    "tick Follower->Prospective", "tick Prospective->Follower", "tick Leader->Resigned",
    "tick Candidate->Prospective",
)

RAFT = SeededSimulation(
    env_prefix="SEAWAY_RAFT", tests="tests/raft", build=Simulation, default_seeds=1000,
    must_happen=MUST_HAPPEN,
    describe=lambda sim: (f"faults {sim.faults}, voters {sim.voters}, "
                          f"observers {sim.observers}"),
    summary=lambda sim: (f"committed {len(sim.history.committed)}, "
                         f"leaders by epoch {sim.history.leaders}"),
    outcome=lambda sim: (sim.history.committed, sim.history.leaders))


@RAFT.parametrize_chunks()
def test_simulation_seeds(first: int, end: int) -> None:
    RAFT.check_seeds(first, end)


def test_replay_seed() -> None:
    """Replays SEAWAY_RAFT_SEED with its trace (seed 7 by default), twice: a seed that does not
    replay event for event could not be debugged from its replay command."""
    RAFT.check_replay()
