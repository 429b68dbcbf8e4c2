"""Consumer groups with REAL clients against a real node process.

confluent-kafka (librdkafka), kafka-python, kcat and kafkajs join groups on a Seaway node,
rebalance, commit and resume; what each member owned, in which generation, and what it
consumed is recorded from the clients' own callbacks (tests/support/groups.py) and checked:
no partition has two owners at once, every record is consumed, and a record is consumed twice
only when a member crashed before committing it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.clients import create_topic, unique_topic
from tests.support.groups import (ChildMember, ConfluentMember, KafkaPythonMember, attach_log_on_failure,
                                  kafkajs_group_consume, wait_until)
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration

NODE_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "num.partitions": "1",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory, request):
    with SeawayNode(tmp_path_factory.mktemp("groups_real"), NODE_CONFIG) as n:
        attach_log_on_failure(request, "node", n)
        yield n


def unique_group(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        for tp in got:
            assert tp.error is None, tp
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


class KeyedProducer(threading.Thread):
    """Writes keyed records (value ``v<i>``) until stopped; remembers where each one landed."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.01):
        super().__init__(daemon=True, name="producer")
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic, self.interval = topic, interval
        self.acked: dict[tuple[int, int], str] = {}
        self.errors: list = []
        self.stopping = threading.Event()

    def _report(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value().decode()

    def run(self):
        for i in range(10**9):
            if self.stopping.is_set():
                break
            self.producer.produce(self.topic, key=f"key-{i % 97}".encode(), value=f"v{i}".encode(),
                                  on_delivery=self._report)
            self.producer.poll(0)
            time.sleep(self.interval)
        assert self.producer.flush(30) == 0

    def stop(self):
        self.stopping.set()
        self.join(40)
        assert not self.errors, self.errors[:3]
        return self.acked


# ---------------------------------------------------------------------------- history checks

def stints(member) -> list[dict]:
    """Continuous ownerships of one partition by one member: start/end time, offsets consumed."""
    out, open_ = [], {}
    for e in member.snapshot():
        if e["ev"] == "assign":
            for p in e["parts"]:
                assert p not in open_, f"{member.name} assigned {p} it already owns: {e}"
                open_[p] = {"member": member.name, "p": p, "start": e["t"], "gen": e.get("gen"), "offsets": []}
        elif e["ev"] == "revoke":
            for p in e["parts"]:
                if p in open_:
                    s = open_.pop(p)
                    s["end"], s["end_ev"] = e["t"], e["ev"]
                    out.append(s)
        elif e["ev"] in ("closed", "killed"):
            for s in open_.values():
                s["end"], s["end_ev"] = e["t"], e["ev"]
                out.append(s)
            open_ = {}
        elif e["ev"] == "rec":
            assert e["p"] in open_, f"{member.name} consumed partition {e['p']} it did not own: {e}"
            open_[e["p"]]["offsets"].append(e["o"])
    for s in open_.values():
        s["end"], s["end_ev"] = float("inf"), None
        out.append(s)
    return out


def last_commit(member, p: int) -> int:
    """The last offset of ``p`` the member reports having committed (JSON made the keys text)."""
    return max(({int(k): o for k, o in e["offsets"].items()}.get(p, -1)
                for e in member.snapshot() if e["ev"] == "commit"), default=-1)


def check_history(members, partitions: int):
    """The invariants of a run, from the members' own callbacks."""
    # 1. no partition is owned by two members in the same generation
    by_gen: dict[int, dict[int, str]] = {}
    for mem in members:
        for e in mem.snapshot():
            if e["ev"] == "assign":
                for p in e["parts"]:
                    other = by_gen.setdefault(e["gen"], {}).setdefault(p, mem.name)
                    assert other == mem.name, f"generation {e['gen']}: partition {p} owned by {other} and {mem.name}"
    # 2. ... nor at the same time, and hand-overs resume exactly where the last owner committed
    all_stints = [s for mem in members for s in stints(mem)]
    by_name = {mem.name: mem for mem in members}
    for p in range(partitions):
        ps = sorted((s for s in all_stints if s["p"] == p), key=lambda s: s["start"])
        for a, b in zip(ps, ps[1:]):
            assert a["end"] <= b["start"], f"partition {p}: {a['member']} and {b['member']} own it at once"
        expected, prev = 0, None
        for s in ps:
            offs = s["offsets"]
            if not offs:
                continue
            assert offs == list(range(offs[0], offs[0] + len(offs))), f"partition {p}: gap or rewind in {s['member']}"
            if prev is not None and prev["end_ev"] == "killed":
                # the crashed member's records after its last commit come again, nothing before
                low = max(prev["offsets"][0], last_commit(by_name[prev["member"]], p))
                assert low <= offs[0] <= expected, (
                    f"partition {p}: {s['member']} resumed at {offs[0]} after {prev['member']} crashed, "
                    f"expected within [{low}, {expected}]")
            else:
                assert offs[0] == expected, (
                    f"partition {p}: {s['member']} started at {offs[0]}, expected {expected} "
                    f"(previous owner {prev and prev['member']})")
            expected, prev = offs[-1] + 1, s


def consumed(members) -> dict[tuple[int, int], list[str]]:
    out: dict[tuple[int, int], list[str]] = {}
    for mem in members:
        for e in mem.snapshot():
            if e["ev"] == "rec":
                out.setdefault((e["p"], e["o"]), []).append((mem.name, e["v"]))
    return out


def settled(live, partitions: int) -> bool:
    """Every live member owns something, in one generation, and together they own each partition once."""
    sets = [m.owned() for m in live]
    gens = {(m.last("assign") or {}).get("gen") for m in live}
    return (all(sets) and len(gens) == 1 and sum(map(len, sets)) == partitions
            and set().union(*sets) == set(range(partitions)))


def wait_settled(live, partitions: int, timeout: float = 30.0):
    wait_until(lambda: settled(live, partitions), timeout,
               f"{[m.name for m in live]} to share {partitions} partitions: "
               f"{ {m.name: sorted(m.owned()) for m in live} }")


def describe(bootstrap: str, group: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)


# ---------------------------------------------------------------------------- 1. mixed group

def test_mixed_group_join_leave_crash(node):
    """confluent-kafka and kafka-python (both "range") share one group while a producer writes;
    members join, one leaves, one is SIGKILLed and must be expired by its session timeout."""
    P = 6
    topic, group = unique_topic("mixed"), unique_group("mixed")
    create_topic(node.bootstrap, topic, P)
    producer = KeyedProducer(node.bootstrap, topic)
    producer.start()
    # x joins first, so it leads (librdkafka computes the assignment) until it is killed; then
    # the leadership passes to k1, the next oldest member, and kafka-python assigns for all.
    # x commits only when its partitions are revoked: what it consumed since must come again.
    x = ChildMember("x", node.bootstrap, group, topic, commit_interval=3600)
    everyone = [x]
    try:
        wait_until(lambda: x.owned() == set(range(P)), 20, "x to own every partition")
        k1 = KafkaPythonMember("k1", node.bootstrap, group, topic).start()
        everyone.append(k1)
        wait_settled([x, k1], P)
        c1 = ConfluentMember("c1", node.bootstrap, group, topic).start()
        c2 = ConfluentMember("c2", node.bootstrap, group, topic).start()
        everyone += [c1, c2]
        wait_settled([x, k1, c1, c2], P, timeout=40)
        assert not any(e.get("leader") for e in k1.snapshot()), "x leads while it lives"
        d = describe(node.bootstrap, group)
        assert len(d.members) == 4 and str(d.state).endswith("STABLE"), d

        c2.stop()  # graceful: commits in on_revoke, then LeaveGroup
        wait_settled([c1, k1, x], P)
        left_at = c2.last("closed")["t"]
        moved = min(e["t"] for m in (c1, k1, x) for e in m.snapshot() if e["ev"] == "assign" and e["t"] > left_at)
        assert moved - left_at < 4, "a member that leaves is replaced at once, not after its session timeout"
        assert any(e["ev"] == "commit" for e in x.snapshot()), "x committed when c2 left"

        def uncommitted_by_x():
            events = x.snapshot()
            since = max(i for i, e in enumerate(events) if e["ev"] in ("assign", "commit"))
            return sum(e["ev"] == "rec" for e in events[since:]) >= 20
        wait_until(uncommitted_by_x, 15, "x to consume 20 records it will not commit")
        x.kill()
        killed_at = x.last("killed")["t"]
        wait_settled([c1, k1], P, timeout=30)
        taken_over = min(e["t"] for m in (c1, k1) for e in m.snapshot() if e["ev"] == "assign" and e["t"] > killed_at)
        # the dead member's session (6 s, heartbeat every 0.5 s) had to run out first
        assert taken_over - killed_at >= 4.5, f"x's partitions moved {taken_over - killed_at:.1f}s after SIGKILL"
        assert k1.last("assign")["leader"], "the oldest surviving member leads the next generation"

        k2 = KafkaPythonMember("k2", node.bootstrap, group, topic).start()
        everyone.append(k2)
        wait_settled([c1, k1, k2], P)

        acked = producer.stop()
        assert len(acked) > 500
        wait_until(lambda: set(acked) <= set(consumed(everyone)), 30, "every produced record to be consumed")
        wait_settled([c1, k1, k2], P)
        final = {m.name: m.owned() for m in (c1, k1, k2)}
        d = describe(node.bootstrap, group)
        described = {mm.client_id: {tp.partition for tp in mm.assignment.topic_partitions} for mm in d.members}
        assert described == final, f"the coordinator's view {described} differs from the members' {final}"
        for m in (c1, k1, k2):
            m.stop()
    finally:
        producer.stopping.set()
        for m in everyone:
            if isinstance(m, ChildMember):
                if not m.exited():
                    m.kill()
            else:
                m.stopping.set()
    try:
        check_mixed_run(everyone, acked, x, P)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{timeline(everyone)}") from None
    assert committed(node.bootstrap, group, topic, P) == end_offsets(node.bootstrap, topic, P)


def timeline(members) -> str:
    """Who owned what when, for a failure message."""
    t0 = min((e["t"] for mem in members for e in mem.snapshot()), default=0)
    lines = [f"{e['t'] - t0:7.2f} {mem.name:3} {e['ev']:7} gen={e.get('gen')} {e.get('parts', '')}"
             for mem in members for e in mem.snapshot() if e["ev"] not in ("rec", "commit")]
    return "timeline:\n" + "\n".join(sorted(lines))


def check_mixed_run(everyone, acked, x, P):
    for m in everyone:
        assert not any(e["ev"] in ("commit_failed", "crashed") for e in m.snapshot()), \
            [e for e in m.snapshot() if e["ev"] in ("commit_failed", "crashed")]
    got = consumed(everyone)
    for key, value in acked.items():
        assert key in got, f"record {value} at partition/offset {key} never consumed"
        assert all(v == value for _, v in got[key]), (key, value, got[key])
    check_history(everyone, P)
    dups = {k: v for k, v in got.items() if len(v) > 1}
    assert all(any(n == "x" for n, _ in v) for v in dups.values()), f"duplicates without a crash: {dups}"
    x_last_stint = {(s["p"], o) for s in stints(x) if s["end_ev"] == "killed" for o in s["offsets"]}
    assert set(dups) == x_last_stint, "exactly what x consumed and never committed is consumed again"


# ---------------------------------------------------------------------------- 2. restart

@pytest.mark.parametrize("how", ["graceful", "kill-9"])
def test_committed_offsets_survive_restart(tmp_path, how):
    """A sync commit by a group member is still there after the node restarts (SIGTERM or
    SIGKILL); the member carries on across the restart, and a new member resumes exactly there."""
    P, N = 3, 40
    want = {0: 7, 1: 23, 2: 0}
    with SeawayNode(tmp_path, NODE_CONFIG) as node:
        topic, group = unique_topic("restart"), unique_group("restart")
        create_topic(node.bootstrap, topic, P)
        p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
        for part in range(P):
            for i in range(N):
                p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
        assert p.flush(30) == 0

        assigned = threading.Event()
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "session.timeout.ms": 30000, "heartbeat.interval.ms": 500,
                      "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"})
        c.subscribe([topic], on_assign=lambda *_: assigned.set())
        wait_until(lambda: c.poll(0.1) is not None and assigned.is_set(), 20, "the consumer to join")
        c.commit(offsets=[TopicPartition(topic, q, o, metadata=f"meta-{q}") for q, o in want.items()],
                 asynchronous=False)
        tps = [TopicPartition(topic, q) for q in range(P)]
        before = {tp.partition: (tp.offset, tp.metadata) for tp in c.committed(tps, timeout=10)}
        assert before == {q: (o, f"meta-{q}") for q, o in want.items()}

        if how == "graceful":
            assert node.stop() == 0
        else:
            node.kill()
        node.start()

        # the member survives the restart: the group came back Stable with it in it
        after = wait_until(lambda: _committed_or_none(c, tps), 30, "committed() after the restart")
        assert {tp.partition: (tp.offset, tp.metadata) for tp in after} == before
        d = describe(node.bootstrap, group)
        assert [m.member_id for m in d.members] == [c.memberid()], "the member is still in the group"
        c.close()

        new = ConfluentMember("resumer", node.bootstrap, group, topic).start()
        try:
            wait_until(lambda: sum(e["ev"] == "rec" for e in new.snapshot()) >= P * N - sum(want.values()), 30,
                       "the new member to consume from the committed offsets to the end")
            time.sleep(0.5)  # nothing more may arrive
        finally:
            new.stop()
        got: dict[int, list[int]] = {}
        for e in new.snapshot():
            if e["ev"] == "rec":
                got.setdefault(e["p"], []).append(e["o"])
        assert got == {q: list(range(o, N)) for q, o in want.items() if o < N}
        assert committed(node.bootstrap, group, topic, P) == {q: N for q in range(P)}


