"""`docker compose -f compose/two-regions.yml up` for real: the images built here from Debian
packages and a wheelhouse (nothing pulled), the committed file started from a clean state, and
then, in order, on the same platform:

1. it becomes healthy (every node registered, unfenced and serving; the mirror and the WAN up),
   secured: its pki service made the certificates and passwords inside the platform and
   exported the admin's client properties for the host, and nothing gets in without them;
2. confluent-kafka on the host produces to and consumes from each region at the published
   addresses the README prints, logged in with those properties, and through each region's
   gateway of the DR pair, which both serve eu-west-1;
3. the mirror copies eu-west's topic to us-east, record for record;
   and every panel of the Grafana dashboard has data in the platform's real Prometheus;
4. `docker compose kill` of one node leaves acks=all produce working (RF 3, min ISR 2);
5. stopping every node of eu-west leaves us-east serving;
6. `docker network disconnect` of the WAN on eu-west's side: the mirror's lag grows and
   SeawayMirrorLagAboveRpo fires in Prometheus' ALERTS; reconnected, the mirror catches up
   with nothing lost and nothing duplicated;
7. `down` then `up` keeps every record (the volumes);
8. `down -v` leaves no container, network or volume behind; the images are removed after.

One module, one platform: the steps build on each other, as an operator's afternoon would.
It takes about five minutes here (README: Tests).
"""
from __future__ import annotations

import json
import math
import shlex
import subprocess
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.compose import REPO, ComposePlatform

pytestmark = pytest.mark.integration

EU, US = "127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292", "127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29292"
EU_NODES = ["eu-west-1-1", "eu-west-1-2", "eu-west-1-3"]
TOPIC, MIRRORED = "orders", "orders"         # a DR pair keeps names: us-east-1's replica
ALL_SERVICES = EU_NODES + ["us-east-1-1", "us-east-1-2", "us-east-1-3", "wan", "mirror-eu-west-1-to-us-east-1",
                           "mirror-us-east-1-to-eu-west-1", "dr", "gateway-eu-west-eu-west-1",
                           "gateway-us-east-eu-west-1"]
# The DR pair's gateways, as the README's table gives them: eu-west's, then us-east's.
GATEWAYS = {"eu-west": "127.0.0.1:31092,127.0.0.1:31093,127.0.0.1:31094",
            "us-east": "127.0.0.1:31192,127.0.0.1:31193,127.0.0.1:31194"}
DR_API = "http://127.0.0.1:9780/api/v1"


@pytest.fixture(scope="module")
def platform():
    with ComposePlatform() as p:
        try:
            yield p
        except BaseException:
            print(p.logs())
            raise


def eu(platform) -> dict:
    return platform.client(EU)


def us(platform) -> dict:
    return platform.client(US)


