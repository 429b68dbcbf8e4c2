"""`seaway leaders elect`, `seaway reassign` and the `seaway topics describe` filters against a
real KRaft cluster (one controller, four brokers in two racks), run as a user runs them: the
CLI as a subprocess, its output and exit status checked.

Brokers 101 and 102 are in rack "a", 103 and 104 in rack "b". Sessions and lag times are short
so that fencing and ISR changes take seconds; automatic leader rebalancing is off, so a leader
that moved stays moved until someone asks for an election. The tests share the cluster and
each leaves it as it found it (every broker running and in sync).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from core.controller.image import TOPIC_RESOURCE
from tests.support.cluster import KRaftCluster, metadata_image
from tests.support.node import REPO

pytestmark = pytest.mark.integration

BROKERS = [101, 102, 103, 104]
RACKS = {101: "a", 102: "a", 103: "b", 104: "b"}
OVERRIDES = {"auto.leader.rebalance.enable": "false", "broker.session.timeout.ms": "3000",
             "broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "2000"}
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def seaway(*args, check=True, timeout=90):
    proc = subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"seaway {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def one_line_error(proc, status: int, *needles: str) -> str:
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seaway: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def wait_until(predicate, timeout: float, what: str, cluster):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:   # noqa: BLE001 — a node may be restarting
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    what = what() if callable(what) else what   # evaluated at the end, with what was seen
    raise AssertionError(f"{what}: last saw {last!r}\n{cluster.log_tails()}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KRaftCluster(tmp_path_factory.mktemp("cli-replication"), controllers=1, brokers=4, overrides=OVERRIDES)
    for broker, rack in RACKS.items():
        with open(c.nodes[broker].config_path, "a") as f:
            f.write(f"broker.rack={rack}\n")
    with c:
        wait_until(lambda: sorted(AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=5).brokers)
                   == BROKERS, 30, "four brokers registered", c)
        yield c


def via(cluster, broker: int = 101) -> tuple[str, str]:
    """--bootstrap-server naming one broker (others may be stopped: a stopped node accepts
    connections it never answers)."""
    return ("--bootstrap-server", cluster.nodes[broker].bootstrap)


def layout(cluster, topic: str, broker: int = 101) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, sorted ISR), as broker `broker` sees it."""
    md = AdminClient({"bootstrap.servers": cluster.nodes[broker].bootstrap}).list_topics(topic, timeout=5)
    return {p: (pm.leader, list(pm.replicas), sorted(pm.isrs)) for p, pm in md.topics[topic].partitions.items()}


def create(cluster, topic: str, assignment: list[list[int]], **configs) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.nodes[101].bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment,
                                       config={k: str(v) for k, v in configs.items()})])
    fs[topic].result(15)
    wait_until(lambda: all(isr == sorted(replicas) and leader == replicas[0]
                           for leader, replicas, isr in layout(cluster, topic).values()),
               20, f"{topic}: every partition led by its first replica with a full ISR", cluster)


