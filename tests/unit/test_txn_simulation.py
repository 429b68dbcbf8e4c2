"""Seeded simulations of the transaction coordinator; tests/support/txn_simulation.py has the
model and the invariants.

    python -m pytest -q tests/unit/test_txn_simulation.py                          # 250 seeds
    SEAWAY_TXN_SEEDS=20000 python -m pytest -q tests/unit/test_txn_simulation.py   # more seeds
    SEAWAY_TXN_SEED=1234 python -m pytest -q tests/unit/test_txn_simulation.py -k replay -s
"""
from __future__ import annotations

from unittest import mock

import pytest

from core.broker.transactions import coordinator
from core.broker.transactions.events import MarkersWritten
from core.broker.transactions.state import TxnMetadata, TxnState
from tests.support.simulation import SeededSimulation, assert_mutation_caught
from tests.support.txn_simulation import build

MUST_HAPPEN = ("init granted", "commit", "abort", "fenced", "concurrent", "markers", "markers cut short", "write failed", "parked", "unparked",
               "complete+ongoing", "crash", "landed unreported")

TXN = SeededSimulation(
    env_prefix="SEAWAY_TXN", tests="tests/unit/test_txn_simulation.py", build=build, default_seeds=250,
    must_happen=MUST_HAPPEN,
    describe=lambda sim: f"faults {sim.faults}, config {sim.config}",
    summary=lambda sim: f"{dict(sim.stats)}",
    outcome=lambda sim: (sim.log, dict(sim.stats)))


@TXN.parametrize_chunks()
def test_simulation_seeds(first: int, end: int) -> None:
    TXN.check_seeds(first, end)


def test_replay_seed() -> None:
    TXN.check_replay()


# Bugs the simulation must notice, each planted by patching one rule out of the coordinator.

def _complete_on_any_report(self, ev):
    entry = self.entries.get(ev.transactional_id)
    if entry is not None and entry.pending is None and entry.meta.state.preparing:
        self._write(entry, entry.meta.prepare_complete(ev.now_ms))


def _abort_without_fence(self, now_ms):
    return self._to(TxnState.PREPARE_ABORT, last_update_ms=now_ms)


def _answer_before_write(self, entry, target, request_id=None, on_success=None, on_failure=None, **kw):
    _WRITE(self, entry, target, **kw)
    if request_id is not None and on_success is not None:
        self._respond(request_id, on_success)


def _load_without_markers(self, partition, coordinator_epoch, records, now_ms):
    self.loading.discard(partition)
    self.epochs[partition] = coordinator_epoch
    for tid, meta in records.items():
        if meta is not None:
            self.entries[tid] = coordinator._Entry(meta, partition)
    return []


_WRITE = coordinator.TxnCoordinator._write
MUTATIONS = {
    "completes on a stale coordinator's marker report":
        lambda: mock.patch.dict(coordinator.TxnCoordinator._HANDLERS, {MarkersWritten: _complete_on_any_report}),
    "aborts a timed-out transaction without bumping the epoch":
        lambda: mock.patch.object(TxnMetadata, "prepare_fenced_abort", _abort_without_fence),
    "answers before the record is written":
        lambda: mock.patch.object(coordinator.TxnCoordinator, "_write", _answer_before_write),
    "loads prepared transactions without sending their markers":
        lambda: mock.patch.object(coordinator.TxnCoordinator, "load_partition", _load_without_markers),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_the_simulation_notices_a_planted_bug(name):
    assert_mutation_caught(name, MUTATIONS[name], TXN.run_seed, range(60))
