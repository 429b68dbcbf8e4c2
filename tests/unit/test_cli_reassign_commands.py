"""`seaway reassign execute|verify` in process, against a fake Admin that records every call:
the order of the changes (throttles before the reassignment, as Kafka's tool), what is
printed, the JSON documents, and the answers to a cluster that says no.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import anyio
import pytest

from core.cli import reassign_cmd
from core.cli.main import CliError
from core.cli.reassign_plan import parse_reassignment
from core.client import BrokerInfo, ClusterDescription, PartitionDescription, TopicDescription
from core.client.replica_admin import PartitionReassignment
from core.protocol.errors import ErrorCode, KafkaError


class FakeAdmin:
    def __init__(self, replicas, ongoing=None, fail=None, brokers=(1, 2, 3, 4), refuse_broker_configs=False):
        self.replicas = replicas                    # {(topic, partition): [replicas]}
        self.ongoing = dict(ongoing or {})
        self.fail = fail or {}                      # {(topic, partition): ErrorCode} for alter
        self.brokers = brokers
        self.refuse_broker_configs = refuse_broker_configs   # as a broker without dynamic broker configs does
        self.calls: list[tuple] = []

    async def describe_topics(self, names=None):
        out = {}
        for (t, p), r in sorted(self.replicas.items()):
            if names is None or t in names:
                out.setdefault(t, TopicDescription(t, None, False, []))
                out[t].partitions.append(PartitionDescription(p, r[0], 0, list(r), list(r), []))
        for name in names or ():
            out.setdefault(name, KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        return out

    async def describe_cluster(self):
        return ClusterDescription("c", 1, [BrokerInfo(b, "h", b) for b in self.brokers])

    async def list_partition_reassignments(self, partitions=None):
        self.calls.append(("list", None if partitions is None else sorted(partitions)))
        return {tp: r for tp, r in self.ongoing.items() if partitions is None or tp in partitions}

    async def incremental_alter_configs(self, changes):
        self.calls.append(("configs", {(int(r.type), r.name): dict(c) for r, c in changes.items()}))
        return {r: KafkaError(ErrorCode.INVALID_REQUEST, "not supported")
                if self.refuse_broker_configs and r.type == 4 else None for r in changes}

    async def alter_partition_reassignments(self, targets):
        self.calls.append(("alter", {tp: None if r is None else list(r) for tp, r in targets.items()}))
        return {tp: KafkaError(self.fail[tp], "no") if tp in self.fail else None for tp in targets}


def args(plan: dict, output="table", **flags):
    entries = parse_reassignment(plan)
    return SimpleNamespace(entries=entries, targets={e.tp: list(e.replicas) for e in entries},
                           reassignment_json_file="plan.json", output=output,
                           **dict(dict(throttle=-1, additional=False, cancel=False, preserve_throttles=False), **flags))


PLAN = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 4]},
                                     {"topic": "t", "partition": 1, "replicas": [4, 1]}]}
CURRENT = {("t", 0): [1, 2], ("t", 1): [2, 1]}
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
L, F = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


def test_execute_with_a_throttle_sets_it_before_starting(capsys):
    admin = FakeAdmin(dict(CURRENT))
    assert anyio.run(reassign_cmd.run_execute, admin, args(PLAN, throttle=1000)) == 0
    assert [c[0] for c in admin.calls] == ["list", "configs", "configs", "alter"]
    assert admin.calls[1][1] == {(4, str(b)): dict.fromkeys(RATES, "1000") for b in (1, 2, 3, 4)}
    assert admin.calls[2][1] == {(2, "t"): {L: "0:1,0:2,1:1,1:2", F: "0:3,0:4,1:4"}}
    assert admin.calls[3][1] == {("t", 0): [3, 4], ("t", 1): [4, 1]}
    assert capsys.readouterr().out.splitlines() == [
        "Current partition replica assignment", "",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"t","partition":1,"replicas":[2,1],"log_dirs":["any","any"]}]}', "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run verify periodically, until the reassignment completes, to ensure the throttle "
        "is removed.",
        "The inter-broker throttle limit was set to 1000 B/s",
        "Successfully started partition reassignments for t-0,t-1"]


def test_execute_without_a_throttle_touches_no_config_and_prints_json(capsys):
    admin = FakeAdmin(dict(CURRENT))
    anyio.run(reassign_cmd.run_execute, admin, args(PLAN, output="json"))
    assert [c[0] for c in admin.calls] == ["list", "alter"]
    doc = json.loads(capsys.readouterr().out)
    assert doc["started"] == ["t-0", "t-1"] and doc["failed"] == {}
    assert [p["replicas"] for p in doc["current"]["partitions"]] == [[1, 2], [2, 1]]


def test_execute_refuses_while_another_reassignment_runs_unless_additional(capsys):
    ongoing = {("u", 0): PartitionReassignment([5, 1], [5], [1])}
    admin = FakeAdmin({**CURRENT, ("u", 0): [5, 1]}, ongoing=ongoing, brokers=(1, 2, 3, 4, 5))
    with pytest.raises(CliError, match=r"reassignments are in progress \(u-0\).*--additional"):
        anyio.run(reassign_cmd.run_execute, admin, args(PLAN))
    assert [c[0] for c in admin.calls] == ["list"]
    anyio.run(reassign_cmd.run_execute, admin, args(PLAN, additional=True, throttle=7))
    # The running reassignment is throttled too (Kafka's move map).
    assert (4, "5") in admin.calls[2][1]
    assert admin.calls[3][1][(2, "u")] == {L: "0:1", F: "0:5"}


def test_execute_reports_each_partition_the_controller_refused(capsys):
    admin = FakeAdmin(dict(CURRENT), fail={("t", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT})
    with pytest.raises(CliError, match="1 of 2 partition reassignments could not be started"):
        anyio.run(reassign_cmd.run_execute, admin, args(PLAN))
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == ["Error reassigning partition(s):", "t-1: INVALID_REPLICA_ASSIGNMENT: no"]


def test_execute_checks_the_plan_against_the_cluster_first(capsys):
    admin = FakeAdmin(dict(CURRENT), brokers=(1, 2, 3))
    with pytest.raises(CliError, match=r"plan.json: partitions\[0\].replicas: broker 4 not in the cluster"):
        anyio.run(reassign_cmd.run_execute, admin, args(PLAN))
    assert admin.calls == []


def test_cancel_cancels_what_runs_and_clears_throttles(capsys):
    ongoing = {("t", 0): PartitionReassignment([3, 4, 1, 2], [3, 4], [1, 2])}
    admin = FakeAdmin({("t", 0): [3, 4, 1, 2], ("t", 1): [2, 1]}, ongoing=ongoing)
    anyio.run(reassign_cmd.run_execute, admin, args(PLAN, cancel=True))
    assert admin.calls[0] == ("list", [("t", 0), ("t", 1)])
    assert admin.calls[1] == ("alter", {("t", 0): None})
    assert admin.calls[2][1] == {(4, str(b)): dict.fromkeys(RATES) for b in (1, 2, 3, 4)}
    assert admin.calls[3][1] == {(2, "t"): {L: None, F: None}}
    assert capsys.readouterr().out.splitlines() == [
        "Successfully cancelled partition reassignment for: t-0",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topic t"]
    admin = FakeAdmin(dict(CURRENT))
    anyio.run(reassign_cmd.run_execute, admin, args(PLAN, cancel=True, preserve_throttles=True))
    assert capsys.readouterr().out == "None of the specified partition reassignments are active.\n"
    assert [c[0] for c in admin.calls] == ["list"]


def test_verify_clears_throttles_only_once_everything_is_done(capsys):
    ongoing = {("t", 1): PartitionReassignment([4, 1, 2], [4], [2])}
    admin = FakeAdmin({("t", 0): [3, 4], ("t", 1): [4, 1, 2]}, ongoing=ongoing)
    anyio.run(reassign_cmd.run_verify, admin, args(PLAN))
    assert capsys.readouterr().out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress."]
    assert [c[0] for c in admin.calls] == ["list"]

    admin = FakeAdmin({("t", 0): [3, 4], ("t", 1): [4, 1]})
    anyio.run(reassign_cmd.run_verify, admin, args(PLAN, output="json"))
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] is True and [p["status"] for p in doc["partitions"]] == ["completed", "completed"]
    assert doc["throttles_cleared"] == {"brokers": [1, 2, 3, 4], "topics": ["t"]}
    assert [c[0] for c in admin.calls] == ["list", "configs", "configs"]

    admin = FakeAdmin({("t", 0): [3, 4], ("t", 1): [4, 1]})
    anyio.run(reassign_cmd.run_verify, admin, args(PLAN, preserve_throttles=True))
    assert [c[0] for c in admin.calls] == ["list"]


def test_verify_looks_again_at_a_mismatch_a_lagging_broker_may_show(capsys, monkeypatch):
    """The controller says t-1 is done; the broker's metadata shows the old replicas for a
    moment. verify asks again instead of reporting a mismatch."""
    monkeypatch.setattr(reassign_cmd, "MISMATCH_RECHECK_DELAY_S", 0)
    admin = FakeAdmin({("t", 0): [3, 4], ("t", 1): [4, 1, 2]})
    seen = []
    real = admin.describe_topics

    async def lagging(names=None):
        seen.append(1)
        if len(seen) == 3:
            admin.replicas[("t", 1)] = [4, 1]
        return await real(names)
    admin.describe_topics = lagging
    anyio.run(reassign_cmd.run_verify, admin, args(PLAN))
    assert "Reassignment of partition t-1 is completed." in capsys.readouterr().out
    assert len(seen) == 3


def test_a_cluster_refusing_the_rates_is_left_unchanged(capsys):
    admin = FakeAdmin(dict(CURRENT), refuse_broker_configs=True)
    with pytest.raises(CliError, match=r"--throttle: could not change the configs of broker 1: INVALID_REQUEST: "
                                       r"not supported \(and 3 more\)"):
        anyio.run(reassign_cmd.run_execute, admin, args(PLAN, throttle=5))
    assert [c[0] for c in admin.calls] == ["list", "configs"]     # no topic throttles, no reassignment


def test_clearing_removes_topic_throttles_even_when_a_broker_refuses(capsys):
    admin = FakeAdmin({("t", 0): [3, 4], ("t", 1): [4, 1]}, refuse_broker_configs=True)
    with pytest.raises(CliError, match="clearing throttles: could not change the configs of broker 1"):
        anyio.run(reassign_cmd.run_verify, admin, args(PLAN))
    assert admin.calls[-1] == ("configs", {(2, "t"): {L: None, F: None}})
    assert "Reassignment of partition t-1 is completed." in capsys.readouterr().out