def produce(client: dict, topic: str, count: int, prefix: str) -> list[bytes]:
    """`count` unique values, idempotent acks=all; every one acknowledged or the test fails."""
    producer = Producer({**client, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60000})
    acked, failed = [], []

    def on_delivery(err, msg):
        (failed if err else acked).append(err or msg.value())
    values = [f"{prefix}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(90) == 0
    assert not failed, failed[:3]
    assert sorted(acked) == sorted(values)
    return values


def read_all(client: dict, topic: str, timeout: float = 60) -> dict[int, list[bytes]]:
    """Every record of every partition up to its high watermark, by partition, in order."""
    consumer = Consumer({**client, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: dict[int, list[bytes]] = defaultdict(list)
        positions = {p: 0 for p in partitions}
        deadline = time.monotonic() + timeout
        while any(positions[p] < ends[p] for p in partitions):
            assert time.monotonic() < deadline, f"read {positions} of {ends} in {timeout}s"
            for msg in consumer.consume(500, timeout=1):
                if msg.error():
                    continue
                out[msg.partition()].append(msg.value())
                positions[msg.partition()] = msg.offset() + 1
        return {p: out[p] for p in partitions}
    finally:
        consumer.close()


def wait_mirrored(platform, source: dict[int, list[bytes]], timeout: float = 120) -> dict[int, list[bytes]]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            copy = read_all(us(platform), MIRRORED, timeout=30)
        except Exception:   # noqa: BLE001 — the topic may not exist yet
            copy = {}
        if {p: len(v) for p, v in copy.items()} == {p: len(v) for p, v in source.items()}:
            return copy
        assert time.monotonic() < deadline, (
            f"mirror copied {({p: len(v) for p, v in copy.items()})} of {({p: len(v) for p, v in source.items()})}")
        time.sleep(2)


def test_up_from_a_clean_state_becomes_healthy(platform):
    assert platform.leftovers() == {"container": [], "network": [], "volume": []}
    took = platform.up()
    print(f"\nimages built in {platform.build_s:.0f}s ({platform.image_size() / 1e6:.0f} MB); "
          f"healthy {took:.1f}s after `up`")
    for service in ALL_SERVICES:
        assert platform.health(service) == "healthy", service
    assert took < 120
    # Secured: the admin's properties were exported for the host, privately, and a client
    # without them is refused.
    props = platform.admin_properties.read_text()
    assert "security.protocol=SASL_SSL" in props and "sasl.mechanism=SCRAM-SHA-512" in props
    assert f"ssl.ca.location={platform.secrets}/ca.crt" in props
    assert oct(platform.admin_properties.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": EU, "socket.timeout.ms": 3000}).list_topics(timeout=5)
    # The README's kcat and seaway commands work as printed (with this run's secrets directory).
    readme = (REPO / "README.md").read_text()
    for program in ("kcat", "seaway"):
        line = next(ln.strip() for ln in readme.splitlines() if ln.strip().startswith(f"{program} ")
                    and "compose/secrets/admin.properties" in ln)
        command = shlex.split(line.replace("compose/secrets", str(platform.secrets)))
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 0, (line, done.stderr)
        if program == "kcat":
            assert "3 brokers" in done.stdout, done.stdout


def test_clients_on_the_host_produce_and_consume_in_each_region(platform):
    admin = AdminClient(eu(platform))
    for future in admin.create_topics([NewTopic(TOPIC, 3, 3)]).values():
        future.result(30)
    sent = produce(eu(platform), TOPIC, 300, "eu")
    assert sorted(v for vs in read_all(eu(platform), TOPIC).values() for v in vs) == sorted(sent)
    sent_us = produce(us(platform), "local-us", 100, "us")          # auto-created in us-east
    assert sorted(v for vs in read_all(us(platform), "local-us").values() for v in vs) == sorted(sent_us)
    # Either region's gateway, with the same properties: both serve eu-west-1, the pair's
    # active cluster, so what one takes the other reads, and so does eu-west-1 itself.
    readme = (REPO / "README.md").read_text()
    via = {region: {**eu(platform), "bootstrap.servers": bootstrap} for region, bootstrap in GATEWAYS.items()}
    for region, bootstrap in GATEWAYS.items():
        assert bootstrap in readme, f"the README does not give {region}'s gateway"
    sent_gw = produce(via["us-east"], TOPIC, 200, "via-gateway")
    everything = sorted(sent + sent_gw)
    assert sorted(v for vs in read_all(via["eu-west"], TOPIC).values() for v in vs) == everything
    assert sorted(v for vs in read_all(eu(platform), TOPIC).values() for v in vs) == everything


def test_the_mirror_copies_eu_west_to_us_east_record_for_record(platform):
    source = read_all(eu(platform), TOPIC)
    assert wait_mirrored(platform, source) == source
    # The dr service sees the pair: orders active in eu-west (local-us in us-east), each
    # region ready to fail over.
    import urllib.request

    def pair() -> dict:
        with urllib.request.urlopen(f"{DR_API}/status", timeout=10) as answer:
            return json.loads(answer.read())["pairs"][0]
    deadline = time.monotonic() + 60
    while not (status := pair())["ready"] or status["active_for"] != {"eu-west": 1, "us-east": 1}:
        assert time.monotonic() < deadline, status
        time.sleep(1)
    assert status["clusters"]["us-east-1"]["topics"][MIRRORED]["replica_of"] == "eu-west-1"
    assert status["clusters"]["eu-west-1"]["topics"]["local-us"]["replica_of"] == "us-east-1"


def test_every_dashboard_panel_has_data_from_the_real_prometheus(platform):
    """No Grafana image can run here, so each panel's PromQL is asked of the platform's own
    Prometheus, scraping the real platform: every query must return at least one number."""
    dashboard = json.loads((REPO / "compose" / "grafana" / "dashboards" / "seaway.json").read_text())
    queries = [(p["title"], t["expr"]) for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]
    assert len(queries) >= 20
    deadline = time.monotonic() + 90         # rate() needs two scrapes of a counter that exists
    while True:
        empty = []
        for title, expr in queries:
            values = [float(r["value"][1]) for r in platform.prometheus_query(expr)]
            if not any(math.isfinite(v) for v in values):
                empty.append(f"{title}: {expr}")
        if not empty:
            return
        assert time.monotonic() < deadline, "panels without data:\n" + "\n".join(empty)
        produce(eu(platform), TOPIC, 20, f"dashboard-{time.monotonic():.0f}")      # keep rates above zero
        time.sleep(5)


def test_the_console_draws_from_the_real_prometheus_and_logs_in_against_the_platforms_users(platform):
    """The console `dr serve` publishes on 9780, in compose, where its source is Prometheus."""
    import http.client
    from core.config import load_properties
    password = load_properties(platform.admin_properties)["sasl.password"]

    def call(method: str, path: str, body: dict | None = None, cookie: str = "") -> tuple[int, dict, str]:
        conn = http.client.HTTPConnection("127.0.0.1", 9780, timeout=30)
        headers = {"Cookie": cookie, "Content-Type": "application/json", "X-Seaway-Console": "1"}
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=headers)
        resp = conn.getresponse()
        data = json.loads(resp.read())
        return resp.status, data, (resp.getheader("Set-Cookie") or "").split(";")[0]

    assert call("GET", "/api/v1/console/overview")[0] == 401
    assert call("POST", "/api/v1/console/login", {"user": "admin", "password": "wrong"})[0] == 401
    status, session, cookie = call("POST", "/api/v1/console/login", {"user": "admin", "password": password})
    assert status == 200 and session["may_act"] is True, session
    deadline = time.monotonic() + 90
    while True:
        status, overview, _ = call("GET", "/api/v1/console/overview", cookie=cookie)
        clusters = {c["name"]: c for r in overview.get("platform", {}).get("regions", []) for c in r["clusters"]}
        _, page, _ = call("GET", "/api/v1/console/charts/cluster?cluster=eu-west-1", cookie=cookie)
        drawn = {c["id"] for c in page.get("charts", []) if any(v is not None for s in c["series"] for v in s["values"])}
        if status == 200 and overview["mode"] == "prometheus" and len(clusters) == 2 and \
                all(c["health"] == "ok" and len(c["nodes"]) == 3 for c in clusters.values()) and \
                {"requests", "latency_p99", "leaders", "replicas"} <= drawn:
            break
        assert time.monotonic() < deadline, json.dumps({"overview": overview, "drawn": sorted(drawn)})[:4000]
        produce(eu(platform), TOPIC, 20, f"console-{time.monotonic():.0f}")
        time.sleep(5)


def test_a_killed_node_leaves_acks_all_produce_working(platform):
    platform.compose("kill", "eu-west-1-2")
    sent = produce(eu(platform), TOPIC, 200, "after-kill")
    got = [v for vs in read_all(eu(platform), TOPIC).values() for v in vs]
    assert set(sent) <= set(got)
    platform.compose("start", "eu-west-1-2")
    platform.wait_healthy(["eu-west-1-2"])


def test_a_stopped_region_leaves_the_other_serving(platform):
    platform.compose("stop", "--timeout", "10", *EU_NODES)
    try:
        sent = produce(us(platform), "local-us", 100, "us-alone")
        got = [v for vs in read_all(us(platform), "local-us").values() for v in vs]
        assert set(sent) <= set(got)
    finally:
        platform.compose("start", *EU_NODES)
        platform.wait_healthy(EU_NODES)


def test_a_cut_wan_raises_the_lag_alert_and_the_mirror_catches_up_after(platform):
    wait_mirrored(platform, read_all(eu(platform), TOPIC))
    platform.disconnect("eu-west", "wan")
    try:
        during = produce(eu(platform), TOPIC, 300, "during-cut")   # eu-west itself still serves
        deadline = time.monotonic() + 150
        lags = []
        while True:
            lag = platform.prometheus_query('max(seaway_mirror_lag_seconds)')
            lags.append(float(lag[0]["value"][1]) if lag else 0.0)
            firing = platform.prometheus_query(
                'ALERTS{alertname="SeawayMirrorLagAboveRpo", alertstate="firing"}')
            # Both of the DR pair's links cross the cut WAN, and either may alert first (the
            # link back copies us-east's heartbeats); the one that carries the topic must.
            if "eu-west-1->us-east-1" in {alert["metric"]["link"] for alert in firing}:
                break
            assert time.monotonic() < deadline, f"the lag alert did not fire; lag seconds seen: {lags}"
            time.sleep(3)
        assert lags[-1] > 60 and lags[0] < lags[-1], lags              # grew while the WAN was cut
    finally:
        platform.connect("eu-west", "wan")
    source = read_all(eu(platform), TOPIC)
    assert set(during) <= {v for vs in source.values() for v in vs}
    copy = wait_mirrored(platform, source, timeout=180)
    assert copy == source               # nothing lost, nothing duplicated, same order


def test_down_then_up_keeps_every_record(platform):
    before_eu, before_us = read_all(eu(platform), TOPIC), read_all(us(platform), MIRRORED)
    platform.compose("down", "--timeout", "20")
    assert platform.leftovers()["container"] == []
    assert len(platform.leftovers()["volume"]) == 9          # six nodes' data, Prometheus', pki and dr-state
    platform.up()
    assert read_all(eu(platform), TOPIC) == before_eu
    assert read_all(us(platform), MIRRORED) == before_us


def test_down_with_volumes_leaves_nothing_behind(platform):
    platform.compose("down", "-v", "--timeout", "20")
    assert platform.leftovers() == {"container": [], "network": [], "volume": []}
