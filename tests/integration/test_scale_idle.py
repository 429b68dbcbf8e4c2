"""Thousands of idle partitions cost a cluster neither its cores nor its controller.

A 3-node cluster (real processes, combined broker and controller roles) holds 2,000 partitions
at RF=3 and sits idle for SEAWAY_SCALE_IDLE_S seconds (default 300, the issue's five minutes).
Before fetch sessions, each follower named every partition twice a second and each leader
looked at every one of them: 1,300 partitions took about a quarter of a core per node, and the
controller lost its leadership every few seconds. The bounds here are generous; the measured
figures are in tests/benchmarks/README.md (bench_scale.py).
"""
from __future__ import annotations

import os
import time

import anyio
import pytest
from confluent_kafka.admin import NewTopic

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from core.protocol.errors import ErrorCode

from tests.benchmarks.bench_scale import cpu_seconds
from tests.support.cluster import KRaftCluster

pytestmark = pytest.mark.integration

PARTITIONS = 2000
PER_TOPIC = 10
IDLE_S = float(os.environ.get("SEAWAY_SCALE_IDLE_S", "300"))
MAX_IDLE_CPU = 0.20     # of one core, per node; measured about 0.02


def _layout(admin, names) -> dict:
    md = admin.list_topics(timeout=60)
    return {(t, i): (p.leader, sorted(p.isrs)) for t in names if t in md.topics
            for i, p in md.topics[t].partitions.items()}


@pytest.mark.timeout(IDLE_S + 300)
def test_two_thousand_idle_partitions_cost_no_elections_and_little_cpu(tmp_path):
    with KRaftCluster(tmp_path, combined=3) as cluster:
        admin = cluster.admin_when_ready()
        names = [f"idle-{i:04d}" for i in range(PARTITIONS // PER_TOPIC)]
        for i in range(0, len(names), 50):
            for f in admin.create_topics([NewTopic(n, PER_TOPIC, 3) for n in names[i:i + 50]],
                                         request_timeout=120).values():
                f.result(180)
        deadline = time.monotonic() + 180
        while True:
            layout = _layout(admin, names)
            if len(layout) == PARTITIONS and all(leader >= 0 and len(isr) == 3 for leader, isr in layout.values()):
                break
            assert time.monotonic() < deadline, "partitions not led with a full ISR"
            time.sleep(1)

        _, epoch_before = cluster.wait_for_leader()
        pids = {i: n.proc.pid for i, n in cluster.nodes.items()}
        cpu_before = {i: cpu_seconds(p) for i, p in pids.items()}
        started = time.monotonic()
        time.sleep(IDLE_S)
        wall = time.monotonic() - started
        usage = {i: (cpu_seconds(p) - cpu_before[i]) / wall for i, p in pids.items()}
        _, epoch_after = cluster.wait_for_leader()

        t0 = time.monotonic()
        layout = _layout(admin, names)
        metadata_s = time.monotonic() - t0
        assert epoch_after == epoch_before, f"{epoch_after - epoch_before} controller elections while idle"
        assert all(u < MAX_IDLE_CPU for u in usage.values()), f"idle CPU per node (share of a core): {usage}"
        shrunk = [tp for tp, (_, isr) in layout.items() if len(isr) < 3]
        assert not shrunk, f"{len(shrunk)} idle partitions lost an ISR member, e.g. {shrunk[:5]}"
        assert metadata_s < 5, f"Metadata for {PARTITIONS} partitions took {metadata_s:.1f}s"


def test_deleted_topics_leave_no_work_behind(tmp_path):
    """Topics created and deleted: every follower forgets their partitions in its fetch
    sessions, so the nodes go back to idle. (A follower that forgot them under the wrong key
    kept its leaders answering their errors at once, round after round: half a core each.)"""
    with KRaftCluster(tmp_path, combined=3) as cluster:
        admin = cluster.admin_when_ready()
        names = [f"short-lived-{i}" for i in range(30)]
        # A topic that stays keeps each follower's fetch session busy after the others go.
        for f in admin.create_topics([NewTopic(n, 2, 3) for n in ["keeper", *names]], request_timeout=60).values():
            f.result(120)
        deadline = time.monotonic() + 60
        while not all(len(isr) == 3 for _, isr in _layout(admin, ["keeper", *names]).values()) or \
                len(_layout(admin, ["keeper", *names])) < 62:
            assert time.monotonic() < deadline, "partitions not led with a full ISR"
            time.sleep(0.5)
        for f in admin.delete_topics(names, request_timeout=60).values():
            f.result(120)
        time.sleep(5)
        pids = {i: n.proc.pid for i, n in cluster.nodes.items()}
        before = {i: cpu_seconds(p) for i, p in pids.items()}
        time.sleep(10)
        usage = {i: (cpu_seconds(p) - before[i]) / 10 for i, p in pids.items()}
        assert all(u < MAX_IDLE_CPU for u in usage.values()), f"CPU per node after the deletions: {usage}"
        assert not set(admin.list_topics(timeout=30).topics) & set(names), "a deleted topic came back"
        # A client that still names a deleted topic gets it back only if it asks for creation
        # (Metadata's allow_auto_topic_creation, with auto.create.topics.enable on by default).
        node = cluster.nodes[1]
        asked = _metadata(node.bootstrap, names[0], allow_create=False)
        assert asked.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert names[0] not in admin.list_topics(timeout=30).topics
        # LEADER_NOT_AVAILABLE means "ask again", as a client does, until the topic is there.
        deadline = time.monotonic() + 30
        while (asked := _metadata(node.bootstrap, names[1], allow_create=True)).error_code:
            assert asked.error_code == ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode(asked.error_code)
            assert time.monotonic() < deadline, "auto-creation never finished"
            time.sleep(0.2)
        assert [p.leader_id for p in asked.partitions] != [] and all(p.leader_id > 0 for p in asked.partitions)
        deadline = time.monotonic() + 30
        while names[1] not in admin.list_topics(timeout=30).topics:   # other brokers catch up
            assert time.monotonic() < deadline, "an auto-created topic is missing on another broker"
            time.sleep(0.2)


def _metadata(bootstrap: str, topic: str, *, allow_create: bool):
    host, port = bootstrap.rsplit(":", 1)
    M = m.MetadataRequest

    async def ask():
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            return await conn.send(M(topics=[M.MetadataRequestTopic(name=topic, topic_id=bytes(16))],
                                     allow_auto_topic_creation=allow_create), 3, version=12)
        finally:
            await conn.close()
    return anyio.run(ask).topics[0]
