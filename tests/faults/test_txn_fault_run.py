"""One short seeded transactional fault run (tests/faults/run_txn_faults.py): a 3-node cluster
behind a FaultNet, consume-transform-produce loops and transactional writers, nodes and loops
killed -9, links cut; then exactly-once and the transaction checker. About a minute and a half."""
from __future__ import annotations

import pytest

from tests.faults.run_txn_faults import run_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def test_short_transactional_fault_run_is_exactly_once(tmp_path):
    result = run_once(seed=20261206, duration=25, directory=tmp_path, log=lambda _: None)
    print(result.summary())
    assert result.faults, "the nemesis injected nothing"
    assert result.loop_restarts > 0, "no loop was killed and restarted"
    assert result.ledger is not None and result.ledger.committed > 0 and result.ledger.aborted > 0, result.summary()
    assert result.ok, result.summary()
