"""Activation, pending vs committed state, replay on standbys, failover, snapshots, NOT_CONTROLLER,
unexpected errors, and ControllerConfig.from_properties."""
from __future__ import annotations

import dataclasses

import pytest

from core.config import ConfigError
from core.controller import HANDLED_APIS, ControllerConfig, MetadataImage, QuorumController
from core.controller import topics as topics_module
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from core.protocol.metadata_records import decode_record, encode_record

from tests.support.controller_harness import (CLUSTER, Clock, Harness, create_request, heartbeat,
                                              new_topic, registration)

TIMEOUT = ControllerConfig().broker_session_timeout_ms
IAC = m.IncrementalAlterConfigsRequest
A = m.AlterConfigsRequest
P = m.CreatePartitionsRequest
D = m.DeleteTopicsRequest
AP = m.AlterPartitionRequest
EL = m.ElectLeadersRequest
RA = m.AlterPartitionReassignmentsRequest

SAMPLE_REQUESTS = {
    62: (registration(1), 4),
    63: (heartbeat(1, 1, 0), 1),
    64: (m.UnregisterBrokerRequest(broker_id=1), 0),
    67: (m.AllocateProducerIdsRequest(broker_id=1, broker_epoch=1), 0),
    19: (create_request(new_topic("t"), new_topic("u")), 7),
    20: (D(topics=[D.DeleteTopicState(name="t", topic_id=bytes(16))], timeout_ms=1), 6),
    37: (P(topics=[P.CreatePartitionsTopic(name="t", count=2)], timeout_ms=1), 3),
    44: (IAC(resources=[IAC.AlterConfigsResource(resource_type=2, resource_name="t", configs=[])]), 1),
    33: (A(resources=[A.AlterConfigsResource(resource_type=4, resource_name="", configs=[])]), 2),
    56: (AP(broker_id=1, broker_epoch=1, topics=[AP.TopicData(topic_name="t", partitions=[
        AP.PartitionData(partition_index=0, new_isr=[1])])]), 1),
    43: (EL(election_type=0, topic_partitions=[EL.TopicPartitions(topic="t", partitions=[0])]), 2),
    45: (RA(timeout_ms=1, topics=[RA.ReassignableTopic(name="t", partitions=[
        RA.ReassignablePartition(partition_index=0, replicas=[1])])]), 0),
    46: (m.ListPartitionReassignmentsRequest(timeout_ms=1, topics=None), 0),
    51: (m.AlterUserScramCredentialsRequest(deletions=[], upsertions=[
        m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name="u", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p")]), 0),
    30: (m.CreateAclsRequest(creations=[m.CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a", host="*",
        operation=3, permission_type=3)]), 3),
    31: (m.DeleteAclsRequest(filters=[m.DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1)]), 3),
}


def error_codes(response) -> list[int]:
    if getattr(response, "error_code", 0):    # a top-level error (AlterPartition)
        return [response.error_code]
    for items in ("topics", "responses", "results", "filter_results"):
        if hasattr(response, items):
            return [i.error_code for i in getattr(response, items)]
    return [response.error_code]


# --------------------------------------------------------------------------- activation


def test_activation_bootstraps_metadata_version_only_on_a_fresh_log():
    h = Harness()
    [record] = h.log
    assert record.message == m.FeatureLevelRecord(name="metadata.version", feature_level=14)
    assert h.image.features["metadata.version"] == 14
    h.ctl.deactivate()
    assert h.ctl.activate(h.end_offset) == []


@pytest.mark.parametrize("api_key", sorted(HANDLED_APIS))
def test_a_standby_answers_not_controller_to_everything(api_key):
    ctl = QuorumController(1, CLUSTER, clock=Clock())
    request, version = SAMPLE_REQUESTS[api_key]
    result = ctl.handle(api_key, request, version)
    assert result.records == []
    codes = error_codes(result.response)
    assert codes and set(codes) == {E.NOT_CONTROLLER}
    m.API[api_key].response.encode(version, result.response)
    assert ctl.tick() == [] and ctl.next_deadline_ms() is None


def test_handle_dispatches_and_refuses_other_apis():
    h = Harness()
    result = h.ctl.handle(62, registration(1), 4)
    assert result.response.error_code == 0
    with pytest.raises(KeyError):
        h.ctl.handle(0, None, 0)


def test_an_unexpected_failure_is_an_unknown_server_error_and_changes_nothing(monkeypatch):
    h = Harness()
    h.add_brokers({1: None})
    before = h.image

    def boom(*args, **kwargs):
        raise RuntimeError("bug")
    monkeypatch.setattr(topics_module, "create_topics", boom)
    result = h.create(new_topic("t"), new_topic("u"))
    assert result.records == [] and h.image == before
    assert error_codes(result.response) == [E.UNKNOWN_SERVER_ERROR] * 2


# --------------------------------------------------------------------------- pending vs committed


def test_requests_see_uncommitted_records_and_deactivate_drops_them():
    h = Harness()
    h.add_brokers({1: None})
    first = h.call("create_topics", create_request(new_topic("t")), 7, commit=False)
    assert h.image.topic("t") is not None
    assert h.ctl.committed_image.topic("t") is None
    again = h.call("create_topics", create_request(new_topic("t")), 7, commit=False)
    assert error_codes(again.response) == [E.TOPIC_ALREADY_EXISTS]
    assert first.records
    h.ctl.deactivate()
    assert h.ctl.pending_image == h.ctl.committed_image
    assert h.ctl.pending_image.topic("t") is None
    # The uncommitted records never made it: the log forgets them as Raft would truncate.
    del h.log[h.replayed:]
    h.append(h.ctl.activate(h.end_offset))
    h.commit()
    h.create_topic("t")


def test_committing_our_own_records_keeps_later_uncommitted_ones():
    h = Harness()
    h.add_brokers({1: None})
    h.call("create_topics", create_request(new_topic("a")), 7, commit=False)
    mid = len(h.log)
    h.call("create_topics", create_request(new_topic("b")), 7, commit=False)
    h.ctl.replay(h.log[h.replayed:mid], mid)
    h.replayed = mid
    h.check()
    assert h.ctl.committed_image.topic("a") is not None
    assert h.ctl.committed_image.topic("b") is None
    assert h.image.topic("b") is not None
    h.commit()
    assert h.ctl.committed_image == h.ctl.pending_image


def test_foreign_records_at_our_offsets_make_the_controller_step_down():
    h = Harness()
    h.add_brokers({1: None})
    h.call("create_topics", create_request(new_topic("mine")), 7, commit=False)
    # Another leader's records took those offsets.
    del h.log[h.replayed:]
    h.append([m.ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms",
                             value="1")])
    h.commit()
    assert not h.ctl.is_active
    assert h.image.topic("mine") is None
    assert h.image.broker_config("") == {"log.retention.ms": "1"}


