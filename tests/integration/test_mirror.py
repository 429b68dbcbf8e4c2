"""`mirror run` between two real clusters (single Seaway nodes here; the two-region platform
runs it across the WAN in test_regions_mirror.py): every record arrives with its key, value,
headers, timestamp and partition; offset syncs and their runs map every offset exactly; a
mirror killed with kill -9 resumes where its last recorded run ends, duplicating only records
at or after it; a group that moves to the target re-reads nothing and skips nothing.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.support.mirror import (SteadyWriter, alter_topic_configs, copies_after_a_restart, produce, read_all,
                                  read_internal, read_offset_syncs, resume_on_target, start_mirror,
                                  topic_configs, wait_for_configs)
from tests.support.node import REPO, SeawayNode

pytestmark = pytest.mark.integration

SYNCS = "mm2-offset-syncs.tgt.internal"


@pytest.fixture
def clusters(tmp_path):
    src = SeawayNode(tmp_path / "src", {"num.partitions": "3"}).start()
    tgt = SeawayNode(tmp_path / "tgt").start()
    try:
        yield src, tgt
    finally:
        src.stop()
        tgt.stop()


def offset_syncs(bootstrap: str) -> list:
    return read_offset_syncs(bootstrap, SYNCS)


def test_every_record_arrives_with_its_fields_and_syncs_map_batches_exactly(tmp_path, clusters):
    src, tgt = clusters
    admin = AdminClient({"bootstrap.servers": src.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1, config={"retention.ms": "86400000"})])["orders"].result(10)
    placed = produce(src.bootstrap, "orders", 0, 6000)
    mirror = start_mirror(tmp_path, src, tgt)
    try:
        got = read_all(tgt.bootstrap, "src.orders", 6000)
        ends = {p: 1 + max(o for q, o in placed.values() if q == p) for p in range(3)}
        deadline = time.monotonic() + 30
        while True:      # how far each partition got is recorded too
            syncs = [s for s in offset_syncs(src.bootstrap) if s.topic == "orders"]
            if {p: max((s.upstream_offset + s.extent for s in syncs if s.partition == p), default=-1)
                    for p in range(3)} == ends:
                break
            assert time.monotonic() < deadline, (syncs[-5:], ends)
            time.sleep(0.2)
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(30) == 0
    by_value = {}
    for partition, offset, value, key, headers, ts in got:
        assert value not in by_value, f"{value} twice"
        by_value[value] = (partition, offset)
        i = int(value[1:])
        assert (partition, key, headers, ts) == (i % 3, b"k%d" % i, [("i", b"%d" % i)], (1, 1_700_000_000_000 + i))
    assert set(by_value) == set(placed)
    # Offsets keep their order within each partition (batches go whole, in order).
    for p in range(3):
        ups = sorted((placed[v][1], by_value[v][1]) for v in placed if placed[v][0] == p)
        assert [d for _, d in ups] == sorted(d for _, d in ups)
    # Each offset sync (u, d, x): upstream offset u + k is downstream offset d + k, exactly, for
    # every k below x (the batch's run); the runs cover every record.
    assert {s.topic for s in offset_syncs(src.bootstrap)} <= {"orders", "heartbeats"}
    at_target = {(p, o): v for v, (p, o) in by_value.items()}
    at_source = {(p, o): v for v, (p, o) in placed.items()}
    covered = set()
    for s in syncs:
        if (s.partition, s.upstream_offset) in at_source:
            assert at_target[(s.partition, s.downstream_offset)] == at_source[(s.partition, s.upstream_offset)], s
        for k in range(s.extent):
            assert at_target[(s.partition, s.downstream_offset + k)] == at_source[(s.partition, s.upstream_offset + k)], s
            covered.add((s.partition, s.upstream_offset + k))
    assert covered == set(at_source)
    # The topic's non-default config came along.
    target_admin = AdminClient({"bootstrap.servers": tgt.bootstrap})
    res = target_admin.describe_configs([ConfigResource("topic", "src.orders")])
    assert list(res.values())[0].result(10)["retention.ms"].value == "86400000"


def wait_until_resumed(log: Path, mirror: subprocess.Popen) -> None:
    """Until the mirror writing `log` has read its offset syncs: its signal handler is in place."""
    deadline = time.monotonic() + 30
    while "resume from recorded offset syncs" not in log.read_text():
        assert time.monotonic() < deadline and mirror.poll() is None, log.read_text()[-2000:]
        time.sleep(0.1)


def wait_for_progress(tmp_path: Path, bootstrap: str, mirror: subprocess.Popen, beyond: int) -> None:
    """Until the recorded syncs of the link's partitions add up to more than `beyond`."""
    deadline = time.monotonic() + 60
    while True:
        syncs = offset_syncs(bootstrap) if _has_topic(bootstrap, SYNCS) else []
        if sum({s.partition: s.upstream_offset + s.extent for s in syncs if s.topic != "heartbeats"}.values()) > beyond:
            return
        assert time.monotonic() < deadline and mirror.poll() is None, (tmp_path / "mirror.log").read_text()[-2000:]
        time.sleep(0.05)


