"""`seaway` as a user types it: real processes, real output, one-line errors."""
from __future__ import annotations

import json

import pytest

from tests.support.cli import seaway
from tests.support.node import SeawayNode, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    metrics = free_port()
    with SeawayNode(tmp_path_factory.mktemp("cli"), {"auto.create.topics.enable": "false",
                                                      "metrics.port": str(metrics)}) as n:
        n.metrics_port = metrics
        yield n


def topics(node, *args, **kw):
    return seaway("topics", "--bootstrap-server", node.bootstrap, *args, **kw)


def test_help_lists_every_topics_action():
    out = seaway("topics", "--help").stdout
    for action in ("create", "list", "describe", "delete", "alter"):
        assert action in out
    assert "--config" in seaway("node", "--help").stdout


def test_create_list_describe_alter_delete(node):
    assert "created" in topics(node, "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000").stdout
    assert "orders" in topics(node, "list").stdout.split()
    assert json.loads(topics(node, "list", "--output", "json").stdout).count("orders") == 1

    table = topics(node, "describe", "orders").stdout
    assert "PartitionCount: 3" in table and "retention.ms=3600000" in table
    rows = [line.split() for line in table.splitlines()[2:]]
    assert [r[0] for r in rows] == ["0", "1", "2"] and all(r[1] == "1" for r in rows)

    topics(node, "alter", "orders", "--partitions", "5", "--config", "cleanup.policy=compact",
           "--delete-config", "retention.ms")
    desc = json.loads(topics(node, "describe", "orders", "--output", "json").stdout)[0]
    assert desc["partition_count"] == 5
    assert desc["configs"] == {"cleanup.policy": "compact"}
    assert desc["partitions"][4]["end_offset"] == 0

    topics(node, "delete", "orders")
    assert "orders" not in topics(node, "list").stdout.split()


def test_describe_shows_offsets(node):
    from tests.support.clients import CLIENTS, Record
    topics(node, "create", "counted", "--partitions", "1")
    CLIENTS["confluent"].produce(node.bootstrap, "counted", [Record(value=b"x", partition=0)] * 7)
    desc = json.loads(topics(node, "describe", "counted", "-o", "json").stdout)[0]
    assert (desc["partitions"][0]["start_offset"], desc["partitions"][0]["end_offset"]) == (0, 7)


@pytest.mark.parametrize("args, needle", [
    (["create", "dup"], None),  # first creation succeeds; see below
    (["create", "bad/name"], "INVALID_TOPIC_EXCEPTION"),
    (["create", "x1", "--config", "nonsense.key=1"], "nonsense.key"),
    (["create", "x2", "--config", "retention.ms=abc"], "retention.ms"),
    (["create", "x3", "--config", "noequals"], "--config"),
    (["create", "x4", "--replication-factor", "3"], "INVALID_REPLICATION_FACTOR"),
    (["delete", "never-existed"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["describe", "never-existed"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["alter", "never-existed", "--partitions", "4"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["alter", "dup", "--partitions", "1"], "INVALID_PARTITIONS"),
])
def test_bad_input_gets_one_line(node, args, needle):
    proc = topics(node, *args, check=needle is None)
    if needle is None:
        return
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seaway: error:"), proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_if_exists_flags(node):
    topics(node, "create", "twice")
    assert topics(node, "create", "twice", check=False).returncode == 1
    topics(node, "create", "twice", "--if-not-exists")
    topics(node, "delete", "not-there", "--if-exists")


def test_unreachable_broker_is_one_line():
    proc = seaway("topics", "-b", "127.0.0.1:1", "list", "--timeout", "3", check=False)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "127.0.0.1:1" in proc.stderr


@pytest.mark.parametrize("props, needle", [
    ("num.partitions=zero\n", "num.partitions"),
    ("listeners=nonsense\n", "listeners"),
    ("message.max.bytes=-5\n", "message.max.bytes"),
])
def test_node_bad_config_is_one_line(tmp_path, props, needle):
    cfg = tmp_path / "bad.properties"
    cfg.write_text(props + f"log.dirs={tmp_path / 'data'}\n")
    proc = seaway("node", "--config", str(cfg), check=False, timeout=30)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("seaway: error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_node_missing_config_file_is_one_line(tmp_path):
    proc = seaway("node", "--config", str(tmp_path / "nope.properties"), check=False)
    assert proc.returncode == 1 and "nope.properties" in proc.stderr and "Traceback" not in proc.stderr


def test_quorum_describe_on_a_one_node_cluster_shows_its_one_voter(node):
    proc = seaway("quorum", "describe", "--bootstrap-server", node.bootstrap, check=False)
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(":", 1) for line in proc.stdout.splitlines())
    assert fields["LeaderId"].strip() == "1" and fields["CurrentVoters"].strip() == "[1]"
    assert fields["CurrentObservers"].strip() == "[]"
    proc = seaway("quorum", "describe", "--bootstrap-controller", node.bootstrap, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not a controller listener" in proc.stderr
    # Nothing named and no platform running (the helper's state directory is empty): the
    # default address is tried, and the one line says that it was a guess.
    proc = seaway("quorum", "describe", "--timeout", "3", check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "so 127.0.0.1:9092 was tried: give --bootstrap-server HOST:PORT or --cluster NAME" in proc.stderr


def test_a_bootstrap_that_is_no_kafka_listener_says_what_answered(node, tmp_path):
    """The wrong port: each case one line that says what was there and what was expected."""
    import socket
    import threading

    with socket.socket() as closed:          # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
    hangup = socket.socket()                  # accepts, reads, closes without a word
    hangup.bind(("127.0.0.1", 0))
    hangup.listen()

    def hang_up():
        while True:
            try:
                conn, _ = hangup.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
    threading.Thread(target=hang_up, daemon=True).start()
    try:
        for address, words in (
                (f"127.0.0.1:{node.metrics_port}", "an HTTP server answered, not a Kafka listener"),
                (f"127.0.0.1:{closed_port}", "nothing listens there (connection refused)"),
                (f"127.0.0.1:{hangup.getsockname()[1]}",
                 "closed before any answer: not a Kafka listener, or one that expects TLS")):
            proc = seaway("topics", "list", "-b", address, "--timeout", "5", check=False)
            assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
            assert f"{address}: {words}" in proc.stderr or f"{address} {words}" in proc.stderr, proc.stderr
    finally:
        hangup.close()