def test_offsets_resync_when_the_log_puts_a_control_record_between_batches():
    h = Harness()
    h.register(1)
    control_at = h.end_offset                      # where the log puts a control record
    h.call("broker_registration", registration(2), 4, commit=False)
    h.call("broker_registration", registration(3), 4, commit=False)
    assert h.ctl.registration_offset(3) == control_at + 1
    # Broker 2's batch commits one offset later than the controller counted ...
    h.ctl.replay(h.log[h.replayed:h.replayed + 1], control_at + 1)
    h.replayed += 1
    assert h.ctl.committed_image.brokers[2].epoch == control_at   # epochs are names, not offsets
    assert h.ctl.registration_offset(2) == control_at + 1
    # ... and so will broker 3's, and every record after it.
    assert h.ctl.registration_offset(3) == control_at + 2
    assert h.ctl.next_write_offset == control_at + 3
    h.ctl.replay(h.log[h.replayed:], control_at + 2)
    h.replayed = len(h.log)
    assert h.ctl.is_active and h.ctl.registration_offset(3) == control_at + 2


def test_replaying_an_offset_twice_is_refused():
    h = Harness()
    with pytest.raises(ValueError):
        h.ctl.replay(h.log[:1], 1)


# --------------------------------------------------------------------------- failover


def test_a_standby_takes_over_with_the_same_state_and_fresh_sessions():
    h = Harness()
    h.add_brokers({1: "a", 2: "b"})
    h.create_topic("t", 2, 2)
    clock = Clock(h.clock.now)
    standby = QuorumController(101, CLUSTER, clock=clock, seed=5)
    offset = 1
    for record in h.log:                              # batch by batch would do as well
        standby.replay([record], offset)
        offset += 1
    assert standby.committed_image == h.ctl.committed_image
    assert standby.pending_image == standby.committed_image
    assert not standby.is_active
    h.ctl.deactivate()
    clock.advance(TIMEOUT * 5)
    assert standby.activate(offset + 1) == []             # a LeaderChange sits at `offset`
    # Broker 1 reaches the new controller; broker 2 never does and is fenced.
    response = standby.broker_heartbeat(heartbeat(1, h.epochs[1], offset), 1).response
    assert (response.error_code, response.is_caught_up, response.is_fenced) == (0, True, False)
    assert standby.tick() == []
    clock.advance(TIMEOUT + 1)
    standby.broker_heartbeat(heartbeat(1, h.epochs[1], offset), 1)
    records = standby.tick()
    assert [type(r).__name__ for r in records][-1] == "BrokerRegistrationChangeRecord"
    image = standby.pending_image
    assert image.brokers[2].fenced and not image.brokers[1].fenced
    for p in image.topic("t").partitions.values():
        assert p.leader == 1 and p.isr == (1,)