def test_a_mirror_killed_with_kill9_resumes_from_its_last_sync(tmp_path, clusters):
    src, tgt = clusters
    total = 30_000
    producer = SteadyWriter.into_new_topic(src.bootstrap, "events", total)
    placed = producer.placed
    mirror = start_mirror(tmp_path, src, tgt)
    wait_for_progress(tmp_path, src.bootstrap, mirror, 4000)
    mirror.send_signal(signal.SIGKILL)
    mirror.wait()
    recorded = {}
    for s in offset_syncs(src.bootstrap):
        if s.topic == "events":
            recorded[s.partition] = s.upstream_offset + s.extent     # where the latest run ends: the resume point
    producer.join(120)
    assert sum(recorded.values()) < total, "the kill came too late to test a resume"
    seen = copies_after_a_restart(tmp_path, src, tgt, total)
    assert set(seen) == set(placed), f"missing {len(set(placed) - set(seen))}"
    duplicated = [v for v, n in seen.items() if n > 1]
    for v in duplicated:       # only what came after the last recorded sync can come twice
        partition, offset = placed[v]
        assert offset >= recorded.get(partition, 0), (v, placed[v], recorded)
    thrice = sorted((placed[v], n) for v, n in seen.items() if n > 2)
    if thrice:      # was it the copy, or does the source itself hold a value twice?
        source = read_all(src.bootstrap, "events", total, timeout=30)
        twice_upstream = sorted((p, o) for p, o, v, *_ in source if placed.get(v) != (p, o))
        raise AssertionError(f"copied more than twice: {thrice[:20]} ({len(thrice)} in all); syncs {recorded}; "
                             f"source records placed elsewhere than their delivery report said: "
                             f"{twice_upstream[:20]}\n" + _mirror_warnings(tmp_path))


def test_a_mirror_stopped_with_sigterm_hands_over_without_a_duplicate(tmp_path, clusters):
    """SIGTERM is a graceful stop: the mirror stops fetching, waits for what it has in flight
    and records where it got. Stopped and restarted three times mid-stream, it leaves the
    target exactly the source: every record once, in order."""
    src, tgt = clusters
    total = 30_000
    producer = SteadyWriter.into_new_topic(src.bootstrap, "events", total)
    mirror = start_mirror(tmp_path, src, tgt)
    for round_ in range(3):
        # The syncs an earlier run recorded may already be past the mark: wait for this run to
        # be under way too, since a signal before its handler is in place kills it.
        wait_until_resumed(tmp_path / ("mirror.log" if round_ == 0 else f"mirror{round_ + 1}.log"), mirror)
        wait_for_progress(tmp_path, src.bootstrap, mirror, 3000 * (round_ + 1))
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(30) == 0
        mirror = start_mirror(tmp_path, src, tgt, f"mirror{round_ + 2}")
    producer.join(120)
    placed = producer.placed
    assert len(placed) == total
    try:
        got = read_all(tgt.bootstrap, "src.events", total, timeout=90)
    finally:
        wait_until_resumed(tmp_path / "mirror4.log", mirror)
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(30) == 0
    values = [value for _, _, value, *_ in got]
    assert len(values) == len(set(values)) == total, (len(values), len(set(values)), total)
    for p in range(3):        # in the source's order
        mine = [(offset, value) for partition, offset, value, *_ in got if partition == p]
        assert [placed[v][1] for _, v in sorted(mine)] == sorted(o for q, o in placed.values() if q == p)

