"""A planned failover and failback on the shipped two-region platform (secured, 40 ms of WAN),
under a confluent-kafka idempotent acks=all writer and a consumer group with a confluent-kafka
member and a kafka-python member, each following the README's recipe: they read the decision
in `active/<pair>.json`; the writer, refused (`Broker: Invalid topic`), waits for the decision
to name the other region and sends what was refused there, in order; the members commit as
they go, leave when the active region changes, and join there once the decision is `serving`.

What must hold afterwards:
- every acknowledged record is in the log exactly once, in the order it was acknowledged
  per partition (0 lost, 0 duplicated, 0 reordered);
- the group received each record exactly once (it skipped 0 and re-read 0);
- `dr` reported RPO 0, and its "writes accepted after" matches the writer's own timing.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from regions.topology import DEFAULT_TOPOLOGY
from tests.support.node import REPO
from tests.support.regions import Platform, create, without_fixed_ports

pytestmark = pytest.mark.integration

TOPIC, GROUP, PAIR = "orders", "billing", "eu-west-1~us-east-1"
RATE = 300          # records per second


def dr(state: Path, *args: str) -> tuple[float, str]:
    started = time.time()
    out = subprocess.run([sys.executable, "-m", "dr.cli", "--platform", "--state-dir", str(state), *args],
                         cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return started, out.stdout


def grant_acl(client: dict, principal: str, topic: str) -> None:
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)
    admin = AdminClient(client)
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(30)


def dr_status(state: Path) -> str:
    return subprocess.run([sys.executable, "-m", "dr.cli", "--platform", "--state-dir", str(state), "status"],
                          cwd=REPO, capture_output=True, text=True, timeout=60).stdout


def ready(state: Path) -> bool:
    """`dr status` exits 0: the pair could fail over now."""
    return subprocess.run([sys.executable, "-m", "dr.cli", "--platform", "--state-dir", str(state), "status"],
                          cwd=REPO, capture_output=True, timeout=60).returncode == 0


class Decisions:
    """The recipe's one input: the decision file `dr` keeps in its state directory."""

    def __init__(self, state: Path, login: dict, initial: str):
        self.path = state / "dr" / "active" / f"{PAIR}.json"
        self.login, self.initial = login, initial

    def now(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"active_region": "eu-west", "bootstrap": self.initial, "phase": "serving"}

    def config(self, decision: dict) -> dict:
        return {**self.login, "bootstrap.servers": decision["bootstrap"]}