def test_load_snapshot_counts_registrations_at_the_snapshot_offset():
    h = Harness()
    h.add_brokers({1: None})
    h.register(2)
    snapshot = MetadataImage.empty().apply_all(h.log)
    clock = Clock(h.clock.now)
    other = QuorumController(101, CLUSTER, clock=clock)
    other.load_snapshot(snapshot, 500)
    assert other.committed_offset == 500 and other.committed_image == snapshot
    assert other.registration_offset(2) == 500
    other.activate(501)
    behind = other.broker_heartbeat(heartbeat(2, h.epochs[2], 499), 1).response
    assert (behind.is_caught_up, behind.is_fenced) == (False, True)
    caught_up = other.broker_heartbeat(heartbeat(2, h.epochs[2], 500), 1)
    assert caught_up.response.is_fenced is False
    # A snapshot loaded while active (not something a leader does) ends the active role.
    other.load_snapshot(snapshot, 600)
    assert not other.is_active


def test_records_round_trip_through_every_declared_version_they_use():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.create_topic("t", 2, 2, configs={"retention.ms": "1"})
    h.heartbeat(1, shut_down=True)
    for record in h.log:
        assert decode_record(encode_record(record)).message == record.message


# --------------------------------------------------------------------------- ControllerConfig


def test_config_from_properties_uses_kafka_names():
    config = ControllerConfig.from_properties({
        "num.partitions": "6", "default.replication.factor": "3",
        "broker.session.timeout.ms": "18000", "broker.heartbeat.interval.ms": "3000",
        "unclean.leader.election.enable": "true", "min.insync.replicas": "2",
        "delete.topic.enable": "false", "auto.leader.rebalance.enable": "false",
        "leader.imbalance.check.interval.seconds": "60",
        "unclean.leader.election.interval.ms": "1000",
        "node.id": "1", "controller.quorum.voters": "1@h1:9093,2@h2:9093",
        "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "log.retention.ms": "1234", "log.cleanup.policy": "compact",
    })
    assert (config.num_partitions, config.default_replication_factor) == (6, 3)
    assert (config.broker_session_timeout_ms, config.broker_heartbeat_interval_ms) == (18000, 3000)
    assert config.unclean_leader_election_enable and not config.delete_topic_enable
    assert config.min_insync_replicas == 2 and not config.auto_leader_rebalance_enable
    assert config.leader_imbalance_check_interval_ms == 60_000
    assert config.unclean_leader_election_interval_ms == 1000
    assert config.controller_ids == {1, 2}
    assert dict(config.topic_defaults) == {
        "retention.ms": "1234", "cleanup.policy": "compact",
        "unclean.leader.election.enable": "true", "min.insync.replicas": "2"}


def test_config_defaults_are_kafkas():
    config = ControllerConfig.from_properties({})
    # Without controller.quorum.voters, node 1 (the default node.id) is its own controller,
    # and the broker of its own process.
    assert config == dataclasses.replace(ControllerConfig(), controller_ids=frozenset({1}),
                                         colocated_broker_id=1)
    assert (config.broker_session_timeout_ms, config.broker_heartbeat_interval_ms) == (9000, 2000)
    assert config.unclean_leader_election_enable is False
    assert dict(config.topic_defaults) == {}


@pytest.mark.parametrize("props, key", [
    ({"broker.session.timeout.ms": "soon"}, "broker.session.timeout.ms"),
    ({"broker.session.timeout.ms": "0"}, "broker.session.timeout.ms"),
    ({"num.partitions": "0"}, "num.partitions"),
    ({"controller.quorum.voters": "x@h:1", "controller.listener.names": "CONTROLLER"},
     "controller.quorum.voters"),
    ({"unclean.leader.election.enable": "perhaps"}, "unclean.leader.election.enable"),
])
def test_bad_config_values_name_the_key(props, key):
    with pytest.raises(ConfigError) as exc:
        ControllerConfig.from_properties(props)
    assert key in str(exc.value)
