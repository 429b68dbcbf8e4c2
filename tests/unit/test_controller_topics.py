"""CreateTopics, DeleteTopics and CreatePartitions against the controller."""
from __future__ import annotations

import time

import pytest

from core.controller import ControllerConfig
from core.controller.topics import ZERO_UUID
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import Harness, new_topic

RACKS = {1: "a", 2: "b", 3: "c"}


@pytest.fixture
def h():
    harness = Harness(ControllerConfig(num_partitions=2, default_replication_factor=3,
                                       topic_defaults={"retention.ms": "1000"}), seed=11)
    harness.add_brokers(RACKS)
    harness.create_topic("a_b", 1, 1)
    return harness


def kinds(records) -> list[str]:
    return [type(r).__name__ for r in records]


# --------------------------------------------------------------------------- CreateTopics


BAD_TOPICS = [
    ("empty name", new_topic(""), E.INVALID_TOPIC_EXCEPTION, "the empty string is not allowed"),
    ("dot", new_topic("."), E.INVALID_TOPIC_EXCEPTION, "'.' is not allowed"),
    ("dot dot", new_topic(".."), E.INVALID_TOPIC_EXCEPTION, "'..' is not allowed"),
    ("too long", new_topic("x" * 250), E.INVALID_TOPIC_EXCEPTION, "max allowed length 249"),
    ("illegal character", new_topic("no spaces"), E.INVALID_TOPIC_EXCEPTION,
     "characters other than ASCII alphanumerics"),
    ("non-ASCII letter", new_topic("caf\u00e9"), E.INVALID_TOPIC_EXCEPTION, "ASCII"),
    ("metadata topic", new_topic("__cluster_metadata"), E.INVALID_REQUEST, "prohibited"),
    ("exists", new_topic("a_b"), E.TOPIC_ALREADY_EXISTS, "Topic 'a_b' already exists."),
    ("collides", new_topic("a.b"), E.INVALID_TOPIC_EXCEPTION,
     "Topic 'a.b' collides with existing topic: a_b"),
    ("zero partitions", new_topic("t", 0, 1), E.INVALID_PARTITIONS, "non-positive"),
    ("negative partitions", new_topic("t", -2, 1), E.INVALID_PARTITIONS, "non-positive"),
    ("zero replicas", new_topic("t", 1, 0), E.INVALID_REPLICATION_FACTOR, "larger than 0"),
    ("negative replicas", new_topic("t", 1, -3), E.INVALID_REPLICATION_FACTOR, "larger than 0"),
    ("too many replicas", new_topic("t", 1, 4), E.INVALID_REPLICATION_FACTOR,
     "only 3 broker(s) are registered"),
    ("unknown config", new_topic("t", configs={"retention.foo": "1"}), E.INVALID_CONFIG,
     "retention.foo"),
    ("bad config value", new_topic("t", configs={"retention.ms": "soon"}), E.INVALID_CONFIG,
     "retention.ms"),
    ("config below minimum", new_topic("t", configs={"min.insync.replicas": "0"}),
     E.INVALID_CONFIG, "min.insync.replicas"),
    ("null config", new_topic("t", configs={"retention.ms": None}), E.INVALID_CONFIG,
     "Null value not supported for topic configs: retention.ms"),
    ("empty cleanup policy", new_topic("t", configs={"cleanup.policy": ""}), E.INVALID_CONFIG,
     "cleanup.policy"),
    ("assignment with a count", m.CreateTopicsRequest.CreatableTopic(
         name="t", num_partitions=1, replication_factor=-1, configs=[],
         assignments=[m.CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0,
                                                                        broker_ids=[1])]),
     E.INVALID_REQUEST, "numPartitions was not set to -1"),
    ("assignment with a factor", m.CreateTopicsRequest.CreatableTopic(
         name="t", num_partitions=-1, replication_factor=1, configs=[],
         assignments=[m.CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0,
                                                                        broker_ids=[1])]),
     E.INVALID_REQUEST, "replication factor was not set to -1"),
    ("unknown broker", new_topic("t", assignments={0: [1, 9]}), E.INVALID_REPLICA_ASSIGNMENT,
     "broker 9, but no such broker is registered"),
    ("broker twice", new_topic("t", assignments={0: [2, 2]}), E.INVALID_REPLICA_ASSIGNMENT,
     "the broker 2 more than once"),
    ("empty replica list", new_topic("t", assignments={0: []}), E.INVALID_REPLICA_ASSIGNMENT,
     "empty replica list"),
    ("uneven sizes", new_topic("t", assignments={0: [1, 2], 1: [3]}),
     E.INVALID_REPLICA_ASSIGNMENT, "not consistent with previous partitions"),
    ("gap", new_topic("t", assignments={0: [1], 2: [2]}), E.INVALID_REPLICA_ASSIGNMENT,
     "consecutive 0-based"),
    ("not from zero", new_topic("t", assignments={1: [1]}), E.INVALID_REPLICA_ASSIGNMENT,
     "consecutive 0-based"),
]


