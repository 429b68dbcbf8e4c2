"""dr/groups.py and the `groups` check of dr/plan.py: whether the standby's checkpoints follow
the groups' commits on the active cluster, and the checkpoint age (no I/O); and dr/observe.py's
rule for the bytes of a link's backlog."""
from __future__ import annotations

import pytest

from dr.groups import GRACE_S, CheckpointSeen, GroupsView, checkpoint_age, describe, group_syncs
from dr.observe import backlog_bytes
from dr.plan import ClusterView, DrPair, PairView, plan_failover

PAIR = DrPair("eu-west-1", "us-east-1", "eu-west", "us-east")
EU, US = PAIR.first, PAIR.second
NOW = 1_000_000.0


def seen(commits: dict, checkpoints: dict, newest: float | None = None) -> GroupsView:
    return GroupsView(EU, US, commits, {k: CheckpointSeen(u, u + 1000, at) for k, (u, at) in checkpoints.items()},
                      newest)


# Each row: the commit on eu-west, the standby's newest checkpoint of it (upstream offset, age
# in seconds; None: none) -> synced, and how the partition counts.
@pytest.mark.parametrize("commit, checkpoint, synced, how", [
    (50, (50, 3600.0), True, "synced"),          # at the commit: however old (the group stood still)
    (50, (40, 2.0), True, "in flight"),          # the group moved since the mirror's last pass
    (50, (40, GRACE_S - 1), True, "in flight"),
    (50, (40, GRACE_S + 1), False, "stale"),     # the checkpoints stopped following it
    (50, (60, GRACE_S + 1), False, "stale"),     # rewound on eu-west, not written: would skip 10
    (50, None, False, "missing"),
])
def test_a_partition_is_synced_when_its_checkpoint_is_at_the_commit_or_fresh(commit, checkpoint, synced, how):
    cps = {} if checkpoint is None else {("billing", "orders", 0): (checkpoint[0], NOW - checkpoint[1])}
    [s] = group_syncs(seen({"billing": {("orders", 0): commit}}, cps), NOW)
    assert s.synced is synced
    assert (how == "missing") == bool(s.missing) and (how == "stale") == bool(s.stale)
    if how == "stale":
        [b] = s.stale
        assert (b.commit, b.checkpoint) == (commit, checkpoint[0]) and b.age_s == pytest.approx(GRACE_S + 1)
    assert s.age_s == (None if checkpoint is None else pytest.approx(checkpoint[1]))


def test_a_group_is_synced_only_when_every_partition_it_committed_is():
    commits = {"billing": {("orders", 0): 10, ("orders", 1): 20, ("orders", 2): 30},
               "audit": {("orders", 0): 10}}
    cps = {("billing", "orders", 0): (10, NOW - 100), ("billing", "orders", 1): (20, NOW - 5),
           ("audit", "orders", 0): (10, NOW - 7)}
    syncs = {s.group: s for s in group_syncs(seen(commits, cps), NOW)}
    assert not syncs["billing"].synced and syncs["billing"].missing == [("orders", 2)]
    assert syncs["billing"].age_s == pytest.approx(5)       # its newest checkpoint
    assert syncs["audit"].synced and syncs["billing"].partitions == 3
    line = describe(list(syncs.values()))
    assert line == "billing has no checkpoint on us-east-1 for orders-2", line


def test_only_the_asked_topics_and_groups_count_and_the_mirrors_exclusions_never_do():
    commits = {"billing": {("orders", 0): 10, ("payments", 0): 5},
               "console-consumer-42": {("orders", 0): 3},     # MM2 writes no checkpoints for these
               "__tools": {("orders", 0): 3},
               "canary": {("canary", 0): 7}}
    cps = {("billing", "orders", 0): (10, NOW)}
    assert [s.group for s in group_syncs(seen(commits, cps), NOW)] == ["billing", "canary"]
    [billing] = group_syncs(seen(commits, cps), NOW, topics={"orders"})
    assert billing.synced and billing.partitions == 1
    [canary] = group_syncs(seen(commits, cps), NOW, groups=["canary"])
    assert canary.missing == [("canary", 0)]


def test_the_checkpoint_age_is_the_newest_checkpoints_of_the_pair():
    assert checkpoint_age([], NOW) is None
    assert checkpoint_age([seen({}, {}, None)], NOW) is None
    assert checkpoint_age([seen({}, {}, NOW - 40), GroupsView(US, EU, newest_at=NOW - 4)], NOW) == pytest.approx(4)


def normal(groups: GroupsView) -> PairView:
    topics = {"orders": (3, "")}
    return PairView(PAIR, {EU: ClusterView(EU, True, 0, topics), US: ClusterView(US, True, 0, {"orders": (3, EU)})},
                    groups={EU: groups})


