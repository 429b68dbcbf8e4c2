"""Which way a DR pair's records flow follows from the two copies' seaway.replica.of alone
(core/protocol/dr.py), and who may write a replica."""
from __future__ import annotations

import pytest

from core.protocol.dr import FENCED, link_copies, mirror_client_id, refusal_error, replica_write_refusal
from core.protocol.errors import ErrorCode

EU, US = "eu-west-1", "us-east-1"


# The planned failover of core/protocol/dr.py's table, then the unplanned one's split brain.
@pytest.mark.parametrize("eu_copy, us_copy, eu_to_us, us_to_eu", [
    ("", EU, True, False),            # eu-west primary
    (FENCED, EU, True, False),        # fenced: the drain goes on
    (FENCED, "", False, False),       # promoted: nothing flows
    (US, "", False, True),            # pointed back: us-east primary
    ("", "", False, False),           # both writable (an unplanned failover's split brain)
    (US, EU, False, False),           # replicas of each other: nothing is anyone's to send
    ("ap-1", EU, True, False),        # eu's copy fed from a third cluster still feeds us
])
def test_records_flow_only_into_a_replica_of_the_source_and_never_back(eu_copy, us_copy, eu_to_us, us_to_eu):
    assert link_copies(EU, US, eu_copy, us_copy) is eu_to_us
    assert link_copies(US, EU, us_copy, eu_copy) is us_to_eu


@pytest.mark.parametrize("replica_of, epoch, client_id, allowed", [
    ("", 0, "anyone", True),
    ("", 0, None, True),
    ("", 3, "app", True),                           # a promoted topic: applications write it
    (EU, 0, mirror_client_id(EU), True),
    (EU, 2, mirror_client_id(EU), True),
    (EU, 0, mirror_client_id(US), False),
    (EU, 0, "app", False),
    (EU, 0, None, False),
    (FENCED, 1, mirror_client_id(EU), False),
    (FENCED, 1, mirror_client_id(FENCED), False),   # fenced means no one
    ("", 0, mirror_client_id(EU), True),            # a renaming link's target: no DR role ever
    ("", 2, mirror_client_id(EU), False),           # promoted: the link that fed it is refused
])
def test_who_may_write_a_dr_topic(replica_of, epoch, client_id, allowed):
    refusal = replica_write_refusal("orders", replica_of, client_id, epoch)
    assert (refusal is None) is allowed
    if refusal is not None:
        assert refusal.startswith("orders ")


@pytest.mark.parametrize("replica_of, client_id, error", [
    (FENCED, "app", ErrorCode.NOT_LEADER_OR_FOLLOWER),       # passes: retry, and the gateway moves it
    (FENCED, None, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (FENCED, mirror_client_id(EU), ErrorCode.INVALID_TOPIC_EXCEPTION),   # a copier must stop
    (EU, "app", ErrorCode.INVALID_TOPIC_EXCEPTION),          # a replica: final, as Kafka's internal topics
    ("", mirror_client_id(EU), ErrorCode.INVALID_TOPIC_EXCEPTION),
])
def test_only_a_fenced_copy_refuses_applications_with_a_retriable_error(replica_of, client_id, error):
    assert refusal_error(replica_of, client_id) == error
