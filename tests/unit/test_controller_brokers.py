"""Broker registration, heartbeats, fencing, unfencing, controlled shutdown and session expiry
(Kafka's ClusterControlManager / BrokerHeartbeatManager / ReplicationControlManager)."""
from __future__ import annotations

import pytest

from core.controller import ControllerConfig
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import Harness, heartbeat, incarnation, registration

TIMEOUT = ControllerConfig().broker_session_timeout_ms


def kinds(records) -> list[str]:
    return [type(r).__name__ for r in records]


# --------------------------------------------------------------------------- registration


def test_registration_writes_a_fenced_record_and_the_epoch_is_its_offset():
    h = Harness()
    offset = h.end_offset
    result = h.register(1, rack="r1", features=[("metadata.version", 1, 20)])
    assert result.response.error_code == 0
    assert result.response.broker_epoch == offset
    [record] = result.records
    assert isinstance(record, m.RegisterBrokerRecord)
    assert (record.broker_id, record.broker_epoch, record.fenced, record.rack) == (1, offset, True, "r1")
    assert record.incarnation_id == incarnation(1)
    assert [(e.name, e.host, e.port) for e in record.end_points] == [("PLAINTEXT", "b1", 9092)]
    assert [(f.name, f.min_supported_version, f.max_supported_version)
            for f in record.features] == [("metadata.version", 1, 20)]
    reg = h.image.brokers[1]
    assert reg.fenced and reg.epoch == offset and reg.rack == "r1"
    assert h.ctl.registration_offset(1) == offset


def test_registration_epoch_follows_a_driver_supplied_next_offset():
    h = Harness()
    result = h.ctl.broker_registration(registration(1), 4, next_offset=50)
    assert result.response.broker_epoch == 50
    assert h.ctl.next_write_offset == 51


@pytest.mark.parametrize("request_, version, code", [
    (registration(1, cluster="other"), 4, E.INCONSISTENT_CLUSTER_ID),
    (registration(1, zk=True), 1, E.BROKER_ID_NOT_REGISTERED),
    (registration(-1), 4, E.INVALID_REGISTRATION),
    (registration(1, features=[("metadata.version", 1, 10)]), 4, E.UNSUPPORTED_VERSION),
])
def test_bad_registrations(request_, version, code):
    h = Harness()
    result = h.call("broker_registration", request_, version)
    assert result.response.error_code == code
    assert result.response.broker_epoch == -1
    assert result.records == []
    assert not h.image.brokers


def test_an_unfenced_broker_with_a_live_session_keeps_its_id():
    h = Harness()
    h.add_brokers({1: None})
    result = h.register(1, generation=1)
    assert result.response.error_code == E.DUPLICATE_BROKER_REGISTRATION
    assert result.records == []


def test_the_same_incarnation_registering_again_keeps_epoch_and_state():
    h = Harness()
    h.add_brokers({1: None})
    epoch = h.epochs[1]
    result = h.register(1)
    assert result.response.error_code == 0
    assert result.response.broker_epoch == epoch
    [record] = result.records
    assert record.broker_epoch == epoch and record.fenced is False
    assert not h.image.brokers[1].fenced


def test_a_new_incarnation_may_replace_a_fenced_broker_at_once():
    h = Harness()
    h.add_brokers({1: None})
    assert h.heartbeat(1, fence=True).response.is_fenced
    result = h.register(1, generation=1)
    assert result.response.error_code == 0
    assert result.response.broker_epoch > 1
    assert h.image.brokers[1].incarnation_id == incarnation(1, 1)


