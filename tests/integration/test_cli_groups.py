"""`seaway groups` as an operator uses it: a real node, real confluent-kafka consumers in real
groups, and the CLI as a subprocess, checked number by number like kafka-consumer-groups."""
from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support.cli import seaway
from tests.support.clients import CLIENTS, Record, create_topic
from tests.support.node import SeawayNode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("cli-groups"), {
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",   # a new group's first join completes at once
        "offsets.topic.num.partitions": "1",
    }) as n:
        yield n


def groups(node, *args, **kw):
    return seaway("groups", "--bootstrap-server", node.bootstrap, *args, **kw)


def groups_json(node, *args):
    return json.loads(groups(node, *args, "--output", "json").stdout)


def produce(node, topic, counts: dict[int, int]):
    records = [Record(value=f"{p}-{i}".encode(), partition=p) for p, n in counts.items() for i in range(n)]
    CLIENTS["confluent"].produce(node.bootstrap, topic, records)


def consumer(node, group, **extra):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "client.id": f"{group}-client",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 10000, "heartbeat.interval.ms": 500, **extra})


def consume(c, count, timeout=15.0):
    """Poll until `count` records arrived; returns them (topic, partition, offset)."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append((msg.topic(), msg.partition(), msg.offset()))
    assert len(out) == count, f"consumed {len(out)} of {count} in {timeout}s: {out}"
    return out


def consume_commit_close(node, topic, group, count, commit: dict[int, int] | None = None):
    """Join `group`, read `count` records, commit (explicit offsets, or the positions reached)
    and leave, so that the group is Empty with committed offsets."""
    from confluent_kafka import TopicPartition
    c = consumer(node, group)
    try:
        c.subscribe([topic])
        records = consume(c, count)
        if commit is None:
            c.commit(asynchronous=False)
        else:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commit.items()], asynchronous=False)
    finally:
        c.close()
    return records


def one_line_error(proc, *needles):
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seaway: error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def table_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    return [line.split() for line in lines[1:]]


# ---------------------------------------------------------------------------------- tests

def test_list_and_describe_committed_offsets_end_and_lag(node):
    create_topic(node.bootstrap, "orders", partitions=2)
    produce(node, "orders", {0: 5, 1: 3})
    consume_commit_close(node, "orders", "g-describe", 8, commit={0: 4, 1: 3})
    produce(node, "orders", {1: 2})               # ends: p0 = 5, p1 = 5

    listed = {r[0]: r[1:] for r in table_rows(groups(node, "list").stdout)}
    assert listed["g-describe"] == ["Empty", "consumer"]
    as_json = groups_json(node, "list")
    assert {"group": "g-describe", "state": "Empty", "protocol_type": "consumer"} in as_json
    assert [g["group"] for g in groups_json(node, "list", "--state", "Stable")] == []
    assert "g-describe" in [g["group"] for g in groups_json(node, "list", "--state", "empty")]

    proc = groups(node, "describe", "g-describe")
    assert "has no active members" in proc.stderr
    rows = table_rows(proc.stdout)
    #        GROUP         TOPIC     P    CURRENT END  LAG  CONSUMER-ID HOST CLIENT-ID
    assert rows == [["g-describe", "orders", "0", "4", "5", "1", "-", "-", "-"],
                    ["g-describe", "orders", "1", "3", "5", "2", "-", "-", "-"]]

    [desc] = groups_json(node, "describe", "g-describe")
    assert desc["group"] == "g-describe" and desc["state"] == "Empty"
    assert desc["coordinator"]["id"] == 1 and desc["coordinator"]["port"] == node.port
    assert [(p["topic"], p["partition"], p["current_offset"], p["log_end_offset"], p["lag"], p["consumer_id"])
            for p in desc["partitions"]] == [("orders", 0, 4, 5, 1, None), ("orders", 1, 3, 5, 2, None)]

    [state] = groups_json(node, "describe", "g-describe", "--state")
    assert (state["state"], state["members"], state["protocol_type"]) == ("Empty", 0, "consumer")
    assert state["coordinator"] == {"id": 1, "host": "127.0.0.1", "port": node.port}
    assert groups_json(node, "describe", "g-describe", "--members") == [
        {"group": "g-describe", "state": "Empty", "members": []}]
    every = groups_json(node, "describe", "--all-groups")
    assert "g-describe" in [d["group"] for d in every]

    deleted = groups_json(node, "delete-offsets", "g-describe", "--topic", "orders:1")
    assert deleted == {"group": "g-describe", "partitions": [{"topic": "orders", "partition": 1, "error": None}]}
    [desc] = groups_json(node, "describe", "g-describe")
    assert [(p["partition"], p["current_offset"]) for p in desc["partitions"]] == [(0, 4)]


def test_reset_offsets_dry_run_execute_and_restart_from_zero(node):
    create_topic(node.bootstrap, "events", partitions=1)
    produce(node, "events", {0: 6})
    consume_commit_close(node, "events", "g-reset", 6)

    def committed():
        [d] = groups_json(node, "describe", "g-reset")
        return [(p["current_offset"], p["log_end_offset"], p["lag"]) for p in d["partitions"]]
    assert committed() == [(6, 6, 0)]

    dry = groups(node, "reset-offsets", "g-reset", "--topic", "events", "--to-earliest")
    assert table_rows(dry.stdout) == [["g-reset", "events", "0", "6", "0"]]
    assert "dry run" in dry.stderr
    plan = groups_json(node, "reset-offsets", "g-reset", "--all-topics", "--to-earliest", "--dry-run")
    assert plan == {"group": "g-reset", "executed": False,
                    "partitions": [{"topic": "events", "partition": 0, "current_offset": 6, "new_offset": 0}]}
    assert committed() == [(6, 6, 0)]                   # a dry run changes nothing

    shifted = groups_json(node, "reset-offsets", "g-reset", "--topic", "events:0", "--shift-by", "-2", "--execute")
    assert shifted["executed"] and shifted["partitions"][0]["new_offset"] == 4
    assert committed() == [(4, 6, 2)]

    clamp = groups(node, "reset-offsets", "g-reset", "--topic", "events", "--to-offset", "100", "--execute")
    assert table_rows(clamp.stdout) == [["g-reset", "events", "0", "4", "6"]]   # clamped to the log end
    assert "above the log end" in clamp.stderr
    assert committed() == [(6, 6, 0)]

    groups(node, "reset-offsets", "g-reset", "--all-topics", "--to-earliest", "--execute")
    assert committed() == [(0, 6, 6)]

    # The group resumes from the reset offset, not from auto.offset.reset=latest.
    c = consumer(node, "g-reset", **{"auto.offset.reset": "latest"})
    try:
        c.subscribe(["events"])
        assert [o for _t, _p, o in consume(c, 6)] == [0, 1, 2, 3, 4, 5]
    finally:
        c.close()


def test_by_time_resets(node):
    create_topic(node.bootstrap, "timed", partitions=1)
    produce(node, "timed", {0: 4})
    consume_commit_close(node, "timed", "g-time", 4)
    recent = groups_json(node, "reset-offsets", "g-time", "--topic", "timed", "--by-duration", "PT10M")
    assert recent["partitions"][0]["new_offset"] == 0     # every record is newer than 10 minutes
    future = groups(node, "reset-offsets", "g-time", "--topic", "timed", "--to-datetime", "2999-01-01T00:00:00",
                    "-o", "json")
    assert json.loads(future.stdout)["partitions"][0]["new_offset"] == 4   # none that late: the log end
    assert "log end" in future.stderr


def test_active_group_refuses_reset_and_delete_then_deletes_when_empty(node):
    create_topic(node.bootstrap, "live", partitions=2)
    produce(node, "live", {0: 3, 1: 3})
    stop = threading.Event()
    consumed = []
    failures = []

    def run():
        try:
            c = consumer(node, "g-live")
            try:
                c.subscribe(["live"])
                while not stop.is_set():
                    msg = c.poll(0.2)
                    if msg is not None and msg.error() is None:
                        c.commit(message=msg, asynchronous=False)
                        consumed.append(msg.offset())
            finally:
                c.close()
        except Exception as exc:  # surfaced by the main thread
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while True:
            [state] = groups_json(node, "describe", "g-live", "--state")
            if state["state"] == "Stable" and len(consumed) >= 6:
                break
            assert time.monotonic() < deadline, (state, consumed, failures)
            time.sleep(0.3)
        assert state["members"] == 1 and state["assignment_strategy"]

        [members] = groups_json(node, "describe", "g-live", "--members")
        [m] = members["members"]
        assert m["client_id"] == "g-live-client" and "127.0.0.1" in m["host"]
        assert m["assignment"] == {"live": [0, 1]} and m["partitions"] == 2
        rows = table_rows(groups(node, "describe", "g-live").stdout)
        assert [(r[1], r[2], r[3], r[4], r[5], r[6], r[8]) for r in rows] == [
            ("live", "0", "3", "3", "0", m["consumer_id"], "g-live-client"),
            ("live", "1", "3", "3", "0", m["consumer_id"], "g-live-client")]

        for extra in ([], ["--execute"]):
            proc = groups(node, "reset-offsets", "g-live", "--all-topics", "--to-earliest", *extra, check=False)
            one_line_error(proc, "g-live", "Stable", "inactive")
        one_line_error(groups(node, "delete", "g-live", check=False), "g-live", "NON_EMPTY_GROUP")
        one_line_error(groups(node, "delete-offsets", "g-live", "--topic", "live:0", check=False),
                       "g-live", "GROUP_SUBSCRIBED_TO_TOPIC")
        [d] = groups_json(node, "describe", "g-live")
        assert [p["current_offset"] for p in d["partitions"]] == [3, 3]   # nothing was reset
    finally:
        stop.set()
        thread.join(20)
    assert not failures, failures

    assert groups_json(node, "describe", "g-live", "--state")[0]["state"] == "Empty"
    assert groups(node, "delete", "g-live").stdout.strip() == "group g-live: deleted"
    one_line_error(groups(node, "describe", "g-live", check=False), "g-live", "does not exist")
    assert "g-live" not in [g["group"] for g in groups_json(node, "list")]


@pytest.fixture(scope="module")
def bad_input_topic(node):
    create_topic(node.bootstrap, "plain", partitions=1)
    return "plain"


@pytest.mark.parametrize("args, needles", [
    (["describe", "no-such-group"], ["no-such-group", "does not exist"]),
    (["describe", "--members", "no-such-group"], ["does not exist"]),
    (["describe"], ["GROUP", "--all-groups"]),
    (["delete", "no-such-group"], ["no-such-group", "GROUP_ID_NOT_FOUND"]),
    (["list", "--state", "Sleeping"], ["--state", "Sleeping"]),
    (["reset-offsets", "g-bad", "--topic", "plain"], ["--to-earliest"]),
    (["reset-offsets", "g-bad", "--to-earliest"], ["--topic", "--all-topics"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--to-earliest", "--to-latest"], ["only one of"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--to-offset", "abc"], ["--to-offset", "abc"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--to-offset", "-3"], ["--to-offset"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--shift-by", "two"], ["--shift-by"]),
    (["reset-offsets", "g-bad", "--topic", "plain:x", "--to-earliest"], ["--topic", "plain:x"]),
    (["reset-offsets", "g-bad", "--topic", "plain:7", "--to-earliest"], ["--topic", "partition 7"]),
    (["reset-offsets", "g-bad", "--topic", "missing", "--to-earliest"], ["--topic", "missing"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--to-datetime", "tomorrow"], ["--to-datetime"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--by-duration", "10 minutes"], ["--by-duration"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--shift-by", "1"], ["--shift-by", "no committed offset"]),
    (["reset-offsets", "g-bad", "--all-topics", "--to-earliest"], ["g-bad", "no committed offsets"]),
    (["reset-offsets", "g-bad", "--topic", "plain", "--to-earliest", "--execute", "--dry-run"], ["--execute"]),
    (["reset-offsets"], ["GROUP"]),
    (["delete-offsets", "no-such-group", "--topic", "plain"], ["no-such-group", "GROUP_ID_NOT_FOUND"]),
    (["delete-offsets", "g-bad", "--topic", "missing"], ["--topic", "missing"]),
    (["delete-offsets", "g-bad"], ["--topic"]),
    (["frobnicate"], ["frobnicate"]),
])
def test_bad_input_gets_one_line(node, bad_input_topic, args, needles):
    one_line_error(groups(node, *args, check=False), *needles)


def test_dry_run_for_a_new_group_creates_nothing(node, bad_input_topic):
    """Kafka lets a group that does not exist yet be given offsets; a dry run only plans it
    (and none of the refused resets above created g-bad either)."""
    plan = groups_json(node, "reset-offsets", "g-bad", "--topic", "plain", "--to-latest")
    assert plan["executed"] is False and plan["partitions"][0]["current_offset"] is None
    one_line_error(groups(node, "describe", "g-bad", check=False), "does not exist")


def test_unreachable_broker_is_one_line():
    proc = seaway("groups", "-b", "127.0.0.1:1", "list", "--timeout", "1", check=False)
    one_line_error(proc, "127.0.0.1:1")
