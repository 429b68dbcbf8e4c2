"""Partition replication across real broker processes: followers fetch from the leader, the high
watermark follows the ISR, acks=all waits for it, min.insync.replicas refuses writes, the ISR
shrinks and grows through AlterPartition, and the replicas' logs end up byte-identical.

One controller and three brokers with short sessions and lag times, so that fencing and ISR
changes take seconds. (With combined nodes, stopping two of them would also take the controller
quorum's majority, and no ISR change could commit.) Produce errors are checked on raw Produce requests (a real
client retries NOT_ENOUGH_REPLICAS until its delivery timeout and only then reports it); the
data is written and read with confluent-kafka.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import anyio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch
from tests.support.clients import unique_topic
from tests.support.cluster import KRaftCluster

LAG_MS = 2000
OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "replica.lag.time.max.ms": str(LAG_MS)}
NODES = [101, 102, 103]


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def wait_until(predicate, timeout: float, what: str, cluster=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:   # noqa: BLE001 — a node may be restarting
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: last saw {last!r}\n{cluster.log_tails() if cluster else ''}")


def layout(cluster, topic: str, partition: int = 0):
    md = admin(cluster).list_topics(topic, timeout=5).topics[topic].partitions[partition]
    return md.leader, list(md.replicas), sorted(md.isrs)


def isr_seen_by(cluster, node_id: int, topic: str) -> list[int]:
    """The ISR in that broker's own metadata image (the one its replicas act on)."""
    M = m.MetadataRequest
    r = raw(cluster, node_id, 3, M(topics=[M.MetadataRequestTopic(name=topic, topic_id=bytes(16))],
                                   allow_auto_topic_creation=False), 12)
    return sorted(r.topics[0].partitions[0].isr_nodes)


@contextmanager
def start_cluster(tmp_path: Path, per_node: dict[int, dict[str, str]] | None = None, **overrides):
    """One controller, brokers 101-103; `per_node` adds settings to single nodes."""
    cluster = KRaftCluster(tmp_path, controllers=1, brokers=3, overrides=dict(OVERRIDES, **overrides))
    for node_id, props in (per_node or {}).items():
        with open(cluster.nodes[node_id].config_path, "a") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())
    with cluster:
        wait_until(lambda: len(admin(cluster).list_topics(timeout=5).brokers) == 3, 30,
                   "three brokers registered", cluster)
        yield cluster