def test_a_new_incarnation_after_session_expiry_takes_over_the_old_ones_partitions():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("t", 1, 2, assignments={0: [1, 2]})
    h.clock.advance(TIMEOUT // 2)
    h.heartbeat(2)
    h.clock.advance(TIMEOUT // 2 + 1)     # broker 1's session is stale, not yet fenced
    result = h.register(1, generation=1)
    assert result.response.error_code == 0
    assert kinds(result.records) == ["PartitionChangeRecord", "RegisterBrokerRecord"]
    p = h.partition("t")
    assert (p.leader, p.isr) == (2, (2,))
    assert h.image.brokers[1].fenced


# --------------------------------------------------------------------------- heartbeats


def test_heartbeat_errors():
    h = Harness()
    h.register(1)
    unknown = h.call("broker_heartbeat", heartbeat(9, 1, 0), 1).response
    stale = h.call("broker_heartbeat", heartbeat(1, h.epochs[1] + 1, 0), 1).response
    for response in (unknown, stale):
        assert response.error_code == E.STALE_BROKER_EPOCH
        assert (response.is_fenced, response.should_shut_down, response.is_caught_up) == (True, False, False)


def test_a_fenced_broker_is_unfenced_once_caught_up_to_its_registration():
    h = Harness()
    h.register(1)
    registered_at = h.ctl.registration_offset(1)
    behind = h.heartbeat(1, offset=registered_at - 1)
    assert (behind.response.is_caught_up, behind.response.is_fenced) == (False, True)
    assert behind.records == []
    wants_fence = h.heartbeat(1, offset=registered_at, fence=True)
    assert (wants_fence.response.is_caught_up, wants_fence.response.is_fenced) == (True, True)
    assert wants_fence.records == []
    caught_up = h.heartbeat(1, offset=registered_at)
    assert (caught_up.response.is_caught_up, caught_up.response.is_fenced) == (True, False)
    [record] = caught_up.records
    assert isinstance(record, m.BrokerRegistrationChangeRecord)
    assert (record.broker_id, record.broker_epoch, record.fenced) == (1, h.epochs[1], -1)
    assert not h.image.brokers[1].fenced
    again = h.heartbeat(1)
    assert again.records == [] and not again.response.is_fenced


def test_unfencing_elects_leaders_for_leaderless_partitions_it_is_in_sync_for():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("a", 1, 2, assignments={0: [1, 2]})
    h.create_topic("b", 1, 1, assignments={0: [2]})
    h.heartbeat(1, fence=True)                   # a-0 -> leader 2, ISR [2]
    h.heartbeat(2, fence=True)                   # both leaderless, ISR [2] kept
    assert h.partition("a").leader == h.partition("b").leader == -1
    assert h.partition("a").isr == (2,)
    result = h.heartbeat(1)                      # 1 is not in any ISR: nothing to lead
    assert kinds(result.records) == ["BrokerRegistrationChangeRecord"]
    result = h.heartbeat(2)
    assert kinds(result.records) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord",
                                     "PartitionChangeRecord"]
    assert h.partition("a").leader == h.partition("b").leader == 2


def test_want_fence_moves_leadership_and_isr_away():
    h = Harness()
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("t", 1, 3, assignments={0: [1, 2, 3]})
    result = h.heartbeat(1, fence=True)
    assert result.response.is_fenced and not result.response.should_shut_down
    assert kinds(result.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2, 3), 1)
    assert h.image.brokers[1].fenced


# --------------------------------------------------------------------------- shutdown


