"""Deterministic simulation of partition replication built from core.broker.replication.

Each seed builds 3-5 brokers holding one partition, a simulated controller (elections from the
ISR, unclean when the seed enables it, AlterPartition, fencing) and a hostile network (drops,
delays, reordering, symmetric and one-way partitions, cuts between brokers and the controller),
with kills, power losses that lose the unflushed tail, whole-ISR wipes, retention, and a client
producing mostly acks=all; then heals everything and demands full replication. Invariants are
checked after every event; see tests/replication/simulation.py for the model and
tests/replication/invariants.py for the checks.

    python -m pytest -q tests/replication -k simulation_seeds                          # 500 seeds
    SEAWAY_REPLICATION_SEEDS=20000 python -m pytest -q tests/replication -k simulation_seeds
    SEAWAY_REPLICATION_SEED_START=100000 SEAWAY_REPLICATION_SEEDS=5000 python -m pytest ...
    SEAWAY_REPLICATION_SEED=1234 python -m pytest -q tests/replication -k replay -s   # replay one,
                                                                                      # with trace
"""
from __future__ import annotations

import os
import traceback
from collections import Counter

import pytest

from tests.replication.simulation import Simulation, run_seed

DEFAULT_SEEDS = 500
CHUNK = 250          # seeds per test item, for progress and to stay far below the test timeout
TRACE_TAIL = 80

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


def replay_command(seed: int) -> str:
    return f"SEAWAY_REPLICATION_SEED={seed} python -m pytest -q tests/replication -k replay -s"


def describe(simulation: Simulation) -> str:
    return (f"faults {simulation.faults}, brokers {simulation.broker_ids}, "
            f"min.insync.replicas {simulation.min_isr}, "
            f"hw_requires_min_isr {simulation.config.hw_requires_min_isr}")


def failure_report(seed: int, error: BaseException) -> str:
    # Runs are deterministic: run the seed again with tracing on to show how it got there.
    simulation = Simulation(seed, trace=True)
    try:
        simulation.run()
    except BaseException:  # noqa: BLE001 - the same failure, expected
        pass
    tail = "\n".join((simulation.trace_lines or [])[-TRACE_TAIL:])
    detail = "".join(traceback.format_exception_only(type(error), error)).strip()
    return (f"seed {seed} failed: {detail}\n{describe(simulation)}\n"
            f"last {TRACE_TAIL} events:\n{tail}\n\n"
            f"replay it with:\n    {replay_command(seed)}")


def seed_chunks() -> list[tuple[int, int]]:
    start = int(os.environ.get("SEAWAY_REPLICATION_SEED_START", "0"))
    count = int(os.environ.get("SEAWAY_REPLICATION_SEEDS", str(DEFAULT_SEEDS)))
    return [(first, min(first + CHUNK, start + count))
            for first in range(start, start + count, CHUNK)]


@pytest.mark.parametrize("first, end", seed_chunks(),
                         ids=[f"seeds-{a}-{b - 1}" for a, b in seed_chunks()])
def test_simulation_seeds(first: int, end: int) -> None:
    exercised: Counter[str] = Counter()
    for seed in range(first, end):
        try:
            simulation = run_seed(seed)
        except Exception as error:  # noqa: BLE001 - every failure is reported with its seed
            pytest.fail(failure_report(seed, error), pytrace=False)
        exercised.update(simulation.stats)
    if end - first == CHUNK and end <= DEFAULT_SEEDS:
        # The CI seeds are fixed, so are these counts: a zero means a path went untested.
        missing = [what for what in MUST_HAPPEN if not exercised[what]]
        assert not missing, f"seeds {first}-{end - 1} never exercised: {missing}"


def test_replay_seed() -> None:
    """Replays SEAWAY_REPLICATION_SEED with its trace (seed 7 by default), twice: a seed that
    does not replay event for event could not be debugged from its replay command."""
    seed = int(os.environ.get("SEAWAY_REPLICATION_SEED", "7"))
    runs = []
    for _ in range(2):
        simulation = Simulation(seed, trace=True)
        try:
            simulation.run()
        finally:
            if "SEAWAY_REPLICATION_SEED" in os.environ:
                print("\n".join(simulation.trace_lines or []))
                print(f"seed {seed}: {describe(simulation)}, events {simulation.events}, "
                      f"acknowledged {len(simulation.history.acked)}, "
                      f"lost {len(simulation.history.lost)}, "
                      f"unclean epochs {sorted(simulation.history.unclean_epochs)}, "
                      f"lossy epochs {sorted(simulation.history.lossy_epochs)}")
        runs.append((simulation.trace_lines, simulation.history.acked,
                     simulation.history.committed))
    assert runs[0] == runs[1], f"seed {seed} does not replay identically"
