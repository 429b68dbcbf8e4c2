"""`seaway gateway` between unmodified Kafka clients and a DR pair of two Seaway nodes joined by
identity links both ways (`mirror run`), with the DR controller run as a person runs it
(`dr --config dr.yaml failover ...`). The clients are bootstrapped once, at the gateway, and
never restarted or reconfigured."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from core.gateway import routing
from tests.support.gateway import GatewayProcess, free_ports
from tests.support.gateway_traffic import (PARTITIONS, ConfluentTraffic, KafkajsTraffic,
                                           KafkaPythonTraffic)
from tests.support.mirror import start_dr_links, stop_mirror, write_dr_config
from tests.support.node import REPO, SeawayNode
from tests.support.wire import read_frame

pytestmark = pytest.mark.integration

PAIR = "eu-1~us-1"


def dr(config: Path, *args: str, timeout: float = 180) -> str:
    proc = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def pair(tmp_path):
    eu = SeawayNode(tmp_path / "eu").start()
    us = SeawayNode(tmp_path / "us").start()
    config = write_dr_config(tmp_path, eu, us)
    mirror = start_dr_links(tmp_path, ("eu-1", eu.bootstrap), ("us-1", us.bootstrap), checkpoint_interval_s=1)
    # Fixed ports, so that a gateway started again listens where its clients look.
    listen = f"127.0.0.1:{free_ports(3)}"
    gateway = GatewayProcess(tmp_path, PAIR, [("eu-1", eu.bootstrap), ("us-1", us.bootstrap)], listen=listen).start()
    try:
        yield eu, us, config, gateway, mirror
    finally:
        try:
            gateway.stop()
            stop_mirror(mirror)
        finally:
            eu.stop()
            us.stop()


def log_values(bootstrap: str, topic: str, n: int, timeout: float = 30) -> Counter:
    """Every value in `topic` on one cluster (read directly, not through the gateway)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen: Counter = Counter()
    deadline = time.monotonic() + timeout
    try:
        while sum(seen.values()) < n and time.monotonic() < deadline:
            for msg in c.consume(500, 0.5):
                if not msg.error():
                    seen[msg.value().decode()] += 1
    finally:
        c.close()
    return seen


def test_clients_bootstrapped_at_the_gateway_ride_through_a_failover_and_back(pair):
    """confluent-kafka, kafka-python and kafkajs, at once, through `dr failover eu-west` and
    back: nothing acknowledged is lost, nothing is read twice, skipped or out of order, and
    no client reports a fatal error."""
    eu, us, config, gateway, mirror = pair
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("orders", "orders-kp", "orders-js")]).values():
        future.result(10)
    clients = [ConfluentTraffic(gateway.bootstrap, "orders", "billing"),
               KafkaPythonTraffic(gateway.bootstrap, "orders-kp", "billing-kp"),
               KafkajsTraffic(gateway.bootstrap, "orders-js", "billing-js")]
    for c in clients:
        c.start()
    try:
        deadline = time.monotonic() + 60
        while any(len(c.consumed) < 100 for c in clients):
            assert time.monotonic() < deadline, [(type(c).__name__, len(c.consumed), c.fatal[:3]) for c in clients]
            time.sleep(0.2)
        moved = time.monotonic()
        out = dr(config, "failover", "eu-west")
        assert "us-east is active" in out, out
        time.sleep(8)
        back = time.monotonic()
        out = dr(config, "failover", "us-east")
        assert "eu-west is active" in out, out
        time.sleep(8)
    finally:
        for c in clients:
            c.stop_producing.set()
        for c in clients:
            c.finish()
    for c in clients:
        c.check()
        # Both sides took writes and served reads in turn, through the one bootstrap address.
        for since, until in ((moved, back), (back, time.monotonic())):
            assert any(since < t < until for t, _ in c.ack_times), type(c).__name__
            assert any(since < t < until for t in c.consume_times), type(c).__name__
    # What was acknowledged while us-east was active is in its log, and every acknowledged
    # record is in eu-west's exactly once.
    ck = clients[0]
    written_on_us = {v for t, v in ck.ack_times if moved < t < back}
    assert written_on_us - set(log_values(us.bootstrap, "orders", ck.total_acked())) == set()
    on_eu = log_values(eu.bootstrap, "orders", ck.total_acked())
    assert {v for v, n in on_eu.items() if n > 1} == set()
    assert set(on_eu) >= {v for values in ck.acked.values() for v in values}
    metrics = gateway.metrics()
    assert 'seaway_gateway_moves_total{pair="eu-1~us-1"} 2.0' in metrics
    # The consumers were moved as the gateway moves them: told to rejoin, and held until the
    # group's offsets were on the other side.
    assert 'seaway_gateway_requests_total{api="JoinGroup",handling="held",pair="eu-1~us-1"}' in metrics
    assert 'seaway_gateway_requests_total{api="Heartbeat",handling="answered",pair="eu-1~us-1"}' in metrics
    assert json.loads(dr(config, "status", "-o", "json"))["pairs"][0]["active_region"] == "eu-west"


def flowing_traffic(eu, gateway) -> "ConfluentTraffic":
    """`orders` on eu-west, and confluent-kafka traffic through the gateway that has been read
    back already."""
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(10)
    traffic = ConfluentTraffic(gateway.bootstrap, "orders", "billing").start()
    deadline = time.monotonic() + 60
    while len(traffic.consumed) < 300:
        assert time.monotonic() < deadline, traffic.fatal
        time.sleep(0.2)
    return traffic


def stranded_count(out: str) -> int:
    m = re.search(r"(\d+) stranded records? on eu-1 \(the exact RPO", out)
    assert m, out
    return int(m.group(1))


