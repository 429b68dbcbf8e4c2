"""Deterministic simulation of partition replication built from core.broker.replication.

Each seed builds 3-5 brokers holding one partition, a simulated controller (elections from the
ISR, unclean when the seed enables it, AlterPartition, fencing) and a hostile network (drops,
delays, reordering, symmetric and one-way partitions, cuts between brokers and the controller),
with kills, power losses that lose the unflushed tail, whole-ISR wipes, retention, and a client
producing mostly acks=all; then heals everything and demands full replication. Invariants are
checked after every event; see tests/replication/simulation.py for the model and
tests/replication/invariants.py for the checks. The event loop, the network, the seed chunks,
the failure report and its replay command are the generic ones of tests/support/simulation.py.

    python -m pytest -q tests/replication -k simulation_seeds                          # 500 seeds
    SEAWAY_REPLICATION_SEEDS=20000 python -m pytest -q tests/replication -k simulation_seeds
    SEAWAY_REPLICATION_SEED_START=100000 SEAWAY_REPLICATION_SEEDS=5000 python -m pytest ...
    SEAWAY_REPLICATION_SEED=1234 python -m pytest -q tests/replication -k replay -s   # replay one,
                                                                                      # with trace
"""
from __future__ import annotations

from tests.replication.simulation import Simulation
from tests.support.simulation import SeededSimulation

# What each chunk of the CI seeds must exercise, or the simulation quietly stopped testing it.
MUST_HAPPEN = (
    "acked", "isr expand", "isr shrink", "leader change", "diverging epoch", "truncation",
    "truncate fully", "list offsets", "retention", "partition", "kill", "isr wipe",
    "lost unflushed", "unclean election", "unclean leadership", "lossy election",
    "records lost", "append NOT_ENOUGH_REPLICAS", "produce NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "produce REQUEST_TIMED_OUT", "produce NOT_LEADER_OR_FOLLOWER", "fetch FENCED_LEADER_EPOCH",
    "fetch UNKNOWN_LEADER_EPOCH", "fetch OFFSET_OUT_OF_RANGE", "fetch NOT_LEADER_OR_FOLLOWER",
    "alter FENCED_LEADER_EPOCH", "alter INVALID_UPDATE_VERSION",
)

REPLICATION = SeededSimulation(
    env_prefix="SEAWAY_REPLICATION", tests="tests/replication", build=Simulation,
    default_seeds=500, must_happen=MUST_HAPPEN,
    describe=lambda sim: (f"faults {sim.faults}, brokers {sim.broker_ids}, "
                          f"min.insync.replicas {sim.min_isr}, "
                          f"hw_requires_min_isr {sim.config.hw_requires_min_isr}"),
    summary=lambda sim: (f"acknowledged {len(sim.history.acked)}, "
                         f"lost {len(sim.history.lost)}, "
                         f"unclean epochs {sorted(sim.history.unclean_epochs)}, "
                         f"lossy epochs {sorted(sim.history.lossy_epochs)}"),
    outcome=lambda sim: (sim.history.acked, sim.history.committed))


@REPLICATION.parametrize_chunks()
def test_simulation_seeds(first: int, end: int) -> None:
    REPLICATION.check_seeds(first, end)


def test_replay_seed() -> None:
    """Replays SEAWAY_REPLICATION_SEED with its trace (seed 7 by default), twice: a seed that
    does not replay event for event could not be debugged from its replay command."""
    REPLICATION.check_replay()