def write_json(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


# ---------------------------------------------------------------------------------- leaders elect

def test_leaders_elect_moves_leadership_back_after_a_restart(cluster, tmp_path):
    topic = "elect-me"
    create(cluster, topic, [[101, 102, 103], [102, 103, 101], [103, 101, 102]])
    # A controlled shutdown moves 101's leadership away; nothing brings it back by itself.
    assert cluster.nodes[101].stop(timeout=30) == 0
    try:
        wait_until(lambda: layout(cluster, topic, 102)[0][0] == 102, 15, "102 leads elect-me-0", cluster)
        # While 101 is away its partition cannot get it back: a failure, exit status 1.
        proc = seaway("leaders", "elect", *via(cluster, 102), "--election-type", "preferred",
                      "--topic", topic, "--partition", "0", check=False)
        assert "Error completing leader election (PREFERRED) for partition: elect-me-0: " \
               "PREFERRED_LEADER_NOT_AVAILABLE" in proc.stdout, proc.stdout
        one_line_error(proc, 1, "1 partition could not be elected")
    finally:
        cluster.nodes[101].start()
    wait_until(lambda: layout(cluster, topic, 102)[0][2] == [101, 102, 103], 30, "101 back in the ISR", cluster)
    assert layout(cluster, topic, 102)[0][0] == 102       # auto.leader.rebalance.enable=false

    proc = seaway("leaders", "elect", *via(cluster, 102), "--election-type", "PREFERRED", "--topic", topic)
    assert proc.stdout.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions elect-me-0",
        "Valid replica already elected for partitions elect-me-1, elect-me-2"], proc.stdout
    assert {p: leader for p, (leader, _, _) in layout(cluster, topic, 102).items()} == {0: 101, 1: 102, 2: 103}

    # Every partition: nothing left to elect, so nothing listed, and success.
    proc = seaway("leaders", "elect", *via(cluster, 103), "--election-type", "preferred",
                  "--all-topic-partitions", "-o", "json")
    doc = json.loads(proc.stdout)
    assert doc["election_type"] == "PREFERRED"
    assert not [r for r in doc["partitions"] if r["status"] != "already_elected"], doc

    # A JSON file: unclean elections where a leader exists are not needed; an unknown
    # partition is an error naming it, exit status 1.
    path = write_json(tmp_path, "elect.json", {"partitions": [{"topic": topic, "partition": 1},
                                                              {"topic": topic, "partition": 7}]})
    proc = seaway("leaders", "elect", *via(cluster), "--election-type", "unclean", "--path-to-json-file", path,
                  "-o", "json", check=False)
    assert proc.returncode == 1, proc.stderr
    rows = {(r["topic"], r["partition"]): r for r in json.loads(proc.stdout)["partitions"]}
    assert rows[(topic, 1)]["status"] == "already_elected"
    assert rows[(topic, 7)]["status"] == "failed" and "UNKNOWN_TOPIC_OR_PARTITION" in rows[(topic, 7)]["error"]
    one_line_error(proc, 1, "could not be elected")

    one_line_error(seaway("leaders", "elect", *via(cluster), "--election-type", "preferred", "--topic", "nope",
                          check=False), 1, "--topic", "'nope' does not exist")


# ---------------------------------------------------------------------------------- describe filters

def filtered(cluster, flag: str, topics: list[str]) -> set[tuple[str, int]]:
    proc = seaway("topics", *via(cluster), "describe", *topics, flag, "--timeout", "20")
    table = {(line.split()[0], int(line.split()[1])) for line in proc.stdout.splitlines()[1:]}
    as_json = {(t["topic"], p["partition"]) for t in json.loads(
        seaway("topics", *via(cluster), "describe", *topics, flag, "-o", "json", "--timeout", "20").stdout)
        for p in t["partitions"]}
    assert table == as_json, (proc.stdout, as_json)
    if not table:
        assert proc.stdout == ""
    return table


def test_describe_filters_show_under_replicated_and_unavailable_partitions(cluster):
    topics = {"urp": [[101, 102, 104]], "strict": [[102, 103, 104]], "solo": [[104]], "fine": [[101, 102]]}
    create(cluster, "urp", topics["urp"], **{"min.insync.replicas": 2})
    create(cluster, "strict", topics["strict"], **{"min.insync.replicas": 3})
    create(cluster, "solo", topics["solo"])
    create(cluster, "fine", topics["fine"])
    names = sorted(topics)
    flags = ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions",
             "--at-min-isr-partitions")
    healthy = {flag: filtered(cluster, flag, names) for flag in flags}
    # At min ISR: solo (ISR 1, min.insync.replicas 1 by default) and strict (3 of 3).
    assert healthy == {"--under-replicated-partitions": set(), "--unavailable-partitions": set(),
                       "--under-min-isr-partitions": set(),
                       "--at-min-isr-partitions": {("solo", 0), ("strict", 0)}}

    cluster.sigstop(104)
    try:
        # Fenced after its session times out: out of every ISR, and solo has no leader left.
        wait_until(lambda: layout(cluster, "solo")[0][0] == -1 and layout(cluster, "urp")[0][2] == [101, 102]
                   and layout(cluster, "strict")[0][2] == [102, 103], 30, "104 fenced", cluster)
        assert filtered(cluster, "--under-replicated-partitions", names) == {("urp", 0), ("strict", 0)}
        assert filtered(cluster, "--unavailable-partitions", names) == {("solo", 0)}
        assert filtered(cluster, "--under-min-isr-partitions", names) == {("strict", 0), ("solo", 0)}
        # solo keeps its last ISR member while it has no leader (Kafka does not empty the ISR).
        assert filtered(cluster, "--at-min-isr-partitions", names) == {("urp", 0), ("solo", 0)}
        # The plain description still answers quickly, with "none" for the missing leader.
        started = time.monotonic()
        desc = seaway("topics", *via(cluster), "describe", "solo", "--timeout", "20").stdout
        assert time.monotonic() - started < 15
        row = desc.splitlines()[2].split()
        assert row[:2] == ["0", "none"], desc
    finally:
        cluster.sigcont(104)
    wait_until(lambda: not filtered(cluster, "--under-replicated-partitions", names)
               and not filtered(cluster, "--unavailable-partitions", names), 40, "104 back in sync", cluster)