class Writer(threading.Thread):
    def __init__(self, decisions: Decisions):
        super().__init__(daemon=True)
        self.decisions = decisions
        self.acked: dict[int, tuple[str, float]] = {}       # seq -> (region, when)
        self.order: dict[int, list[int]] = defaultdict(list)  # partition -> seqs in ack order
        self.halt = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        seq, todo = 0, []
        while not self.halt.is_set() or todo:
            decision = self.decisions.now()
            region = decision["active_region"]
            producer = Producer({**self.decisions.config(decision), "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 5, "message.timeout.ms": 30000})
            refused: list[int] = []

            def delivered(err, msg, region=region):
                n = int(msg.key())
                if err is None:
                    self.acked[n] = (region, time.time())
                    self.order[msg.partition()].append(n)
                else:
                    if err.code() != KafkaError.TOPIC_EXCEPTION:
                        self.errors.append(str(err))
                    refused.append(n)
            while not refused and (not self.halt.is_set() or todo):
                if not self.halt.is_set():
                    todo += list(range(seq, seq + RATE // 20))
                    seq += RATE // 20
                for n in todo:
                    producer.produce(TOPIC, b"v%d" % n, b"%d" % n, partition=n % 3, on_delivery=delivered)
                producer.flush(60)          # in order: the next batch only after these are answered
                todo = sorted(refused)
                time.sleep(0.05)
            producer.flush(60)
            if refused:          # the recipe: wait for the decision to name the other region
                deadline = time.monotonic() + 60
                while self.decisions.now()["active_region"] == region:
                    assert time.monotonic() < deadline, "the decision never moved"
                    time.sleep(0.05)


class Member(threading.Thread):
    """One member of the group; `kind` is confluent or kafka-python."""

    def __init__(self, kind: str, decisions: Decisions):
        super().__init__(daemon=True)
        self.kind, self.decisions = kind, decisions
        self.received: list[tuple[int, str, float]] = []     # (seq, region, when)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            decision = self.decisions.now()
            if decision["phase"] != "serving":
                time.sleep(0.05)
                continue
            region = decision["active_region"]
            consumer = self._consumer(self.decisions.config(decision))
            try:
                while not self.halt.is_set() and self.decisions.now()["active_region"] == region:
                    got = self._poll(consumer)
                    for n in got:
                        self.received.append((n, region, time.time()))
                    if got:
                        self._commit(consumer)
                self._commit(consumer)
            finally:
                consumer.close()

    def _consumer(self, config: dict):
        if self.kind == "confluent":
            c = Consumer({**config, "group.id": GROUP, "enable.auto.commit": False,
                          "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
            c.subscribe([TOPIC])
            return c
        from kafka import KafkaConsumer
        c = KafkaConsumer(
            bootstrap_servers=config["bootstrap.servers"].split(","), group_id=GROUP, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=10000, security_protocol=config["security.protocol"],
            sasl_mechanism=config["sasl.mechanism"], sasl_plain_username=config["sasl.username"],
            sasl_plain_password=config["sasl.password"], ssl_cafile=config["ssl.ca.location"])
        c.subscribe([TOPIC])
        return c

    def _poll(self, consumer) -> list[int]:
        if self.kind == "confluent":
            return [int(m.key()) for m in consumer.consume(200, timeout=0.2) if not m.error()]
        return [int(r.key) for records in consumer.poll(timeout_ms=200).values() for r in records]

    def _commit(self, consumer) -> None:
        try:
            if self.kind == "confluent":
                consumer.commit(asynchronous=False)
            else:
                consumer.commit()
        except Exception:   # noqa: BLE001 — nothing to commit yet, or a rebalance: the next poll settles it
            pass


def test_planned_failover_and_back_under_a_writer_and_a_group_loses_and_repeats_nothing(tmp_path):
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "two-regions.yaml")
    state = tmp_path / "state"
    with Platform(state, topology) as p:
        eu = p.client("eu-west-1")
        create(eu, TOPIC, rf=3, min_isr=2)
        login = {k: v for k, v in eu.items() if k != "bootstrap.servers"}
        decisions = Decisions(state, login, eu["bootstrap.servers"])
        writer = Writer(decisions)
        members = [Member("confluent", decisions), Member("kafka-python", decisions)]
        writer.start()
        for m in members:
            m.start()
        try:
            deadline = time.monotonic() + 90       # the replica made, the group reading
            while not (all(m.received for m in members) and ready(state)):
                assert time.monotonic() < deadline, [len(m.received) for m in members]
                time.sleep(1)
            moves = []
            for region in ("eu-west", "us-east"):
                started, out = dr(state, "failover", region)
                assert "RPO 0 records" in out, out
                reported = float(out.split("writes accepted after ")[1].split("s;")[0])
                target = "us-east" if region == "eu-west" else "eu-west"
                moves.append((started, target, reported))
                time.sleep(4)
        finally:
            writer.halt.set()
            writer.join(120)
        assert not writer.is_alive() and not writer.errors, writer.errors[:3]
        deadline = time.monotonic() + 60
        while {n for m in members for n, _, _ in m.received} < set(writer.acked):
            assert time.monotonic() < deadline, len(set(writer.acked) - {n for m in members for n, _, _ in m.received})
            time.sleep(0.5)
        for m in members:
            m.halt.set()
            m.join(60)

        # The log (eu-west, active again): every acknowledged record once, in ack order.
        log = {part: [k for _, k, _ in recs] for part, recs in read_records(eu, TOPIC).items()}
        counts = Counter(n for part in log.values() for n in part)
        assert set(writer.acked) <= set(counts), f"lost: {sorted(set(writer.acked) - set(counts))[:10]}"
        assert [n for n, c in counts.items() if c > 1] == [], "duplicated"
        for part, seqs in log.items():
            assert seqs == sorted(seqs), f"partition {part} reordered"
            assert [n for n in seqs if n in writer.acked] == writer.order[part]
        # The group: each record once, across both members and both moves.
        received = Counter(n for m in members for n, _, _ in m.received)
        assert set(counts) - set(received) == set(), "skipped"
        assert [n for n, c in received.items() if c > 1] == [], "re-read"
        assert all(m.received for m in members)
        # dr's figure against the writer's own: its first write acknowledged in the new region.
        for started, target, reported in moves:
            first = min(t for region, t in writer.acked.values() if region == target and t >= started)
            assert reported - 0.5 <= first - started <= reported + 15, (target, reported, first - started)
            print(f"to {target}: dr says writes accepted after {reported:.2f}s; the writer's first "
                  f"acknowledged write there came {first - started:.2f}s after the failover began")


class SteadyWriter(threading.Thread):
    """An application that keeps writing to eu-west, whatever happens to it."""

    def __init__(self, client: dict):
        super().__init__(daemon=True)
        self.client = client
        self.acked: set[int] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        producer = Producer({**self.client, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 5000})

        def delivered(err, msg):
            if err is None:
                self.acked.add(int(msg.key()))
        n = 0
        while not self.halt.is_set():
            for _ in range(RATE // 20):
                producer.produce(TOPIC, b"v%d" % n, b"%d" % n, partition=n % 3, on_delivery=delivered)
                n += 1
            producer.poll(0.05)
        producer.flush(10)


def settle(client: dict) -> None:
    """A cluster restarted whole: until every partition has its full ISR again and its high
    watermark holds still (a new leader's moves up as the followers catch up)."""
    from confluent_kafka.admin import AdminClient
    deadline = time.monotonic() + 90
    last = None
    while True:
        try:
            parts = AdminClient(client).list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()
            full = bool(parts) and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts)
            c = Consumer({**client, "group.id": "settle"})
            try:
                ends = [c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(3)]
            finally:
                c.close()
        except Exception:   # noqa: BLE001 — still electing
            full, ends = False, None
        if full and ends == last:
            return
        assert time.monotonic() < deadline, (full, ends)
        last = ends
        time.sleep(2)


def read_records(client: dict, topic: str) -> dict[int, list[tuple[int, int, dict]]]:
    """partition -> [(offset, key, headers)] of every record."""
    c = Consumer({**client, "group.id": f"check-{time.monotonic_ns()}", "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 60
        while True:         # a cluster just restarted answers NOT_LEADER while it elects
            try:
                ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)}
                break
            except Exception:   # noqa: BLE001
                assert time.monotonic() < deadline
                time.sleep(1)
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        out: dict[int, list[tuple[int, int, dict]]] = {p: [] for p in range(3)}
        while any(len(out[p]) < ends[p] for p in out):
            assert time.monotonic() < deadline
            for msg in c.consume(1000, timeout=0.5):
                if not msg.error():
                    out[msg.partition()].append((msg.offset(), int(msg.key()), dict(msg.headers() or [])))
        return out
    finally:
        c.close()


def test_an_unplanned_failover_under_load_reports_exactly_what_failback_finds_stranded(tmp_path):
    """eu-west is killed (kill -9 of every node) under a steady writer; `dr failover --force`
    promotes us-east. When eu-west is back, `dr failback` counts the records only eu-west has,
    and that count is exactly what a reader finds; each is kept in orders.stranded with its
    origin; eu-west's log was never truncated; and eu-west ends active with what us-east took."""
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "two-regions.yaml")
    state = tmp_path / "state"
    with Platform(state, topology) as p:
        eu, us = p.client("eu-west-1"), p.client("us-east-1")
        create(eu, TOPIC, rf=3, min_isr=2)
        writer = SteadyWriter(eu)
        writer.start()
        deadline = time.monotonic() + 90
        while not ready(state) or len(writer.acked) < 1000:
            assert time.monotonic() < deadline, len(writer.acked)
            time.sleep(1)
        try:
            killed = subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), "stop",
                                     "eu-west", "--kill"], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert killed.returncode == 0, killed.stderr
        finally:
            writer.halt.set()
            writer.join(60)
        _, out = dr(state, "--timeout", "3", "failover", "eu-west", "--force")
        assert "us-east is active" in out and "expected" in out, out
        on_us = {k for part in read_records(us, TOPIC).values() for _, k, _ in part}
        assert subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), "start", "eu-west"],
                              cwd=REPO, capture_output=True, timeout=120).returncode == 0
        settle(eu)
        before = read_records(eu, TOPIC)
        on_eu = {k for part in before.values() for _, k, _ in part}
        assert writer.acked <= on_eu, "eu-west lost acknowledged records"
        only_eu = on_eu - on_us
        print(f"\nacknowledged {len(writer.acked)}; only in eu-west at failback: {len(only_eu)}")

        _, out = dr(state, "failback", "eu-west")
        assert f"{len(only_eu)} stranded record" in out and "eu-west is active" in out, out
        history = json.loads(dr(state, "history", "-o", "json")[1])["failovers"]
        [unplanned] = [r for r in history if r["kind"] == "unplanned"]
        assert (unplanned["rpo_records"], unplanned["rpo_exact"]) == (len(only_eu), 1)
        if only_eu:
            kept = read_records(eu, f"{TOPIC}.stranded")
            assert sorted(k for part in kept.values() for _, k, _ in part) == sorted(only_eu)
            origins = {h["seaway.stranded.origin"].decode() for part in kept.values() for _, _, h in part}
            assert origins == {f"eu-west-1:{TOPIC}:{part}:{o}" for part, recs in before.items()
                               for o, k, _ in recs if k in only_eu}
        after = read_records(eu, TOPIC)
        for part, recs in before.items():           # never truncated: the old log is a prefix
            assert after[part][:len(recs)] == recs, part


