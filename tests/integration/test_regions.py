"""`regions`: a whole platform from its topology, as a user runs it — the CLI in a
subprocess, a supervisor and real node processes, real clients in each region and across the
WAN proxies.

The shipped default topology is used with its fixed ports removed (the launcher then picks
free ones), so the test checks the default's shape without depending on ports 19092-29294. It
is secured (TLS and SCRAM on client listeners, mTLS between nodes, ACLs), so every client here
logs in with the admin properties `regions up` wrote, as a newcomer would, directly or through
the DR pair's gateway.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from regions.topology import DEFAULT_TOPOLOGY
from tests.support.node import REPO
from tests.support.regions import Platform, create, regions, without_fixed_ports

pytestmark = pytest.mark.integration

def round_trip(client: dict, topic: str, tag: str, n: int = 30) -> list[float]:
    """Produce n records (acks=all) one at a time, then read them all back; the produce
    latencies in seconds. `client`: Platform.client's configuration."""
    producer = Producer({**client, "acks": "all", "linger.ms": 0, "message.timeout.ms": 30000})
    latencies = []
    for i in range(n):
        started = time.perf_counter()
        producer.produce(topic, f"{tag}-{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0, f"{tag}: record {i} not delivered"
        latencies.append(time.perf_counter() - started)
    consumer = Consumer({**client, "group.id": f"g-{tag}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got: set[str] = set()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not {f"{tag}-{i}" for i in range(n)} <= got:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.add(msg.value().decode())
    finally:
        consumer.close()
    missing = {f"{tag}-{i}" for i in range(n)} - got
    assert not missing, f"{tag}: never read back {sorted(missing)[:5]}"
    return latencies


def read_values(client: dict, topic: str, wanted: set[str], timeout: float = 60) -> set[str]:
    consumer = Consumer({**client, "group.id": f"read-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 1000})
    got: set[str] = set()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not wanted <= got:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.add(msg.value().decode())
    finally:
        consumer.close()
    return got


def cluster_status(status: dict, region: str, cluster: str) -> dict:
    return status["regions"][region][cluster]


def test_two_regions_come_up_serve_clients_and_survive_outages(tmp_path):
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "two-regions.yaml")
    state = tmp_path / "state"
    with Platform(state, topology) as p:
        assert "eu-west-1" in p.up_output and "us-east-1" in p.up_output and "bootstrap" in p.up_output
        # Secure by default: `regions up` says how to log in, and nothing gets in without it.
        assert p.info["security"] and f"kcat -F {p.admin_properties}" in p.up_output, p.up_output
        gateways = {g["region"]: g for g in p.info["gateways"]}
        assert set(gateways) == {"eu-west", "us-east"}, p.info["gateways"]
        assert f"kcat -F {p.admin_properties} -b {gateways['eu-west']['bootstrap']} -L" in p.up_output
        anonymous = AdminClient({"bootstrap.servers": p.bootstrap("eu-west-1"), "socket.timeout.ms": 3000})
        with pytest.raises(KafkaException):
            anonymous.list_topics(timeout=5)
        again = regions(state, "up", str(topology), "--detach")
        assert again.returncode == 0 and "already running" in again.stdout
        status = p.status()
        for region, cluster in (("eu-west", "eu-west-1"), ("us-east", "us-east-1")):
            s = cluster_status(status, region, cluster)
            assert s["healthy"] and s["nodes_up"] == 3 and s["brokers"] == [1, 2, 3], s
            assert {n["zone"] for n in s["nodes"].values()} == {f"{region}-a", f"{region}-b", f"{region}-c"}

        # Both regions serve real clients; across the WAN every request pays two 40 ms legs.
        # (us-east-1's `orders` is the DR pair's read-only replica of eu-west-1's: a topic of
        # its own there.)
        local = {}
        for cluster, topic in (("eu-west-1", "orders"), ("us-east-1", "invoices")):
            create(p.client(cluster), topic, rf=3, min_isr=2)
            local[cluster] = round_trip(p.client(cluster), topic, f"{cluster}-local")
        # The DR pair's gateway takes the platform's client properties as they are: the admin
        # logs in through it as itself (TLS of the platform CA, SCRAM relayed to the brokers)...
        via_gateway = {**p.client("eu-west-1"), "bootstrap.servers": gateways["eu-west"]["bootstrap"]}
        round_trip(via_gateway, "orders", "via-gateway", n=5)
        # ... and a user with no ACLs gets nothing through it: the broker authorizes the client.
        admin = AdminClient(p.client("eu-west-1"))
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-secret")])["bob"].result(20)
        errors: list = []
        bob = Producer({**via_gateway, "sasl.username": "bob", "sasl.password": "bob-secret",
                        "message.timeout.ms": 10000})
        bob.produce("orders", b"x", on_delivery=lambda err, msg: errors.append(err))
        bob.flush(20)
        assert errors and errors[0] is not None and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors
        wan = round_trip(p.client("eu-west-1", from_region="us-east"), "orders", "from-us-east", n=10)
        assert min(wan) >= 0.08, wan          # at least one round trip of 2 x 40 ms
        median = lambda xs: sorted(xs)[len(xs) // 2]   # noqa: E731
        assert median(local["eu-west-1"]) < median(wan), (local, wan)   # inside a region is direct
        metadata = AdminClient(p.client("eu-west-1", "us-east")).list_topics(timeout=10)
        wan_ports = {int(a.split(":")[1]) for a in p.bootstrap("eu-west-1", "us-east").split(",")}
        assert {b.port for b in metadata.brokers.values()} == wan_ports   # clients stay on the WAN path

        # The default topology's DR pair mirrors eu-west-1 to us-east-1: what eu-west-1's
        # orders got is read back in us-east from its replica, orders, every record.
        assert status["mirror"]["running"], status
        sent = {f"eu-west-1-local-{i}" for i in range(30)} | {f"from-us-east-{i}" for i in range(10)}
        mirrored = read_values(p.client("us-east-1"), "orders", sent)
        assert sent <= mirrored, f"not mirrored: {sorted(sent - mirrored)[:5]}"

        # A zone's node crashes: its cluster keeps serving acks=all (RF=3, min ISR 2).
        stopped = regions(state, "stop", "eu-west-1/2", "--kill")
        assert stopped.returncode == 0 and "eu-west-1/2" in stopped.stdout, stopped.stderr
        round_trip(p.client("eu-west-1"), "orders", "zone-down")
        s = cluster_status(p.status(), "eu-west", "eu-west-1")
        assert s["nodes_up"] == 2 and not s["nodes"]["eu-west-1/2"]["running"] and not s["healthy"]
        assert regions(state, "start", "eu-west-1/2").returncode == 0

        # A whole region goes down: the other is untouched.
        assert regions(state, "stop", "us-east").returncode == 0
        round_trip(p.client("eu-west-1"), "orders", "region-down")
        status = p.status()
        assert cluster_status(status, "us-east", "us-east-1")["nodes_up"] == 0
        eu = cluster_status(status, "eu-west", "eu-west-1")
        deadline = time.monotonic() + 60
        while not (eu["healthy"] and eu["under_replicated"] == 0):   # node 2 back in every ISR
            assert time.monotonic() < deadline, eu
            time.sleep(1)
            eu = cluster_status(p.status(), "eu-west", "eu-west-1")
        table = regions(state, "status")
        assert table.returncode == 0 and "down" in table.stdout and "healthy" in table.stdout

        # And it comes back with its data.
        assert regions(state, "start", "us-east").returncode == 0
        round_trip(p.client("us-east-1"), "invoices", "us-east-1-local", n=30)
    left = subprocess.run(["pgrep", "-af", str(state)], capture_output=True, text=True).stdout
    assert left == "", f"processes outlived `regions down`: {left}"


def test_two_clusters_in_one_region(tmp_path):
    topology = Path(DEFAULT_TOPOLOGY).parent / "two-clusters-one-region.yaml"
    with Platform(tmp_path / "state", topology) as p:
        status = p.status()
        assert set(status["regions"]["eu-west"]) == {"orders", "analytics"}
        assert set(status["regions"]["ap-south"]) == {"ap-south-1"}
        assert all(c["healthy"] for r in status["regions"].values() for c in r.values()), status
        create(p.client("orders"), "payments", rf=3, min_isr=2)
        create(p.client("analytics"), "clicks", rf=1)
        round_trip(p.client("orders"), "payments", "orders")
        round_trip(p.client("analytics"), "clicks", "analytics")
        # Two clusters of one region are separate clusters: one's topics are not the other's.
        assert "payments" not in AdminClient(p.client("analytics")).list_topics(timeout=10).topics
        # From ap-south, the orders cluster is behind the WAN (60 ms a leg in this topology).
        wan = round_trip(p.client("orders", from_region="ap-south"), "payments", "from-ap-south", n=5)
        assert min(wan) >= 0.12, wan
        # `seaway --cluster NAME` finds each cluster (and the admin login) in the platform's state;
        # named none of three, it lists them and connects nowhere.
        seaway = [sys.executable, "-m", "core.cli", "--state-dir", str(p.state_dir), "topics", "list"]
        for name, mine, theirs in (("orders", "payments", "clicks"), ("analytics", "clicks", "payments")):
            listed = subprocess.run([*seaway, "--cluster", name], capture_output=True, text=True, cwd=REPO,
                                    timeout=60)
            assert listed.returncode == 0 and mine in listed.stdout.split() and theirs not in listed.stdout, (
                listed.stdout, listed.stderr)
        unnamed = subprocess.run(seaway, capture_output=True, text=True, cwd=REPO, timeout=60)
        assert unnamed.returncode == 2 and unnamed.stderr.count("\n") == 1, unnamed.stderr
        assert all(f"{name} ({p.bootstrap(name)})" in unnamed.stderr for name in ("orders", "analytics", "ap-south-1"))


PAIR = "eu-west-1~us-east-1"
PLAINTEXT_PAIR = """\
name: gateways
regions:
  eu-west:
    clusters:
      eu-west-1:
        config: {offsets.topic.replication.factor: 1, group.initial.rebalance.delay.ms: 0}
        nodes: [{id: 1, roles: [broker, controller], zone: eu-west-a}]
  us-east:
    clusters:
      us-east-1:
        config: {offsets.topic.replication.factor: 1, group.initial.rebalance.delay.ms: 0}
        nodes: [{id: 1, roles: [broker, controller], zone: us-east-a}]
wan: {latency_ms: 10}
mirrors: [{source: eu-west-1, target: us-east-1, policy: identity}]
"""


def dr(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dr.cli", "--platform", "--state-dir", str(state), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_plaintext_dr_pair_gets_a_gateway_in_each_region_that_follows_its_failover(tmp_path):
    topology = tmp_path / "pair.yaml"
    topology.write_text(PLAINTEXT_PAIR)
    state = tmp_path / "state"
    with Platform(state, topology) as p:
        gateways = {g["region"]: g for g in p.info["gateways"]}
        assert set(gateways) == {"eu-west", "us-east"} and {g["pair"] for g in gateways.values()} == {PAIR}
        for region, g in gateways.items():
            assert f"gateway of {PAIR} in {region}: bootstrap {g['bootstrap']}   serving eu-west-1" in p.up_output
        # The printed `seaway` command works as printed (plaintext: no properties needed).
        printed = next(line for line in p.up_output.splitlines() if line.strip().startswith("try: seaway"))
        assert printed.strip() == f"try: seaway --state-dir {state} topics list --cluster eu-west-1"
        listed = subprocess.run([sys.executable, "-m", "core.cli", *shlex.split(printed.split(":", 1)[1])[1:]],
                                capture_output=True, text=True, cwd=REPO, timeout=60)
        assert listed.returncode == 0, listed.stderr

        # Clients bootstrap at their region's gateway: both reach the primary, us-east's across the WAN.
        create(gateways["eu-west"]["bootstrap"], "orders", rf=1)
        sent = round_trip({"bootstrap.servers": gateways["eu-west"]["bootstrap"]}, "orders", "via-eu-west", n=10)
        assert sent and {f"via-eu-west-{i}" for i in range(10)} <= read_values(
            {"bootstrap.servers": gateways["us-east"]["bootstrap"]}, "orders", {f"via-eu-west-{i}" for i in range(10)})

        # `dr status` lists them serving the active cluster, and after `dr failover` the other.
        deadline = time.monotonic() + 60
        while (status := dr(state, "status")).returncode != 0:      # the replica made, the pair ready
            assert time.monotonic() < deadline, status.stdout
            time.sleep(1)
        for region, g in gateways.items():
            assert f"  gateway {region} {g['bootstrap']}: serving eu-west-1 (no DR decision yet)" in status.stdout
        assert dr(state, "failover", "eu-west").returncode == 0
        deadline = time.monotonic() + 15
        while True:
            [pair] = json.loads(dr(state, "status", "-o", "json").stdout)["pairs"]
            if {(g["serving"], g["epoch"]) for g in pair["gateways"]} == {("us-east-1", 1)}:
                break
            assert time.monotonic() < deadline, pair["gateways"]
            time.sleep(0.3)
        assert [(g["region"], g["reachable"], g["stale"], g["bootstrap"], g["metrics_url"]) for g in pair["gateways"]] == [
            (r, True, False, gateways[r]["bootstrap"], gateways[r]["metrics"]) for r in ("eu-west", "us-east")]
        round_trip({"bootstrap.servers": gateways["eu-west"]["bootstrap"]}, "orders", "after-failover", n=5)

        # A region's outage takes its gateway with it; the region's return brings it back.
        assert "gateway-us-east-eu-west-1" in regions(state, "stop", "us-east", "--kill").stdout
        held = {g["region"]: g for g in p.status()["gateways"]}["us-east"]
        assert held["held"] and not held["running"], held
        assert regions(state, "start", "us-east").returncode == 0
        assert {g["region"]: g for g in p.status()["gateways"]}["us-east"]["running"]


@pytest.mark.parametrize("args, words", [
    (["up", "{bad}"], "roles[1]: Input should be 'broker' or 'controller'"),
    (["up", "{missing}"], "cannot read the topology"),
    (["up", "{typo}"], "typo.yaml:5: regions.eu-west.clusters.a.config.log.retension.ms: not a broker setting "
                       "of Seaway or Kafka (did you mean log.retention.ms?)"),
    (["compose", "{typo}"], "did you mean log.retention.ms?"),
    (["status"], "no platform is running"),
    (["stop", "eu-west"], "no platform is running"),
])
def test_bad_input_gets_one_line(tmp_path, args, words):
    bad = tmp_path / "bad.yaml"
    bad.write_text("regions:\n  eu-west:\n    clusters:\n      a:\n        nodes:\n"
                   "          - {id: 1, roles: [broker, controler], zone: z}\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("regions:\n  eu-west:\n    clusters:\n      a:\n        config: {log.retension.ms: 1000}\n"
                    "        nodes:\n          - {id: 1, roles: [broker, controller], zone: z}\n")
    args = [a.format(bad=bad, missing=tmp_path / "missing.yaml", typo=typo) for a in args]
    out = regions(tmp_path / "state", *args)
    assert out.returncode != 0
    assert not (tmp_path / "state").exists() or args[0] != "up", "a topology refused left a state directory"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"regions {args[0]}: ")


TINY = ("name: tiny\nregions:\n  eu-west:\n    clusters:\n      solo:\n        nodes:\n"
        "          - {id: 1, roles: [broker, controller], zone: a}\n")


def up_in_the_foreground(tmp_path):
    """`regions up` of a one-node platform, in the foreground, once its live view has refreshed
    twice: (process, state directory, the lines read so far)."""
    topology = tmp_path / "one.yaml"
    topology.write_text(TINY)
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "regions.cli", "--state-dir", str(state), "up", str(topology)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while sum("REGION" in line for line in lines) < 2:     # two refreshes of the view
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
    except BaseException:
        proc.kill()
        raise
    return proc, state, lines


def assert_addresses_printed_again(rest: str, state: Path) -> None:
    """The view's end repeats where everything is (it had scrolled away, or been cleared)."""
    assert f"platform 'tiny': state and logs in {state}" in rest, rest
    assert any(line.split()[:3] == ["eu-west", "solo", "bootstrap"] for line in rest.splitlines()), rest


def test_up_in_the_foreground_shows_live_status_until_ctrl_c(tmp_path):
    import signal
    proc, state, lines = up_in_the_foreground(tmp_path)
    try:
        assert any(line.split()[:2] == ["eu-west", "solo"] and "healthy" in line for line in lines), lines
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, rest
    assert "stopping the platform" in rest
    assert_addresses_printed_again(rest, state)
    assert not (state / "control.sock").exists() and not (state / "platform.json").exists()
    assert subprocess.run(["pgrep", "-f", str(state)], capture_output=True).stdout == b""


def test_regions_down_from_another_shell_ends_the_foreground_up_with_exit_0(tmp_path):
    proc, state, _ = up_in_the_foreground(tmp_path)
    try:
        down = regions(state, "down")
        assert down.returncode == 0, down.stderr
        rest, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert f"the platform was stopped by `regions down`; its data stays in {state}" in rest
    assert_addresses_printed_again(rest, state)
    assert "error" not in rest and "supervisor exited" not in rest, rest


def test_a_supervisor_stopped_by_a_signal_ends_the_foreground_up_as_a_failure_that_says_so(tmp_path):
    import signal
    proc, state, _ = up_in_the_foreground(tmp_path)
    try:
        supervisor = json.loads((state / "platform.json").read_text())["supervisor_pid"]
        os.kill(supervisor, signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, rest
    assert "regions up: the supervisor exited (stopped by SIGTERM); see " in rest, rest
    assert_addresses_printed_again(rest, state)


def test_a_start_refused_for_a_taken_port_leaves_nothing_behind(tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        topology = tmp_path / "taken.yaml"
        topology.write_text(TINY.replace("zone: a}", f"zone: a, port: {port}}}"))
        fresh, used = tmp_path / "fresh", tmp_path / "used"
        out = regions(fresh, "up", str(topology), "--detach")
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert f"port {port} on 127.0.0.1 is in use" in out.stderr
        assert out.stderr.rstrip().endswith(f"; removed {fresh}, which this start had made")
        assert not fresh.exists()
        # A state directory that held something already keeps it; only this start's files go.
        used.mkdir()
        (used / "notes.txt").write_text("mine")
        out = regions(used, "up", str(topology), "--detach")
        assert out.returncode == 1 and "kept what was there before" in out.stderr, out.stderr
        assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]


def test_a_start_that_times_out_keeps_only_the_logs_that_say_why(tmp_path):
    topology = tmp_path / "one.yaml"
    topology.write_text(TINY)
    state = tmp_path / "state"
    out = regions(state, "up", str(topology), "--detach", "--timeout", "0.3")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "not healthy within 0.3s" in out.stderr
    assert f"except its logs (supervisor.log, each node's node.log), which show what went wrong: `rm -r {state}`" \
        in out.stderr
    left = sorted(str(p.relative_to(state)) for p in state.rglob("*") if p.is_file())
    assert left and all(name.endswith(".log") for name in left), left
    assert "supervisor.log" in left
    assert subprocess.run(["pgrep", "-f", str(state)], capture_output=True).stdout == b""