# ---------------------------------------------------------------------------------- reassign

def test_reassign_rejects_bad_input_with_one_line(cluster, tmp_path):
    create(cluster, "fixed", [[101, 102], [102, 101]])
    b = via(cluster)

    def execute(doc, *extra):
        path = write_json(tmp_path, "plan.json", doc)
        return seaway("reassign", *b, "execute", "--reassignment-json-file", path, *extra, check=False)

    def plan(**entry):
        return {"version": 1, "partitions": [dict({"topic": "fixed", "partition": 0, "replicas": [103, 104]},
                                                  **entry)]}

    # Mistakes found before connecting: exit status 2.
    one_line_error(execute("{not json"), 2, "not valid JSON")
    one_line_error(execute({"version": 1}), 2, "partitions: missing")
    one_line_error(execute(plan(replicas="103")), 2, "partitions[0].replicas: expected a list")
    one_line_error(execute(plan(partition=True)), 2, "partitions[0].partition: expected an integer")
    one_line_error(execute(plan(replicas=[103, 103])), 2, "partitions[0].replicas", "broker 103 is listed twice")
    one_line_error(execute(plan(log_dirs=["/data"])), 2, "partitions[0].log_dirs")
    one_line_error(execute(plan(), "--throttle", "-7"), 2, "--throttle")
    one_line_error(seaway("reassign", *b, "verify", "--reassignment-json-file", str(tmp_path / "missing.json"),
                          check=False), 2, "missing.json", "No such file")
    one_line_error(seaway("reassign", *b, "generate", "--topics-to-move-json-file",
                          write_json(tmp_path, "t.json", {"topics": [{"topic": "fixed"}]}),
                          "--broker-list", "103,x", check=False), 2, "--broker-list", "'x'")
    # Plans the cluster contradicts: exit status 1, naming the field.
    one_line_error(execute(plan(topic="ghost")), 1, "partitions[0].topic", "'ghost' does not exist")
    one_line_error(execute(plan(partition=5)), 1, "partitions[0].partition", "no partition 5")
    one_line_error(execute(plan(replicas=[103, 999])), 1, "partitions[0].replicas", "999")
    one_line_error(seaway("reassign", *b, "generate", "--topics-to-move-json-file",
                          write_json(tmp_path, "t.json", {"topics": [{"topic": "fixed"}]}),
                          "--broker-list", "103", check=False), 1, "replication factor 2", "1 available broker")
    # Nothing was changed.
    assert {p: r for p, (_, r, _) in layout(cluster, "fixed").items()} == {0: [101, 102], 1: [102, 101]}


