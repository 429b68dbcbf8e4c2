"""The log start of replicated partitions, against three real nodes. DeleteRecords, with
confluent-kafka's AdminClient: the log start moves on every replica before the answer (Kafka's
DelayedDeleteRecords), so a leader killed right after it cannot bring the records back; a
replica that does not follow holds the answer until the request's timeout, which is then
REQUEST_TIMED_OUT with the low watermark reached. Retention: segments go on the leader and
its followers, and the partition stays online (it once went offline with a storage error)."""
from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.support.clients import unique_topic
from tests.support.cluster import KRaftCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KRaftCluster(tmp_path_factory.mktemp("cluster"), combined=3,
                      overrides={"log.retention.check.interval.ms": "500"}) as c:
        c.admin = c.admin_when_ready()
        yield c


def _topic_with_records(cluster, count: int = 100, partitions: int = 2, **config: str) -> str:
    topic = unique_topic("dr")
    for f in cluster.admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2",
                                                                                 **config})]).values():
        f.result(30)
    failed = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 3, "batch.size": 1000,
                  "linger.ms": 0})
    for i in range(count):
        p.produce(topic, b"v%d" % i + b"x" * 100, partition=i % partitions, on_delivery=lambda e, m: e and failed.append(e))
        p.poll(0)
    assert p.flush(30) == 0 and not failed, failed
    return topic


def _earliest(cluster, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("g"), "log_level": 3})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        c.close()


def _leader(cluster, topic: str, partition: int) -> int:
    return cluster.admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


@contextlib.contextmanager
def _leader_killed(cluster, topic: str):
    """Partition 0's leader killed -9 and a follower leading in its place; the node comes back after."""
    leader = _leader(cluster, topic, 0)
    cluster.kill9(leader)
    try:
        deadline = time.monotonic() + 60
        while _leader(cluster, topic, 0) in (leader, -1):
            assert time.monotonic() < deadline, "no new leader for the partition"
            time.sleep(0.2)
        yield
    finally:
        cluster.nodes[leader].start()


def test_every_replica_drops_the_records_before_the_answer(cluster):
    topic = _topic_with_records(cluster)
    done = cluster.admin.delete_records([TopicPartition(topic, 0, 10), TopicPartition(topic, 1, -1)],
                                        request_timeout=30, operation_timeout=20)
    low = {tp.partition: f.result(30).low_watermark for tp, f in done.items()}
    assert low == {0: 10, 1: 50}
    assert _earliest(cluster, topic, 0) == 10
    with _leader_killed(cluster, topic):
        assert _earliest(cluster, topic, 0) == 10, "the new leader brought deleted records back"


def test_a_replica_that_does_not_follow_holds_the_answer_until_the_timeout(cluster):
    topic = _topic_with_records(cluster, 40)
    partitions = cluster.admin.list_topics(topic, timeout=10).topics[topic].partitions
    leader = partitions[0].leader
    follower = next(r for r in partitions[0].replicas if r != leader)
    cluster.sigstop(follower)
    try:
        start = time.monotonic()
        done = cluster.admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=30,
                                            operation_timeout=1.5)
        with pytest.raises(KafkaException) as timed_out:
            next(iter(done.values())).result(30)
        assert timed_out.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT
        assert time.monotonic() - start >= 1.4, "answered before the paused replica could have followed"
        assert _earliest(cluster, topic, 0) == 5, "the leader itself has moved its log start"
    finally:
        cluster.sigcont(follower)
    done = cluster.admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=30, operation_timeout=20)
    assert next(iter(done.values())).result(30).low_watermark == 5


def test_retention_moves_the_log_start_on_every_replica(cluster):
    topic = _topic_with_records(cluster, 200, partitions=1, **{"segment.bytes": "2048", "retention.bytes": "4096"})
    deadline = time.monotonic() + 30
    while (earliest := _earliest(cluster, topic, 0)) == 0:
        assert time.monotonic() < deadline, "retention never deleted a segment"
        time.sleep(0.5)
    assert 0 < earliest < 200
    time.sleep(1)   # the followers' next fetches carry the new log start
    with _leader_killed(cluster, topic):
        assert _earliest(cluster, topic, 0) >= earliest, "a follower kept the segments retention deleted"