def test_controlled_shutdown_moves_leaders_then_lets_the_broker_go():
    h = Harness()
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("t", 2, 2, assignments={0: [1, 2], 1: [3, 1]})
    h.create_topic("solo", 1, 1, assignments={0: [1]})
    first = h.heartbeat(1, shut_down=True)
    assert (first.response.is_fenced, first.response.should_shut_down) == (False, False)
    assert kinds(first.records) == ["BrokerRegistrationChangeRecord"] + ["PartitionChangeRecord"] * 3
    assert first.records[0].in_controlled_shutdown == 1
    assert h.image.brokers[1].in_controlled_shutdown and not h.image.brokers[1].fenced
    assert (h.partition("t", 0).leader, h.partition("t", 0).isr) == (2, (2,))
    assert (h.partition("t", 1).leader, h.partition("t", 1).isr) == (3, (3,))
    # Nobody can take solo-0 over: it goes offline, keeping its only ISR member (Kafka).
    assert (h.partition("solo").leader, h.partition("solo").isr) == (-1, (1,))
    shutdown_at = h.end_offset - 1
    # It may stop only when every active broker has read past the records above.
    h.heartbeat(2, offset=shutdown_at - 1)
    h.heartbeat(3, offset=shutdown_at)
    waiting = h.heartbeat(1, shut_down=True)
    assert (waiting.response.should_shut_down, waiting.records) == (False, [])
    h.heartbeat(2, offset=shutdown_at)
    done = h.heartbeat(1, shut_down=True)
    assert (done.response.is_fenced, done.response.should_shut_down) == (True, True)
    assert kinds(done.records) == ["BrokerRegistrationChangeRecord"]
    assert h.image.brokers[1].fenced
    # Fenced, it is usable again for placement (Kafka resets the shutdown on fencing) and
    # may come back: a caught-up heartbeat unfences it and solo-0 is led again.
    back = h.heartbeat(1)
    assert not back.response.is_fenced
    assert h.partition("solo").leader == 1


def test_controlled_shutdown_waits_while_the_broker_still_leads():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("t", 1, 2, assignments={0: [1, 2]})
    h.heartbeat(1, shut_down=True)
    # A log that hands it a leadership again (no request of ours does that).
    t = h.image.topic("t")
    h.inject(m.PartitionChangeRecord(topic_id=t.id, partition_id=0, leader=1, isr=[1, 2]))
    stuck = h.heartbeat(1, shut_down=True)
    assert (stuck.response.should_shut_down, stuck.records) == (False, [])


