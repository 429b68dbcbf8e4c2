"""Committed-offset rules: which commits a group accepts (coordinator) and when offsets expire
(OffsetStore), table-driven against Kafka's GroupCoordinator/GroupMetadata behaviour."""
from __future__ import annotations

import pytest

from core.broker.groups import Coordinator, GroupConfig, GroupState
from core.broker.groups.events import JoinGroup, ScheduleTimer, SyncGroup
from core.broker.groups.offsets import OffsetStore
from core.broker.groups.storage import CommittedOffset
from core.protocol.consumer_protocol import Subscription, encode_subscription
from core.protocol.errors import ErrorCode as E

CONFIG = GroupConfig(initial_rebalance_delay_ms=0)


def _joined(coord: Coordinator, join: JoinGroup) -> tuple[str, int]:
    """A new group's first join completes when its (zero) initial delay fires."""
    actions = coord.handle(join) + coord.tick(join.now_ms)
    (resp,) = [a for a in actions if getattr(a, "request_id", None) == join.request_id]
    return resp.result.member_id, resp.result.generation_id


def stable_group(coord: Coordinator, gid="g", topics=("t",)) -> tuple[str, int]:
    """One member, Stable; returns (member id, generation)."""
    meta = encode_subscription(Subscription(list(topics)))
    join = JoinGroup(1, 0, gid, "", "consumer", (("range", meta),), 10_000, 10_000,
                     require_known_member_id=False)
    member, gen = _joined(coord, join)
    coord.handle(SyncGroup(2, 0, gid, gen, member, ((member, b"a"),)))
    assert coord.groups[gid].state is GroupState.STABLE
    return member, gen


def completing_group(coord: Coordinator, gid="g") -> tuple[str, int]:
    join = JoinGroup(1, 0, gid, "", "consumer", (("range", b""),), 10_000, 10_000,
                     require_known_member_id=False)
    joined = _joined(coord, join)
    assert coord.groups[gid].state is GroupState.COMPLETING_REBALANCE
    return joined


@pytest.mark.parametrize("setup,commit,expected", [
    # no group: a simple (unmanaged) commit creates an Empty group
    ("none", dict(generation=-1, member="", inst=None), None),
    # no group: a generation this coordinator never had
    ("none", dict(generation=1, member="m", inst=None), E.ILLEGAL_GENERATION),
    # a live member with its generation
    ("stable", dict(generation="gen", member="member", inst=None), None),
    ("stable", dict(generation="gen+1", member="member", inst=None), E.ILLEGAL_GENERATION),
    ("stable", dict(generation="gen", member="stranger", inst=None), E.UNKNOWN_MEMBER_ID),
    # a simple commit while the group has members
    ("stable", dict(generation=-1, member="", inst=None), E.UNKNOWN_MEMBER_ID),
    # a static instance id the group does not know
    ("stable", dict(generation="gen", member="member", inst="i-1"), E.UNKNOWN_MEMBER_ID),
    # member synced to the new generation has not got its assignment yet
    ("completing", dict(generation="gen", member="member", inst=None), E.REBALANCE_IN_PROGRESS),
])
def test_validate_offset_commit(setup, commit, expected):
    coord = Coordinator(CONFIG, seed=1)
    member, gen = "", -1
    if setup == "stable":
        member, gen = stable_group(coord)
    elif setup == "completing":
        member, gen = completing_group(coord)
    generation = {"gen": gen, "gen+1": gen + 1}.get(commit["generation"], commit["generation"])
    member_id = {"member": member, "stranger": "someone-else"}.get(commit["member"], commit["member"])
    err, _ = coord.validate_offset_commit("g", generation, member_id, commit["inst"], 1000)
    assert err == expected
    if setup == "none" and expected is None:
        assert coord.groups["g"].state is GroupState.EMPTY


