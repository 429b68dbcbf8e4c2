"""kafkajs's admin client against a 3-node cluster, method by method, with good and bad
arguments: the calls run in order in one kafkajs process (tests/js/kafkajs_client.js's admin
action), and each row states what a Kafka cluster gives kafkajs back: the result, or the error
kafkajs raises (its type, and for aggregate errors the type of each)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from tests.support.clients import CLIENTS
from tests.support.cluster import KRaftCluster

pytestmark = pytest.mark.integration

T = "kjs-table"

# (method, args, expected): expected is "ok", a check of the result, or the error's type
# (a tuple of types for kafkajs's aggregate errors).
CALLS = [
    ("createTopics", {"topics": [{"topic": T, "numPartitions": 3, "replicationFactor": 3}], "waitForLeaders": True},
     lambda ok: ok is True),
    ("createTopics", {"topics": [{"topic": T}]}, lambda ok: ok is False),   # exists: kafkajs says false
    ("createTopics", {"topics": [{"topic": "bad name!"}, {"topic": "kjs-rf", "replicationFactor": 5}]},
     ("INVALID_TOPIC_EXCEPTION", "INVALID_REPLICATION_FACTOR")),
    ("listTopics", {}, lambda ok: T in ok),
    ("fetchTopicMetadata", {"topics": [T]},
     lambda ok: [sorted(p["replicas"]) for p in ok["topics"][0]["partitions"]] == [[1, 2, 3]] * 3),
    ("fetchTopicOffsets", T, lambda ok: sorted((p["partition"], p["low"], p["high"]) for p in ok)
     == [(0, "0", "4"), (1, "0", "3"), (2, "0", "3")]),
    ("describeCluster", {}, lambda ok: sorted(b["nodeId"] for b in ok["brokers"]) == [1, 2, 3] and ok["clusterId"]),
    ("describeConfigs", {"resources": [{"type": 2, "name": T}], "includeSynonyms": True},
     lambda ok: any(e["configName"] == "retention.ms" for e in ok["resources"][0]["configEntries"])),
    ("alterConfigs", {"resources": [{"type": 2, "name": T, "configEntries": [{"name": "retention.ms",
                                                                              "value": "soon"}]}]}, "INVALID_CONFIG"),
    ("alterConfigs", {"resources": [{"type": 2, "name": T, "configEntries": [{"name": "retention.ms",
                                                                              "value": "86400000"}]}]}, "ok"),
    ("createPartitions", {"topicPartitions": [{"topic": T, "count": 2}]}, "INVALID_PARTITIONS"),
    ("createPartitions", {"topicPartitions": [{"topic": "nope", "count": 2}]}, "UNKNOWN_TOPIC_OR_PARTITION"),
    ("setOffsets", {"groupId": "kjs-group", "topic": T, "partitions": [{"partition": 0, "offset": "2"}]}, "ok"),
    ("fetchOffsets", {"groupId": "kjs-group", "topics": [T]},
     lambda ok: {p["partition"]: p["offset"] for p in ok[0]["partitions"]} == {0: "2", 1: "-1", 2: "-1"}),
    ("describeGroups", ["kjs-group", "never-was"],   # kafkajs asks each group's coordinator: any order
     lambda ok: {g["groupId"]: g["state"] for g in ok["groups"]} == {"kjs-group": "Empty", "never-was": "Dead"}),
    ("listGroups", {}, lambda ok: "kjs-group" in [g["groupId"] for g in ok["groups"]]),
    ("deleteTopicRecords", {"topic": T, "partitions": [{"partition": 1, "offset": "2"}]}, "ok"),
    ("fetchTopicOffsets", T, lambda ok: {p["partition"]: p["low"] for p in ok} == {0: "0", 1: "2", 2: "0"}),
    ("deleteGroups", ["kjs-group"], lambda ok: [(g["groupId"], g["errorCode"]) for g in ok] == [("kjs-group", 0)]),
    ("deleteTopics", {"topics": [T]}, "ok"),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    with KRaftCluster(tmp_path_factory.mktemp("cluster"), combined=3) as cluster:
        cluster.admin_when_ready()
        first = CLIENTS["kafkajs"].admin(cluster.bootstrap, [(m, a) for m, a, _ in CALLS[:1]])
        p = Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        for i in range(10):
            p.produce(T, b"v", partition=i % 3)
        assert p.flush(30) == 0
        time.sleep(0.5)
        rest = CLIENTS["kafkajs"].admin(cluster.bootstrap, [(m, a) for m, a, _ in CALLS[1:]])
        yield first + rest


@pytest.mark.parametrize("index", range(len(CALLS)), ids=[f"{i:02d}-{c[0]}" for i, c in enumerate(CALLS)])
def test_each_kafkajs_admin_call(answers, index):
    method, args, expected = CALLS[index]
    answer = answers[index]
    if callable(expected):
        assert "ok" in answer, answer
        assert expected(answer["ok"]), answer["ok"]
    elif expected == "ok":
        assert "ok" in answer, answer
    elif isinstance(expected, tuple):
        assert "error" in answer, answer
        assert tuple(e["type"] for e in answer["error"]["errors"]) == expected, answer
    else:
        assert "error" in answer and answer["error"]["type"] == expected, answer
