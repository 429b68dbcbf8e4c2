"""The client's partition assignors (core/client/assignors.py).

range and roundrobin are checked against the expectations of Java's RangeAssignorTest and
RoundRobinAssignorTest (same inputs, same outputs), because a mixed group only works if every
leader computes the same thing. cooperative-sticky is checked by its invariants: nothing
assigned twice or outside a member's subscription, nothing handed to a member while another
still claims it (KIP-429), ownership kept where balance allows, and a group that follows the
protocol (revoke, rejoin) settles on a complete, balanced assignment.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.client.assignors import (COOPERATIVE, EAGER, CooperativeStickyAssignor, Member, RangeAssignor,
                                   RoundRobinAssignor, get_assignor, rebalance_protocol)
from core.protocol.consumer_protocol import Subscription


def members(spec: dict[str, list[str]], instances: dict[str, str] | None = None) -> dict[str, Member]:
    instances = instances or {}
    return {mid: Member(mid, topics, instances.get(mid)) for mid, topics in spec.items()}


def flat(assignment: dict[str, dict[str, list[int]]]) -> dict[str, list[str]]:
    return {mid: [f"{t}-{p}" for t in sorted(tps) for p in tps[t]] for mid, tps in assignment.items()}


# ---------------------------------------------------------------------------- range

RANGE_CASES = [
    # (name, partitions per topic, subscriptions, expected) from Java's RangeAssignorTest
    ("one consumer, no topic", {}, {"c": []}, {"c": []}),
    ("one consumer, nonexistent topic", {}, {"c": ["t1"]}, {"c": []}),
    ("one consumer, one topic", {"t1": 3}, {"c": ["t1"]}, {"c": ["t1-0", "t1-1", "t1-2"]}),
    ("only subscribed topics", {"t1": 3, "other": 3}, {"c": ["t1"]}, {"c": ["t1-0", "t1-1", "t1-2"]}),
    ("one consumer, two topics", {"t1": 1, "t2": 2}, {"c": ["t1", "t2"]}, {"c": ["t1-0", "t2-0", "t2-1"]}),
    ("two consumers, one partition", {"t1": 1}, {"c1": ["t1"], "c2": ["t1"]}, {"c1": ["t1-0"], "c2": []}),
    ("two consumers, two partitions", {"t1": 2}, {"c1": ["t1"], "c2": ["t1"]},
     {"c1": ["t1-0"], "c2": ["t1-1"]}),
    ("mixed topics", {"t1": 3, "t2": 2}, {"c1": ["t1"], "c2": ["t1", "t2"], "c3": ["t1"]},
     {"c1": ["t1-0"], "c2": ["t1-1", "t2-0", "t2-1"], "c3": ["t1-2"]}),
    ("two consumers, two topics, six partitions", {"t1": 3, "t2": 3}, {"c1": ["t1", "t2"], "c2": ["t1", "t2"]},
     {"c1": ["t1-0", "t1-1", "t2-0", "t2-1"], "c2": ["t1-2", "t2-2"]}),
    # member ids compare as strings, as Java's do: "c10" < "c2"
    ("string order of member ids", {"t": 3}, {"c2": ["t"], "c10": ["t"]},
     {"c10": ["t-0", "t-1"], "c2": ["t-2"]}),
    ("seven over three", {"t": 7}, {"a": ["t"], "b": ["t"], "c": ["t"]},
     {"a": ["t-0", "t-1", "t-2"], "b": ["t-3", "t-4"], "c": ["t-5", "t-6"]}),
    ("more members than partitions", {"t": 2}, {"a": ["t"], "b": ["t"], "c": ["t"]},
     {"a": ["t-0"], "b": ["t-1"], "c": []}),
]


@pytest.mark.parametrize("name,partitions,subs,expected", RANGE_CASES, ids=[c[0] for c in RANGE_CASES])
def test_range_matches_java(name, partitions, subs, expected):
    assert flat(RangeAssignor().assign(partitions, members(subs))) == expected


def test_range_orders_static_members_by_instance_id_before_dynamic_ones():
    """Java's MemberInfo order: a restarted static member gets a new member id but keeps its
    instance id, and so its partitions."""
    subs = {"m-zzz": ["t"], "m-aaa": ["t"], "m-dyn": ["t"]}
    out = RangeAssignor().assign({"t": 3}, members(subs, {"m-zzz": "instance-1", "m-aaa": "instance-2"}))
    assert flat(out) == {"m-zzz": ["t-0"], "m-aaa": ["t-1"], "m-dyn": ["t-2"]}
    # same instances, new member ids: same partitions per instance
    out = RangeAssignor().assign({"t": 3}, members({"x": ["t"], "y": ["t"], "m-dyn": ["t"]},
                                                   {"y": "instance-1", "x": "instance-2"}))
    assert flat(out) == {"y": ["t-0"], "x": ["t-1"], "m-dyn": ["t-2"]}


# ---------------------------------------------------------------------------- roundrobin

ROUNDROBIN_CASES = [
    ("one consumer, one topic", {"t1": 3}, {"c": ["t1"]}, {"c": ["t1-0", "t1-1", "t1-2"]}),
    ("two consumers, two topics, six partitions", {"t1": 3, "t2": 3}, {"c1": ["t1", "t2"], "c2": ["t1", "t2"]},
     {"c1": ["t1-0", "t1-2", "t2-1"], "c2": ["t1-1", "t2-0", "t2-2"]}),
    ("mixed topics", {"t1": 3, "t2": 2}, {"c1": ["t1"], "c2": ["t1", "t2"], "c3": ["t1"]},
     {"c1": ["t1-0"], "c2": ["t1-1", "t2-0", "t2-1"], "c3": ["t1-2"]}),
    ("two consumers, one partition", {"t1": 1}, {"c1": ["t1"], "c2": ["t1"]}, {"c1": ["t1-0"], "c2": []}),
    ("nonexistent topic", {}, {"c": ["t1"]}, {"c": []}),
]


@pytest.mark.parametrize("name,partitions,subs,expected", ROUNDROBIN_CASES, ids=[c[0] for c in ROUNDROBIN_CASES])
def test_roundrobin_matches_java(name, partitions, subs, expected):
    assert flat(RoundRobinAssignor().assign(partitions, members(subs))) == expected


# ---------------------------------------------------------------------------- cooperative-sticky

def sticky(partitions, group: dict[str, Member]):
    return CooperativeStickyAssignor().assign(partitions, group)


def owned_members(spec: dict[str, dict[str, list[int]] | None], topics=("t",), generation=5) -> dict[str, Member]:
    return {mid: Member(mid, list(topics), None, dict(owned or {}), generation if owned is not None else -1)
            for mid, owned in spec.items()}


def counts(assignment) -> list[int]:
    return sorted(sum(len(ps) for ps in tps.values()) for tps in assignment.values())


def test_sticky_first_assignment_is_balanced_and_complete():
    out = sticky({"t": 6}, owned_members({"a": None, "b": None, "c": None}))
    assert counts(out) == [2, 2, 2]
    assert sorted(p for tps in out.values() for p in tps["t"]) == list(range(6))


def test_sticky_leaver_partitions_go_to_the_others_who_keep_theirs():
    group = owned_members({"a": {"t": [0, 1]}, "b": {"t": [2, 3]}})  # c (4, 5) left
    out = sticky({"t": 6}, group)
    assert set(out["a"]["t"]) >= {0, 1} and set(out["b"]["t"]) >= {2, 3}
    assert counts(out) == [3, 3]


def test_sticky_joiner_takes_only_what_balance_needs_after_revocation():
    group = owned_members({"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4, 5]}, "c": None})
    first = sticky({"t": 6}, group)
    # one partition leaves a and one leaves b; the joiner gets nothing yet: both are still claimed
    assert len(first["a"]["t"]) == 2 and set(first["a"]["t"]) < {0, 1, 2}
    assert len(first["b"]["t"]) == 2 and set(first["b"]["t"]) < {3, 4, 5}
    assert first["c"] == {}
    # a and b revoke and rejoin with what they kept; now c gets the two freed partitions
    second = sticky({"t": 6}, owned_members({"a": first["a"], "b": first["b"], "c": {}}, generation=6))
    assert second["a"] == first["a"] and second["b"] == first["b"]
    assert sorted(second["c"]["t"]) == sorted({0, 1, 2, 3, 4, 5} - set(first["a"]["t"]) - set(first["b"]["t"]))


def test_sticky_ignores_claims_of_older_generations_but_still_withholds_them():
    group = {"a": Member("a", ["t"], None, {"t": [0, 1, 2]}, 7),
             "b": Member("b", ["t"], None, {"t": [0, 3]}, 3)}    # b is behind: a zombie's claim on 0
    out = sticky({"t": 4}, group)
    assert 0 not in out["b"].get("t", [])  # b's stale claim does not win it
    assert all(0 not in tps.get("t", []) for mid, tps in out.items() if mid != "a")


def test_sticky_same_generation_double_claim_is_invalid_for_both():
    group = owned_members({"a": {"t": [0, 1]}, "b": {"t": [1, 2]}})
    out = sticky({"t": 4}, group)
    # both claim 1: neither may get it this round (each must first revoke it)
    assert all(1 not in tps.get("t", []) for tps in out.values())


def test_sticky_generation_from_user_data_of_old_subscriptions():
    """Java's CooperativeStickyAssignor puts the generation in user data for v0/v1 readers."""
    sub = Subscription(["t"], user_data=struct.pack(">i", 12), owned_partitions={"t": [1]}, version=1)
    assert Member.from_subscription("m", None, sub).generation == 12
    assert CooperativeStickyAssignor().user_data(12) == struct.pack(">i", 12)
    v2 = Subscription(["t"], user_data=struct.pack(">i", 12), generation_id=13, version=2)
    assert Member.from_subscription("m", None, v2).generation == 13


