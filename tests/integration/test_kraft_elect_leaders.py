"""ElectLeaders through a broker of a real KRaft cluster, and AlterPartition on the real
controller: a broker stopped and started again has lost its leaderships; once back in the ISR
it gets them back when an operator asks for preferred leaders (auto rebalance is off here).

The test reads the cluster's metadata the way a broker does, as an observer fetching the
__cluster_metadata log from the active controller, to learn the epochs an AlterPartition
must carry. Until partition replication adds a caught-up follower to the ISR by itself, the
test sends that AlterPartition as the partition's leader would.
"""
from __future__ import annotations

import time

import anyio
import pytest

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.cluster import KRaftCluster, ask_controller, metadata_image

BROKERS = [101, 102, 103]
OVERRIDES = {"auto.leader.rebalance.enable": "false", "broker.session.timeout.ms": "3000",
             "broker.heartbeat.interval.ms": "500"}
ASSIGNMENT = {0: [101, 102, 103], 1: [102, 103, 101], 2: [103, 101, 102]}


def send(bootstrap: str, api_key: int, request, version: int | None = None):
    host, port = bootstrap.rsplit(":", 1)

    async def go():
        conn = await BrokerConnection(host, int(port), request_timeout_ms=30_000).connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(go)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    answer = send(bootstrap, 3, m.MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    [t] = [t for t in answer.topics if t.name == topic]
    return {p.partition_index: p.leader_id for p in t.partitions}


def wait_for(condition, what: str, cluster: KRaftCluster, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:   # noqa: BLE001 — a node may be starting
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout}s\n{cluster.log_tails()}")
        time.sleep(0.2)


def registered(cluster: KRaftCluster, ids) -> bool:
    image = metadata_image(cluster)
    return all(b in image.brokers and not image.brokers[b].fenced for b in ids)


def back_in_sync(cluster: KRaftCluster, topic: str, broker: int) -> None:
    """Have each partition's leader add `broker` to its ISR (AlterPartition v3), unless
    replication already did; check what the controller answers."""
    for _ in range(20):
        image = metadata_image(cluster)
        t = image.topic(topic)
        missing = {p: part for p, part in t.partitions.items() if broker not in part.isr}
        if not missing:
            return
        for p, part in missing.items():
            R = m.AlterPartitionRequest
            isr = list(part.isr) + [broker]
            request = R(broker_id=part.leader, broker_epoch=image.brokers[part.leader].epoch,
                        topics=[R.TopicData(topic_id=t.id, partitions=[R.PartitionData(
                            partition_index=p, leader_epoch=part.leader_epoch,
                            partition_epoch=part.partition_epoch, leader_recovery_state=0,
                            new_isr_with_epochs=[
                                R.BrokerState(broker_id=b, broker_epoch=image.brokers[b].epoch)
                                for b in isr])])])
            answer = ask_controller(cluster, 56, request)
            assert answer.error_code == 0, answer
            [res] = answer.topics[0].partitions
            if res.error_code == E.INVALID_UPDATE_VERSION:
                continue          # the leader changed the ISR meanwhile: look again
            assert res.error_code == 0, res
            assert (res.leader_id, res.leader_epoch, res.isr, res.partition_epoch) == \
                (part.leader, part.leader_epoch, isr, part.partition_epoch + 1)
    pytest.fail(f"{broker} did not get back into the ISR of {topic}")


def test_preferred_leaders_come_back_through_elect_leaders_on_a_broker(tmp_path):
    with KRaftCluster(tmp_path, controllers=1, brokers=3, overrides=OVERRIDES) as cluster:
        wait_for(lambda: registered(cluster, BROKERS), "brokers registered and unfenced", cluster)
        via = cluster.nodes[102].bootstrap
        topic = "elect-me"
        C = m.CreateTopicsRequest
        created = send(via, 19, C(topics=[C.CreatableTopic(
            name=topic, num_partitions=-1, replication_factor=-1, configs=[],
            assignments=[C.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                         for p, b in ASSIGNMENT.items()])], timeout_ms=10_000, validate_only=False))
        assert created.topics[0].error_code == 0, created
        assert leaders(via, topic) == {0: 101, 1: 102, 2: 103}

        # Stopped (controlled shutdown) and started again: 101 leads nothing and is in no ISR.
        assert cluster.nodes[101].stop(timeout=30) == 0
        assert leaders(via, topic)[0] == 102
        cluster.nodes[101].start()
        wait_for(lambda: registered(cluster, BROKERS), "101 back and unfenced", cluster)
        assert leaders(via, topic)[0] == 102
        before = metadata_image(cluster).partition(topic, 0)

        # Until 101 is back in t-0's ISR, the preferred replica cannot lead.
        EL = m.ElectLeadersRequest
        ask = EL(election_type=0, timeout_ms=10_000,
                 topic_partitions=[EL.TopicPartitions(topic=topic, partitions=[0, 1, 2])])

        def elect():
            answer = send(via, 43, ask, 2)
            assert answer.error_code == 0
            [r] = answer.replica_election_results
            assert r.topic == topic
            return [(p.partition_id, p.error_code) for p in r.partition_result]

        codes = elect()
        if codes[0][1] == E.PREFERRED_LEADER_NOT_AVAILABLE:
            back_in_sync(cluster, topic, 101)
            codes = elect()
        # (else replication had already put 101 back in sync)
        assert codes == [(0, E.NONE), (1, E.ELECTION_NOT_NEEDED), (2, E.ELECTION_NOT_NEEDED)]
        # The broker answered once its own metadata showed the new leader.
        assert leaders(via, topic) == {0: 101, 1: 102, 2: 103}
        after = metadata_image(cluster).partition(topic, 0)
        assert (after.leader, after.leader_epoch) == (101, before.leader_epoch + 1)

        # Every partition: nothing left to do, so nothing listed; unknown ones say so (v0).
        everything = send(cluster.nodes[103].bootstrap, 43,
                          EL(election_type=0, topic_partitions=None, timeout_ms=10_000), 1)
        assert everything.error_code == 0
        listed = {r.topic: r.partition_result for r in everything.replica_election_results}
        assert listed[topic] == []
        unknown = send(via, 43, EL(topic_partitions=[EL.TopicPartitions(
            topic="no-such-topic", partitions=[0])], timeout_ms=10_000), 0)
        assert [(r.topic, [p.error_code for p in r.partition_result])
                for r in unknown.replica_election_results] == \
            [("no-such-topic", [E.UNKNOWN_TOPIC_OR_PARTITION])]
