"""Partition reassignment (KIP-455) across real node processes: one controller, four brokers,
the fourth (104) joining with nothing on it.

AlterPartitionReassignments and ListPartitionReassignments go as raw requests to a broker,
which forwards them to the controller. To see a reassignment in progress, the broker being
added is slowed down with the replication throttles (KIP-73): a dynamic
follower.replication.throttled.rate of 1 byte/s on broker 104 (the controller must accept it
as a dynamic broker config) and the topic's follower.replication.throttled.replicas; with
small replica fetches, 104 then fetches one 50 kB batch about every 11 s. Lifting the rate
lets it catch up, and the leader's AlterPartition completes the move. Records are written with
confluent-kafka (acks=all) and read back from the new leader.
"""
from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.clients import unique_topic
from tests.support.cluster import KRaftCluster

BROKERS = [101, 102, 103, 104]
OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "replica.lag.time.max.ms": "2000", "replica.fetch.max.bytes": "50000",
             "auto.leader.rebalance.enable": "false"}
RECORDS = 600            # of ~1 kB: a dozen throttled fetches' worth
THROTTLE = "follower.replication.throttled.rate"

A = m.AlterPartitionReassignmentsRequest
L = m.ListPartitionReassignmentsRequest
IA = m.IncrementalAlterConfigsRequest


def wait_until(predicate, timeout: float, what: str, cluster):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:   # noqa: BLE001 — a broker may be between states
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: last saw {last!r}\n{cluster.log_tails()}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KRaftCluster(tmp_path_factory.mktemp("reassign"), controllers=1, brokers=4,
                      overrides=OVERRIDES) as c:
        wait_until(lambda: sorted(AdminClient({"bootstrap.servers": c.bootstrap})
                                  .list_topics(timeout=5).brokers) == BROKERS, 30,
                   "four brokers registered", c)
        yield c


def raw(cluster, node_id: int, api_key: int, request, version: int):
    host, port = cluster.nodes[node_id].bootstrap.rsplit(":", 1)

    async def ask():
        conn = await BrokerConnection(host, int(port), request_timeout_ms=30_000).connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(ask)


def reassign(cluster, topic: str, targets: dict[int, list[int] | None], via: int = 102):
    """[(partition, error code)] of an AlterPartitionReassignments sent to broker `via`."""
    answer = raw(cluster, via, 45, A(timeout_ms=30_000, topics=[A.ReassignableTopic(
        name=topic, partitions=[A.ReassignablePartition(partition_index=i, replicas=r)
                                for i, r in targets.items()])]), 0)
    assert answer.error_code == 0, answer
    [t] = answer.responses
    return [(p.partition_index, p.error_code) for p in t.partitions]


def ongoing(cluster, via: int = 103) -> dict:
    answer = raw(cluster, via, 46, L(timeout_ms=30_000, topics=None), 0)
    assert answer.error_code == 0, answer
    return {t.name: [(p.partition_index, list(p.replicas), list(p.adding_replicas),
                      list(p.removing_replicas)) for p in t.partitions] for t in answer.topics}


def layout(cluster, topic: str, via: int = 101):
    """(leader, replicas in order, sorted ISR) in that broker's Metadata answer."""
    M = m.MetadataRequest
    answer = raw(cluster, via, 3, M(topics=[M.MetadataRequestTopic(name=topic, topic_id=bytes(16))],
                                    allow_auto_topic_creation=False), 12)
    [p] = answer.topics[0].partitions
    return p.leader_id, list(p.replica_nodes), sorted(p.isr_nodes)


def set_throttle(cluster, broker: int, value: str | None) -> None:
    """The dynamic follower.replication.throttled.rate of a broker (None: delete it)."""
    answer = raw(cluster, 101, 44, IA(validate_only=False, resources=[IA.AlterConfigsResource(
        resource_type=4, resource_name=str(broker), configs=[IA.AlterableConfig(
            name=THROTTLE, config_operation=0 if value is not None else 1, value=value)])]), 1)
    [res] = answer.responses
    assert (res.error_code, res.error_message) == (0, None), res


def create(cluster, topic: str, replicas: list[int], **configs) -> None:
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = a.create_topics([NewTopic(topic, 1, replica_assignment=[replicas], config=configs)])
    fs[topic].result(15)
    wait_until(lambda: layout(cluster, topic)[2] == sorted(replicas), 15, "the full ISR", cluster)


def produce(cluster, topic: str) -> list[bytes]:
    values = [b"%05d:" % i + bytes([65 + i % 26]) * 1000 for i in range(RECORDS)]
    errors: list = []
    # Batches of ~16 kB, so that a throttled replica needs many fetches to catch up (a fetch
    # returns at least one whole batch).
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5, "batch.size": 16384})
    for v in values:
        p.produce(topic, value=v, partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]
    return values