def _committed_or_none(consumer, tps):
    try:
        got = consumer.committed(tps, timeout=5)
    except KafkaException:
        return None
    return got if all(tp.error is None for tp in got) else None


# ---------------------------------------------------------------------------- 3. cooperative

def test_cooperative_sticky_moves_only_what_it_must(node):
    P = 6
    topic, group = unique_topic("coop"), unique_group("coop")
    create_topic(node.bootstrap, topic, P)
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    a = ConfluentMember("a", node.bootstrap, group, topic, conf).start()
    b = None
    try:
        wait_until(lambda: a.owned() == set(range(P)), 20, "a to own every partition")
        mark = len(a.snapshot())
        b = ConfluentMember("b", node.bootstrap, group, topic, conf).start()
        wait_until(lambda: len(b.owned()) == P // 2 and a.owned() | b.owned() == set(range(P))
                   and not a.owned() & b.owned(), 20, "a and b to share the partitions")
        time.sleep(1.0)  # no further moves
        later = [e for e in a.snapshot()[mark:] if e["ev"] in ("assign", "revoke") and e["parts"]]
        kept = a.owned()
        assert len(kept) == P // 2
        # (librdkafka also calls on_assign with no partitions in each cooperative round)
        assert [e["ev"] for e in later] == ["revoke"], f"a must only give partitions away, once: {later}"
        assert set(later[0]["parts"]) == set(range(P)) - kept, "a revoked exactly what b got, kept the rest"
        b_assigns = [e for e in b.snapshot() if e["ev"] == "assign" and e["parts"]]
        assert len(b_assigns) == 1 and set(b_assigns[0]["parts"]) == set(later[0]["parts"])
        assert b_assigns[0]["gen"] > later[0]["gen"], "b gets them in a later generation than a gave them up"

        mark = len(a.snapshot())
        b.stop()
        wait_until(lambda: a.owned() == set(range(P)), 20, "a to take b's partitions back")
        time.sleep(0.5)
        later = [e for e in a.snapshot()[mark:] if e["ev"] in ("assign", "revoke") and e["parts"]]
        assert [(e["ev"], set(e["parts"])) for e in later] == [("assign", set(range(P)) - kept)], later
    finally:
        for m in (a, b):
            if m is not None:
                m.stopping.set()
        a.stop()
    check_history([a, b], P)


