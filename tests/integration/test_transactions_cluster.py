"""Where a cluster keeps its transactions: `__transaction_state` gets the replication factor it
is configured with (transaction.state.log.replication.factor), as in Kafka. A cluster that has
fewer brokers registered waits for them, telling transactional clients
COORDINATOR_NOT_AVAILABLE (which they retry), instead of creating the topic on fewer replicas
for good because a client came early."""
from __future__ import annotations

import time

import anyio
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from core.client import KafkaClient
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.cluster import KRaftCluster

pytestmark = pytest.mark.integration

TRANSACTION_KEY = 1


async def _find_coordinator(bootstrap: str, transactional_id: str):
    async with KafkaClient(bootstrap) as client:
        conn = await client.connection(await client.any_node())
        resp = await conn.send(m.FindCoordinatorRequest(key_type=TRANSACTION_KEY, coordinator_keys=[transactional_id]),
                               version=4)
        return resp.coordinators[0]


def test_the_transaction_log_waits_for_as_many_brokers_as_its_replication_factor(tmp_path):
    overrides = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3"}
    cluster = KRaftCluster(tmp_path, combined=3, overrides=overrides)
    try:
        for node_id in (1, 2):      # the third comes later
            cluster.nodes[node_id].start()
        two = ",".join(cluster.nodes[i].bootstrap for i in (1, 2))
        AdminClient({"bootstrap.servers": two}).list_topics(timeout=30)     # both serve
        deadline = time.monotonic() + 4
        answers = set()
        while time.monotonic() < deadline:          # asked again and again, as clients do
            found = anyio.run(_find_coordinator, two, "early")
            answers.add(found.error_code)
            time.sleep(0.2)
        assert answers == {E.COORDINATOR_NOT_AVAILABLE}, answers
        logs = "".join(cluster.nodes[i].log_path.read_text() for i in (1, 2))
        assert "2 of the 3 brokers its replication factor needs" in logs

        cluster.nodes[3].start()
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "early"})
        producer.init_transactions(60)
        topic = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            "__transaction_state", timeout=10).topics["__transaction_state"]
        assert {p: len(meta.replicas) for p, meta in topic.partitions.items()} == {0: 3, 1: 3, 2: 3}
    finally:
        cluster.__exit__(None, None, None)


def test_every_marker_of_a_transaction_names_it_and_counts_its_partitions_per_topic(tmp_path):
    """core/protocol/txn_markers.py: the coordinator names each transaction (its start) and
    counts its partitions per topic in every marker, whichever broker leads the partition
    (WriteTxnMarkers' Seaway tagged fields, or the coordinator's own append), including the
    marker on `__consumer_offsets` that send_offsets_to_transaction added. Consecutive
    transactions of the producer have distinct starts, so a reader can tell them apart."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import NewTopic

    with KRaftCluster(tmp_path, combined=3, overrides={"transaction.state.log.num.partitions": "3",
                                                       "offsets.topic.num.partitions": "3"}) as cluster:
        cluster.wait_for_leader()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for done in admin.create_topics([NewTopic("shape-a", 3, 2), NewTopic("shape-b", 1, 2)]).values():
            done.result(30)
        leaders = {p.leader for t in ("shape-a", "shape-b")
                   for p in admin.list_topics(t, timeout=10).topics[t].partitions.values()}
        assert len(leaders) >= 2, "partitions on several leaders: markers go over WriteTxnMarkers too"
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "shape-group"})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "shape"})
        producer.init_transactions(60)
        for n in range(2):
            producer.begin_transaction()
            for partition in range(3):
                producer.produce("shape-a", f"a{n}".encode(), partition=partition)
            producer.produce("shape-b", f"b{n}".encode(), partition=0)
            producer.send_offsets_to_transaction([TopicPartition("shape-a", 0, 7 + n)],
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
        consumer.close()
        markers = anyio.run(_markers, cluster.bootstrap, ["shape-a", "shape-b", "__consumer_offsets"])

    by_txn: dict = {}
    for tp, (pid, epoch, control_type, value) in markers:
        by_txn.setdefault((pid, epoch, value.shape.start_ms), []).append((tp, control_type, value.shape.topics))
    assert len(by_txn) == 2, by_txn                      # two transactions, told apart by their start
    for (pid, epoch, start), found in by_txn.items():
        assert start > 0
        assert sorted(tp for tp, _, _ in found if tp[0] != "__consumer_offsets") == \
            [("shape-a", 0), ("shape-a", 1), ("shape-a", 2), ("shape-b", 0)]
        assert sum(tp[0] == "__consumer_offsets" for tp, _, _ in found) == 1
        assert {(ct, topics) for _, ct, topics in found} == {
            (1, (("__consumer_offsets", 1), ("shape-a", 3), ("shape-b", 1)))}, found


async def _markers(bootstrap: str, topics: list[str]) -> list:
    """Every COMMIT/ABORT marker in these topics: ((topic, partition), (producer id, epoch,
    type, decoded value)), read from each partition's leader from offset 0."""
    from core.protocol.records import iter_batch_headers
    from core.protocol.txn_markers import decode_marker_value, read_marker
    out = []
    F = m.FetchRequest
    async with KafkaClient(bootstrap) as client:
        await client.refresh_metadata(topics)
        for topic in topics:
            for partition in range(len(client.cluster.topics[topic].partitions)):
                conn = await client.connection(client.leader_for(topic, partition))
                resp = await conn.send(F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20,
                                         isolation_level=0, topics=[F.FetchTopic(topic=topic, partitions=[
                                             F.FetchPartition(partition=partition, fetch_offset=0,
                                                              partition_max_bytes=8 << 20)])]), version=11)
                data = resp.responses[0].partitions[0].records or b""
                for info in iter_batch_headers(data):
                    found = read_marker(data, info)
                    if found is not None:
                        out.append(((topic, partition), (info.producer_id, info.producer_epoch, found[0],
                                                         decode_marker_value(found[1]))))
    return out