def test_a_full_drill_kills_the_region_fails_the_pair_over_and_back_and_accounts_for_every_record(tmp_path):
    """`dr drill eu-west --full`: every eu-west node is killed, the whole pair (an application's
    topic with the canary) fails over unplanned, eu-west is started and failed back at once,
    with no wait for it to settle. The canary clients follow the pair's own decision; the
    report accounts for every canary record (stranded ones kept, as many as the failback
    counted); the canary group resumed on us-east from its checkpoint, and on eu-west where it
    left us-east (its member from before the kill removed)."""
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "two-regions.yaml")
    state = tmp_path / "state"
    with Platform(state, topology) as p:
        eu = p.client("eu-west-1")
        create(eu, TOPIC, rf=3, min_isr=2)
        deadline = time.monotonic() + 90
        while not ready(state):
            assert time.monotonic() < deadline
            time.sleep(1)
        out = subprocess.run([sys.executable, "-m", "dr.cli", "--platform", "--state-dir", str(state), "--timeout", "3",
                              "drill", "eu-west", "--full", "--rate", "300", "--hold", "2"],
                             cwd=REPO, capture_output=True, text=True, timeout=600)
        print(out.stdout, out.stderr)
        assert out.returncode == 0 and "drill PASSED" in out.stdout, out.stdout + out.stderr
        assert "killing eu-west (regions stop eu-west --kill)" in out.stdout
        assert "1 group checkpointed" in out.stdout                      # restore-groups, on us-east
        assert "seaway-canary: removed 1 member left over from the outage of eu-west-1" in out.stdout
        report = json.loads((state / "dr" / "drills" / "drill-1.json").read_text())
        assert report["mode"] == "full" and report["passed"] and report["lost"] == 0, report
        assert report["stranded"] <= report["kept"] == report["stranded_counted"], report
        assert report["acknowledged"] > 1000, report
        failover, failback = report["phases"]
        assert (failover["source"], failover["target"]) == ("eu-west-1", "us-east-1")
        assert (failback["source"], failback["target"]) == ("us-east-1", "eu-west-1")
        # What the canary's own clients saw: writes on us-east after the kill, within the bound.
        assert 0 < failover["rto_writes_s"] < 60 and 0 < failback["rto_writes_s"] < 60, report["phases"]

        history = json.loads(dr(state, "history", "-o", "json")[1])
        kinds = [(r["kind"], r["source"], r["target"], r["state"]) for r in reversed(history["failovers"])]
        assert kinds == [("unplanned", "eu-west-1", "us-east-1", "done"),
                         ("failback", "eu-west-1", "us-east-1", "done"),
                         ("planned", "us-east-1", "eu-west-1", "done")], kinds
        [unplanned] = [r for r in history["failovers"] if r["kind"] == "unplanned"]
        assert unplanned["rpo_exact"] == 1
        assert [(d["mode"], d["state"]) for d in history["drills"]] == [("full", "passed")]
        # The whole pair, the application's topic with it, is back in eu-west, every node up.
        deadline = time.monotonic() + 60
        while not ready(state):
            assert time.monotonic() < deadline, dr_status(state)
            time.sleep(1)
        status = json.loads(dr(state, "status", "-o", "json")[1])
        assert status["pairs"][0]["active_region"] == "eu-west", status
        nodes = p.status()["regions"]["eu-west"]["eu-west-1"]
        assert nodes["nodes_up"] == nodes["nodes_total"], nodes


