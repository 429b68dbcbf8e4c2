"""The mirror under faults: the source's partition leaders are killed mid-stream (kill -9 of
a broker of a 3-node RF=3 cluster) and the target goes down and comes back, while a producer
keeps writing. Afterwards every record the source acknowledged is in the target."""
from __future__ import annotations

import signal
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import KRaftCluster
from tests.support.mirror import SteadyWriter, copies_after_a_restart, read_all, start_mirror
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration


def test_leader_failover_upstream_and_a_target_outage_lose_nothing(tmp_path):
    with KRaftCluster(tmp_path / "source", combined=3,
                      overrides={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
                                 "offsets.topic.replication.factor": "3"}) as source:
        source.wait_for_leader()
        tgt = SeawayNode(tmp_path / "target").start()
        try:
            admin = AdminClient({"bootstrap.servers": source.bootstrap})
            deadline = time.monotonic() + 30
            while len(admin.list_topics(timeout=5).brokers) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            admin.create_topics([NewTopic("orders", 3, 3, config={"min.insync.replicas": "2"})])["orders"].result(30)
            acked: set[str] = set()
            stop = threading.Event()

            def produce():
                p = Producer({"bootstrap.servers": source.bootstrap, "acks": "all", "enable.idempotence": True,
                              "linger.ms": 5, "message.timeout.ms": 60000})

                def delivered(err, msg):
                    if err is None:
                        acked.add(msg.value().decode())
                i = 0
                while not stop.is_set():
                    p.produce("orders", value=b"v%d" % i, partition=i % 3, on_delivery=delivered)
                    i += 1
                    if i % 100 == 0:
                        p.poll(0)
                        time.sleep(0.02)
                p.flush(60)
            writer = threading.Thread(target=produce)
            writer.start()
            mirror = start_mirror(tmp_path, source, tgt)
            try:
                time.sleep(3)
                leaders = {p.leader for p in admin.list_topics("orders", timeout=5).topics["orders"].partitions.values()}
                victim = sorted(leaders)[0]
                source.kill(victim)                     # leaders move while the mirror reads
                time.sleep(4)
                source.nodes[victim].start()
                time.sleep(2)
                tgt.stop()                              # the target is down for a while
                time.sleep(3)
                tgt.start()
                time.sleep(3)
            finally:
                stop.set()
                writer.join(90)
            try:
                got = read_all(tgt.bootstrap, "src.orders", len(acked), timeout=120)
            finally:
                mirror.send_signal(signal.SIGTERM)
                mirror.wait(30)
            values = [g[2] for g in got]
            missing = acked - set(values)
            assert not missing, f"{len(missing)} acknowledged records never reached the target, e.g. {sorted(missing)[:5]}"
            assert len(acked) > 1000
        finally:
            tgt.stop()


@pytest.mark.parametrize("paused", ["source", "target"])
def test_a_stop_while_a_cluster_hangs_is_bounded_and_a_restart_loses_nothing(tmp_path, paused):
    """SIGTERM while the source or target is frozen (SIGSTOP): no hand-over can finish, so the
    mirror gives up within its deadline (8 s for the copiers, 3 s to close) and exits 0 rather
    than hang; after the cluster thaws a new mirror completes the copy: nothing lost, and
    nothing copied more than twice."""
    src = SeawayNode(tmp_path / "src").start()
    tgt = SeawayNode(tmp_path / "tgt").start()
    frozen = src if paused == "source" else tgt
    try:
        writer = SteadyWriter.into_new_topic(src.bootstrap, "events", 20_000)
        mirror = start_mirror(tmp_path, src, tgt)
        time.sleep(1.5)                      # copying mid-stream
        frozen.pause()
        try:
            time.sleep(0.5)
            started = time.monotonic()
            mirror.send_signal(signal.SIGTERM)
            assert mirror.wait(30) == 0
            took = time.monotonic() - started
        finally:
            frozen.resume()
        assert took < 15, took
        writer.join(120)
        counts = copies_after_a_restart(tmp_path, src, tgt, 20_000)
        assert set(counts) == set(writer.placed), f"missing {len(set(writer.placed) - set(counts))}"
        assert max(counts.values()) <= 2
    finally:
        src.stop()
        tgt.stop()