# ---------------------------------------------------------------------------- 4. static membership

def test_static_member_restart_keeps_partitions_and_duplicate_instance_is_fenced(node):
    P = 4
    topic, group = unique_topic("static"), unique_group("static")
    create_topic(node.bootstrap, topic, P)

    def static(name, instance):
        return ConfluentMember(name, node.bootstrap, group, topic,
                               {"group.instance.id": instance, "session.timeout.ms": 20000})

    s1, s2 = static("s1", "instance-1").start(), static("s2", "instance-2").start()
    s1b = fencer = None
    try:
        wait_settled([s1, s2], P)
        s1_parts, s2_gen = s1.owned(), s2.last("assign")["gen"]
        mark = len(s2.snapshot())
        d = describe(node.bootstrap, group)
        assert sorted(m.group_instance_id for m in d.members) == ["instance-1", "instance-2"]

        s1.stop()  # a static member does not leave the group when it closes (KIP-345)
        s1b = static("s1-restarted", "instance-1").start()
        wait_until(lambda: s1b.owned(), 20, "the restarted static member to get its partitions")
        assert s1b.owned() == s1_parts
        assert s1b.last("assign")["gen"] == s2_gen, "no new generation"
        time.sleep(1.5)  # several heartbeats of s2: nothing may have told it to rebalance
        assert [e for e in s2.snapshot()[mark:] if e["ev"] in ("assign", "revoke")] == []
        d = describe(node.bootstrap, group)
        assert str(d.state).endswith("STABLE") and len(d.members) == 2

        # another process claims instance-1: the coordinator fences s1b
        fencer = ChildMember("s1-fencer", node.bootstrap, group, topic,
                             {"group.instance.id": "instance-1", "session.timeout.ms": 20000})
        wait_until(lambda: fencer.owned(), 20, "the second instance-1 to get the partitions")
        assert fencer.owned() == s1_parts
        # librdkafka raises it through error_cb as _FATAL; rd_kafka_fatal_error() names the cause
        fatal = wait_until(lambda: [e for e in s1b.snapshot() if e["ev"] == "error"
                                    and (e["fatal"] or e["code"] == KafkaError._FATAL)], 20,
                           "s1b to see a fatal error")
        assert any("Static consumer fenced" in e["text"] for e in fatal), fatal
        assert [e for e in s2.snapshot()[mark:] if e["ev"] in ("assign", "revoke")] == [], \
            "fencing a static member does not rebalance the others"
    finally:
        for m in (s1, s2, s1b):
            if m is not None:
                m.stopping.set()
        if fencer is not None:
            fencer.stop()
        s2.stop()


