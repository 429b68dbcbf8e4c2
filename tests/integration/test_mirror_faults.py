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

from tests.integration.test_mirror import read_all, start_mirror
from tests.support.cluster import KRaftCluster
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