def test_member_commit_counts_as_heartbeat():
    coord = Coordinator(CONFIG, seed=1)
    member, gen = stable_group(coord)
    err, actions = coord.validate_offset_commit("g", gen, member, None, 5000)
    assert err is None
    assert ScheduleTimer(("heartbeat", "g", member), 15_000) in actions


def test_subscribed_topics_reads_consumer_subscriptions():
    coord = Coordinator(CONFIG, seed=1)
    stable_group(coord, topics=("a", "b"))
    assert coord.subscribed_topics("g") == {"a", "b"}
    assert coord.subscribed_topics("unknown") is None


def test_remove_group_if_empty_only_removes_empty_groups():
    coord = Coordinator(CONFIG, seed=1)
    stable_group(coord)
    assert coord.remove_group_if_empty("g", 0) == []
    coord.ensure_group("h", 0)
    actions = coord.remove_group_if_empty("h", 0)
    assert [(a.group_id, a.metadata) for a in actions] == [("h", None)]
    assert "h" not in coord.groups


DAY = 86_400_000
RETENTION = 7 * DAY


@pytest.mark.parametrize("case,committed,group,now,expired", [
    ("empty group, retention counted from emptiness, not the commit",
     CommittedOffset(1, commit_timestamp_ms=0), dict(has_protocol=True, is_empty=True, empty_since_ms=5 * DAY),
     RETENTION + 4 * DAY, False),
    ("empty group past retention", CommittedOffset(1, commit_timestamp_ms=0),
     dict(has_protocol=True, is_empty=True, empty_since_ms=5 * DAY), RETENTION + 5 * DAY, True),
    ("simple consumer: from the commit", CommittedOffset(1, commit_timestamp_ms=DAY),
     dict(has_protocol=False, is_empty=True, empty_since_ms=0), RETENTION + DAY - 1, False),
    ("simple consumer past retention", CommittedOffset(1, commit_timestamp_ms=DAY),
     dict(has_protocol=False, is_empty=True, empty_since_ms=0), RETENTION + DAY, True),
    ("live group, subscribed topic: never", CommittedOffset(1, commit_timestamp_ms=0),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed={"t"}), 100 * DAY, False),
    ("live group, topic no longer subscribed", CommittedOffset(1, commit_timestamp_ms=0),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed={"other"}), RETENTION, True),
    ("live group, subscriptions unknown: kept", CommittedOffset(1, commit_timestamp_ms=0),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed=None), 100 * DAY, False),
    ("explicit expiry (OffsetCommit v2-4) not reached", CommittedOffset(1, commit_timestamp_ms=0, expire_timestamp_ms=50),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed={"t"}), 49, False),
    ("explicit expiry never applies to a subscribed topic (Kafka)", CommittedOffset(1, commit_timestamp_ms=0, expire_timestamp_ms=50),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed={"t"}), 50, False),
    ("explicit expiry of an unsubscribed topic", CommittedOffset(1, commit_timestamp_ms=0, expire_timestamp_ms=50),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed={"other"}), 50, True),
    ("explicit expiry, live group not Stable: kept", CommittedOffset(1, commit_timestamp_ms=0, expire_timestamp_ms=50),
     dict(has_protocol=True, is_empty=False, empty_since_ms=0, subscribed=None), 50, False),
])
def test_offset_expiry(case, committed, group, now, expired):
    store = OffsetStore()
    store.put("g", ("t", 0), committed)
    group.setdefault("subscribed", None)
    got = store.expired("g", now, RETENTION, **group)
    assert got == ([("t", 0)] if expired else []), case


def test_store_remove_topic_and_group():
    store = OffsetStore()
    store.put("g", ("a", 0), CommittedOffset(1))
    store.put("g", ("b", 0), CommittedOffset(2))
    store.put("h", ("a", 1), CommittedOffset(3))
    assert store.remove_topic("a") == {"g": [("a", 0)], "h": [("a", 1)]}
    assert store.groups() == ["g"]
    assert store.remove_group("g") == [("b", 0)]
    assert not store.has_offsets("g")