def test_dr_serve_fails_the_pair_over_by_itself_once_the_controller_and_the_partner_both_lose_the_region(tmp_path):
    """auto_failover_after_s: 10. The daemon `regions up` runs fails the pair over unplanned
    once eu-west has answered none of its polls for 10 s and us-east has had no heartbeat from
    eu-west for as long, records the evidence, and does not act again when eu-west returns."""
    import urllib.request

    import yaml
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "two-regions.yaml")
    doc = yaml.safe_load(topology.read_text())
    doc["dr"]["auto_failover_after_s"] = 10
    topology.write_text(yaml.safe_dump(doc))
    state = tmp_path / "state"
    decision = state / "dr" / "active" / f"{PAIR}.json"
    with Platform(state, topology) as p:
        create(p.client("eu-west-1"), TOPIC, rf=3, min_isr=2)
        deadline = time.monotonic() + 90
        while not ready(state):
            assert time.monotonic() < deadline, dr_status(state)
            time.sleep(1)
        # An application's ACL granted on eu-west only: us-east would refuse it after a failover.
        grant_acl(p.client("eu-west-1"), "User:alice", TOPIC)
        deadline = time.monotonic() + 30
        while "WARN  access: us-east-1 lacks 1 of eu-west-1's logins and ACLs: no ACL User:alice ALLOW READ on " \
                f"topic {TOPIC}" not in dr_status(state):
            assert time.monotonic() < deadline, dr_status(state)
            time.sleep(1)
        assert not ready(state)
        grant_acl(p.client("us-east-1"), "User:alice", TOPIC)
        deadline = time.monotonic() + 30
        while not ready(state):
            assert time.monotonic() < deadline, dr_status(state)
            time.sleep(1)
        time.sleep(12)      # a healthy pair for longer than the period: nothing happens
        assert not decision.exists() and json.loads(dr(state, "history", "-o", "json")[1])["failovers"] == []
        killed_at = time.monotonic()
        assert subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), "stop", "eu-west",
                               "--kill"], cwd=REPO, capture_output=True, timeout=60).returncode == 0
        deadline = time.monotonic() + 120
        while not decision.exists() or json.loads(decision.read_text())["active_region"] != "us-east":
            assert time.monotonic() < deadline, dr_status(state)
            time.sleep(0.5)
        took = time.monotonic() - killed_at
        print(f"\nus-east active {took:.1f}s after the kill (auto_failover_after_s 10, polls every 5 s)")
        assert took >= 10, took
        [row] = json.loads(dr(state, "history", "-o", "json")[1])["failovers"]
        assert (row["kind"], row["source"], row["target"], row["state"]) == \
            ("unplanned", "eu-west-1", "us-east-1", "done"), row
        evidence = row["context"]["automatic"]
        assert evidence["unreachable_for_s"] >= 10 and evidence["partner_heard_ago_s"] >= 10, evidence
        assert "[automatic]" in dr(state, "history")[1]
        metrics = urllib.request.urlopen(p.info["dr"].rstrip("/") + "/metrics", timeout=10).read().decode()
        assert f'seaway_dr_auto_failovers_total{{outcome="done",pair="{PAIR}"}} 1.0' in metrics, metrics
        # eu-west back: people fail back; the daemon does not fail over again meanwhile.
        assert subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), "start", "eu-west"],
                              cwd=REPO, capture_output=True, timeout=120).returncode == 0
        time.sleep(15)
        assert len(json.loads(dr(state, "history", "-o", "json")[1])["failovers"]) == 1