def scrape(port: int) -> dict[str, float]:
    """A node's Prometheus metrics without labels, by name."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def create(cluster, topic: str, rf: int = 3, partitions: int = 1, **configs) -> None:
    a = admin(cluster)   # the futures need their client alive
    fs = a.create_topics([NewTopic(topic, partitions, rf,
                                   config={k.replace("_", "."): str(v) for k, v in configs.items()})])
    fs[topic].result(15)
    wait_until(lambda: layout(cluster, topic)[0] >= 0, 15, "a leader", cluster)


def produce(cluster, topic: str, values: list[bytes], **config) -> list[int]:
    """confluent-kafka, acks=all and idempotence: the offsets acknowledged."""
    acked: list[int] = []
    errors: list = []

    def done(err, msg):
        (errors.append(err) if err else acked.append(msg.offset()))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, **config})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0, "records still in flight"
    assert not errors, errors[:3]
    return acked


def consume(cluster, topic: str, count: int, timeout: float = 20.0, via: int | None = None
            ) -> list[tuple[int, bytes]]:
    """confluent-kafka from offset 0; `via` bootstraps from that node alone (others may be
    stopped, and a stopped node accepts connections it never answers)."""
    bootstrap = cluster.nodes[via].bootstrap if via is not None else cluster.bootstrap
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.value()))
    finally:
        c.close()
    return got


def raw(cluster, node_id: int, api_key: int, request, version: int):
    host, port = cluster.nodes[node_id].bootstrap.rsplit(":", 1)

    async def ask():
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(ask)


def raw_produce(cluster, node_id: int, topic: str, acks: int, value: bytes = b"x",
                timeout_ms: int = 5000):
    P = m.ProduceRequest
    request = P(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(
            index=0, records=bytes(build_batch([(None, value, None, int(time.time() * 1000))])))])])
    r = raw(cluster, node_id, 0, request, 9).responses[0].partition_responses[0]
    return ErrorCode(r.error_code), r.base_offset


def list_offset(cluster, node_id: int, topic: str, timestamp: int = -1) -> int:
    L = m.ListOffsetsRequest
    request = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
        name=topic, partitions=[L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                       timestamp=timestamp)])])
    r = raw(cluster, node_id, 2, request, 7).topics[0].partitions[0]
    assert r.error_code == 0, ErrorCode(r.error_code)
    return r.offset


def log_bytes(cluster, node_id: int, topic: str) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_acks_all_reaches_every_replica_and_survives_the_leader(tmp_path):
    with start_cluster(tmp_path) as cluster:
        topic = unique_topic("rep")
        create(cluster, topic, min_insync_replicas=2)
        leader, replicas, isr = layout(cluster, topic)
        assert sorted(replicas) == NODES and isr == NODES
        values = [b"v%d" % i for i in range(3000)]
        acked = produce(cluster, topic, values)
        assert sorted(acked) == list(range(3000))
        # Every follower fetched every batch: the three logs are the same bytes.
        wait_until(lambda: len({log_bytes(cluster, n, topic) for n in NODES}) == 1, 15,
                   "identical logs", cluster)
        assert len(log_bytes(cluster, leader, topic)) > 3000 * 10
        cluster.kill(leader)
        new_leader = wait_until(lambda: (lambda ldr: ldr if ldr not in (leader, -1) else None)(layout(cluster, topic)[0]),
                                20, "a new leader", cluster)
        assert new_leader in NODES
        got = consume(cluster, topic, 3000)
        assert [v for _, v in got] == values, "the new leader lost or reordered acknowledged records"
        # The new leader takes writes, and the old one comes back as a follower, catches up
        # and rejoins the ISR.
        more = produce(cluster, topic, [b"after%d" % i for i in range(100)])
        assert sorted(more) == list(range(3000, 3100))
        cluster.restart(leader)
        wait_until(lambda: layout(cluster, topic)[2] == NODES, 30, "the old leader back in the ISR", cluster)
        wait_until(lambda: len({log_bytes(cluster, n, topic) for n in NODES}) == 1, 15,
                   "identical logs after the restart", cluster)


def test_consumers_see_only_what_the_isr_has(tmp_path):
    """The high watermark: a record on the leader alone is not readable until the ISR has it."""
    # Long lag time and session: the stopped followers stay in the ISR (neither the leader
    # nor the controller removes them) for the whole check.
    with start_cluster(tmp_path, **{"replica.lag.time.max.ms": "60000",
                                    "broker.session.timeout.ms": "60000"}) as cluster:
        topic = unique_topic("hw")
        create(cluster, topic)
        produce(cluster, topic, [b"committed"])
        leader, _, _ = layout(cluster, topic)
        followers = [n for n in NODES if n != leader]
        for f in followers:
            cluster.sigstop(f)
        try:
            # acks=1: the leader has it, the (stopped) followers do not, and they are still in
            # the ISR, so the high watermark cannot move.
            code, offset = raw_produce(cluster, leader, topic, acks=1, value=b"pending")
            assert code == ErrorCode.NONE and offset == 1
            assert list_offset(cluster, leader, topic) == 1, "LATEST must be the high watermark"
            assert [v for _, v in consume(cluster, topic, 2, timeout=10, via=leader)] == [b"committed"]
            # acks=all waits for the ISR, and says so when it runs out of time.
            code, _ = raw_produce(cluster, leader, topic, acks=-1, value=b"waits", timeout_ms=1500)
            assert code == ErrorCode.REQUEST_TIMED_OUT
        finally:
            for f in followers:
                cluster.sigcont(f)
        wait_until(lambda: list_offset(cluster, leader, topic) == 3, 15, "the high watermark moves", cluster)
        assert [v for _, v in consume(cluster, topic, 3)] == [b"committed", b"pending", b"waits"]


def test_isr_shrinks_and_grows_and_min_insync_replicas_guards_acks_all(tmp_path):
    from tests.support.node import free_port
    ports = {n: free_port() for n in NODES}
    # Sessions longer than the lag time: the leader's own AlterPartition shrinks the ISR before
    # the controller could fence anyone.
    with start_cluster(tmp_path, per_node={n: {"metrics.port": str(p)} for n, p in ports.items()},
                       **{"broker.session.timeout.ms": "15000"}) as cluster:
        topic = unique_topic("isr")
        create(cluster, topic, min_insync_replicas=2)
        leader, _, _ = layout(cluster, topic)
        a, b = [n for n in NODES if n != leader]
        # One follower stops: it leaves the ISR after replica.lag.time.max.ms, and acks=all
        # goes on with two replicas (min.insync.replicas=2).
        cluster.sigstop(a)
        stopped = time.monotonic()
        wait_until(lambda: isr_seen_by(cluster, leader, topic) == sorted([leader, b]), LAG_MS / 1000 + 15,
                   "the stopped follower out of the ISR", cluster)
        assert time.monotonic() - stopped >= LAG_MS / 1000 - 0.5, "left the ISR before its lag time"
        assert raw_produce(cluster, leader, topic, acks=-1)[0] == ErrorCode.NONE
        # The second follower stops too: the ISR is the leader alone, below the minimum.
        cluster.sigstop(b)
        # The metadata image (what Metadata answers from) and the partition's own state (what
        # produce checks) take the committed shrink in separate steps, as in Kafka's
        # BrokerMetadataPublisher; the gauge reads the partition's.
        wait_until(lambda: isr_seen_by(cluster, leader, topic) == [leader]
                   and scrape(ports[leader])["seaway_under_min_isr_partitions"] == 1,
                   LAG_MS / 1000 + 15, "the ISR down to the leader", cluster)
        code, _ = raw_produce(cluster, leader, topic, acks=-1)
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS
        metrics = scrape(ports[leader])
        assert metrics["seaway_under_replicated_partitions"] == 1
        assert metrics["seaway_under_min_isr_partitions"] == 1
        assert metrics["seaway_isr_shrinks_total"] >= 1
        assert raw_produce(cluster, leader, topic, acks=1)[0] == ErrorCode.NONE, "acks=1 does not need the ISR"
        # Both come back, catch up and rejoin; acks=all works again.
        cluster.sigcont(a)
        cluster.sigcont(b)
        wait_until(lambda: isr_seen_by(cluster, leader, topic) == NODES, 30, "both followers back in the ISR",
                   cluster)
        assert raw_produce(cluster, leader, topic, acks=-1)[0] == ErrorCode.NONE
        metrics = scrape(ports[leader])
        assert metrics["seaway_under_replicated_partitions"] == 0
        assert metrics["seaway_isr_expands_total"] >= 2 and metrics["seaway_leader_partitions"] >= 1
        wait_until(lambda: len({log_bytes(cluster, n, topic) for n in NODES}) == 1, 15,
                   "identical logs", cluster)


def test_offset_for_leader_epoch_answers_from_the_epoch_cache(tmp_path):
    with start_cluster(tmp_path) as cluster:
        topic = unique_topic("epochs")
        create(cluster, topic)
        produce(cluster, topic, [b"e0-%d" % i for i in range(10)])
        leader, _, _ = layout(cluster, topic)
        cluster.kill(leader)
        new = wait_until(lambda: (lambda ldr: ldr if ldr not in (leader, -1) else None)(layout(cluster, topic)[0]),
                         20, "a new leader", cluster)
        produce(cluster, topic, [b"e1-%d" % i for i in range(5)])
        OLE = m.OffsetForLeaderEpochRequest

        def ask(epoch: int, current: int = -1):
            request = OLE(replica_id=-1, topics=[OLE.OffsetForLeaderTopic(topic=topic, partitions=[
                OLE.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
            r = raw(cluster, new, 23, request, 4).topics[0].partitions[0]
            return ErrorCode(r.error_code), r.leader_epoch, r.end_offset

        md = admin(cluster).list_topics(topic, timeout=5).topics[topic].partitions[0]
        current = raw(cluster, new, 3, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
            name=topic, topic_id=bytes(16))], allow_auto_topic_creation=False), 12).topics[0].partitions[0].leader_epoch
        assert md.leader == new and current >= 1
        # The first epoch ends where the new leader's began: after the 10 first records.
        assert ask(0) == (ErrorCode.NONE, 0, 10)
        assert ask(current) == (ErrorCode.NONE, current, 15)
        # An epoch later than any the leader knows: undefined, as Kafka answers.
        assert ask(current + 5) == (ErrorCode.NONE, -1, -1)
        assert ask(0, current=current - 1)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert ask(0, current=current + 1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        # A follower does not answer.
        follower = next(n for n in NODES if n not in (new, leader))
        request = OLE(replica_id=-1, topics=[OLE.OffsetForLeaderTopic(topic=topic, partitions=[
            OLE.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])])
        r = raw(cluster, follower, 23, request, 4).topics[0].partitions[0]
        assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_consumers_read_from_a_follower_in_their_rack(tmp_path):
    """KIP-392: the leader sends a consumer with client.rack to the in-sync follower in that
    rack, which serves records up to its high watermark."""
    racks = {101: "az-a", 102: "az-b", 103: "az-c"}
    with start_cluster(tmp_path, per_node={n: {"broker.rack": r} for n, r in racks.items()}, **{
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}) as cluster:
        topic = unique_topic("rack")
        create(cluster, topic)
        values = [b"r%d" % i for i in range(50)]
        produce(cluster, topic, values)
        leader, _, _ = layout(cluster, topic)
        follower = next(n for n in NODES if n != leader)
        wait_until(lambda: isr_seen_by(cluster, leader, topic) == NODES, 15, "full ISR", cluster)
        F = m.FetchRequest

        def fetch(node_id: int, rack: str):
            md = raw(cluster, node_id, 3, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
                name=topic, topic_id=bytes(16))], allow_auto_topic_creation=False), 12)
            request = F(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[F.FetchTopic(
                            topic=topic, topic_id=md.topics[0].topic_id, partitions=[F.FetchPartition(
                                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id=rack)
            pd = raw(cluster, node_id, 1, request, 12).responses[0].partitions[0]
            records = b"".join(pd.records) if isinstance(pd.records, list) else bytes(pd.records or b"")
            return ErrorCode(pd.error_code), pd.preferred_read_replica, pd.high_watermark, records

        # From the leader's rack, or with no rack: the leader serves the records itself.
        code, preferred, hw, records = fetch(leader, racks[leader])
        assert (code, preferred, hw) == (ErrorCode.NONE, -1, 50) and records
        code, preferred, _, records = fetch(leader, "")
        assert (code, preferred) == (ErrorCode.NONE, -1) and records
        # From the follower's rack: no records, go to the follower.
        code, preferred, hw, records = fetch(leader, racks[follower])
        assert (code, preferred, hw, records) == (ErrorCode.NONE, follower, 50, b"")
        # An unknown rack: the leader.
        assert fetch(leader, "az-nowhere")[1] == -1
        # The follower serves the same bytes, up to its high watermark.
        wait_until(lambda: fetch(follower, racks[follower])[2] == 50, 10, "the follower's high watermark", cluster)
        code, preferred, hw, from_follower = fetch(follower, racks[follower])
        assert (code, preferred) == (ErrorCode.NONE, -1)
        assert from_follower == fetch(leader, racks[leader])[3]
        # A real consumer in the follower's rack reads everything.
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("g"),
                      "client.rack": racks[follower], "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        try:
            while len(got) < 50 and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg.value())
        finally:
            c.close()
        assert got == values


def test_without_unclean_election_a_partition_with_no_live_isr_stays_offline(tmp_path):
    """The controller elects only from the ISR: when the last ISR member dies the partition is
    offline (Metadata says so) even though an out-of-sync replica is alive; enabling
    unclean.leader.election.enable brings it back on that replica, which lacks (and reports)
    the records only the dead leader had."""
    from tests.support.node import free_port
    port = free_port()
    with start_cluster(tmp_path, per_node={102: {"metrics.port": str(port)}},
                       **{"unclean.leader.election.interval.ms": "500"}) as cluster:
        topic = unique_topic("unclean")
        a = admin(cluster)
        fs = a.create_topics([NewTopic(topic, 1, replica_assignment=[[101, 102]])])
        fs[topic].result(15)
        wait_until(lambda: isr_seen_by(cluster, 101, topic) == [101, 102], 15, "full ISR", cluster)
        produce(cluster, topic, [b"both-%d" % i for i in range(10)])
        # The follower stops and leaves the ISR; the leader alone takes more records.
        cluster.sigstop(102)
        wait_until(lambda: isr_seen_by(cluster, 101, topic) == [101], LAG_MS / 1000 + 15, "ISR = leader", cluster)
        for i in range(5):
            assert raw_produce(cluster, 101, topic, acks=-1, value=b"only-leader-%d" % i)[0] == ErrorCode.NONE
        cluster.kill(101)
        cluster.sigcont(102)
        # 102 is alive and unfenced again, but out of sync: no leader.
        wait_until(lambda: sorted(admin(cluster).list_topics(timeout=5).brokers) == [102, 103], 20,
                   "101 fenced and 102 back", cluster)
        time.sleep(2)   # several unclean-election intervals: still nothing may be elected
        md = raw(cluster, 102, 3, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
            name=topic, topic_id=bytes(16))], allow_auto_topic_creation=False), 12).topics[0].partitions[0]
        assert (md.leader_id, md.error_code) == (-1, ErrorCode.LEADER_NOT_AVAILABLE)
        assert 101 in md.offline_replicas and list(md.isr_nodes) == [101]
        # The operator accepts the loss.
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
        res = ConfigResource("topic", topic, incremental_configs=[ConfigEntry(
            "unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
        a.incremental_alter_configs([res])[res].result(15)
        wait_until(lambda: layout(cluster, topic)[0] == 102, 20, "102 elected uncleanly", cluster)
        got = consume(cluster, topic, 15, timeout=5, via=102)
        assert [v for _, v in got] == [b"both-%d" % i for i in range(10)]
        assert "unclean" in cluster.nodes[102].log_tail(200)
        assert scrape(port)["seaway_unclean_leaderships_total"] == 1


def test_a_replication_throttle_slows_only_the_throttled_catch_up(tmp_path):
    """KIP-73: a follower catching up on a topic whose follower.replication.throttled.replicas
    names it fetches at most follower.replication.throttled.rate; another topic it is behind on,
    without a throttle, catches up at once."""
    rate = 300_000
    # Small fetches, so that catching up takes many, and the throttle has rounds to act on.
    with start_cluster(tmp_path, **{"follower.replication.throttled.rate": str(rate),
                                    "replica.fetch.max.bytes": "50000"}) as cluster:
        slow, fast = unique_topic("throttled"), unique_topic("free")
        create(cluster, slow, follower_replication_throttled_replicas="*")
        create(cluster, fast)
        leader = layout(cluster, slow)[0]
        lagging = next(n for n in NODES if n != leader and n != layout(cluster, fast)[0])
        cluster.sigstop(lagging)
        for t in (slow, fast):
            wait_until(lambda: lagging not in layout(cluster, t)[2], LAG_MS / 1000 + 15,
                       f"{lagging} out of the ISR of {t}", cluster)
        size = 1_500_000
        chunk = b"x" * 10_000
        for t in (slow, fast):
            p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 5,
                          "batch.size": 25_000})   # many small batches: fetches can stop between them
            for _ in range(size // len(chunk)):
                p.produce(t, value=chunk, partition=0)
                p.poll(0)
            assert p.flush(30) == 0
        cluster.sigcont(lagging)
        started = time.monotonic()
        wait_until(lambda: lagging in layout(cluster, fast)[2], 20, "the unthrottled topic caught up", cluster)
        fast_took = time.monotonic() - started
        wait_until(lambda: lagging in layout(cluster, slow)[2], 60, "the throttled topic caught up", cluster)
        slow_took = time.monotonic() - started
        # 1.5 MB at 300 kB/s is five seconds; the sliding window lets the first second's worth
        # through at once, so about four, and surely more than three.
        assert slow_took >= (size / rate) - 2, (slow_took, fast_took)
        assert fast_took < slow_took / 2, (slow_took, fast_took)