def read_checkpoints(bootstrap: str) -> list:
    from mirror.records import decode_checkpoint
    topic = "src.checkpoints.internal"
    return read_internal(bootstrap, topic, decode_checkpoint) if _has_topic(bootstrap, topic) else []


def _has_topic(bootstrap: str, topic: str) -> bool:
    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics


def test_a_bad_link_config_gets_one_line(tmp_path):
    bad = tmp_path / "links.yaml"
    bad.write_text("links:\n  - {source_alias: a, source_bootstrap: 'x:1', target_alias: b, "
                   "target_bootstrap: 'y:2', max_in_flight: 9}\n")
    out = subprocess.run([sys.executable, "-m", "mirror.cli", "run", "--config", str(bad)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "links[0].max_in_flight" in lines[0] and lines[0].startswith("mirror run: ")


def test_a_group_fails_over_to_the_target_without_skipping(tmp_path, clusters):
    """A group consumes part of a topic on the source and commits, stopping inside batches; the
    mirror checkpoints and commits the translated offsets into the idle target group; the same
    group then consumes the rest on the target: nothing skipped and, the batches having been
    copied whole, nothing read again."""
    from mirror.translation import Sync, redelivery_bound, translate
    src, tgt = clusters
    admin = AdminClient({"bootstrap.servers": src.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(10)
    placed = produce(src.bootstrap, "orders", 0, 3000)
    consumed: list[tuple[int, int, str]] = []
    # Part of every partition, stopping mid-batch somewhere: 317, 400 and 555 records.
    stop_at = {0: 317, 1: 400, 2: 555}
    c = Consumer({"bootstrap.servers": src.bootstrap, "group.id": "app", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("orders", p, 0) for p in range(3)])
    deadline = time.monotonic() + 30
    while len(consumed) < sum(stop_at.values()) and time.monotonic() < deadline:
        for msg in c.consume(50, timeout=0.5):
            if not msg.error() and msg.offset() < stop_at[msg.partition()]:
                consumed.append((msg.partition(), msg.offset(), msg.value().decode()))
    c.commit(offsets=[TopicPartition("orders", p, o) for p, o in stop_at.items()], asynchronous=False)
    committed = dict(stop_at)
    c.close()
    config = tmp_path / "links.yaml"
    config.write_text(f"links:\n  - {{source_alias: src, source_bootstrap: '{src.bootstrap}', target_alias: tgt, "
                      f"target_bootstrap: '{tgt.bootstrap}', refresh_topics_s: 1, checkpoint_interval_s: 1, "
                      f"sync_group_offsets: true}}\n")
    mirror = subprocess.Popen([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)], cwd=REPO,
                              stderr=open(tmp_path / "mirror.log", "ab"))
    try:
        # The latest checkpoint of each partition must be the translation, through the
        # syncs in the topic, of what the group committed (the store notes a sync a moment
        # before it reaches the topic, and the first checkpoints may come while copying).
        deadline = time.monotonic() + 60
        while True:
            checkpoints = {cp.partition: cp for cp in read_checkpoints(tgt.bootstrap) if cp.group == "app"}
            syncs = [s for s in offset_syncs(src.bootstrap) if s.topic == "orders"] \
                if _has_topic(src.bootstrap, SYNCS) else []
            mine = {p: [Sync(s.upstream_offset, s.downstream_offset, s.extent) for s in syncs if s.partition == p]
                    for p in range(3)}
            translated = {p: translate(mine[p], committed[p]) for p in range(3)}
            if len(checkpoints) == 3 and all(translated[p] == cp.downstream_offset for p, cp in checkpoints.items()):
                break
            assert time.monotonic() < deadline, (translated, checkpoints)
            time.sleep(0.5)
        assert {p: cp.upstream_offset for p, cp in checkpoints.items()} == committed, (checkpoints, committed)
        assert all(cp.topic == "src.orders" for cp in checkpoints.values())
        bound = sum(redelivery_bound(mine[p], committed[p]) for p in checkpoints)
        assert bound == 0, {p: redelivery_bound(mine[p], committed[p]) for p in checkpoints}
        # The same group, now on the target, resumes where the checkpoints say.
        wanted = {v.encode() for v in placed} - {v.encode() for _, _, v in consumed}
        resume_on_target(tgt.bootstrap, "app", "src.orders", wanted, bound, timeout=60)
    finally:
        mirror.send_signal(signal.SIGTERM)
        mirror.wait(30)


def test_status_shows_lag_throughput_and_latency_and_heartbeats_flow(tmp_path, clusters):
    import json

    from tests.support.node import free_port
    src, tgt = clusters
    admin = AdminClient({"bootstrap.servers": src.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(10)
    produce(src.bootstrap, "orders", 0, 3000)
    port = free_port()
    mirror = start_mirror(tmp_path, src, tgt, "mirror", "--metrics-port", str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        read_all(tgt.bootstrap, "src.orders", 3000)
        deadline = time.monotonic() + 30
        while True:
            out = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--metrics-url", url,
                                  "--output", "json"], cwd=REPO, capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            status = json.loads(out.stdout)
            orders = [r for r in status["partitions"] if r["topic"] == "orders"]
            beats = [r for r in status["partitions"] if r["topic"] == "heartbeats"]
            link = status["links"].get("src->tgt", {})
            if len(orders) == 3 and beats and beats[0]["records"] >= 2 and "replication_latency_p50_ms" in link:
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        assert sum(r["records"] for r in orders) == 3000 and all(r["lag_records"] == 0 for r in orders)
        assert 0 <= link["replication_latency_p50_ms"] <= link["replication_latency_p99_ms"]
        assert "src.heartbeats" in AdminClient({"bootstrap.servers": tgt.bootstrap}).list_topics(timeout=10).topics
        table = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--metrics-url", url], cwd=REPO,
                               capture_output=True, text=True, timeout=30)
        assert table.returncode == 0 and "orders" in table.stdout and "replication latency p50" in table.stdout
    finally:
        mirror.send_signal(signal.SIGTERM)
        mirror.wait(30)
    gone = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--metrics-url", url], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1


def test_an_active_active_pair_copies_each_topic_once_and_follows_partition_growth(tmp_path, clusters):
    """Links both ways between two clusters, as for active-active regions: each cluster gets the
    other's topics once, under the source alias, and nothing is copied back (no
    `tgt.src.orders`). A source topic that grows gets the new partitions on the target, and
    their records arrive."""
    from confluent_kafka.admin import NewPartitions
    src, tgt = clusters
    admins = {node: AdminClient({"bootstrap.servers": node.bootstrap}) for node in (src, tgt)}
    for node, topic in ((src, "orders"), (tgt, "invoices")):
        admins[node].create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    config = tmp_path / "links.yaml"
    link = "{{source_alias: {a}, source_bootstrap: '{ab}', target_alias: {b}, target_bootstrap: '{bb}', refresh_topics_s: 1}}"
    config.write_text("links:\n  - " + link.format(a="src", ab=src.bootstrap, b="tgt", bb=tgt.bootstrap)
                      + "\n  - " + link.format(a="tgt", ab=tgt.bootstrap, b="src", bb=src.bootstrap) + "\n")
    mirror = subprocess.Popen([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)], cwd=REPO,
                              stderr=open(tmp_path / "mirror.log", "ab"))
    try:
        for node, topic in ((src, "orders"), (tgt, "invoices")):
            p = Producer({"bootstrap.servers": node.bootstrap})
            for i in range(200):
                p.produce(topic, b"%s-%d" % (topic.encode(), i), partition=i % 2)
            assert p.flush(30) == 0
        assert len(read_all(tgt.bootstrap, "src.orders", 200)) >= 200
        assert len(read_all(src.bootstrap, "tgt.invoices", 200)) >= 200

        # orders grows to 4 partitions upstream; the records of the new ones come across too.
        admins[src].create_partitions([NewPartitions("orders", 4)])["orders"].result(10)
        p = Producer({"bootstrap.servers": src.bootstrap, "topic.metadata.refresh.interval.ms": 500})
        deadline = time.monotonic() + 30
        while len(p.list_topics("orders", timeout=5).topics["orders"].partitions) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for i in range(200):
            p.produce("orders", b"grown-%d" % i, partition=2 + i % 2)
        assert p.flush(30) == 0
        deadline = time.monotonic() + 30       # the mirror grows the target's topic
        while len(admins[tgt].list_topics("src.orders", timeout=5).topics["src.orders"].partitions) < 4:
            assert time.monotonic() < deadline, "src.orders never grew on the target"
            time.sleep(0.2)
        got = read_all(tgt.bootstrap, "src.orders", 400, timeout=60)
        grown = {(g[0], g[2]) for g in got if g[2].startswith("grown-")}
        assert grown == {(2 + i % 2, f"grown-{i}") for i in range(200)}, len(grown)
        time.sleep(3)        # several discovery rounds in both directions
        for node, own, other in ((src, "orders", "tgt"), (tgt, "invoices", "src")):
            topics = {t for t in admins[node].list_topics(timeout=5).topics
                      if not t.startswith(("__", "mm2-")) and not t.endswith(".internal")}
            remote = "tgt.invoices" if other == "tgt" else "src.orders"
            assert topics == {own, remote, "heartbeats", f"{other}.heartbeats"}, topics
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(30) == 0


def mirror_metric(port: int, name: str, **labels: str) -> float | None:
    """One sample of the mirror's /metrics, None if it is not there (yet)."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families
    try:
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def test_topic_configs_changed_upstream_follow_to_the_target(tmp_path, clusters):
    """A config set, changed or deleted on the source after the target topic exists reaches
    the target within the sync interval; what MM2 never copies stays where it is on each side."""
    from tests.support.node import free_port
    src, tgt = clusters
    admin = AdminClient({"bootstrap.servers": src.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 1, config={"retention.ms": "86400000",
                                                          "max.message.bytes": "2000000"})])["orders"].result(10)
    port = free_port()
    mirror = start_mirror(tmp_path, src, tgt, "mirror", "--metrics-port", str(port),
                          sync_topic_configs_interval_s=0.5)
    log = tmp_path / "mirror.log"
    try:
        wait_for_configs(tgt.bootstrap, "src.orders", lambda c: c.get("retention.ms") == "86400000", log=log)
        # The target's own min.insync.replicas is the target's business (MM2 never copies it).
        alter_topic_configs(tgt.bootstrap, "src.orders", {"min.insync.replicas": "1"})
        alter_topic_configs(src.bootstrap, "orders", {"retention.ms": "3600000", "cleanup.policy": "compact,delete",
                                                      "min.insync.replicas": "1"})
        got = wait_for_configs(tgt.bootstrap, "src.orders",
                               lambda c: c.get("retention.ms") == "3600000" and "cleanup.policy" in c, log=log)
        assert got == {"retention.ms": "3600000", "cleanup.policy": "compact,delete", "max.message.bytes": "2000000",
                       "min.insync.replicas": "1"}
        alter_topic_configs(src.bootstrap, "orders", {"min.insync.replicas": None})    # not copied: stays there
        alter_topic_configs(src.bootstrap, "orders", {"retention.ms": None})
        got = wait_for_configs(tgt.bootstrap, "src.orders", lambda c: "retention.ms" not in c, log=log)
        assert got == {"cleanup.policy": "compact,delete", "max.message.bytes": "2000000", "min.insync.replicas": "1"}
        time.sleep(1.5)      # rounds that find nothing to do change nothing
        assert topic_configs(tgt.bootstrap, "src.orders") == got
        assert mirror_metric(port, "seaway_mirror_topic_config_syncs_total", link="src->tgt", result="applied") == 2
        assert mirror_metric(port, "seaway_mirror_topic_config_syncs_total", link="src->tgt", result="failed") == 0
        assert mirror_metric(port, "seaway_mirror_topic_configs_unsynced", link="src->tgt") == 0
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(30) == 0


JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_mirror="mirror-secret";'


def test_a_config_change_the_target_refuses_does_not_stop_the_copying(tmp_path):
    """The mirror may not alter src.orders' configs on the target (a DENY ACL): its records keep
    coming, another topic's configs still sync, the refusal is logged once however many rounds
    meet it, and counted; once the ACL goes, the next round brings the topic in line."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    from tests.support.node import free_port
    plain, sasl, port = free_port(), free_port(), free_port()
    src = SeawayNode(tmp_path / "src", {"num.partitions": "3"}).start()
    tgt = SeawayNode(tmp_path / "tgt", {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"},     # the test administers through the PLAINTEXT listener
        port=plain).start()
    mirror = None
    try:
        target_admin = AdminClient({"bootstrap.servers": tgt.bootstrap})
        allow = [AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:mirror", "*", AclOperation.ALL,
                            AclPermissionType.ALLOW)
                 for rtype, name in ((ResourceType.TOPIC, "*"), (ResourceType.GROUP, "*"),
                                     (ResourceType.BROKER, "kafka-cluster"))]
        deny = AclBinding(ResourceType.TOPIC, "src.orders", ResourcePatternType.LITERAL, "User:mirror", "*",
                          AclOperation.ALTER_CONFIGS, AclPermissionType.DENY)
        for future in target_admin.create_acls([*allow, deny]).values():
            assert future.result(20) is None
        admin = AdminClient({"bootstrap.servers": src.bootstrap})
        for topic in ("orders", "audit"):
            admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "86400000"})])[topic].result(10)
        produce(src.bootstrap, "orders", 0, 300)
        mirror = start_mirror(tmp_path, src, tgt, "mirror", "--metrics-port", str(port),
                              target_bootstrap=f"127.0.0.1:{sasl}", sync_topic_configs_interval_s=0.3,
                              target_properties={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                 "sasl.username": "mirror", "sasl.password": "mirror-secret"})
        log = tmp_path / "mirror.log"
        assert len({v for _, _, v, *_ in read_all(tgt.bootstrap, "src.orders", 300)}) == 300, log.read_text()[-3000:]
        wait_for_configs(tgt.bootstrap, "src.orders", lambda c: c.get("retention.ms") == "86400000", log=log)

        for topic in ("orders", "audit"):
            alter_topic_configs(src.bootstrap, topic, {"retention.ms": "3600000"})
        wait_for_configs(tgt.bootstrap, "src.audit", lambda c: c.get("retention.ms") == "3600000", log=log)
        deadline = time.monotonic() + 30
        while (mirror_metric(port, "seaway_mirror_topic_config_syncs_total", link="src->tgt", result="failed")
               or 0) < 5:       # several rounds met the refusal
            assert time.monotonic() < deadline and mirror.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        assert mirror_metric(port, "seaway_mirror_topic_configs_unsynced", link="src->tgt") == 1
        assert topic_configs(tgt.bootstrap, "src.orders")["retention.ms"] == "86400000"
        refusals = [line for line in log.read_text().splitlines() if "topic configs of orders not synced" in line]
        assert len(refusals) == 1 and "TOPIC_AUTHORIZATION_FAILED" in refusals[0], refusals
        # The records keep coming.
        produce(src.bootstrap, "orders", 300, 300)
        assert len({v for _, _, v, *_ in read_all(tgt.bootstrap, "src.orders", 600)}) == 600, log.read_text()[-3000:]

        deleted = target_admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, "src.orders", ResourcePatternType.LITERAL, "User:mirror", "*",
            AclOperation.ALTER_CONFIGS, AclPermissionType.DENY)])
        assert len(list(deleted.values())[0].result(20)) == 1
        wait_for_configs(tgt.bootstrap, "src.orders", lambda c: c.get("retention.ms") == "3600000", log=log)
        deadline = time.monotonic() + 30
        while mirror_metric(port, "seaway_mirror_topic_configs_unsynced", link="src->tgt") != 0:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert "topic configs of orders are in sync again" in log.read_text()
        assert mirror.poll() is None and "starting the link again" not in log.read_text()
    finally:
        if mirror is not None:
            mirror.send_signal(signal.SIGTERM)
            mirror.wait(30)
        src.stop()
        tgt.stop()


def _mirror_warnings(tmp_path) -> str:
    """What the mirror logs said beyond INFO (retries, producer renewals), for a failure's message."""
    lines = []
    for path in sorted(tmp_path.glob("mirror*.log")):
        lines += [f"{path.name}: {line}" for line in path.read_text(errors="replace").splitlines()
                  if " INFO " not in line][-40:]
    return "\n".join(lines)