def test_sticky_heterogeneous_subscriptions_respect_topics():
    group = {"a": Member("a", ["x"]), "b": Member("b", ["x", "y"]), "c": Member("c", ["y"])}
    out = sticky({"x": 4, "y": 4}, group)
    assert set(out["a"]) <= {"x"} and set(out["c"]) <= {"y"}
    assert counts(out) == [2, 3, 3]  # a can only take x and c only y: 3-3-2 is the best split


# Property tests: random groups driven through the cooperative protocol.

@st.composite
def groups(draw):
    n_topics = draw(st.integers(1, 3))
    partitions = {f"t{i}": draw(st.integers(0, 7)) for i in range(n_topics)}
    n_members = draw(st.integers(1, 5))
    same = draw(st.booleans())
    topics = sorted(partitions)
    subs = {}
    for i in range(n_members):
        subs[f"m{i}"] = topics if same else draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
    # a valid previous ownership: each partition at most one owner among its subscribers
    owned: dict[str, dict[str, list[int]]] = {mid: {} for mid in subs}
    for t, n in partitions.items():
        for p in range(n):
            choice = draw(st.sampled_from([None] + [mid for mid in subs if t in subs[mid]]))
            if choice is not None:
                owned[choice].setdefault(t, []).append(p)
    return partitions, subs, owned, same


