"""The controller harness itself (tests/support/controller_harness.py): records go through the
codec into its log, and its invariant check catches what it should."""
from __future__ import annotations

import pytest

from core.controller import MetadataImage
from core.protocol import messages as m
from tests.support.controller_harness import Harness, check_invariants, incarnation



def test_log_round_trips_records_through_the_codec():
    h = Harness()
    h.add_brokers({1: "a", 2: "b"})
    h.create_topic("t", 2, 2)
    assert all(type(r).__name__ == "MetadataRecord" for r in h.log)
    assert h.ctl.committed_offset == len(h.log)
    assert h.ctl.committed_image == h.ctl.pending_image


def test_check_invariants_catches_a_leader_outside_the_isr():
    image = MetadataImage.empty().apply_all([
        m.RegisterBrokerRecord(broker_id=1, incarnation_id=incarnation(1), broker_epoch=1,
                               end_points=[], features=[], rack=None, fenced=False),
        m.TopicRecord(name="t", topic_id=bytes(range(16))),
        m.PartitionRecord(partition_id=0, topic_id=bytes(range(16)), replicas=[1, 2], isr=[2],
                          removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0,
                          partition_epoch=0)])
    with pytest.raises(AssertionError):
        check_invariants(image)
