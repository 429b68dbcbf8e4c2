"""KRaft clusters of real processes serving real clients: 3 controllers + 3 brokers, and 3
combined nodes. Brokers register, are unfenced, learn metadata from the quorum as observers,
forward admin requests to the active controller and answer Metadata from their image; a broker
killed with kill -9 is fenced and its partitions' leadership moves; a broker stopped with
SIGTERM hands its leaderships over first (controlled shutdown); everything survives a full
restart.

Replication (followers, ISR, acks=all) is tested in test_replication.py; the data checks here
use RF=1 partitions, whose leader does not change.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from core.protocol.errors import ErrorCode
from tests.support.clients import CLIENTS, Record, create_topic, unique_topic
from tests.support.cluster import KRaftCluster

SESSION_MS = 3000   # broker.session.timeout.ms, short so that fencing is quick to see
OVERRIDES = {"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": "500"}


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def wait_brokers(cluster, ids, timeout: float = 30.0) -> None:
    a = admin(cluster)
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        try:
            seen = sorted(a.list_topics(timeout=5).brokers)
        except Exception:   # noqa: BLE001 — a broker may still be starting
            seen = None
        if seen == sorted(ids):
            return
        time.sleep(0.2)
    raise AssertionError(f"brokers {seen}, wanted {sorted(ids)}\n{cluster.log_tails()}")


def partitions(cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = admin(cluster).list_topics(topic, timeout=5)
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in md.topics[topic].partitions.values()}


def init_producer_id(bootstrap: str) -> int:
    import anyio

    from core.client.connection import BrokerConnection
    from core.protocol import messages as m
    host, port = bootstrap.rsplit(":", 1)

    async def ask() -> int:
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            r = await conn.send(m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                        producer_id=-1, producer_epoch=-1), 22)
            assert r.error_code == 0, r
            return r.producer_id
        finally:
            await conn.close()
    return anyio.run(ask)


def round_trip_every_client(cluster, topic: str, parts: int) -> None:
    for name, client in CLIENTS.items():
        records = [Record(key=f"{name}-{i}".encode(), value=f"v{i}".encode(), partition=i % parts)
                   for i in range(30)]
        sent = client.produce(cluster.bootstrap, topic, records)
        assert all(r.offset is None or r.offset >= 0 for r in sent)
        got = CLIENTS["confluent"].consume(cluster.bootstrap, topic, {p: 0 for p in range(parts)},
                                           count=10_000, timeout=8)
        mine = [(r.partition, r.key, r.value) for r in got if r.key.startswith(name.encode() + b"-")]
        assert sorted(mine) == sorted((r.partition, r.key, r.value) for r in records), name


@pytest.mark.parametrize("shape", ["3 controllers + 3 brokers", "3 combined"])
def test_a_kraft_cluster_serves_every_client(tmp_path, shape):
    kwargs = dict(controllers=3, brokers=3) if shape.startswith("3 controllers") else dict(combined=3)
    with KRaftCluster(tmp_path, **kwargs) as cluster:
        ids = [101, 102, 103] if "brokers" in shape else [1, 2, 3]
        wait_brokers(cluster, ids)
        topic = unique_topic("kraft")
        create_topic(cluster.bootstrap, topic, partitions=6, replication_factor=3)
        layout = partitions(cluster, topic)
        # Rack-less placement stripes replicas and spreads leadership over every broker.
        assert {leader for leader, _, _ in layout.values()} == set(ids)
        assert all(sorted(replicas) == ids and sorted(isr) == ids for _, replicas, isr in layout.values())
        round_trip_every_client(cluster, topic, 6)
        # Producer ids come from the controller in blocks: no two brokers hand out the same.
        pids = [init_producer_id(node.bootstrap) for i, node in cluster.nodes.items() if i in ids
                for _ in range(2)]
        assert len(set(pids)) == len(pids) and min(pids) >= 0, pids
        # Admin writes go through any broker to the controller and show in every broker's view.
        a = admin(cluster)
        fs = a.create_topics([NewTopic(topic, 1, 1)])
        with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
            fs[topic].result(10)


def test_a_broker_killed_with_kill_9_is_fenced_and_its_leadership_moves(tmp_path):
    with KRaftCluster(tmp_path, controllers=3, brokers=3, overrides=OVERRIDES) as cluster:
        wait_brokers(cluster, [101, 102, 103])
        topic = unique_topic("fence")
        create_topic(cluster.bootstrap, topic, partitions=6, replication_factor=3)
        before = partitions(cluster, topic)
        victim = 102
        led = [p for p, (leader, _, _) in before.items() if leader == victim]
        assert led, before
        cluster.kill(victim)
        killed_at = time.monotonic()
        deadline = killed_at + SESSION_MS / 1000 + 15
        while time.monotonic() < deadline:
            after = partitions(cluster, topic)
            if all(after[p][0] not in (victim, -1) for p in led) and all(
                    victim not in isr for _, _, isr in after.values()):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"leadership did not move off {victim}: {partitions(cluster, topic)}")
        took = time.monotonic() - killed_at
        # Not before the session timed out (heartbeats stopped; nothing else tells the
        # controller), and not long after.
        assert SESSION_MS / 1000 - 0.5 <= took <= SESSION_MS / 1000 + 10, took
        # Every broker's image drops the fenced broker (each applies the log on its own, so
        # the one asked may be a few milliseconds behind the one that answered above).
        a = admin(cluster)
        deadline = time.monotonic() + 5
        while victim in a.list_topics(timeout=5).brokers:
            assert time.monotonic() < deadline, "a broker still lists the fenced broker"
            time.sleep(0.1)
        # Clients follow the new leaders.
        records = [Record(key=b"k%d" % i, value=b"after", partition=p) for i, p in enumerate(led)]
        sent = CLIENTS["confluent"].produce(cluster.bootstrap, topic, records)
        assert all(r.offset is not None and r.offset >= 0 for r in sent)

        # It comes back: registers again, is unfenced, rejoins the ISR of its partitions.
        cluster.nodes[victim].start()
        wait_brokers(cluster, [101, 102, 103])


def test_controlled_shutdown_moves_leadership_before_the_broker_stops(tmp_path):
    with KRaftCluster(tmp_path, controllers=3, brokers=3, overrides=OVERRIDES) as cluster:
        wait_brokers(cluster, [101, 102, 103])
        topic = unique_topic("shutdown")
        create_topic(cluster.bootstrap, topic, partitions=6, replication_factor=3)
        led = [p for p, (leader, _, _) in partitions(cluster, topic).items() if leader == 101]
        assert led
        started = time.monotonic()
        assert cluster.nodes[101].stop(timeout=30) == 0
        after = partitions(cluster, topic)
        # Moved by the controller while the broker asked to stop, not by its session expiring.
        assert all(after[p][0] not in (101, -1) for p in led), after
        assert time.monotonic() - started < SESSION_MS / 1000 + 5
        assert "controlled shutdown granted" in cluster.nodes[101].log_tail(200)


def test_metadata_and_data_survive_a_full_cluster_restart(tmp_path):
    with KRaftCluster(tmp_path, controllers=3, brokers=3, overrides=OVERRIDES) as cluster:
        wait_brokers(cluster, [101, 102, 103])
        topic = unique_topic("restart")
        create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=1,
                     config={"retention.ms": "123456789"})
        records = [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % 3) for i in range(60)]
        CLIENTS["confluent"].produce(cluster.bootstrap, topic, records)
        layout = partitions(cluster, topic)
        cluster.stop()
        cluster.start()
        wait_brokers(cluster, [101, 102, 103], timeout=60)
        # Each broker applies the quorum's records on its own schedule, so the broker that
        # answered wait_brokers can be ahead of the one answering now: the leaders must come
        # back as they were, but eventually, not in the first answer.
        seen = {}

        def layout_restored() -> bool:
            seen["now"] = partitions(cluster, topic)
            return seen["now"] == layout
        deadline = time.monotonic() + 30
        while not layout_restored():
            assert time.monotonic() < deadline, f"{seen['now']} != {layout}\n{cluster.log_tails()}"
            time.sleep(0.2)
        res = ConfigResource("topic", topic)
        a = admin(cluster)
        configs = a.describe_configs([res])[res].result(10)
        assert configs["retention.ms"].value == "123456789"
        got = CLIENTS["confluent"].consume(cluster.bootstrap, topic, {0: 0, 1: 0, 2: 0}, count=60, timeout=15)
        assert sorted((r.partition, r.key, r.value) for r in got) == \
            sorted((r.partition, r.key, r.value) for r in records)


def test_a_consumer_group_runs_on_a_kraft_cluster(tmp_path):
    from confluent_kafka import Consumer
    with KRaftCluster(tmp_path, combined=3) as cluster:
        wait_brokers(cluster, [1, 2, 3])
        topic = unique_topic("group")
        create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=1)
        records = [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % 3) for i in range(30)]
        CLIENTS["confluent"].produce(cluster.bootstrap, topic, records)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g1", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        try:
            c.subscribe([topic])
            got = []
            deadline = time.monotonic() + 40
            while len(got) < 30 and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg)
            assert len(got) == 30
            c.commit(asynchronous=False)
        finally:
            c.close()
        a = admin(cluster)
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        req = ConsumerGroupTopicPartitions("g1", [TopicPartition(topic, p) for p in range(3)])
        offsets = a.list_consumer_group_offsets([req])["g1"].result(10)
        assert sorted(tp.offset for tp in offsets.topic_partitions) == [10, 10, 10]
        # Only the leader of the group's __consumer_offsets partition coordinates it; the
        # others send the client back to FindCoordinator.
        coordinator, others = find_coordinator(cluster, "g1")
        assert len(others) == 2
        for bootstrap in others:
            assert offset_fetch_error(bootstrap, "g1", topic) == ErrorCode.NOT_COORDINATOR
        assert offset_fetch_error(coordinator, "g1", topic) == ErrorCode.NONE


def find_coordinator(cluster, group: str) -> tuple[str, list[str]]:
    import anyio

    from core.client.connection import BrokerConnection
    from core.protocol import messages as m

    async def ask():
        host, port = cluster.nodes[1].bootstrap.rsplit(":", 1)
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            return await conn.send(m.FindCoordinatorRequest(key=group, key_type=0), 10, version=3)
        finally:
            await conn.close()
    answer = anyio.run(ask)
    assert answer.error_code == 0, answer
    me = f"{answer.host}:{answer.port}"
    return me, [n.bootstrap for n in cluster.nodes.values() if n.bootstrap != me]


def offset_fetch_error(bootstrap: str, group: str, topic: str) -> ErrorCode:
    import anyio

    from core.client.connection import BrokerConnection
    from core.protocol import messages as m
    R = m.OffsetFetchRequest

    async def ask():
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            return await conn.send(R(group_id=group, topics=[R.OffsetFetchRequestTopic(
                name=topic, partition_indexes=[0])], require_stable=False), 9, version=7)
        finally:
            await conn.close()
    return ErrorCode(anyio.run(ask).error_code)
