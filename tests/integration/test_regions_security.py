"""A secured platform (the topology's `security:` section), as a newcomer uses it: `regions up`
prints a client properties file and a kcat command, and that command works as printed; every
other way in is shut.

One region, one cluster of three combined nodes: client listeners take SCRAM over TLS, the
brokers replicate and the controllers vote over mTLS, ACLs are on.
"""
from __future__ import annotations

import re
import shlex
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from core.config import load_properties
from tests.support.node import REPO
from tests.support.regions import Platform, regions

pytestmark = pytest.mark.integration

TOPOLOGY = """\
name: secured
regions:
  eu:
    clusters:
      eu-1:
        config: {default.replication.factor: 3, min.insync.replicas: 2, offsets.topic.replication.factor: 3}
        nodes:
          - {id: 1, roles: [broker, controller], zone: a}
          - {id: 2, roles: [broker, controller], zone: b}
          - {id: 3, roles: [broker, controller], zone: c}
security:
  enabled: true
"""


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    directory = tmp_path_factory.mktemp("secured")
    topology = directory / "secured.yaml"
    topology.write_text(TOPOLOGY)
    with Platform(directory / "state", topology) as p:
        yield p


def printed_command(platform, program: str) -> list[str]:
    line = next(line for line in platform.up_output.splitlines() if re.search(rf"\b{program} ", line))
    return shlex.split(line.split(":", 1)[1] if line.strip().startswith("try:") else line)


