"""One short seeded fault run (tests/faults/run_faults.py): a 3-node KRaft cluster behind a
FaultNet, idempotent acks=all producers, a nemesis, then the Jepsen checker and a byte-for-byte
replica comparison. About a minute."""
from __future__ import annotations

import pytest

from tests.faults.run_faults import run_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_short_fault_run_loses_nothing(tmp_path):
    # One request in flight: with more, librdkafka may bump its producer epoch and re-send
    # what a broker already holds (librdkafka issue #4953), a duplicate that is not ours.
    result = run_once(seed=20240501, duration=20, directory=tmp_path, settle=45, max_in_flight=1,
                      log=lambda _: None)
    print(result.summary())
    assert result.report is not None and result.report.acknowledged > 0, result.summary()
    assert result.history.faults, "the nemesis injected nothing"
    assert result.ok, result.summary()


def test_the_nodes_are_told_apart_by_the_fault_network(tmp_path):
    # Every node-to-node connection must come from the node's own 127.0.1.<id>: the Raft
    # driver's (raft-N), the broker lifecycle's (broker-N), the controller channel that
    # forwards CreateTopics (broker-N-forwarding); none may look like a client's.
    result = run_once(seed=1, duration=2, directory=tmp_path, faults=False, log=lambda _: None)
    assert result.ok, result.summary()
    seen = result.client_ids
    for node in (1, 2, 3):
        assert any(src == node and cid == f"raft-{node}" for src, _, cid in seen), seen
        assert any(src == node and cid == f"broker-{node}" for src, _, cid in seen), seen
    assert any(src in (1, 2, 3) and (cid or "").endswith("-forwarding") for src, _, cid in seen), seen
    assert not [x for x in seen if x[0] == "client" and (x[2] or "").startswith(("raft-", "broker-"))]