def test_a_broker_that_leads_nothing_shuts_down_at_once():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("t", 1, 2, assignments={0: [2, 1]})
    result = h.heartbeat(1, shut_down=True)
    assert (result.response.is_fenced, result.response.should_shut_down) == (True, True)
    assert kinds(result.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert h.partition("t").isr == (2,)


@pytest.mark.parametrize("fenced_first, flags, fenced, shut_down, records", [
    (True, dict(shut_down=True), True, True, []),
    (True, dict(fence=True, shut_down=True), True, True, []),
    (False, dict(fence=True, shut_down=True), True, True, ["BrokerRegistrationChangeRecord"]),
    (False, dict(fence=True), True, False, ["BrokerRegistrationChangeRecord"]),
    (False, dict(), False, False, []),
])
def test_heartbeat_state_table(fenced_first, flags, fenced, shut_down, records):
    h = Harness()
    h.register(1)
    if not fenced_first:
        h.heartbeat(1)
    result = h.heartbeat(1, **flags)
    assert (result.response.is_fenced, result.response.should_shut_down) == (fenced, shut_down)
    assert kinds(result.records) == records


# --------------------------------------------------------------------------- sessions


def test_session_expiry_fences_and_re_elects_keeping_the_last_isr_member():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("two", 1, 2, assignments={0: [1, 2]})
    h.create_topic("one", 1, 1, assignments={0: [1]})
    assert h.ctl.next_deadline_ms() == h.clock.now + TIMEOUT + 1
    h.clock.advance(TIMEOUT - 1000)
    h.heartbeat(2)
    h.clock.advance(1000)
    assert h.tick() == []                         # broker 1 is exactly at its deadline
    assert h.ctl.next_deadline_ms() == h.clock.now + 1
    h.clock.advance(1)
    records = h.tick()
    assert kinds(records) == ["PartitionChangeRecord", "PartitionChangeRecord",
                              "BrokerRegistrationChangeRecord"]
    assert (h.partition("two").leader, h.partition("two").isr) == (2, (2,))
    assert (h.partition("one").leader, h.partition("one").isr) == (-1, (1,))
    assert h.image.brokers[1].fenced
    broker_2_seen = h.clock.now - 1001
    assert h.ctl.next_deadline_ms() == broker_2_seen + TIMEOUT + 1
    h.clock.advance(TIMEOUT)
    h.tick()
    assert h.image.brokers[2].fenced
    assert h.partition("two").leader == -1 and h.partition("two").isr == (2,)
    # Nothing unfenced is left: only the periodic elections remain scheduled.
    assert h.ctl.next_deadline_ms() == min(
        h.ctl._next_unclean_ms, h.ctl._next_balance_ms)


def test_heartbeats_keep_a_broker_alive():
    h = Harness()
    h.add_brokers({1: None})
    for _ in range(10):
        h.clock.advance(TIMEOUT // 2)
        h.heartbeat(1)
        assert h.tick() == []
    assert not h.image.brokers[1].fenced


def test_activation_gives_every_registered_broker_a_fresh_session():
    h = Harness()
    h.add_brokers({1: None})
    h.ctl.deactivate()
    h.clock.advance(10 * TIMEOUT)
    h.append(h.ctl.activate(h.end_offset))
    assert h.tick() == []
    assert h.ctl.next_deadline_ms() == h.clock.now + TIMEOUT + 1


@pytest.mark.parametrize("colocated, heard_since, new_incarnation_code", [
    # Kafka's rule: an unfenced broker keeps its id while its session (presumed at activation)
    # lasts, whatever process the new incarnation comes from.
    (None, False, E.DUPLICATE_BROKER_REGISTRATION),
    (2, False, E.DUPLICATE_BROKER_REGISTRATION),
    # The controller's own broker (a combined node) restarted: the old incarnation lived in
    # an earlier run of this process, so the new one takes the id at once...
    (1, False, 0),
    # ...unless the old incarnation has heartbeated this controller since it activated.
    (1, True, E.DUPLICATE_BROKER_REGISTRATION),
])
def test_after_activation_only_the_colocated_broker_restarting_takes_its_id_at_once(
        colocated, heard_since, new_incarnation_code):
    h = Harness(ControllerConfig(colocated_broker_id=colocated))
    h.add_brokers({1: None, 2: None})
    h.ctl.deactivate()
    h.append(h.ctl.activate(h.end_offset))
    if heard_since:
        h.heartbeat(1)
    result = h.register(1, generation=1)
    assert result.response.error_code == new_incarnation_code
    if new_incarnation_code == 0:
        assert h.image.brokers[1].fenced        # a new incarnation starts fenced
        assert result.response.broker_epoch > 0


def test_a_combined_node_names_its_own_broker_as_colocated():
    voters = {"controller.quorum.voters": "1@127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
              "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "node.id": "1"}
    combined = ControllerConfig.from_properties({**voters, "process.roles": "broker,controller"})
    alone = ControllerConfig.from_properties({**voters, "process.roles": "controller",
                                              "listeners": "CONTROLLER://127.0.0.1:9093"})
    assert (combined.colocated_broker_id, alone.colocated_broker_id) == (1, None)


# --------------------------------------------------------------------------- unregister


def test_unregister_broker():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("t", 1, 2, assignments={0: [1, 2]})
    unknown = h.call("unregister_broker", m.UnregisterBrokerRequest(broker_id=9), 0)
    assert unknown.response.error_code == E.BROKER_ID_NOT_REGISTERED
    assert "9" in unknown.response.error_message
    result = h.call("unregister_broker", m.UnregisterBrokerRequest(broker_id=1), 0)
    assert result.response.error_code == 0
    assert kinds(result.records) == ["PartitionChangeRecord", "UnregisterBrokerRecord"]
    assert 1 not in h.image.brokers
    assert (h.partition("t").leader, h.partition("t").isr) == (2, (2,))
    # Its heartbeats are now stale; it may register again.
    assert h.heartbeat(1).response.error_code == E.STALE_BROKER_EPOCH
    assert h.register(1).response.error_code == 0