def consume(cluster, topic: str, via: int, count: int) -> list[bytes]:
    """Every record from offset 0, bootstrapping from broker `via` alone."""
    c = Consumer({"bootstrap.servers": cluster.nodes[via].bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        c.close()
    return got


def partition_dir(cluster, node_id: int, topic: str) -> Path:
    return cluster.nodes[node_id].data_dir / f"{topic}-0"


def test_a_partition_moves_onto_the_empty_broker_and_off_its_leader(cluster):
    topic = unique_topic("move")
    create(cluster, topic, [101, 102, 103], **{"min.insync.replicas": "2",
                                                "follower.replication.throttled.replicas": "0:104"})
    assert layout(cluster, topic)[0] == 101
    assert not partition_dir(cluster, 104, topic).exists()
    set_throttle(cluster, 104, "1")
    try:
        values = produce(cluster, topic)
        assert reassign(cluster, topic, {0: [104, 103, 102]}) == [(0, 0)]
        # In progress: the target first, the leaving leader last; 104 crawls.
        assert ongoing(cluster) == {topic: [(0, [104, 103, 102, 101], [104], [101])]}
        wait_until(lambda: layout(cluster, topic, via=104) == (101, [104, 103, 102, 101],
                                                               [101, 102, 103]),
                   15, "104 sees the reassignment", cluster)
        wait_until(lambda: partition_dir(cluster, 104, topic).exists(), 15,
                   "104 opens its replica", cluster)
        assert ongoing(cluster, via=101) == {topic: [(0, [104, 103, 102, 101], [104], [101])]}
    finally:
        set_throttle(cluster, 104, None)
    wait_until(lambda: ongoing(cluster) == {}, 30, "the reassignment completed", cluster)
    for via in BROKERS:
        wait_until(lambda: layout(cluster, topic, via=via) == (104, [104, 103, 102],
                                                               [102, 103, 104]),
                   15, f"broker {via} shows the new replicas, ISR and leader", cluster)
    wait_until(lambda: not partition_dir(cluster, 101, topic).exists(), 15,
               "the old leader's replica deleted", cluster)
    assert partition_dir(cluster, 104, topic).exists()
    got = consume(cluster, topic, via=104, count=RECORDS)
    assert got == values, "the new replica set lost or reordered acknowledged records"
    # It takes writes as the new leader.
    more = produce(cluster, topic)
    assert consume(cluster, topic, via=102, count=2 * RECORDS) == values + more


def test_a_cancelled_reassignment_goes_back_and_deletes_the_added_replica(cluster):
    topic = unique_topic("cancel")
    create(cluster, topic, [101, 102, 103], **{"follower.replication.throttled.replicas": "*"})
    set_throttle(cluster, 104, "1")
    try:
        values = produce(cluster, topic)
        assert reassign(cluster, topic, {0: [101, 102, 104]}, via=104) == [(0, 0)]
        assert ongoing(cluster) == {topic: [(0, [101, 102, 104, 103], [104], [103])]}
        wait_until(lambda: partition_dir(cluster, 104, topic).exists(), 15,
                   "104 opens its replica", cluster)
        assert reassign(cluster, topic, {0: None}) == [(0, 0)]
        assert ongoing(cluster) == {}
        for via in BROKERS:
            wait_until(lambda: layout(cluster, topic, via=via) == (101, [101, 102, 103],
                                                                   [101, 102, 103]),
                       15, f"broker {via} shows the original replicas", cluster)
        wait_until(lambda: not partition_dir(cluster, 104, topic).exists(), 15,
                   "the added replica deleted", cluster)
        # Nothing left to cancel; bad requests get Kafka's codes through the broker.
        assert reassign(cluster, topic, {0: None}) == [(0, E.NO_REASSIGNMENT_IN_PROGRESS)]
        assert reassign(cluster, topic, {0: [101, 999], 7: [101]}) == \
            [(0, E.INVALID_REPLICA_ASSIGNMENT), (7, E.UNKNOWN_TOPIC_OR_PARTITION)]
        assert reassign(cluster, unique_topic("nope"), {0: [101]}) == \
            [(0, E.UNKNOWN_TOPIC_OR_PARTITION)]
        assert ongoing(cluster) == {}
    finally:
        set_throttle(cluster, 104, None)
    assert partition_dir(cluster, 103, topic).exists()
    assert consume(cluster, topic, via=101, count=RECORDS) == values