@pytest.mark.parametrize("topic, code, message", [c[1:] for c in BAD_TOPICS],
                         ids=[c[0] for c in BAD_TOPICS])
def test_create_topics_rejects(h, topic, code, message):
    before = h.image
    result = h.create(topic)
    [res] = result.response.topics
    assert res.error_code == code
    assert message in res.error_message
    assert (res.num_partitions, res.replication_factor, res.topic_id) == (-1, -1, ZERO_UUID)
    assert result.records == [] and h.image == before


def test_a_partition_index_given_twice(h):
    C = m.CreateTopicsRequest
    topic = C.CreatableTopic(name="t", num_partitions=-1, replication_factor=-1, configs=[],
                             assignments=[C.CreatableReplicaAssignment(partition_index=0,
                                                                       broker_ids=[b])
                                          for b in (1, 2)])
    [res] = h.create(topic).response.topics
    assert (res.error_code, res.error_message) == (
        E.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition assignments for partition 0")


def test_a_manual_assignment_of_fenced_brokers_only(h):
    h.heartbeat(3, fence=True)
    [res] = h.create(new_topic("t", assignments={0: [3]})).response.topics
    assert res.error_code == E.INVALID_REPLICA_ASSIGNMENT
    assert "fenced or in controlled shutdown" in res.error_message
    h.create_topic("u", assignments={0: [3, 1]})
    p = h.partition("u")
    assert (p.replicas, p.isr, p.leader) == ((3, 1), (1,), 1)


def test_a_topic_named_twice_is_answered_once_and_others_go_ahead(h):
    # Kafka's ControllerApis answers each duplicated name once; librdkafka fails to parse a
    # response that names a topic twice ("Broker returned topic x multiple times")
    result = h.create(new_topic("x"), new_topic("y"), new_topic("x"))
    codes = [(t.name, t.error_code) for t in result.response.topics]
    assert codes == [("x", E.INVALID_REQUEST), ("y", 0)]
    assert result.response.topics[0].error_message == "Duplicate topic name."
    assert h.image.topic("y") is not None and h.image.topic("x") is None


def test_topics_of_one_request_see_each_other(h):
    result = h.create(new_topic("p.q"), new_topic("p_q"))
    assert [t.error_code for t in result.response.topics] == [0, E.INVALID_TOPIC_EXCEPTION]


def test_create_with_defaults_writes_topic_configs_and_partitions(h):
    result = h.create(new_topic("t", -1, -1, configs={"cleanup.policy": "compact",
                                                      "retention.ms": "5000"}))
    [res] = result.response.topics
    assert res.error_code == 0 and res.error_message is None
    assert kinds(result.records) == ["TopicRecord", "ConfigRecord", "ConfigRecord",
                                     "PartitionRecord", "PartitionRecord"]
    topic = h.image.topic("t")
    assert res.topic_id == topic.id != ZERO_UUID
    assert (res.num_partitions, res.replication_factor) == (2, 3)
    assert len(topic.partitions) == 2
    for p in topic.partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == (0, 0, 0)
    assert dict(h.image.topic_config("t")) == {"cleanup.policy": "compact", "retention.ms": "5000"}


def test_v5_response_reports_effective_configs_and_their_sources(h):
    C = m.IncrementalAlterConfigsRequest
    h.call("incremental_alter_configs", C(resources=[
        C.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            C.AlterableConfig(name="log.segment.bytes", config_operation=0, value="1048576")]),
        C.AlterConfigsResource(resource_type=4, resource_name=str(h.ctl.node_id), configs=[
            C.AlterableConfig(name="compression.type", config_operation=0, value="zstd")]),
    ]), 1)
    result = h.create(new_topic("t", configs={"cleanup.policy": "compact"}), version=5)
    configs = {c.name: (c.value, c.config_source) for c in result.response.topics[0].configs}
    assert list(configs) == sorted(configs)
    assert configs["cleanup.policy"] == ("compact", 1)
    assert configs["compression.type"] == ("zstd", 2)
    assert configs["segment.bytes"] == ("1048576", 3)
    assert configs["retention.ms"] == ("1000", 4)
    assert configs["min.insync.replicas"] == ("1", 5)
    assert all(not c.read_only and not c.is_sensitive for c in result.response.topics[0].configs)