# ---------------------------------------------------------------------------- 5. AdminClient

def test_admin_client_group_operations(node):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions

    P = 3
    topic = unique_topic("admin")
    active, empty = unique_group("active"), unique_group("empty")
    create_topic(node.bootstrap, topic, P)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    member = ConfluentMember("admin-member", node.bootstrap, active, topic).start()
    try:
        wait_until(lambda: member.owned() == set(range(P)), 20, "the member to own the topic")
        # offsets for a group nobody is in: an Empty group appears
        altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            empty, [TopicPartition(topic, 0, 5), TopicPartition(topic, 2, 9)])])[empty].result(15)
        assert all(tp.error is None for tp in altered.topic_partitions), altered
        # ... but not for one with members (Kafka: UNKNOWN_MEMBER_ID)
        with pytest.raises(KafkaException) as refused:
            res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
                active, [TopicPartition(topic, 0, 1)])])[active].result(15)
            for tp in res.topic_partitions:
                if tp.error is not None:
                    raise KafkaException(tp.error)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID, refused.value

        listed = admin.list_consumer_groups(request_timeout=10).result(15)
        assert not listed.errors, listed.errors
        states = {g.group_id: g.state for g in listed.valid}
        assert states[active] == ConsumerGroupState.STABLE and states[empty] == ConsumerGroupState.EMPTY
        only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(15)
        names = {g.group_id for g in only_empty.valid}
        assert empty in names and active not in names

        d = admin.describe_consumer_groups([active, empty], request_timeout=10)
        da, de = d[active].result(15), d[empty].result(15)
        assert da.state == ConsumerGroupState.STABLE and da.partition_assignor == "range"
        assert not da.is_simple_consumer_group and da.coordinator.id == 1
        assert [(m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions)) for m in da.members] \
            == [("admin-member", list(range(P)))]
        assert de.state == ConsumerGroupState.EMPTY and de.members == []

        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(empty)])[empty].result(15)
        assert sorted((tp.topic, tp.partition, tp.offset) for tp in got.topic_partitions) == \
            [(topic, 0, 5), (topic, 2, 9)]
        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            empty, [TopicPartition(topic, 1), TopicPartition(topic, 2)])])[empty].result(15)
        assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [(1, -1001), (2, 9)]

        with pytest.raises(KafkaException) as non_empty:
            admin.delete_consumer_groups([active], request_timeout=10)[active].result(15)
        assert non_empty.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        assert admin.delete_consumer_groups([empty], request_timeout=10)[empty].result(15) is None
        names = {g.group_id for g in admin.list_consumer_groups().result(15).valid}
        assert empty not in names and active in names
        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(empty)])[empty].result(15)
        assert got.topic_partitions == [], "a deleted group's offsets go with it"
    finally:
        member.stop()