def test_the_groups_check_is_advisory_and_names_what_is_wrong():
    stale = seen({"billing": {("orders", 0): 500}}, {("billing", "orders", 0): (380, NOW - 90)})
    plan = plan_failover(normal(stale), "eu-west", now=NOW)
    [check] = [c for c in plan.checks if c.name == "groups"]
    assert not check.ok and not check.blocking
    assert plan.ready           # a planned failover writes the groups' final offsets itself
    assert check.detail == ("1 of 1 group not synced to us-east-1 (an unplanned failover would resume them "
                            "elsewhere): billing's checkpoint of orders-0 on us-east-1 is at 380, its commit at "
                            "500 (120 behind), written 90s ago"), check.detail

    synced = seen({"billing": {("orders", 0): 500}}, {("billing", "orders", 0): (500, NOW - 900)})
    [check] = [c for c in plan_failover(normal(synced), "eu-west", now=NOW).checks if c.name == "groups"]
    assert check.ok and check.detail.startswith("1 group synced"), check.detail

    [check] = [c for c in plan_failover(normal(seen({}, {})), "eu-west", now=NOW).checks if c.name == "groups"]
    assert check.ok and "no group has committed offsets" in check.detail

    broken = GroupsView(EU, US, error="timed out")
    [check] = [c for c in plan_failover(normal(broken), "eu-west", now=NOW).checks if c.name == "groups"]
    assert not check.ok and not check.blocking and "timed out" in check.detail


def test_a_drill_judges_only_its_canary_topic_and_group():
    view = normal(seen({"billing": {("orders", 0): 500}}, {}))
    plan = plan_failover(view, "eu-west", only={"orders"}, groups=["seaway-canary"], now=NOW)
    [check] = [c for c in plan.checks if c.name == "groups"]
    assert check.ok, check.detail       # billing has no checkpoint, but the drill does not move it


def test_without_the_groups_read_there_is_no_groups_check():
    view = PairView(PAIR, normal(seen({}, {})).clusters)
    assert "groups" not in [c.name for c in plan_failover(view, "eu-west", now=NOW).checks]


# Each row: the batches a fetch at `copied` returned (base, next, bytes), copied, end -> bytes.
@pytest.mark.parametrize("batches, copied, end, expected", [
    ([(10, 15, 500), (15, 20, 700)], 10, 20, (1200, False)),          # read to the end: exact
    ([(10, 15, 500), (15, 20, 700), (20, 21, 90)], 10, 20, (1200, False)),  # past the watermark: not counted
    ([(5, 15, 500), (15, 20, 700)], 10, 20, (1200, False)),           # copied inside a batch: counts whole
    ([(0, 10, 400), (10, 15, 500)], 10, 15, (500, False)),            # a batch already copied: not counted
    ([(10, 20, 1000)], 10, 50, (4000, True)),                         # cut at the probe: 100 bytes an offset
    ([(10, 12, 100), (20, 30, 500)], 10, 40, (900, True)),            # a hole: 30 bytes an offset from 10
    ([], 10, 20, None),                                               # nothing read: unknown, not 0
    ([(0, 10, 400)], 10, 20, None),
])
def test_the_backlog_bytes_are_its_whole_batches_exact_or_estimated_past_the_probe(batches, copied, end, expected):
    assert backlog_bytes(batches, copied, end) == expected


def test_a_commit_beyond_the_links_copy_is_checkpointed_where_the_copy_ends_and_judged_like_any():
    # The mirror checkpoints a group ahead of its link at the end of what it copied, with the
    # group's own commit as upstream (mirror/checkpoints.py): so one is asked for there too.
    # orders-0: committed at 70, copied to 60, checkpointed (70 -> 60): synced, and ahead.
    # orders-1: committed at 80, copied to 60, never checkpointed: missing.
    commits = {"billing": {("orders", 0): 70, ("orders", 1): 80}}
    view = GroupsView(EU, US, commits, {("billing", "orders", 0): CheckpointSeen(70, 60, NOW - 600)},
                      copied={("orders", 0): 60, ("orders", 1): 60})
    [s] = group_syncs(view, NOW)
    assert s.ahead == [("orders", 0), ("orders", 1)] and s.missing == [("orders", 1)] and s.stale == []
    assert not s.synced
    # Ahead with an old checkpoint of an earlier commit: stale, like any other.
    old = GroupsView(EU, US, {"billing": {("orders", 0): 70}}, {("billing", "orders", 0): CheckpointSeen(50, 45, NOW - 600)},
                     copied={("orders", 0): 60})
    [s] = group_syncs(old, NOW)
    assert not s.synced and [b.commit for b in s.stale] == [70]