@pytest.mark.parametrize("version", range(8))
def test_every_version_answers(h, version):
    result = h.create(new_topic(f"t{version}", 1, 2), new_topic("bad!"), version=version)
    ok, bad = result.response.topics
    assert ok.error_code == 0 and bad.error_code == E.INVALID_TOPIC_EXCEPTION


def test_validate_only_checks_everything_and_writes_nothing(h):
    before = h.image
    result = h.create(new_topic("t", 3, 2, configs={"retention.ms": "10"}), new_topic("a_b"),
                      validate_only=True)
    ok, exists = result.response.topics
    assert result.records == [] and h.image == before
    assert (ok.error_code, ok.num_partitions, ok.replication_factor, ok.topic_id) == (0, 3, 2, ZERO_UUID)
    assert ok.configs
    assert exists.error_code == E.TOPIC_ALREADY_EXISTS


def test_too_many_partitions_is_refused_before_anything_is_allocated(h):
    start = time.perf_counter()
    result = h.create(new_topic("huge", 2**31 - 1, 3), new_topic("fits", 9_000, 1),
                      new_topic("over", 2_000, 1))
    # Allocating 2**31 partitions would take far longer than this (and run out of memory);
    # the 9,000 that fit take a second or two, more on a loaded machine.
    assert time.perf_counter() - start < 20
    huge, fits, over = result.response.topics
    assert (huge.error_code, huge.error_message) == (
        E.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
    assert fits.error_code == 0
    assert over.error_code == E.POLICY_VIOLATION
    assert len(result.records) <= 10_000


# --------------------------------------------------------------------------- DeleteTopics


def delete_by_name(h, *names, version=5):
    return h.call("delete_topics", m.DeleteTopicsRequest(topic_names=list(names), timeout_ms=1),
                  version)


def delete_by_id(h, *pairs):
    D = m.DeleteTopicsRequest
    return h.call("delete_topics", D(topics=[D.DeleteTopicState(name=n, topic_id=i)
                                             for n, i in pairs], timeout_ms=1), 6)


@pytest.mark.parametrize("version", range(6))
def test_delete_by_name(h, version):
    h.create_topic("t", configs={"retention.ms": "5"})
    result = delete_by_name(h, "t", "missing", version=version)
    ok, missing = result.response.responses
    assert (ok.name, ok.error_code) == ("t", 0)
    assert (missing.name, missing.error_code) == ("missing", E.UNKNOWN_TOPIC_OR_PARTITION)
    assert kinds(result.records) == ["RemoveTopicRecord"]
    assert h.image.topic("t") is None and not h.image.topic_config("t")


def test_internal_topics_are_never_deleted_by_name_or_id(h):
    """Deleting __consumer_offsets would lose every group's committed offsets."""
    h.create_topic("__consumer_offsets")
    offsets = h.image.topic("__consumer_offsets").id
    for result in (delete_by_name(h, "__consumer_offsets", version=5), delete_by_id(h, (None, offsets))):
        [refused] = result.response.responses
        assert refused.error_code == E.INVALID_TOPIC_EXCEPTION
        assert refused.error_message == "__consumer_offsets is an internal topic and cannot be deleted"
        assert result.records == []
    assert h.image.topic("__consumer_offsets") is not None


def test_delete_by_id_and_the_v6_errors(h):
    h.create_topic("t")
    h.create_topic("u")
    t, u = h.image.topic("t").id, h.image.topic("u").id
    a_b = h.image.topic("a_b").id
    unknown = bytes([5] * 16)
    result = delete_by_id(h, (None, t), ("u", ZERO_UUID), (None, unknown), (None, ZERO_UUID),
                          ("a_b", a_b), ("t", ZERO_UUID))
    got = [(r.name, r.topic_id, r.error_code) for r in result.response.responses]
    assert got == [("t", t, 0), ("u", u, 0), (None, unknown, E.UNKNOWN_TOPIC_ID),
                   (None, ZERO_UUID, E.INVALID_REQUEST), ("a_b", a_b, E.INVALID_REQUEST),
                   ("t", ZERO_UUID, E.INVALID_REQUEST)]
    messages = [r.error_message for r in result.response.responses]
    assert messages[3] == "Neither topic name nor id were specified."
    assert messages[4] == "You may not specify both topic name and topic id."
    assert messages[5] == "The provided topic name maps to an ID that was already supplied."
    assert h.image.topic("t") is None and h.image.topic("u") is None
    assert h.image.topic("a_b") is not None


def test_duplicates_in_delete(h):
    h.create_topic("t")
    result = delete_by_name(h, "t", "t")   # each duplicate answered once, as Kafka's controller does
    assert [r.error_code for r in result.response.responses] == [E.INVALID_REQUEST]
    tid = h.image.topic("t").id
    result = delete_by_id(h, (None, tid), (None, tid))
    assert [r.error_message for r in result.response.responses] == ["Duplicate topic id."]
    assert h.image.topic("t") is not None


@pytest.mark.parametrize("version, code", [(2, E.INVALID_REQUEST), (3, E.TOPIC_DELETION_DISABLED),
                                           (6, E.TOPIC_DELETION_DISABLED)])
def test_deletion_disabled(version, code):
    h = Harness(ControllerConfig(delete_topic_enable=False))
    h.add_brokers({1: None})
    h.create_topic("t")
    if version >= 6:
        result = delete_by_id(h, ("t", ZERO_UUID))
    else:
        result = delete_by_name(h, "t", version=version)
    assert [r.error_code for r in result.response.responses] == [code]
    assert h.image.topic("t") is not None


def test_a_deleted_name_can_be_created_again_with_a_new_id(h):
    h.create_topic("t")
    old = h.image.topic("t").id
    delete_by_name(h, "t")
    h.create_topic("t")
    assert h.image.topic("t").id != old


# --------------------------------------------------------------------------- CreatePartitions


def grow(h, *topics, validate_only=False, version=3):
    P = m.CreatePartitionsRequest
    return h.call("create_partitions", P(topics=[
        P.CreatePartitionsTopic(name=name, count=count, assignments=None if a is None else [
            P.CreatePartitionsAssignment(broker_ids=list(b)) for b in a])
        for name, count, a in topics], timeout_ms=1, validate_only=validate_only), version)


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_places_new_partitions(h, version):
    h.create_topic("t", 2, 2)
    result = grow(h, ("t", 5, None), version=version)
    assert [r.error_code for r in result.response.results] == [0]
    assert [r.partition_id for r in result.records] == [2, 3, 4]
    for pid in range(5):
        p = h.partition("t", pid)
        assert len(p.replicas) == 2 and p.isr == p.replicas


def test_create_partitions_with_manual_assignments(h):
    h.create_topic("t", 1, 2)
    h.heartbeat(3, fence=True)
    grow(h, ("t", 3, [[1, 2], [3, 1]]))
    assert h.partition("t", 1).replicas == (1, 2)
    p = h.partition("t", 2)
    assert (p.replicas, p.isr, p.leader) == ((3, 1), (1,), 1)


BAD_GROWTH = [
    ("unknown topic", ("nope", 3, None), E.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
    ("same count", ("t", 2, None), E.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
    ("fewer", ("t", 1, None), E.INVALID_PARTITIONS, "1 would not be an increase"),
    ("negative", ("t", -5, None), E.INVALID_PARTITIONS, "would not be an increase"),
    ("assignment count", ("t", 4, [[1, 2]]), E.INVALID_REPLICA_ASSIGNMENT,
     "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    ("empty assignments", ("t", 3, []), E.INVALID_REPLICA_ASSIGNMENT, "only 0 assignment(s)"),
    ("unknown broker", ("t", 3, [[1, 7]]), E.INVALID_REPLICA_ASSIGNMENT, "broker 7"),
    ("broker twice", ("t", 3, [[1, 1]]), E.INVALID_REPLICA_ASSIGNMENT, "more than once"),
    ("wrong size", ("t", 3, [[1]]), E.INVALID_REPLICA_ASSIGNMENT,
     "with 1 replica(s), but this is not consistent with previous partitions, which have 2"),
    ("too many", ("t", 2**31 - 1, None), E.POLICY_VIOLATION, "excessively large"),
]


@pytest.mark.parametrize("topic, code, message", [c[1:] for c in BAD_GROWTH],
                         ids=[c[0] for c in BAD_GROWTH])
def test_create_partitions_rejects(h, topic, code, message):
    h.create_topic("t", 2, 2)
    before = h.image
    result = grow(h, topic)
    [res] = result.response.results
    assert res.error_code == code and message in res.error_message
    assert result.records == [] and h.image == before


def test_create_partitions_validate_only_and_duplicates(h):
    h.create_topic("t", 1, 1)
    result = grow(h, ("t", 4, None), validate_only=True)
    assert result.response.results[0].error_code == 0 and result.records == []
    assert len(h.image.topic("t").partitions) == 1
    result = grow(h, ("t", 2, None), ("t", 3, None))
    assert [r.error_message for r in result.response.results] == ["Duplicate topic name."]


def test_create_partitions_when_no_broker_can_lead(h):
    h.create_topic("t", 1, 1)
    for b in RACKS:
        h.heartbeat(b, fence=True)
    [res] = grow(h, ("t", 2, None)).response.results
    assert (res.error_code, res.error_message) == (E.INVALID_REPLICATION_FACTOR,
                                                   "All brokers are currently fenced.")