# ---------------------------------------------------------------------------- 6. kcat, kafkajs

def _produce_values(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict[tuple[int, int], str]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{part}:{i}".encode(), partition=part)
    assert p.flush(30) == 0
    return {(part, i): f"{part}:{i}" for part in range(partitions) for i in range(per_partition)}


def test_kcat_balanced_consumer(node):
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is not installed (see .ci/run)"
    P, N = 3, 20
    topic, group = unique_topic("kcat"), unique_group("kcat")
    create_topic(node.bootstrap, topic, P)
    sent = _produce_values(node.bootstrap, topic, P, N)
    proc = subprocess.run([kcat, "-b", node.bootstrap, "-G", group, "-J", "-e", "-q",
                           "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000", topic],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = {}
    for line in proc.stdout.splitlines():
        j = json.loads(line)
        got[(j["partition"], j["offset"])] = j["payload"]
    assert got == sent
    # kcat committed what it consumed when it closed, and left an Empty group behind
    assert committed(node.bootstrap, group, topic, P) == {q: N for q in range(P)}
    d = describe(node.bootstrap, group)
    assert str(d.state).endswith("EMPTY") and d.members == []


def test_kafkajs_consumer_group(node):
    """Two kafkajs consumers share a group; what is produced once both own partitions is
    consumed by the owner of its partition, and committed when they disconnect."""
    P, N = 4, 25
    topic, group = unique_topic("kafkajs"), unique_group("kafkajs")
    create_topic(node.bootstrap, topic, P)
    sent = {}
    answer = kafkajs_group_consume(node.bootstrap, group, topic, P, count=P * N, members=2, timeout=40,
                                   produce=lambda: sent.update(_produce_values(node.bootstrap, topic, P, N)))
    assert answer["why"] == "count", answer["why"]
    got: dict[tuple[int, int], list[str]] = {}
    for r in answer["records"]:
        got.setdefault((r["partition"], r["offset"]), []).append(r["value"])
    assert got == {k: [v] for k, v in sent.items()}, "each record exactly once"
    final = {}
    for j in answer["joins"]:
        final[j["member"]] = set(j["partitions"])
    assert len(final) == 2 and not final[0] & final[1] and final[0] | final[1] == set(range(P)), answer["joins"]
    for r in answer["records"]:
        assert r["partition"] in final[r["member"]], f"member {r['member']} consumed a partition it did not own"
    assert committed(node.bootstrap, group, topic, P) == {q: N for q in range(P)}
