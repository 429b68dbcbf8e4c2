"""`seaway reassign` and `seaway leaders elect` inputs, throttles and states
(core/cli/reassign_plan.py), the `topics describe` filters, and the command line's answers to
bad input: one line naming the field, exit status 2, before anything connects.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core.cli.main import main
from core.cli.reassign_plan import (COMPLETED, IN_PROGRESS, MISMATCH, InputError, Move, check_against_cluster,
                                    follower_throttles, leader_throttles, move_map, parse_broker_list,
                                    parse_election_partitions, parse_reassignment, parse_topics_to_move,
                                    partition_states, reassigning_brokers, reassignment_json, state_line)
from core.cli.topics_cmd import matches, replication_factor


def plan(*entries, **top):
    return dict({"version": 1, "partitions": list(entries)}, **top)


def entry(topic="t", partition=0, replicas=(1, 2), **extra):
    return dict({"topic": topic, "partition": partition,
                 "replicas": list(replicas) if isinstance(replicas, (list, tuple)) else replicas}, **extra)


# ---------------------------------------------------------------------------------- reassignment JSON

def test_a_reassignment_parses_in_file_order():
    got = parse_reassignment(plan(entry("b", 1, [3, 1]), entry("a", 0, [2], log_dirs=["any"])))
    assert [(e.index, e.tp, e.replicas) for e in got] == [(0, ("b", 1), (3, 1)), (1, ("a", 0), (2,))]
    assert parse_reassignment({"partitions": [entry()]})[0].replicas == (1, 2)   # version defaults to 1


@pytest.mark.parametrize("doc, message", [
    ([], "the file: expected an object, got a list"),
    ({"version": 1}, "partitions: missing"),
    (plan(version=2), "version: 2 is not supported"),
    (plan(version="1"), "version: expected an integer, got a string"),
    ({"partitions": {}}, "partitions: expected a list, got an object"),
    (plan(), "partitions: the list is empty"),
    (plan("t-0"), "partitions[0]: expected an object, got a string"),
    (plan(entry(), {"partition": 0, "replicas": [1]}), "partitions[1].topic: missing"),
    (plan(entry(topic="")), "partitions[0].topic: is empty"),
    (plan(entry(topic=7)), "partitions[0].topic: expected a string, got a number"),
    (plan({"topic": "t", "replicas": [1]}), "partitions[0].partition: missing"),
    (plan(entry(partition="0")), "partitions[0].partition: expected an integer, got a string '0'"),
    (plan(entry(partition=True)), "partitions[0].partition: expected an integer, got a boolean"),
    (plan(entry(partition=1.0)), "partitions[0].partition: expected an integer, got a number"),
    (plan(entry(partition=-1)), "partitions[0].partition: -1 is negative"),
    (plan(entry(partition=2**31)), "partitions[0].partition: 2147483648 is too large"),
    (plan({"topic": "t", "partition": 0}), "partitions[0].replicas: missing"),
    (plan(entry(replicas=None)), "partitions[0].replicas: expected a list, got null"),
    (plan(entry(replicas=[])), "partitions[0].replicas: the list is empty"),
    (plan(entry(replicas=[1, "2"])), "partitions[0].replicas[1]: expected an integer, got a string"),
    (plan(entry(replicas=[1, -2])), "partitions[0].replicas[1]: -2 is negative"),
    (plan(entry(replicas=[1, 2, 1])), "partitions[0].replicas: broker 1 is listed twice in [1, 2, 1]"),
    (plan(entry(log_dirs="any")), "partitions[0].log_dirs: expected a list, got a string"),
    (plan(entry(log_dirs=["any"])), "partitions[0].log_dirs: has 1 entries for 2 replicas"),
    (plan(entry(log_dirs=["any", 3])), "partitions[0].log_dirs[1]: expected a string, got a number"),
    (plan(entry(log_dirs=["any", "/data/2"])), "partitions[0].log_dirs: moving replicas between log directories"),
    (plan(entry("t", 0), entry("u", 0), entry("t", 0, [3])), "partitions[2]: t-0 is listed twice (also partitions[0])"),
])
def test_bad_reassignments_name_the_field(doc, message):
    with pytest.raises(InputError) as err:
        parse_reassignment(doc)
    assert str(err.value).startswith(message), str(err.value)


def test_reassignment_json_is_kafkas_format_and_round_trips():
    doc = reassignment_json({("b", 0): [3, 1], ("a", 1): [2, 1], ("a", 0): [1]})
    assert doc == {"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["any"]},
        {"topic": "a", "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]},
        {"topic": "b", "partition": 0, "replicas": [3, 1], "log_dirs": ["any", "any"]}]}
    assert {e.tp: list(e.replicas) for e in parse_reassignment(json.loads(json.dumps(doc)))} == \
        {("a", 0): [1], ("a", 1): [2, 1], ("b", 0): [3, 1]}


@pytest.mark.parametrize("entries, counts, live, message", [
    ([entry("ghost")], {"t": 2}, {1, 2}, "partitions[0].topic: topic 'ghost' does not exist"),
    ([entry(), entry(partition=2)], {"t": 2}, {1, 2},
     "partitions[1].partition: topic 't' has no partition 2 (it has 2)"),
    ([entry(replicas=[1, 9, 8])], {"t": 1}, {1, 2},
     "partitions[0].replicas: brokers 9,8 not in the cluster (brokers: 1,2)"),
    ([entry(replicas=[9])], {"t": 1}, {1}, "partitions[0].replicas: broker 9 not in the cluster"),
])
def test_plans_the_cluster_contradicts(entries, counts, live, message):
    with pytest.raises(InputError) as err:
        check_against_cluster(parse_reassignment(plan(*entries)), counts, live)
    assert str(err.value).startswith(message), str(err.value)


def test_a_plan_the_cluster_agrees_with_and_unchecked_brokers():
    check_against_cluster(parse_reassignment(plan(entry(replicas=[2, 1]))), {"t": 1}, {1, 2, 3})
    check_against_cluster(parse_reassignment(plan(entry(replicas=[9]))), {"t": 1}, None)   # cancel, verify


# ---------------------------------------------------------------------------------- other inputs

@pytest.mark.parametrize("doc, expected", [
    ({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}, ["a", "b"]),
    ({"topics": [{"topic": "a", "extra": 1}]}, ["a"]),
])
def test_topics_to_move(doc, expected):
    assert parse_topics_to_move(doc) == expected


@pytest.mark.parametrize("doc, message", [
    ({"version": 1}, "topics: missing"),
    ({"topics": []}, "topics: the list is empty"),
    ({"topics": ["a"]}, "topics[0]: expected an object, got a string"),
    ({"topics": [{"name": "a"}]}, "topics[0].topic: missing"),
    ({"topics": [{"topic": "a"}, {"topic": "a"}]}, "topics[1].topic: 'a' is listed twice (also topics[0])"),
    ({"version": 3, "topics": [{"topic": "a"}]}, "version: 3 is not supported"),
])
def test_bad_topics_to_move(doc, message):
    with pytest.raises(InputError) as err:
        parse_topics_to_move(doc)
    assert str(err.value).startswith(message), str(err.value)


def test_election_partitions():
    assert parse_election_partitions({"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 0}]}) \
        == [("a", 1), ("a", 0)]


@pytest.mark.parametrize("doc, message", [
    ({"topics": []}, "partitions: missing"),
    ({"partitions": []}, "partitions: the list is empty"),
    ({"partitions": [{"topic": "a"}]}, "partitions[0].partition: missing"),
    ({"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]},
     "partitions[1]: a-0 is listed twice"),
])
def test_bad_election_partitions(doc, message):
    with pytest.raises(InputError) as err:
        parse_election_partitions(doc)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("text, expected", [("1,2,3", [1, 2, 3]), (" 5 , 4", [5, 4]), ("7", [7])])
def test_broker_list(text, expected):
    assert parse_broker_list(text) == expected


@pytest.mark.parametrize("text, message", [
    ("1,x", "--broker-list: 'x' is not a broker id"),
    ("1,,2", "--broker-list: '' is not a broker id"),
    ("-1", "--broker-list: '-1' is not a broker id"),
    ("1,2,1", "--broker-list: broker 1 is listed twice"),
])
def test_bad_broker_list(text, message):
    with pytest.raises(InputError, match=message.replace("'", ".")):
        parse_broker_list(text)


# ---------------------------------------------------------------------------------- throttles

def test_throttles_of_a_plain_move():
    """t-0 moves from 1,2 to 3,4; t-1 from 1,2 to 2,3 (2 stays): Kafka's tool throttles every
    existing replica on the leader side and only the new ones on the follower side."""
    moves = move_map({}, {("t", 0): [3, 4], ("t", 1): [2, 3]}, {("t", 0): [1, 2], ("t", 1): [1, 2], ("u", 0): [5]})
    assert moves == {"t": {0: Move({1, 2}, {3, 4}), 1: Move({1, 2}, {2, 3})}}
    assert leader_throttles(moves) == {"t": "0:1,0:2,1:1,1:2"}
    assert follower_throttles(moves) == {"t": "0:3,0:4,1:3"}
    assert reassigning_brokers(moves) == {1, 2, 3, 4}


def test_throttles_cover_reassignments_already_in_progress():
    """An ongoing reassignment of u-0 (1 -> 5, so replicas 5,1 with 5 adding) is throttled too;
    re-planning t-0 while it is in progress keeps its original sources."""
    ongoing = {("u", 0): SimpleNamespace(replicas=[5, 1], adding_replicas=[5]),
               ("t", 0): SimpleNamespace(replicas=[3, 1, 2], adding_replicas=[3])}
    moves = move_map(ongoing, {("t", 0): [4, 1]}, {("t", 0): [3, 1, 2]})
    assert moves["u"][0] == Move({1}, {5})
    assert moves["t"][0] == Move({1, 2}, {4, 1})
    assert leader_throttles(moves) == {"t": "0:1,0:2", "u": "0:1"}
    assert follower_throttles(moves) == {"t": "0:4", "u": "0:5"}
    assert reassigning_brokers(moves) == {1, 2, 4, 5}


def test_a_move_that_only_reorders_throttles_no_follower():
    moves = move_map({}, {("t", 0): [2, 1]}, {("t", 0): [1, 2]})
    assert follower_throttles(moves) == {"t": ""} and leader_throttles(moves) == {"t": "0:1,0:2"}


def test_throttle_lists_sort_numerically():
    moves = move_map({}, {("t", 10): [11], ("t", 2): [11]}, {("t", 10): [3], ("t", 2): [3]})
    assert leader_throttles(moves) == {"t": "2:3,10:3"}


# ---------------------------------------------------------------------------------- verify

def test_partition_states():
    targets = {("t", 0): [3, 4], ("t", 1): [4, 3], ("t", 2): [1, 2]}
    ongoing = {("t", 0): SimpleNamespace(replicas=[3, 4, 1, 2], adding_replicas=[3, 4])}
    current = {("t", 0): [3, 4, 1, 2], ("t", 1): [4, 3], ("t", 2): [2, 1]}
    states = partition_states(targets, ongoing, current)
    assert [(s["partition"], s["status"]) for s in states] == [(0, IN_PROGRESS), (1, COMPLETED), (2, MISMATCH)]
    assert [state_line(s) for s in states] == [
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is completed.",
        "There is no active reassignment of partition t-2, but replica set is 2,1 rather than 1,2."]


# ---------------------------------------------------------------------------------- describe filters

def row(leader=1, replicas=(1, 2, 3), isr=(1, 2, 3), adding=(), removing=()):
    return {"leader": leader, "replicas": list(replicas), "isr": list(isr),
            "adding_replicas": list(adding), "removing_replicas": list(removing)}


LIVE = {1, 2, 3}


@pytest.mark.parametrize("p, min_isr, expected", [
    # (under-replicated, unavailable, under min ISR, at min ISR)
    (row(), 2, (False, False, False, False)),
    (row(isr=(1, 2)), 2, (True, False, False, True)),
    (row(isr=(1,)), 2, (True, False, True, False)),
    (row(leader=-1, isr=(3,)), 2, (True, True, True, False)),
    (row(leader=9), 2, (False, True, False, False)),                       # leader not a live broker
    (row(replicas=(1,), isr=(1,)), 1, (False, False, False, True)),
    (row(replicas=(1,), isr=(1,), leader=-1), 1, (False, True, True, True)),
    (row(isr=(1, 2)), None, (True, False, False, False)),                  # min ISR unknown
    # Reassigning 1,2,3 -> 1,2,4: replicas 1,2,4,3 with 4 adding and 3 removing; the
    # replication factor is the 3 not being added, so an ISR of 1,2,3 is complete.
    (row(replicas=(1, 2, 4, 3), isr=(1, 2, 3), adding=(4,), removing=(3,)), 2, (False, False, False, False)),
    (row(replicas=(1, 2, 4, 3), isr=(1, 2), adding=(4,), removing=(3,)), 2, (True, False, False, True)),
])
def test_describe_filters(p, min_isr, expected):
    got = tuple(matches(f, p, min_isr, LIVE) for f in (
        "under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions", "at_min_isr_partitions"))
    assert got == expected


def test_replication_factor_ignores_a_finished_reassignment():
    # Metadata already shows the new replicas although the listing was read just before.
    assert replication_factor(row(replicas=(1, 2, 4), adding=(5,), removing=(6,))) == 3


# ---------------------------------------------------------------------------------- the command line

def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:       # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


NOWHERE = ("--bootstrap-server", "127.0.0.1:1")   # nothing listens: a test that connects fails


@pytest.mark.parametrize("argv, file_text, needles", [
    (["reassign", "execute", "--reassignment-json-file", "{f}"], "{oops",
     ["--reassignment-json-file", "not valid JSON"]),
    (["reassign", "execute", "--reassignment-json-file", "{f}"], json.dumps(plan(entry(replicas=[1, 1]))),
     ["partitions[0].replicas", "broker 1 is listed twice"]),
    (["reassign", "verify", "--reassignment-json-file", "{f}"], json.dumps({"partitions": "x"}),
     ["partitions: expected a list"]),
    (["reassign", "execute", "--reassignment-json-file", "{f}", "--throttle", "-2"], json.dumps(plan(entry())),
     ["--throttle"]),
    (["reassign", "execute", "--reassignment-json-file", "{f}", "--cancel", "--throttle", "5"],
     json.dumps(plan(entry())), ["--throttle cannot be used with --cancel"]),
    (["reassign", "execute", "--reassignment-json-file", "{f}", "--preserve-throttles"],
     json.dumps(plan(entry())), ["--preserve-throttles"]),
    (["reassign", "generate", "--topics-to-move-json-file", "{f}", "--broker-list", "1,1"],
     json.dumps({"topics": [{"topic": "a"}]}), ["--broker-list", "listed twice"]),
    (["reassign", "generate", "--topics-to-move-json-file", "{f}", "--broker-list", "1"],
     json.dumps({"topics": [{"topic": 1}]}), ["topics[0].topic: expected a string"]),
    (["reassign", "verify", "--reassignment-json-file", "{missing}"], None, ["No such file or directory"]),
    (["reassign", "execute"], None, ["--reassignment-json-file"]),
    (["reassign", "generate", "--topics-to-move-json-file", "{f}"], "{}", ["--broker-list"]),
    (["leaders", "elect", "--election-type", "preferred", "--path-to-json-file", "{f}"],
     json.dumps({"partitions": [{"topic": "a", "partition": "x"}]}), ["partitions[0].partition"]),
    (["leaders", "elect", "--election-type", "preferred", "--all-topic-partitions", "--partition", "0"], None,
     ["--partition is only allowed with --topic"]),
    (["leaders", "elect", "--election-type", "preferred", "--topic", "a", "--all-topic-partitions"], None,
     ["not allowed with"]),
    (["leaders", "elect", "--all-topic-partitions"], None, ["--election-type"]),
    (["leaders", "elect", "--election-type", "dirty", "--all-topic-partitions"], None, ["invalid choice"]),
    (["topics", "describe", "--unavailable-partitions", "--under-min-isr-partitions"], None, ["not allowed with"]),
])
def test_usage_errors_are_one_line_with_exit_status_2(capsys, tmp_path, argv, file_text, needles):
    f = tmp_path / "input.json"
    if file_text is not None:
        f.write_text(file_text)
    argv = [a.format(f=f, missing=tmp_path / "missing.json") for a in argv]
    code, out, err = run(capsys, *argv, *NOWHERE)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seaway: error:"), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert out == ""


# ---------------------------------------------------------------------------------- topics describe, in process

class FakeAdmin:
    """What `topics describe` asks, answered from a fixed cluster: t-0 healthy, t-1 without a
    leader (its last ISR member 3 is offline), t-2 being reassigned from 1,2 to 2,3 (replicas
    2,3,1; ISR 1,2). min.insync.replicas=2."""

    def __init__(self, only_healthy: bool = False):
        from core.client import PartitionDescription, TopicDescription
        from core.client.replica_admin import PartitionReassignment
        self.topics = {"t": TopicDescription("t", None, False, [
            PartitionDescription(0, 1, 5, [1, 2], [1, 2], []),
            PartitionDescription(1, -1, 5, [3, 1], [3], [3]),
            PartitionDescription(2, 2, 5, [2, 3, 1], [1, 2], [])])}
        if only_healthy:
            del self.topics["t"].partitions[1:]
        self.ongoing = {("t", 2): PartitionReassignment([2, 3, 1], [3], [1])}
        self.offsets_asked = []

    async def describe_topics(self, names=None):
        return dict(self.topics)

    async def describe_cluster(self):
        from core.client import BrokerInfo, ClusterDescription
        return ClusterDescription("c", 1, [BrokerInfo(1, "h", 1), BrokerInfo(2, "h", 2)])

    async def list_partition_reassignments(self, partitions=None):
        return dict(self.ongoing)

    async def list_offsets(self, specs):
        from core.client import OffsetAndTimestamp
        self.offsets_asked.append(sorted(specs))
        return {tp: OffsetAndTimestamp(0 if spec == "earliest" else 10, -1) for tp, spec in specs.items()}

    async def describe_configs(self, resources):
        from core.client import ConfigEntry
        return {r: {"min.insync.replicas": ConfigEntry("min.insync.replicas", "2", False, 1, False, False)}
                for r in resources}


def describe(capsys, *flags, output="table", only_healthy=False):
    import anyio

    from core.cli.topics_cmd import FILTERS, run_describe
    admin = FakeAdmin(only_healthy)
    args = SimpleNamespace(names=["t"], output=output, **{f: False for f in FILTERS})
    for flag in flags:
        setattr(args, flag.lstrip("-").replace("-", "_"), True)
    assert anyio.run(run_describe, admin, args) == 0
    return capsys.readouterr().out, admin


def test_describe_shows_no_leader_and_reassignments_and_skips_offsets_it_cannot_get(capsys):
    out, admin = describe(capsys)
    lines = out.splitlines()
    assert lines[0].startswith("Topic: t ") and "Configs: min.insync.replicas=2" in lines[0]
    assert lines[1].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "START", "END",
                                "ADDING", "REMOVING"]
    assert lines[2].split() == ["0", "1", "1,2", "1,2", "-", "0", "10", "-", "-"]
    assert lines[3].split() == ["1", "none", "3,1", "3", "3", "-", "-", "-", "-"]
    assert lines[4].split() == ["2", "2", "2,3,1", "1,2", "-", "0", "10", "3", "1"]
    assert admin.offsets_asked == [[("t", 0), ("t", 2)]] * 2      # not the leaderless t-1
    doc = json.loads(describe(capsys, output="json")[0])[0]
    assert doc["min_insync_replicas"] == 2
    assert [(p["adding_replicas"], p["removing_replicas"]) for p in doc["partitions"]] == \
        [([], []), ([], []), ([3], [1])]


@pytest.mark.parametrize("flag, rows", [
    ("--under-replicated-partitions", [["t", "1", "none", "3,1", "3", "3"]]),   # t-2: RF 2 (3 is being added)
    ("--unavailable-partitions", [["t", "1", "none", "3,1", "3", "3"]]),
    ("--under-min-isr-partitions", [["t", "1", "none", "3,1", "3", "3"]]),
    ("--at-min-isr-partitions", [["t", "0", "1", "1,2", "1,2", "-"], ["t", "2", "2", "2,3,1", "1,2", "-"]]),
])
def test_describe_filters_print_only_matching_partitions_without_offsets(capsys, flag, rows):
    out, admin = describe(capsys, flag)
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE"]
    assert [line.split() for line in lines[1:]] == rows
    assert admin.offsets_asked == []
    doc = json.loads(describe(capsys, flag, output="json")[0])
    assert [(t["topic"], p["partition"]) for t in doc for p in t["partitions"]] == [(r[0], int(r[1])) for r in rows]
    assert all("end_offset" not in p for t in doc for p in t["partitions"])


def test_a_filter_that_matches_nothing_prints_nothing(capsys):
    assert describe(capsys, "--under-replicated-partitions", only_healthy=True)[0] == ""
    assert json.loads(describe(capsys, "--under-replicated-partitions", output="json", only_healthy=True)[0]) == []