def test_an_unplanned_failover_loses_exactly_the_rpo_dr_reports_and_nothing_else(pair):
    """eu-west is killed (kill -9) under traffic; `dr failover eu-west --force` promotes
    us-east and the gateway moves the clients there by itself. After eu-west is back and
    `dr failback eu-west` has run, the acknowledged records missing from the topic are exactly
    the stranded records failback counts (the failover's exact RPO), none is in the log twice,
    consumers skip nothing that survived, and no client error was fatal."""
    eu, us, config, gateway, mirror = pair
    traffic = flowing_traffic(eu, gateway)
    try:
        # The link falls behind (its process stopped), so that records are stranded on eu-west.
        os.kill(mirror.pid, signal.SIGSTOP)
        time.sleep(2)
        eu.kill()
        os.kill(mirror.pid, signal.SIGCONT)
        out = dr(config, "--timeout", "2", "failover", "eu-west", "--force")
        assert "us-east is active" in out, out
        time.sleep(6)
        eu.start()
        out = dr(config, "failback", "eu-west")
        assert "eu-west is active" in out, out
        rpo = stranded_count(out)
        time.sleep(6)
    finally:
        traffic.finish()
    assert not traffic.fatal, traffic.fatal
    assert not traffic.failed, traffic.failed[:5]
    acked = {v for values in traffic.acked.values() for v in values}
    on_eu = log_values(eu.bootstrap, "orders", len(acked))
    assert {v for v, n in on_eu.items() if n > 1} == set(), "a record is in the log twice"
    # us-east never had what eu-west acknowledged and the link had not copied when it died;
    # everything else is on both sides now.
    on_us = log_values(us.bootstrap, "orders", len(acked))
    lost = acked - set(on_us)
    assert acked - set(on_eu) == set()          # eu-west keeps its stranded records in place
    # Failback kept the stranded records in orders.stranded too: exactly the RPO it reported,
    # and what the producer lost is what was stranded with an acknowledgement. A record
    # stranded before its acknowledgement reached the producer was sent again: on us-east.
    stranded = log_values(eu.bootstrap, "orders.stranded", rpo)
    assert rpo > 0 and sum(stranded.values()) == rpo, (rpo, stranded)
    assert lost == acked & set(stranded), (len(lost), len(acked & set(stranded)))
    assert set(stranded) - acked <= set(on_us)
    # Consumers skipped nothing that us-east had; what they read again (from the last
    # checkpoint the mirror carried over) is the price of an unplanned failover, not judged here.
    assert acked - lost - {v for _, v in traffic.consumed} == set()
    reread = sum(n - 1 for n in Counter(v for _, v in traffic.consumed).values() if n > 1)
    print(f"unplanned: {len(acked)} acknowledged, RPO {rpo}, lost {len(lost)}, read again {reread}")


def test_a_gateway_killed_and_started_again_under_load_loses_nothing(pair):
    eu, us, config, gateway, mirror = pair
    traffic = flowing_traffic(eu, gateway)
    try:
        gateway.kill()
        killed = time.monotonic()
        time.sleep(2)
        gateway.start()
        time.sleep(6)
    finally:
        traffic.finish()
    traffic.check()
    assert any(t > killed + 2 for t, _ in traffic.ack_times), "nothing acknowledged after the restart"
    on_eu = log_values(eu.bootstrap, "orders", traffic.total_acked())
    assert {v for v, n in on_eu.items() if n > 1} == set()


def _exchange(address: str, payload: bytes, timeout: float = 5.0) -> bytes | None:
    """Send raw bytes; the answer frame, or None if the peer closed the connection."""
    host, port = address.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(payload)
        try:
            return read_frame(s)
        except (ConnectionResetError, socket.timeout):
            return None


def _frame(api_key: int, version: int, body: bytes = b"", correlation_id: int = 5) -> bytes:
    header = api_key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True) + correlation_id.to_bytes(4, "big") \
        + (4).to_bytes(2, "big") + b"test"
    frame = header + body
    return len(frame).to_bytes(4, "big") + frame


BAD_INPUT = {
    "oversized frame": (200 * 1024 * 1024).to_bytes(4, "big") + b"\x00" * 64,
    "negative size": (-5).to_bytes(4, "big", signed=True),
    "too short for a header": (3).to_bytes(4, "big") + b"\x00\x03\x00",
    "unknown API key": _frame(999, 0),
    "Produce at an unknown version": _frame(0, 99),
    "an API between brokers (Vote)": _frame(52, 0),
    "a body that does not parse": _frame(3, 12, b"\xff\xff\xff"),
}


def test_bad_input_gets_a_brokers_answer_and_other_clients_carry_on(pair):
    eu, us, config, gateway, mirror = pair
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(10)
    traffic = ConfluentTraffic(gateway.bootstrap, "orders", "billing").start()
    try:
        for name, payload in BAD_INPUT.items():
            direct, through = _exchange(eu.bootstrap, payload), _exchange(gateway.bootstrap, payload)
            # The broker closes the connection, and so does the gateway (a body that does not
            # parse reaches the broker through the gateway, which closes it in turn).
            assert direct is None, name
            assert through is None, name
        # ApiVersions at a version neither knows: UNSUPPORTED_VERSION (35) in v0, with versions.
        direct, through = _exchange(eu.bootstrap, _frame(18, 99)), _exchange(gateway.bootstrap, _frame(18, 99))
        assert direct[4:6] == through[4:6] == (35).to_bytes(2, "big")
        _, body = routing.decode_response(18, 0, through)
        versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert versions[0][1] <= 9 and 52 not in versions       # what the gateway forwards
        time.sleep(2)
    finally:
        traffic.finish()
    traffic.check()
    metrics = gateway.metrics()
    assert 'seaway_gateway_requests_total{api="?",handling="refused",pair="eu-1~us-1"}' in metrics