def test_reassign_generate_is_rack_aware(cluster, tmp_path):
    create(cluster, "spread", [[101, 102]] * 4)
    topics = write_json(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": "spread"}]})
    proc = seaway("reassign", *via(cluster), "generate", "--topics-to-move-json-file", topics,
                  "--broker-list", "101,102,103,104")
    lines = proc.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert current == {"version": 1, "partitions": [
        {"topic": "spread", "partition": p, "replicas": [101, 102], "log_dirs": ["any", "any"]} for p in range(4)]}
    assert [p["partition"] for p in proposed["partitions"]] == [0, 1, 2, 3]
    for p in proposed["partitions"]:
        assert sorted(RACKS[b] for b in p["replicas"]) == ["a", "b"], proposed   # one replica per rack
    leaders = [p["replicas"][0] for p in proposed["partitions"]]
    assert sorted(leaders) == BROKERS, proposed                                # leaders spread evenly
    doc = json.loads(seaway("reassign", *via(cluster), "generate", "--topics-to-move-json-file", topics,
                            "--broker-list", "101,102", "--disable-rack-aware", "-o", "json").stdout)
    assert doc["current"] == current
    assert all(sorted(p["replicas"]) == [101, 102] for p in doc["proposed"]["partitions"])


def broker_rates(cluster) -> dict[int, dict[str, str]]:
    image = metadata_image(cluster)
    return {b: {k: v for k, v in image.broker_config(b).items() if k in RATES} for b in BROKERS}


def topic_throttles(cluster, topic: str) -> dict[str, str]:
    """The topic's throttled replicas in the committed metadata (brokers follow it)."""
    image = metadata_image(cluster)
    return {k: v for k, v in image.configs.get((TOPIC_RESOURCE, topic), {}).items() if k in THROTTLED}


def test_reassign_generate_execute_throttled_verify(cluster, tmp_path):
    topic = "moving"
    create(cluster, topic, [[101, 102], [102, 101]])
    values = {p: [b"%d-%d" % (p, i) for i in range(300)] for p in (0, 1)}
    producer = Producer({"bootstrap.servers": cluster.nodes[101].bootstrap, "acks": "all", "linger.ms": 5})
    for p, vs in values.items():
        for v in vs:
            producer.produce(topic, value=v, partition=p)
    assert producer.flush(30) == 0

    topics = write_json(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": topic}]})
    lines = seaway("reassign", *via(cluster), "generate", "--topics-to-move-json-file", topics,
                   "--broker-list", "103,104").stdout.splitlines()
    proposed = json.loads(lines[4])
    targets = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
    assert sorted(targets) == [0, 1] and all(sorted(r) == [103, 104] for r in targets.values()), proposed
    plan = write_json(tmp_path, "plan.json", lines[4])

    rate = 20_000_000
    proc = seaway("reassign", *via(cluster), "execute", "--reassignment-json-file", plan, "--throttle", str(rate))
    out = proc.stdout.splitlines()
    assert out[:5] == ["Current partition replica assignment", "",
                       json.dumps({"version": 1, "partitions": [
                           {"topic": topic, "partition": 0, "replicas": [101, 102], "log_dirs": ["any", "any"]},
                           {"topic": topic, "partition": 1, "replicas": [102, 101], "log_dirs": ["any", "any"]}]},
                           separators=(",", ":")),
                       "", "Save this to use as the --reassignment-json-file option during rollback"], proc.stdout
    assert f"The inter-broker throttle limit was set to {rate} B/s" in out
    assert out[-1] == f"Successfully started partition reassignments for {topic}-0,{topic}-1"
    # The throttles Kafka's tool sets: the rate on every broker a replica leaves or joins,
    # the existing replicas throttled as leaders, the new ones as followers.
    assert broker_rates(cluster) == {b: dict.fromkeys(RATES, str(rate)) for b in BROKERS}
    assert topic_throttles(cluster, topic) == {"leader.replication.throttled.replicas": "0:101,0:102,1:101,1:102",
                                               "follower.replication.throttled.replicas": "0:103,0:104,1:103,1:104"}

    seen = []

    def verified():
        seen.append(seaway("reassign", *via(cluster), "verify", "--reassignment-json-file", plan).stdout)
        return seen[-1] if "still in progress" not in seen[-1] else None
    text = wait_until(verified, 60, lambda: f"reassignment complete (verify said {seen[-1:]}, "
                                            f"layout {layout(cluster, topic)})", cluster)
    assert text.splitlines() == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
        "Clearing broker-level throttles on brokers 101,102,103,104",
        f"Clearing topic-level throttles on topic {topic}"], text
    assert broker_rates(cluster) == {b: {} for b in BROKERS}
    assert topic_throttles(cluster, topic) == {}
    doc = json.loads(seaway("reassign", *via(cluster), "verify", "--reassignment-json-file", plan,
                            "--preserve-throttles", "-o", "json").stdout)
    assert doc == {"complete": True, "throttles_cleared": None, "partitions": [
        {"topic": topic, "partition": p, "status": "completed", "replicas": targets[p], "target_replicas": targets[p]}
        for p in (0, 1)]}
    wait_until(lambda: {p: (r, isr) for p, (_, r, isr) in layout(cluster, topic).items()}
               == {p: (r, sorted(r)) for p, r in targets.items()}, 20, "new replicas in sync", cluster)

    # Nothing is in progress any more: cancel has nothing to do.
    proc = seaway("reassign", *via(cluster), "execute", "--reassignment-json-file", plan, "--cancel")
    assert proc.stdout.splitlines()[0] == "None of the specified partition reassignments are active."

    # Every record is readable from the new replicas alone.
    for b in (101, 102):
        cluster.nodes[b].stop(timeout=30)
    try:
        consumer = Consumer({"bootstrap.servers": cluster.nodes[103].bootstrap, "group.id": "reassign-check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, p, 0) for p in values])
        got: dict[int, list[bytes]] = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 600 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got[msg.partition()].append(msg.value())
        consumer.close()
        assert got == values
    finally:
        for b in (101, 102):
            cluster.nodes[b].start()
        wait_until(lambda: sorted(AdminClient({"bootstrap.servers": cluster.nodes[103].bootstrap})
                                  .list_topics(timeout=5).brokers) == BROKERS, 30, "brokers back", cluster)
