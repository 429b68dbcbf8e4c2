"""The mirror on the two-region platform, as `regions up` runs it: eu-west-1 is copied to
us-east-1 across the WAN proxies (40 ms each way) while a confluent-kafka producer writes in
eu-west, through an outage of the whole source cluster, and a consumer group then moves from
eu-west to us-east on the offsets the mirror translated. The platform is the shipped one,
secured: the mirror logs in as its own user with only the ACLs its link needs, the test's
clients as the admin.

What must hold afterwards:
- us-east-1's `payments` (the DR pair's read-only replica) is exactly eu-west-1's `payments`,
  partition by partition
  and record by record (key, value, headers, timestamp): nothing lost, nothing reordered, and
  nothing duplicated, since the mirror process never restarted (its pid is checked) and so
  resent only under its idempotent producer id;
- the outage was seen (the mirror counted errors) and was ridden out by retries, not by the
  supervisor restarting the mirror;
- the group, on us-east, skips no record it had not consumed in eu-west and, since every batch
  went whole and its sync carries the batch's run, re-reads none either (it stopped inside
  batches on purpose).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror.translation import Sync, redelivery_bound, translate
from regions.topology import DEFAULT_TOPOLOGY
from tests.support.mirror import read_offset_syncs, resume_on_target
from tests.support.node import REPO
from tests.support.regions import Platform, create, regions, without_fixed_ports

pytestmark = pytest.mark.integration

TOPIC, REMOTE, GROUP = "payments", "payments", "billing"     # a DR pair keeps names
SYNCS = "mm2-offset-syncs.us-east-1.internal"
PAD = b"." * 900          # ~1 KB records: the copy takes real WAN bandwidth


def record(i: int) -> dict:
    return {"key": b"k%d" % i, "value": b"v%d|" % i + PAD, "headers": [("i", b"%d" % i)],
            "timestamp": 1_800_000_000_000 + i}


class Writer(threading.Thread):
    """Writes ~1500 records a second in eu-west until stopped; keeps what was acknowledged."""

    def __init__(self, client: dict):
        super().__init__(daemon=True)
        self.client, self.acked, self.failed = client, set(), []
        self.halt = threading.Event()

    def run(self) -> None:
        p = Producer({**self.client, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120000})

        def delivered(err, msg):
            if err is None:
                self.acked.add(msg.value().split(b"|")[0].decode())
            else:
                self.failed.append(str(err))
        i = 0
        while not self.halt.is_set():
            for _ in range(30):
                r = record(i)
                p.produce(TOPIC, r["value"], r["key"], partition=i % 3, headers=r["headers"],
                          timestamp=r["timestamp"], on_delivery=delivered)
                i += 1
            p.poll(0.02)
        assert p.flush(150) == 0


def read_partitions(client: dict, topic: str, timeout: float = 120) -> dict[int, list[tuple]]:
    """Every record of every partition, to each partition's end as it is now."""
    c = Consumer({**client, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[int, list[tuple]] = {p: [] for p in parts}
        deadline = time.monotonic() + timeout
        while any(len(out[p]) < ends[p] for p in parts):
            assert time.monotonic() < deadline, {p: (len(out[p]), ends[p]) for p in parts}
            for msg in c.consume(2000, timeout=0.5):
                if not msg.error():
                    out[msg.partition()].append((msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
        return out
    finally:
        c.close()


def mirror_status(state: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--platform", "--state-dir", str(state),
                          "--output", "json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_group_moves_to_us_east_after_a_source_outage_with_every_record_mirrored(tmp_path):
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "two-regions.yaml")
    state = tmp_path / "state"
    with Platform(state, topology) as p:
        eu, us = p.client("eu-west-1"), p.client("us-east-1")     # as the admin user
        create(eu, TOPIC, rf=3, min_isr=2)
        mirror_pid = p.status()["mirror"]["pid"]
        assert mirror_pid
        # The mirror's metrics address: printed by `regions up`, `regions status` and `mirror status`.
        url = p.info["mirror_metrics"]
        assert url and f"  mirror metrics: {url} " in p.up_output
        assert p.status()["mirror"]["url"] == url
        assert f"metrics {url}" in regions(state, "status").stdout
        shown = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--platform", "--state-dir", str(state)],
                               cwd=REPO, capture_output=True, text=True, timeout=60)
        assert shown.stdout.splitlines()[0] == f"mirror metrics: {url}", shown.stdout

        # A writer in eu-west; the whole of eu-west-1 is killed mid-stream and comes back.
        writer = Writer(eu)
        writer.start()
        try:
            deadline = time.monotonic() + 60      # the mirror is copying every partition
            while len([r for r in mirror_status(state)["partitions"]
                       if r["topic"] == TOPIC and r["records"] > 0]) < 3:
                assert time.monotonic() < deadline, "the mirror never started copying"
                time.sleep(0.5)
            down = regions(state, "stop", "eu-west", "--kill")
            assert down.returncode == 0, down.stderr
            time.sleep(8)
            during = mirror_status(state)
        finally:
            back = regions(state, "start", "eu-west")
            time.sleep(6)
            writer.halt.set()
            writer.join(180)
        assert back.returncode == 0, back.stderr
        assert sum(r["errors"] for r in during["partitions"] if r["topic"] == TOPIC) > 0, during
        assert not writer.is_alive() and not writer.failed, writer.failed[:3]
        assert len(writer.acked) > 5000, len(writer.acked)

        # The group consumes part of every partition in eu-west (stopping mid-batch) and commits.
        source = read_partitions(eu, TOPIC)
        assert {r[1].split(b"|")[0].decode() for part in source.values() for r in part} >= writer.acked
        committed = {part: len(records) // 3 + 7 for part, records in source.items()}
        c = Consumer({**eu, "group.id": GROUP, "enable.auto.commit": False})
        c.assign([TopicPartition(TOPIC, part, 0) for part in committed])
        consumed: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(consumed) < sum(committed.values()):
            assert time.monotonic() < deadline, (len(consumed), committed)
            for msg in c.consume(500, timeout=0.5):
                if not msg.error() and msg.offset() < committed[msg.partition()]:
                    consumed.add(msg.value())
        c.commit(offsets=[TopicPartition(TOPIC, part, o) for part, o in committed.items()], asynchronous=False)
        c.close()

        # us-east-1 has exactly what eu-west-1 has: every partition, every field, in order.
        deadline = time.monotonic() + 120
        while True:
            ends = {}
            probe = Consumer({**us, "group.id": "probe"})
            try:
                for part in source:
                    ends[part] = probe.get_watermark_offsets(TopicPartition(REMOTE, part), timeout=10)[1]
            except Exception:   # noqa: BLE001 — not created or not caught up yet
                ends = {}
            finally:
                probe.close()
            if ends and all(ends[part] >= len(source[part]) for part in source):
                break
            assert time.monotonic() < deadline, (ends, {part: len(r) for part, r in source.items()})
            time.sleep(1)
        mirrored = read_partitions(us, REMOTE)
        for part in source:
            assert len(mirrored[part]) == len(source[part]), (part, len(mirrored[part]), len(source[part]))
            first_difference = next((i for i, (a, b) in enumerate(zip(source[part], mirrored[part])) if a != b), None)
            assert first_difference is None, (part, first_difference, source[part][first_difference][:1],
                                              mirrored[part][first_difference][:1])
        assert p.status()["mirror"]["pid"] == mirror_pid     # ridden out by retries, not a restart

        # The mirror commits translated offsets into us-east-1's idle group: each must be the
        # translation of what the group committed through the syncs in eu-west-1's topic (the
        # mirror's store merges runs, so it forgets none of them here), which is exact: the
        # group stopped inside batches, each copied whole with its run.
        admin = AdminClient(us)
        deadline = time.monotonic() + 90
        while True:
            syncs = defaultdict(list)
            for s in read_offset_syncs(eu, SYNCS):
                if s.topic == TOPIC:
                    syncs[s.partition].append(Sync(s.upstream_offset, s.downstream_offset, s.extent))
            found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP].result(10)
            on_target = {tp.partition: tp.offset for tp in found.topic_partitions if tp.topic == REMOTE}
            exact = {part: translate(_as_store(syncs[part]), committed[part]) for part in committed}
            if all(on_target.get(part) == exact[part] is not None for part in committed):
                break
            assert time.monotonic() < deadline, (on_target, exact, committed)
            time.sleep(1)
        bound = sum(redelivery_bound(_as_store(syncs[part]), committed[part]) for part in committed)
        assert bound == 0, {part: redelivery_bound(_as_store(syncs[part]), committed[part]) for part in committed}
        assert all(on_target[part] > 0 for part in committed), on_target   # translated, not from scratch
        print(f"group failover: committed {committed}, translated {on_target}")

        # The same group in us-east reads the rest: none skipped, re-reads within the bound.
        wanted = {r[1] for part in source.values() for r in part} - consumed
        resume_on_target(us, GROUP, REMOTE, wanted, bound)

        # The operator then fails eu-west over to us-east, and back, with `dr` as the README
        # shows it (the platform's clusters and admin login, from the state directory).
        assert json.loads(dr(state, "status", "-o", "json").stdout)["pairs"][0]["active_region"] == "eu-west"
        out = dr(state, "failover", "eu-west").stdout
        assert "us-east is active" in out and "RPO 0 records" in out, out
        assert (role(eu, TOPIC), role(us, TOPIC)) == ("us-east-1", "")
        p_us = Producer({**us, "acks": "all", "enable.idempotence": True})
        for i in range(100):
            p_us.produce(TOPIC, b"after-failover-%d" % i, partition=i % 3)
        assert p_us.flush(30) == 0
        before = sum(len(r) for r in source.values())
        deadline = time.monotonic() + 60        # the link back copies them to eu-west, over the WAN
        while _total(eu, TOPIC, source) < before + 100:
            assert time.monotonic() < deadline, _total(eu, TOPIC, source)
            time.sleep(0.5)
        dr(state, "failover", "us-east")
        assert (role(eu, TOPIC), role(us, TOPIC)) == ("", "eu-west-1")
        history = dr(state, "history").stdout
        assert "planned eu-west-1 -> us-east-1 (epoch 1): done" in history
        assert "planned us-east-1 -> eu-west-1 (epoch 2): done" in history


def dr(state: Path, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "dr.cli", "--platform", "--state-dir", str(state), *args],
                         cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def role(client: dict, topic: str) -> str:
    from confluent_kafka.admin import ConfigResource
    admin = AdminClient(client)
    resource = ConfigResource("topic", topic)
    return admin.describe_configs([resource])[resource].result(10)["seaway.replica.of"].value or ""


def _total(client: dict, topic: str, partitions) -> int:
    probe = Consumer({**client, "group.id": "probe"})
    try:
        return sum(probe.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[1] for part in partitions)
    finally:
        probe.close()


def _as_store(syncs: list) -> tuple:
    """The syncs as the mirror's store keeps them (runs merged), with no capacity limit."""
    from mirror.translation import PartitionSyncs
    store = PartitionSyncs(capacity=10**6)
    for sync in syncs:
        store.observe(*sync)
    return store.syncs