def check_round(partitions, subs, owned, out):
    seen = set()
    for mid, tps in out.items():
        for t, ps in tps.items():
            assert t in subs[mid], f"{mid} got {t} it does not subscribe to"
            for p in ps:
                assert 0 <= p < partitions[t]
                assert (t, p) not in seen, f"{t}-{p} assigned twice"
                seen.add((t, p))
                for other, o in owned.items():
                    assert other == mid or p not in o.get(t, []), \
                        f"{t}-{p} given to {mid} while {other} still owns it"
    return seen


@given(groups())
@settings(max_examples=300, deadline=None)
def test_sticky_cooperative_protocol_converges(case):
    partitions, subs, owned, same = case
    generation = 1
    previous_owned = {mid: {t: list(ps) for t, ps in o.items()} for mid, o in owned.items()}
    for round_ in range(4):
        group = {mid: Member(mid, subs[mid], None, owned[mid], generation) for mid in subs}
        out = sticky(partitions, group)
        check_round(partitions, subs, owned, out)
        if round_ == 0 and same:
            # stickiness: under equal subscriptions a member keeps its partitions up to its fair share
            total = sum(partitions.values())
            fair = -(-total // len(subs)) if subs else 0
            for mid in subs:
                kept = sum(len(set(out[mid].get(t, [])) & set(ps)) for t, ps in previous_owned[mid].items())
                had = sum(len(ps) for ps in previous_owned[mid].values())
                assert kept >= min(had, total // len(subs)), (mid, kept, had, fair)
        revoked = any(set(ps) - set(out[mid].get(t, [])) for mid in subs for t, ps in owned[mid].items())
        owned = {mid: {t: list(ps) for t, ps in out[mid].items()} for mid in subs}
        generation += 1
        if not revoked:
            break
    else:
        pytest.fail("members kept revoking for 4 rounds")
    # settled: nothing left unassigned that someone could take, and balanced if subscriptions agree
    taken = {(t, p) for tps in owned.values() for t, ps in tps.items() for p in ps}
    subscribed_topics = {t for ts in subs.values() for t in ts}
    assert taken == {(t, p) for t in subscribed_topics for p in range(partitions[t])}
    if same:
        c = counts(owned)
        assert max(c) - min(c) <= 1


@given(groups())
@settings(max_examples=200, deadline=None)
def test_range_and_roundrobin_assign_everything_once(case):
    partitions, subs, _, _ = case
    group = {mid: Member(mid, ts) for mid, ts in subs.items()}
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        out = assignor.assign(partitions, group)
        seen = check_round(partitions, subs, {}, out)
        assert seen == {(t, p) for t in {t for ts in subs.values() for t in ts} for p in range(partitions[t])}


# ---------------------------------------------------------------------------- protocol choice

def test_rebalance_protocol_is_the_best_one_every_assignor_supports():
    assert rebalance_protocol([get_assignor("range"), get_assignor("cooperative-sticky")]) == EAGER
    assert rebalance_protocol([get_assignor("cooperative-sticky")]) == COOPERATIVE
    assert rebalance_protocol([get_assignor("roundrobin")]) == EAGER


def test_assignor_names_are_kafkas():
    assert [get_assignor(n).name for n in ("range", "roundrobin", "cooperative-sticky")] == \
        ["range", "roundrobin", "cooperative-sticky"]
    with pytest.raises(ValueError, match="unknown assignor"):
        get_assignor("sticky-ish")