def test_the_printed_kcat_command_works_as_printed(platform):
    kcat = printed_command(platform, "kcat")
    assert kcat[0] == "kcat" and "-F" in kcat
    listed = subprocess.run(kcat, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "3 brokers" in listed.stdout, listed.stderr
    props = kcat[kcat.index("-F") + 1]
    bootstrap = kcat[kcat.index("-b") + 1]
    produced = subprocess.run(["kcat", "-F", props, "-b", bootstrap, "-P", "-t", "printed"], input="hello\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-F", props, "-b", bootstrap, "-C", "-t", "printed", "-o", "beginning", "-e"],
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout.splitlines() == ["hello"], consumed.stderr
    seaway = printed_command(platform, "seaway")
    listed = subprocess.run(seaway, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert listed.returncode == 0 and "printed" in listed.stdout, listed.stderr


def admin_config(platform) -> dict:
    kcat = printed_command(platform, "kcat")
    props = load_properties(Path(kcat[kcat.index("-F") + 1]))
    assert oct(Path(kcat[kcat.index("-F") + 1]).stat().st_mode & 0o777) == "0o600"
    return {"bootstrap.servers": platform.bootstrap("eu-1"), **props}


def test_replication_runs_over_mtls_and_clients_over_scram(platform):
    config = admin_config(platform)
    producer = Producer({**config, "acks": "all"})
    for i in range(50):
        producer.produce("replicated", b"r%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": "secured-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition("replicated", p, 0) for p in range(3)])
    got = []
    for _ in range(100):
        got += [m.value() for m in consumer.consume(50, 0.5) if not m.error()]
        if len(got) == 50:
            break
    consumer.close()
    assert sorted(got) == sorted(b"r%d" % i for i in range(50))
    status = platform.status()
    cluster = status["regions"]["eu"]["eu-1"]
    assert cluster["healthy"] and cluster["under_replicated"] == 0, cluster


def test_every_other_way_in_is_shut(platform):
    bootstrap = platform.bootstrap("eu-1")
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    # Plaintext to the client listener: no answer.
    plain = subprocess.run(["kcat", "-b", bootstrap, "-L", "-m", "5"], capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0
    # TLS without a password: the handshake works, authentication does not.
    config = admin_config(platform)
    wrong = Producer({**config, "sasl.password": "not-it", "message.timeout.ms": 5000, "log_level": 0})
    errors = []
    wrong.produce("replicated", b"x", on_delivery=lambda err, msg: errors.append(err))
    wrong.flush(15)
    assert errors and errors[0] is not None
    # The INTERNAL and CONTROLLER listeners want a certificate of this platform's CA.
    node_props = load_properties(Path(platform.state_dir) / "clusters" / "eu-1" / "node-1" / "node.properties")
    for listener in ("INTERNAL", "CONTROLLER"):
        address = re.search(rf"{listener}://([^,]+)", node_props["listeners"]).group(1)
        h, p = address.rsplit(":", 1)
        context = ssl.create_default_context(cafile=config["ssl.ca.location"])
        with socket.create_connection((h, int(p)), timeout=10) as raw:
            try:
                with context.wrap_socket(raw, server_hostname=h) as tls:
                    tls.sendall(b"\x00\x00\x00\x01\x00")
                    assert tls.recv(1) == b"", f"{listener} served a client without a certificate"
            except (ssl.SSLError, ConnectionError):
                pass    # refused during or right after the handshake: as it should be
    # ACLs are on: a SCRAM user nobody granted anything may not produce.
    users = subprocess.run(["seaway", "users", "add", "bob", "--mechanism", "SCRAM-SHA-512", "--password", "bob-secret",
                            "--command-config", admin_config_path(platform), "-b", bootstrap],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
    assert users.returncode == 0, users.stderr
    bob = Producer({**config, "sasl.username": "bob", "sasl.password": "bob-secret", "message.timeout.ms": 10000})
    errors = []
    bob.produce("replicated", b"x", on_delivery=lambda err, msg: errors.append(err))
    bob.flush(20)
    assert errors and errors[0] is not None and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors
    del host, port


def test_seaway_health_asks_a_secured_node_with_the_admin_properties(platform):
    first = platform.bootstrap("eu-1").split(",")[0]
    base = ["seaway", "health", "--bootstrap-server", first, "--node-id", "1", "--timeout", "10"]
    healthy = subprocess.run(base + ["--command-config", admin_config_path(platform)], capture_output=True,
                             text=True, timeout=60, cwd=REPO)
    assert healthy.returncode == 0 and healthy.stdout.startswith("healthy: broker 1 registered"), healthy.stderr
    anonymous = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert anonymous.returncode == 1 and "Traceback" not in anonymous.stderr
    assert len(anonymous.stderr.strip().splitlines()) == 1 and "unhealthy" in anonymous.stderr, anonymous.stderr


def admin_config_path(platform) -> str:
    kcat = printed_command(platform, "kcat")
    return kcat[kcat.index("-F") + 1]


def test_a_restart_keeps_the_same_identities(platform, tmp_path):
    """The CA, certificates and passwords are made once: `regions status` (which plans the
    layout again) changes none of them."""
    pki = Path(platform.state_dir) / "pki"
    before = {p.name: p.read_bytes() for p in pki.iterdir()}
    assert regions(platform.state_dir, "status").returncode == 0
    assert {p.name: p.read_bytes() for p in pki.iterdir()} == before


MIRRORED = """\
name: secured-mirror
regions:
  eu:
    clusters:
      eu-1:
        config: {default.replication.factor: 1, offsets.topic.replication.factor: 1}
        nodes: [{id: 1, roles: [broker, controller], zone: a}]
  us:
    clusters:
      us-1:
        config: {default.replication.factor: 1, offsets.topic.replication.factor: 1}
        nodes: [{id: 1, roles: [broker, controller], zone: a}]
wan: {latency_ms: 5, bandwidth_mbit: 1000}
mirrors:
  - {source: eu-1, target: us-1}
security:
  enabled: true
"""


def test_the_mirror_copies_as_its_own_principal_with_only_its_acls(tmp_path):
    import json
    import time
    topology = tmp_path / "mirrored.yaml"
    topology.write_text(MIRRORED)
    with Platform(tmp_path / "state", topology) as p:
        config = admin_config(p)
        producer = Producer({**config, "bootstrap.servers": p.bootstrap("eu-1")})
        for i in range(20):
            producer.produce("orders", b"o%d" % i)
        assert producer.flush(30) == 0
        target = {**config, "bootstrap.servers": p.bootstrap("us-1"), "group.id": "check", "enable.auto.commit": False}
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            consumer = Consumer(target)
            if "eu-1.orders" in consumer.list_topics(timeout=10).topics:
                consumer.assign([TopicPartition("eu-1.orders", 0, 0)])
                got = [m.value() for m in consumer.consume(20, 5) if not m.error()]
            consumer.close()
            time.sleep(0.5)
        assert got == [b"o%d" % i for i in range(20)]
        # The mirror is User:mirror on both clusters, not a super user: its ACLs are what it
        # was granted, and a topic outside them (on the target) is refused to it.
        mirror = {**config, "sasl.username": "mirror",
                  "sasl.password": json.loads((Path(p.state_dir) / "secrets.json").read_text())["mirror"]}
        errors: list = []
        stray = Producer({**mirror, "bootstrap.servers": p.bootstrap("us-1"), "message.timeout.ms": 10000})
        stray.produce("not-mirrored", b"x", on_delivery=lambda err, msg: errors.append(err))
        stray.flush(20)
        assert errors and errors[0] is not None and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors
        audit = (Path(p.state_dir) / "clusters" / "us-1" / "node-1" / "audit.log").read_text()
        assert '"principal":"User:mirror"' in audit
