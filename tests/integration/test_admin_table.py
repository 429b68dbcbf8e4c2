"""confluent-kafka's AdminClient against a 3-node cluster, method by method, with good and bad
arguments: each row is one call and the outcome Kafka documents for it (a result, or the
error code a Kafka cluster answers), so a method that times out, drops the connection or
answers differently fails its row. Rows that need a state (records, a group) share the
module's topic and group, set up once."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import pytest
from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, ElectionType, KafkaError, KafkaException,
                             Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
                                   OffsetSpec, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from core.protocol.errors import ErrorCode
from tests.support.cluster import KRaftCluster

pytestmark = pytest.mark.integration

TOPIC, GROUP, RECORDS = "table", "table-group", 30
E = KafkaError


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KRaftCluster(tmp_path_factory.mktemp("cluster"), combined=3) as c:
        c.admin = c.admin_when_ready()
        for f in c.admin.create_topics([NewTopic(TOPIC, 3, 3), NewTopic("to-delete", 1, 3),
                                        NewTopic("to-grow", 1, 3)]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": c.bootstrap, "log_level": 3})
        for i in range(RECORDS):
            p.produce(TOPIC, b"v%d" % i, partition=i % 3, timestamp=1_000_000 + i)
        assert p.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "log_level": 3})
        consumer.assign([TopicPartition(TOPIC, 0, 4)])
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
        consumer.close()
        yield c


def outcome(future_or_value):
    """0 and the result, or the Kafka error code and None."""
    try:
        return 0, future_or_value.result(30) if hasattr(future_or_value, "result") else future_or_value
    except KafkaException as exc:
        return exc.args[0].code(), None


@dataclass
class Row:
    name: str
    call: Callable            # admin -> {key: future} or a future
    expected: dict            # key -> error code (0: success); for a single future, key None
    check: Callable | None = None   # {key: result} -> None, asserts more


def _results(answer) -> dict:
    if isinstance(answer, dict):
        return {str(getattr(k, "topic", k)) if not isinstance(k, str) else k: outcome(f) for k, f in answer.items()}
    return {None: outcome(answer)}


def _offsets(results) -> None:
    by = {tp.partition: r.offset for tp, (code, r) in results.items()}
    assert by == {0: 0, 1: RECORDS // 3, 2: 9}, by   # earliest, latest, max timestamp (the 30th record)


ROWS = [
    # (a name given twice is left out: confluent-kafka keys its futures by name and crashes on the
    # one answer Kafka gives for both; the controller's tests cover it)
    Row("create_topics: good, invalid name, too many replicas, existing, no partitions, bad config",
        lambda a: a.create_topics([NewTopic("ct-ok", 2, 3), NewTopic("bad name!", 1, 1), NewTopic("ct-rf", 1, 4),
                                   NewTopic(TOPIC, 1, 1), NewTopic("ct-zero", 0, 1),
                                   NewTopic("ct-conf", 1, 1, config={"retention.ms": "soon"})]),
        {"ct-ok": 0, "bad name!": E.TOPIC_EXCEPTION, "ct-rf": E.INVALID_REPLICATION_FACTOR,
         TOPIC: E.TOPIC_ALREADY_EXISTS, "ct-zero": E.INVALID_PARTITIONS, "ct-conf": E.INVALID_CONFIG}),
    Row("create_topics validate_only creates nothing",
        lambda a: a.create_topics([NewTopic("ct-validate", 1, 3)], validate_only=True), {"ct-validate": 0},
        lambda r: None),
    Row("create_partitions: grow, shrink, unknown",
        lambda a: a.create_partitions([NewPartitions("to-grow", 3), NewPartitions(TOPIC, 2), NewPartitions("nope", 4)]),
        {"to-grow": 0, TOPIC: E.INVALID_PARTITIONS, "nope": E.UNKNOWN_TOPIC_OR_PART}),
    Row("delete_topics: existing and unknown", lambda a: a.delete_topics(["to-delete", "nope"]),
        {"to-delete": 0, "nope": E.UNKNOWN_TOPIC_OR_PART}),
    Row("describe_topics: a topic and an unknown one",
        lambda a: a.describe_topics(TopicCollection([TOPIC, "nope"])), {TOPIC: 0, "nope": E.UNKNOWN_TOPIC_OR_PART},
        lambda r: _replicas_everywhere(r[TOPIC][1])),
    Row("describe_cluster", lambda a: a.describe_cluster(), {None: 0},
        lambda r: _three_nodes(r[None][1])),
    Row("list_offsets: earliest, latest, max timestamp",
        lambda a: a.list_offsets({TopicPartition(TOPIC, 0): OffsetSpec.earliest(),
                                  TopicPartition(TOPIC, 1): OffsetSpec.latest(),
                                  TopicPartition(TOPIC, 2): OffsetSpec.max_timestamp()}),
        None),
    Row("list_offsets: by timestamp",
        lambda a: a.list_offsets({TopicPartition(TOPIC, 1): OffsetSpec.for_timestamp(1_000_010)}), {TOPIC: 0},
        lambda r: _at(r, 3)),
    Row("list_offsets: past the last timestamp",
        lambda a: a.list_offsets({TopicPartition(TOPIC, 1): OffsetSpec.for_timestamp(2_000_000)}), {TOPIC: 0},
        lambda r: _at(r, -1)),
    Row("describe_configs: a topic, an unknown topic",
        lambda a: a.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC),
                                      ConfigResource(ResourceType.TOPIC, "nope")]),
        {f"ConfigResource(ResourceType.TOPIC,{TOPIC})": 0,
         "ConfigResource(ResourceType.TOPIC,nope)": E.UNKNOWN_TOPIC_OR_PART}),
    Row("incremental_alter_configs: a good value, a bad one",
        lambda a: a.incremental_alter_configs([
            ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
                ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)]),
            ConfigResource(ResourceType.TOPIC, "to-grow", incremental_configs=[
                ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])]),
        {f"ConfigResource(ResourceType.TOPIC,{TOPIC})": 0,
         "ConfigResource(ResourceType.TOPIC,to-grow)": E.INVALID_CONFIG}),
    Row("delete_records: past the high watermark",
        lambda a: a.delete_records([TopicPartition(TOPIC, 1, RECORDS)]), {TOPIC: E.OFFSET_OUT_OF_RANGE}),
    Row("elect_leaders: preferred leaders already lead",
        lambda a: a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]), {None: 0},
        lambda r: _not_needed(r[None][1])),
    Row("list_consumer_group_offsets", lambda a: a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)]),
        {GROUP: 0}, lambda r: _committed(r[GROUP][1])),
    Row("describe_consumer_groups: an empty group and one that never was",
        lambda a: a.describe_consumer_groups([GROUP, "never-was"]), {GROUP: 0, "never-was": 0},
        lambda r: _states(r)),
    Row("delete_consumer_groups: one that never was", lambda a: a.delete_consumer_groups(["never-was"]),
        {"never-was": E.GROUP_ID_NOT_FOUND}),
    Row("describe_user_scram_credentials: a user with none",
        lambda a: a.describe_user_scram_credentials(["nobody"]), {"nobody": E.RESOURCE_NOT_FOUND}),
    Row("alter_user_scram_credentials: an upsertion", lambda a: a.alter_user_scram_credentials([
        UserScramCredentialUpsertion("table-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                     b"password", b"salt")]), {"table-user": 0}),
]


def _name(code: int):
    """A broker error's name, so that a failing row reads; librdkafka's own (negative) as they are."""
    return ErrorCode(code).name if code > 0 else code


def _at(results, offset: int) -> None:
    [(_, info)] = results.values()
    assert info.offset == offset   # partition 1 holds records 1, 4, 7, 10, ... (timestamp 1,000,000 + i) at 0, 1, 2, 3


def _replicas_everywhere(description) -> None:
    assert len(description.partitions) == 3
    assert all(len(p.replicas) == 3 and len(p.isr) == 3 for p in description.partitions)


def _three_nodes(description) -> None:
    assert len(description.nodes) == 3 and description.controller is not None and description.cluster_id


def _not_needed(results) -> None:
    [(tp, error)] = results.items()
    assert error.code() == E.ELECTION_NOT_NEEDED


def _committed(group) -> None:
    assert {(tp.topic, tp.partition, tp.offset) for tp in group.topic_partitions} == {(TOPIC, 0, 4)}


def _states(results) -> None:
    from confluent_kafka import ConsumerGroupState
    assert results[GROUP][1].state == ConsumerGroupState.EMPTY
    assert results["never-was"][1].state == ConsumerGroupState.DEAD


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_each_admin_method(cluster, row):
    answer = row.call(cluster.admin)
    if row.expected is None:   # keyed by TopicPartition: the check reads them
        results = {k: outcome(f) for k, f in answer.items()}
        assert all(code == 0 for code, _ in results.values()), results
        _offsets(results)
        return
    results = _results(answer)
    assert {k: _name(code) for k, (code, _) in results.items()} == {k: _name(code) for k, code in row.expected.items()}
    if row.check is not None:
        row.check(results)


def test_validate_only_left_nothing_and_the_rows_changed_what_they_said(cluster):
    time.sleep(1)
    topics = cluster.admin.list_topics(timeout=10).topics
    assert "ct-validate" not in topics and "bad name!" not in topics and "ct-ok" in topics
