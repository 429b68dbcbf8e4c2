"""The classic group coordinator, driven as a pure state machine.

Part 1: table-driven interaction cases. Each case is a config and a list of steps; a step is
an event (or a tick) and what it must produce. Member ids are random, so a step can bind a
name ("$a") to the member id a response carried, and later events use that name.

Part 2: a seeded randomized simulation of members joining, syncing, heartbeating, leaving and
crashing, with invariants checked after every event. A failure prints the seed; replay with
    SEAWAY_GROUP_SEED=<seed> python -m pytest tests/unit/test_group_coordinator.py -k simulation
"""
from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional

import pytest

from core.broker.groups import Coordinator, GroupConfig, GroupState
from core.broker.groups.events import (
    FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, CancelTimer, DeleteGroups, DescribeGroups, Heartbeat, HeartbeatResult, JoinGroup,
    JoinResult, LeaveGroup, LeavingMember, ListGroups, PersistGroup, Respond, ScheduleTimer,
    SyncGroup, SyncResult,
)
from core.protocol.errors import ErrorCode as E

# ============================================================================ table harness

RANGE = (("range", b"meta-range"),)


def J(rid, now, member="", *, gid="g", inst=None, protos=RANGE, ptype="consumer",
      session=10_000, rebalance=30_000, v4=True, skip=False, client="c"):
    return JoinGroup(rid, now, gid, member, ptype, tuple(protos), session, rebalance, inst,
                     client, "/127.0.0.1", v4, skip)


def S(rid, now, member, gen, assignments=(), *, gid="g", inst=None, ptype=None, pname=None):
    return SyncGroup(rid, now, gid, gen, member, tuple(assignments), inst, ptype, pname)


def H(rid, now, member, gen, *, gid="g", inst=None):
    return Heartbeat(rid, now, gid, gen, member, inst)


def L(rid, now, *members, gid="g"):
    return LeaveGroup(rid, now, gid, tuple(LeavingMember(m, i) for m, i in members))


@dataclass(frozen=True)
class Tick:
    now_ms: int


@dataclass
class Step:
    event: Any
    expect: dict = field(default_factory=dict)   # request id -> {field: value}
    bind: dict = field(default_factory=dict)     # name -> request id whose member_id to bind
    pending: tuple = ()                          # request ids that must stay unanswered
    state: Optional[str] = None                  # group "g" state after the step
    persist_first: bool = False                  # a PersistGroup precedes every Respond
    gone: bool = False                           # group "g" no longer exists


def _resolve(value, names):
    if isinstance(value, str) and value.startswith("$"):
        return names[value[1:]]
    if isinstance(value, tuple):
        return tuple(_resolve(v, names) for v in value)
    if isinstance(value, LeavingMember):
        return LeavingMember(_resolve(value.member_id, names),
                             _resolve(value.group_instance_id, names))
    return value


def _resolve_event(ev, names):
    if isinstance(ev, Tick):
        return ev
    return replace(ev, **{f.name: _resolve(getattr(ev, f.name), names) for f in fields(ev)})


def _check(result, checks, names, where):
    for key, want in checks.items():
        if key == "member_ids":
            got = tuple(m.member_id for m in result.members)
        elif key == "member_errors":
            got = tuple(m.error for m in result.members)
        else:
            got = getattr(result, key)
        if key == "members" and isinstance(want, int):
            assert len(got) == want, f"{where}: {key} {got!r} != {want} entries"
            continue
        want = _resolve(want, names)
        assert got == want, f"{where}: {key} {got!r} != {want!r}"


def run_case(config, steps):
    coord = Coordinator(config, seed=7)
    names: dict[str, str] = {}
    answered: dict = {}
    binds: dict[str, str] = {}   # name -> request id, bound once the request is answered
    for i, step in enumerate(steps):
        ev = _resolve_event(step.event, names)
        actions = coord.tick(ev.now_ms) if isinstance(ev, Tick) else coord.handle(ev)
        responses = {a.request_id: a.result for a in actions if isinstance(a, Respond)}
        for rid in responses:
            assert rid not in answered, f"step {i}: request {rid} answered twice"
        answered.update(responses)
        where = f"step {i} ({type(ev).__name__})"
        binds.update(step.bind)
        for name, rid in list(binds.items()):
            if rid in answered:
                names[name] = answered[rid].member_id
                del binds[name]
        for rid, checks in step.expect.items():
            assert rid in responses, f"{where}: no response to {rid}; got {responses}"
            _check(responses[rid], checks, names, f"{where} {rid}")
        for rid in step.pending:
            assert rid not in answered, f"{where}: {rid} answered too early: {answered[rid]}"
        if step.state is not None:
            assert coord.groups["g"].state.value == step.state, where
        if step.gone:
            assert "g" not in coord.groups, where
        if step.persist_first:
            kinds = [type(a) for a in actions]
            assert PersistGroup in kinds, f"{where}: nothing persisted"
            assert kinds.index(PersistGroup) < kinds.index(Respond), where
    return coord, names


OK = {"error": E.NONE}
NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)


def stable_one(member="a"):
    """Steps that make a one-member Stable group, generation 1, member bound to $a."""
    return [
        Step(J("ja0", 0), {"ja0": {"error": E.MEMBER_ID_REQUIRED}}, bind={member: "ja0"}),
        Step(J("ja1", 0, f"${member}"), pending=("ja1",), state="PreparingRebalance"),
        Step(Tick(0), {"ja1": {"error": E.NONE, "generation_id": 1, "leader": f"${member}",
                               "protocol_name": "range", "members": 1}},
             state="CompletingRebalance"),
        Step(S("sa1", 0, f"${member}", 1, ((f"${member}", b"P0,P1"),)),
             {"sa1": {"error": E.NONE, "assignment": b"P0,P1"}}, state="Stable",
             persist_first=True),
    ]


def stable_two():
    """$a (leader) and $b in a Stable group, generation 1."""
    return [
        Step(J("ja0", 0), bind={"a": "ja0"}),
        Step(J("jb0", 0), bind={"b": "jb0"}),
        Step(J("ja1", 0, "$a")),
        Step(J("jb1", 0, "$b")),
        Step(Tick(0), {"ja1": {"generation_id": 1, "leader": "$a", "members": 2},
                       "jb1": {"generation_id": 1, "leader": "$a", "members": 0}}),
        Step(S("sb1", 1, "$b", 1), pending=("sb1",)),
        Step(S("sa1", 1, "$a", 1, (("$a", b"A"), ("$b", b"B"))),
             {"sa1": {"assignment": b"A"}, "sb1": {"assignment": b"B"}}, state="Stable"),
    ]


CASES = {
    # ---- JoinGroup basics -------------------------------------------------------------
    "member_id_required_then_join_then_sync": (NO_DELAY, stable_one() + [
        Step(H("h1", 100, "$a", 1), {"h1": OK}, state="Stable"),
    ]),
    "join_v3_without_member_id_required": (NO_DELAY, [
        Step(J("j", 0, v4=False), pending=("j",), state="PreparingRebalance"),
        Step(Tick(0), {"j": {"error": E.NONE, "generation_id": 1, "members": 1}}),
    ]),
    "invalid_group_id": (NO_DELAY, [
        Step(J("j", 0, gid=""), {"j": {"error": E.INVALID_GROUP_ID}}),
    ]),
    "unknown_member_on_missing_group": (NO_DELAY, [
        Step(J("j", 0, "ghost"), {"j": {"error": E.UNKNOWN_MEMBER_ID}}, gone=True),
    ]),
    "session_timeout_too_small": (NO_DELAY, [
        Step(J("j", 0, session=5_999), {"j": {"error": E.INVALID_SESSION_TIMEOUT}}, gone=True),
    ]),
    "session_timeout_too_large": (GroupConfig(max_session_timeout_ms=60_000), [
        Step(J("j", 0, session=60_001), {"j": {"error": E.INVALID_SESSION_TIMEOUT}}),
    ]),
    "group_max_size": (GroupConfig(initial_rebalance_delay_ms=0, max_size=1), [
        Step(J("ja0", 0), bind={"a": "ja0"}),
        Step(J("jb0", 0), {"jb0": {"error": E.MEMBER_ID_REQUIRED}}, bind={"b": "jb0"}),
        Step(J("ja1", 0, "$a"), pending=("ja1",), state="PreparingRebalance"),
        # PreparingRebalance counts members awaiting join: b is refused and forgotten
        Step(J("jb1", 0, "$b"), {"jb1": {"error": GROUP_MAX_SIZE_REACHED}}),
        Step(Tick(0), {"ja1": {"members": 1}}),
        Step(J("jc0", 1), {"jc0": {"error": GROUP_MAX_SIZE_REACHED}}),  # CompletingRebalance
        Step(J("jb2", 1, "$b"), {"jb2": {"error": GROUP_MAX_SIZE_REACHED}}),
    ]),
    "empty_protocol_type_rejected": (NO_DELAY, [
        Step(J("j", 0, ptype=""), {"j": {"error": E.INCONSISTENT_GROUP_PROTOCOL}}, gone=True),
    ]),
    "inconsistent_protocol_type": (NO_DELAY, stable_one() + [
        Step(J("jx", 10, ptype="connect"), {"jx": {"error": E.INCONSISTENT_GROUP_PROTOCOL}},
             state="Stable"),
    ]),
    "inconsistent_protocol_name": (NO_DELAY, stable_one() + [
        Step(J("jx", 10, protos=(("sticky", b""),)),
             {"jx": {"error": E.INCONSISTENT_GROUP_PROTOCOL}}, state="Stable"),
    ]),
    "protocol_chosen_by_votes_metadata_passed_through": (NO_DELAY, [
        Step(J("ja", 0, v4=False, protos=(("roundrobin", b"ma-rr"), ("range", b"ma-r")))),
        Step(J("jb", 0, v4=False, protos=(("roundrobin", b"mb-rr"), ("range", b"mb-r")))),
        Step(J("jc", 0, v4=False, protos=(("range", b"mc-r"), ("roundrobin", b"mc-rr")))),
        Step(Tick(0), {"ja": {"protocol_name": "roundrobin", "members": 3},
                       "jc": {"protocol_name": "roundrobin", "members": 0}}),
    ]),
    "only_common_protocol_is_candidate": (NO_DELAY, [
        Step(J("ja", 0, v4=False, protos=(("cooperative-sticky", b""), ("range", b"")))),
        Step(J("jb", 0, v4=False, protos=(("range", b""),))),
        Step(Tick(0), {"ja": {"protocol_name": "range"}, "jb": {"protocol_name": "range"}}),
    ]),
    # ---- KIP-134 initial rebalance delay ------------------------------------------------
    "initial_delay_waits_then_completes": (GroupConfig(initial_rebalance_delay_ms=3000), [
        Step(J("ja", 0, v4=False, rebalance=10_000), pending=("ja",)),
        Step(Tick(2999), pending=("ja",)),
        Step(Tick(3000), {"ja": {"generation_id": 1}}, state="CompletingRebalance"),
    ]),
    "initial_delay_extends_for_new_members": (GroupConfig(initial_rebalance_delay_ms=3000), [
        Step(J("ja", 0, v4=False, rebalance=10_000)),
        Step(J("jb", 2000, v4=False, rebalance=10_000)),
        Step(Tick(3000), pending=("ja", "jb")),          # b joined: extend to 6000
        Step(Tick(5999), pending=("ja", "jb")),
        Step(Tick(6000), {"ja": {"members": 2}, "jb": OK}),
    ]),
    "initial_delay_capped_by_rebalance_timeout": (GroupConfig(initial_rebalance_delay_ms=3000), [
        Step(J("ja", 0, v4=False, rebalance=10_000)),
        Step(J("jb", 2000, v4=False, rebalance=10_000)),
        Step(Tick(3000), pending=("ja",)),               # -> 6000, 4000 left
        Step(J("jc", 4000, v4=False, rebalance=10_000)),
        Step(Tick(6000), pending=("ja",)),               # -> 9000, 1000 left
        Step(J("jd", 7000, v4=False, rebalance=10_000)),
        Step(Tick(9000), pending=("ja",)),               # -> 10000, 0 left
        Step(J("je", 9500, v4=False, rebalance=10_000)),
        Step(Tick(10_000), {"ja": {"members": 5}, "je": OK}),
    ]),
    # ---- rebalances ---------------------------------------------------------------------
    "new_member_triggers_rebalance_and_join_completes_when_all_rejoined": (NO_DELAY, stable_one() + [
        Step(J("jc0", 100), bind={"c": "jc0"}, state="Stable"),   # pending member: no rebalance yet
        Step(J("jc1", 100, "$c"), pending=("jc1",), state="PreparingRebalance"),
        Step(H("h", 200, "$a", 1), {"h": {"error": E.REBALANCE_IN_PROGRESS}}),
        Step(S("sx", 200, "$a", 1), {"sx": {"error": E.REBALANCE_IN_PROGRESS}}),
        Step(J("ja2", 300, "$a"), {"ja2": {"generation_id": 2, "leader": "$a", "members": 2},
                                   "jc1": {"generation_id": 2, "leader": "$a", "members": 0}},
             state="CompletingRebalance"),
        Step(H("h2", 400, "$a", 1), {"h2": {"error": E.ILLEGAL_GENERATION}}),
        Step(H("h3", 400, "$c", 2), {"h3": OK}),         # heartbeats allowed while awaiting sync
    ]),
    "rebalance_timeout_removes_members_that_did_not_rejoin": (NO_DELAY, [
        Step(J("ja", 0, v4=False, session=60_000, rebalance=20_000), bind={"a": "ja"}),
        Step(J("jb", 0, v4=False, session=60_000, rebalance=20_000), bind={"b": "jb"}),
        Step(Tick(0), {"ja": {"members": 2}}),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"), ("$b", b"B"))), {"sa": OK}),
        Step(S("sb", 0, "$b", 1), {"sb": {"assignment": b"B"}}, state="Stable"),
        Step(J("ja2", 1000, "$a", session=60_000, rebalance=20_000), pending=("ja2",),
             state="PreparingRebalance"),                 # leader rejoin -> rebalance
        Step(Tick(20_999), pending=("ja2",)),
        Step(Tick(21_000), {"ja2": {"generation_id": 2, "members": 1}}),
        Step(H("hb", 21_001, "$b", 1), {"hb": {"error": E.UNKNOWN_MEMBER_ID}}),
    ]),
    "session_expiry_removes_member_and_rebalances": (NO_DELAY, stable_two() + [
        Step(H("ha", 5000, "$a", 1), {"ha": OK}),
        Step(Tick(10_000), state="Stable"),
        Step(Tick(10_001), state="PreparingRebalance"),   # b's session (since sync at 1) ran out
        Step(H("hb", 10_002, "$b", 1), {"hb": {"error": E.UNKNOWN_MEMBER_ID}}),
        Step(J("ja2", 12_000, "$a"), {"ja2": {"generation_id": 2, "members": 1}}),
    ]),
    "stable_follower_rejoin_same_metadata_no_rebalance": (NO_DELAY, stable_two() + [
        Step(J("jb2", 10, "$b"), {"jb2": {"generation_id": 1, "leader": "$a", "members": 0}},
             state="Stable"),
        Step(J("jb3", 10, "$b", protos=(("range", b"changed"),)), pending=("jb3",),
             state="PreparingRebalance"),
    ]),
    "lost_join_response_resent_in_completing_rebalance": (NO_DELAY, stable_two()[:5] + [
        Step(J("ja9", 1, "$a"), {"ja9": {"generation_id": 1, "members": 2}},
             state="CompletingRebalance"),
    ]),
    "pending_member_delays_join_until_it_expires": (NO_DELAY, stable_one() + [
        Step(J("jc0", 100), bind={"c": "jc0"}),
        Step(J("ja2", 200, "$a"), pending=("ja2",), state="PreparingRebalance"),
        Step(J("jd0", 200, v4=False), pending=("ja2", "jd0")),   # c still pending
        Step(Tick(10_099), pending=("ja2",)),
        Step(Tick(10_100), {"ja2": {"generation_id": 2, "members": 2}, "jd0": OK}),
    ]),
    "new_member_that_never_completes_join_times_out": (
        GroupConfig(initial_rebalance_delay_ms=0, new_member_join_timeout_ms=5000), [
        *stable_one(),
        Step(H("ha", 1000, "$a", 1), {"ha": OK}),
        Step(J("jc", 1000, v4=False, session=60_000, rebalance=60_000), bind={"c": "jc"},
             pending=("jc",), state="PreparingRebalance"),
        Step(Tick(6000), {"jc": {"error": E.UNKNOWN_MEMBER_ID}}, state="PreparingRebalance"),
    ]),
    # ---- SyncGroup ----------------------------------------------------------------------
    "sync_errors": (NO_DELAY, stable_two() + [
        Step(S("s1", 2, "$a", 7), {"s1": {"error": E.ILLEGAL_GENERATION}}),
        Step(S("s2", 2, "nobody", 1), {"s2": {"error": E.UNKNOWN_MEMBER_ID}}),
        Step(S("s3", 2, "$a", 1, gid="other"), {"s3": {"error": E.UNKNOWN_MEMBER_ID}}),
        Step(S("s4", 2, "$a", 1, pname="roundrobin"),
             {"s4": {"error": E.INCONSISTENT_GROUP_PROTOCOL}}),
        Step(S("s5", 2, "$a", 1, ptype="connect"),
             {"s5": {"error": E.INCONSISTENT_GROUP_PROTOCOL}}),
        Step(S("s6", 2, "$b", 1, ptype="consumer", pname="range"),
             {"s6": {"error": E.NONE, "assignment": b"B"}}),   # stable: current assignment
    ]),
    "unassigned_member_gets_empty_assignment": (NO_DELAY, stable_two()[:5] + [
        Step(S("sa", 1, "$a", 1, (("$a", b"A"),)), {"sa": {"assignment": b"A"}}),
        Step(S("sb", 1, "$b", 1), {"sb": {"error": E.NONE, "assignment": b""}}),
    ]),
    "parked_sync_gets_rebalance_in_progress": (NO_DELAY, stable_two()[:5] + [
        Step(S("sb", 1, "$b", 1), pending=("sb",)),
        Step(J("jc", 2, v4=False), {"sb": {"error": E.REBALANCE_IN_PROGRESS}},
             state="PreparingRebalance"),
    ]),
    "pending_sync_expiry_removes_silent_member": (NO_DELAY, [
        Step(J("ja", 0, v4=False, session=60_000, rebalance=20_000), bind={"a": "ja"}),
        Step(J("jb", 0, v4=False, session=60_000, rebalance=20_000), bind={"b": "jb"}),
        Step(Tick(0), {"ja": {"members": 2}}),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"), ("$b", b"B"))), {"sa": OK}, state="Stable"),
        Step(Tick(20_000), state="PreparingRebalance"),    # b never synced
        Step(H("hb", 20_001, "$b", 1), {"hb": {"error": E.UNKNOWN_MEMBER_ID}}),
    ]),
    # ---- Heartbeat ----------------------------------------------------------------------
    "heartbeat_errors": (NO_DELAY, stable_one() + [
        Step(H("h1", 1, "$a", 0), {"h1": {"error": E.ILLEGAL_GENERATION}}),
        Step(H("h2", 1, "nobody", 1), {"h2": {"error": E.UNKNOWN_MEMBER_ID}}),
        Step(H("h3", 1, "$a", 1, gid="nope"), {"h3": {"error": E.UNKNOWN_MEMBER_ID}}),
        Step(H("h4", 1, "$a", 1), {"h4": OK}),
    ]),
    # ---- LeaveGroup ---------------------------------------------------------------------
    "leave_batch_triggers_rebalance": (NO_DELAY, stable_two() + [
        Step(L("l", 5, ("$b", None), ("ghost", None)),
             {"l": {"error": E.NONE, "member_errors": (E.NONE, E.UNKNOWN_MEMBER_ID)}},
             state="PreparingRebalance"),
        Step(J("ja2", 6, "$a"), {"ja2": {"generation_id": 2, "members": 1}}),
    ]),
    "last_member_leaves_group_becomes_empty": (NO_DELAY, stable_one() + [
        Step(L("l", 5, ("$a", None)), {"l": {"member_errors": (E.NONE,)}}, state="Empty",
             persist_first=True),
        Step(H("h", 6, "$a", 2), {"h": {"error": E.UNKNOWN_MEMBER_ID}}),
    ]),
    "leave_unknown_group": (NO_DELAY, [
        Step(L("l", 0, ("x", None)), {"l": {"error": E.NONE,
                                            "member_errors": (E.UNKNOWN_MEMBER_ID,)}}),
    ]),
    "leave_pending_member": (NO_DELAY, stable_one() + [
        Step(J("jc0", 1), bind={"c": "jc0"}),
        Step(L("l", 2, ("$c", None)), {"l": {"member_errors": (E.NONE,)}}, state="Stable"),
        Step(J("jc1", 3, "$c"), {"jc1": {"error": E.UNKNOWN_MEMBER_ID}}),
    ]),
    # ---- static membership (KIP-345) ----------------------------------------------------
    "static_rejoin_replaces_member_without_rebalance": (NO_DELAY, [
        Step(J("ja", 0, inst="i1"), pending=("ja",), bind={"a": "ja"}),  # no MEMBER_ID_REQUIRED
        Step(Tick(0), {"ja": {"generation_id": 1, "leader": "$a"}}, bind={"a": "ja"}),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"),), inst="i1"), {"sa": OK}, state="Stable"),
        Step(J("ja2", 100, inst="i1"), {"ja2": {"error": E.NONE, "generation_id": 1,
                                                "leader": "$a", "skip_assignment": False,
                                                "members": 0}},
             bind={"a2": "ja2"}, state="Stable", persist_first=True),
        Step(H("h_old", 101, "$a", 1, inst="i1"), {"h_old": {"error": FENCED_INSTANCE_ID}}),
        Step(S("s_old", 101, "$a", 1, inst="i1"), {"s_old": {"error": FENCED_INSTANCE_ID}}),
        Step(J("j_old", 101, "$a", inst="i1"), {"j_old": {"error": FENCED_INSTANCE_ID}}),
        Step(H("h_new", 102, "$a2", 1, inst="i1"), {"h_new": OK}),
        Step(S("s_new", 102, "$a2", 1, inst="i1"), {"s_new": {"assignment": b"A"}}),
    ]),
    "static_leader_rejoin_skip_assignment_v9": (NO_DELAY, [
        Step(J("ja", 0, inst="i1"), bind={"a": "ja"}),
        Step(J("jb", 0, inst="i2"), bind={"b": "jb"}),
        Step(Tick(0)),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"), ("$b", b"B")), inst="i1"), {"sa": OK}),
        Step(J("ja2", 1, inst="i1", skip=True),
             {"ja2": {"leader": "$a2", "member_id": "$a2", "skip_assignment": True,
                      "members": 2, "generation_id": 1}},
             bind={"a2": "ja2"}, state="Stable"),
        Step(DescribeGroups("d", 2, ("g",)), {"d": {}}),
    ]),
    "static_rejoin_with_new_protocol_rebalances": (NO_DELAY, [
        Step(J("ja", 0, inst="i1", protos=(("range", b""), ("roundrobin", b"")))),
        Step(Tick(0), {"ja": {"protocol_name": "range"}}, bind={"a": "ja"}),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"),)), state="Stable"),
        # selected protocol would change: rebalance (which completes at once: all rejoined)
        Step(J("ja2", 1, inst="i1", protos=(("roundrobin", b""),)),
             {"ja2": {"generation_id": 2, "protocol_name": "roundrobin"}},
             state="CompletingRebalance"),
    ]),
    "static_member_kept_through_rebalance_without_rejoining": (NO_DELAY, [
        Step(J("ja", 0, v4=False, rebalance=20_000), bind={"a": "ja"}),
        Step(J("js", 0, inst="i1", session=60_000, rebalance=20_000), bind={"s": "js"}),
        Step(Tick(0), {"ja": {"members": 2}}),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"), ("$s", b"S")))),
        Step(S("ss", 0, "$s", 1, inst="i1"), {"ss": {"assignment": b"S"}}, state="Stable"),
        Step(J("jc", 100, v4=False, rebalance=20_000), pending=("jc",),
             state="PreparingRebalance"),
        Step(J("ja2", 100, "$a", rebalance=20_000), pending=("ja2", "jc")),
        # rebalance timeout: the static member stays (only its session can remove it)
        Step(Tick(20_100), {"ja2": {"generation_id": 2, "members": 3}, "jc": OK},
             state="CompletingRebalance"),
        Step(H("hs", 20_101, "$s", 1, inst="i1"), {"hs": {"error": E.ILLEGAL_GENERATION}}),
        Step(J("js2", 20_102, "$s", inst="i1", session=60_000, rebalance=20_000),
             {"js2": {"generation_id": 2, "members": 0}}),
    ]),
    "join_waits_while_only_unjoined_static_members_remain": (NO_DELAY, [
        Step(J("ja", 0, v4=False), bind={"a": "ja"}),
        Step(J("js", 0, inst="i1", session=60_000, rebalance=20_000), bind={"s": "js"}),
        Step(Tick(0)),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"), ("$s", b"S")))),
        Step(S("ss", 0, "$s", 1), state="Stable"),
        Step(L("l", 10, ("$a", None)), state="PreparingRebalance"),
        Step(Tick(30_000), state="PreparingRebalance"),   # nobody joined: wait again
        Step(J("js2", 31_000, "$s", inst="i1", session=60_000, rebalance=20_000),
             {"js2": {"generation_id": 2, "leader": "$s", "members": 1}},
             state="CompletingRebalance"),
    ]),
    "static_member_unknown_instance": (NO_DELAY, stable_one() + [
        Step(J("j", 1, "$a", inst="nobody"), {"j": {"error": E.UNKNOWN_MEMBER_ID}}),
    ]),
    "static_leave_by_instance_id": (NO_DELAY, [
        Step(J("ja", 0, inst="i1"), bind={"a": "ja"}),
        Step(J("jb", 0, inst="i2"), bind={"b": "jb"}),
        Step(Tick(0)),
        Step(S("sa", 0, "$a", 1, (("$a", b"A"), ("$b", b"B")))),
        Step(L("l", 1, ("", "i2"), ("wrong-id", "i1"), ("", "i9")),
             {"l": {"member_errors": (E.NONE, FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID)}},
             state="PreparingRebalance"),
    ]),
    # ---- Describe / List / Delete -------------------------------------------------------
    "describe_groups": (NO_DELAY, stable_one() + [
        Step(DescribeGroups("d", 1, ("g", "missing")), {"d": {}}),
    ]),
    "delete_groups": (NO_DELAY, stable_one() + [
        Step(DeleteGroups("d1", 1, ("g", "missing")),
             {"d1": {"results": (("g", E.NON_EMPTY_GROUP), ("missing", E.GROUP_ID_NOT_FOUND))}}),
        Step(L("l", 2, ("$a", None)), state="Empty"),
        Step(DeleteGroups("d2", 3, ("g",)), {"d2": {"results": (("g", E.NONE),)}},
             persist_first=True, gone=True),
        Step(DeleteGroups("d3", 4, ("g",)), {"d3": {"results": (("g", E.GROUP_ID_NOT_FOUND),)}}),
    ]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_interaction(name):
    config, steps = CASES[name]
    run_case(config, steps)


def test_describe_contents():
    coord, names = run_case(NO_DELAY, stable_one())
    (d,) = coord.handle(DescribeGroups("d", 1, ("g", "missing")))
    g, missing = d.result.groups
    assert (g.state, g.protocol_type, g.protocol_name) == ("Stable", "consumer", "range")
    (m,) = g.members
    assert (m.member_id, m.metadata, m.assignment) == (names["a"], b"meta-range", b"P0,P1")
    assert (missing.state, missing.error) == ("Dead", E.NONE)
    coord.handle(J("jx", 2, v4=False))
    (d,) = coord.handle(DescribeGroups("d2", 2, ("g",)))
    (g,) = d.result.groups
    assert g.state == "PreparingRebalance" and g.protocol_name == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in g.members)


def test_list_groups_with_state_filter():
    coord, _ = run_case(NO_DELAY, stable_one())
    coord.handle(J("j", 0, gid="h", v4=False))
    (r,) = coord.handle(ListGroups("l", 0))
    assert {(g.group_id, g.state) for g in r.result.groups} == \
        {("g", "Stable"), ("h", "PreparingRebalance")}
    (r,) = coord.handle(ListGroups("l2", 0, ("stable",)))
    assert [g.group_id for g in r.result.groups] == ["g"]


def test_persisted_record_carries_assignments_and_metadata():
    coord = Coordinator(NO_DELAY)
    coord.handle(J("j", 0, v4=False, protos=(("range", b"SUB"),)))
    acts = coord.tick(0)
    mid = next(a.result.member_id for a in acts if isinstance(a, Respond))
    acts = coord.handle(S("s", 0, mid, 1, ((mid, b"\x00\x01ASSIGN"),)))
    (p,) = [a for a in acts if isinstance(a, PersistGroup)]
    rec = p.metadata
    assert (rec.protocol_type, rec.generation_id, rec.protocol_name, rec.leader) == \
        ("consumer", 1, "range", mid)
    (m,) = rec.members
    assert (m.subscription, m.assignment, m.session_timeout_ms) == \
        (b"SUB", b"\x00\x01ASSIGN", 10_000)


def test_timers_are_announced_and_cancelled():
    coord = Coordinator(NO_DELAY)
    acts = coord.handle(J("j", 0, v4=False))
    assert ScheduleTimer(("join", "g"), 0) in acts
    assert coord.next_deadline() == 0
    acts = coord.tick(0)
    assert CancelTimer(("join", "g")) not in acts        # a fired timer needs no cancel
    (mid,) = [a.result.member_id for a in acts if isinstance(a, Respond)]
    assert ScheduleTimer(("heartbeat", "g", mid), 10_000) in acts
    assert ScheduleTimer(("sync", "g"), 30_000) in acts  # pending-sync deadline
    acts = coord.handle(L("l", 1, (mid, None)))
    assert CancelTimer(("heartbeat", "g", mid)) in acts
    assert CancelTimer(("sync", "g")) in acts
    assert coord.timers == {}


def test_load_group_restores_stable_group_from_record():
    # build a Stable group and keep the record it persisted on the leader's sync
    coord, names, persisted = Coordinator(NO_DELAY, seed=7), {}, []
    for step in stable_two():
        ev = _resolve_event(step.event, names)
        acts = coord.tick(ev.now_ms) if isinstance(ev, Tick) else coord.handle(ev)
        persisted += [x for x in acts if isinstance(x, PersistGroup)]
        for x in acts:
            if isinstance(x, Respond) and x.request_id in ("ja0", "jb0"):
                names[x.request_id[1]] = x.result.member_id
    record = persisted[-1].metadata
    fresh = Coordinator(NO_DELAY)
    acts = fresh.load_group("g", record, 50_000)
    a2, b2 = names["a"], names["b"]
    assert ScheduleTimer(("heartbeat", "g", a2), 60_000) in acts
    g = fresh.groups["g"]
    assert (g.state, g.generation_id, g.leader_id, g.protocol_name) == \
        (GroupState.STABLE, 1, a2, "range")
    (r,) = fresh.handle(S("s", 50_001, b2, 1))[-1:]
    assert r.result == SyncResult(E.NONE, "consumer", "range", b"B")
    (r,) = fresh.handle(H("h", 50_001, a2, 1))[-1:]
    assert r.result.error == E.NONE
    # b stops heartbeating: its session runs out and the group rebalances
    fresh.handle(H("h2", 55_000, a2, 1))
    fresh.tick(60_001)
    assert fresh.groups["g"].state is GroupState.PREPARING_REBALANCE
    # a new member with another protocol set still has to match the loaded one
    (r,) = [x for x in fresh.handle(J("jx", 60_002, protos=(("other", b""),)))
            if isinstance(x, Respond)]
    assert r.result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert fresh.load_group("g", None, 70_000) and "g" not in fresh.groups


def test_unload_answers_parked_requests_with_not_coordinator():
    coord = Coordinator(NO_DELAY)
    coord.handle(J("j", 0, v4=False))
    acts = coord.unload_group("g", 1)
    assert Respond("j", JoinResult(E.NOT_COORDINATOR, member_id=acts[0].result.member_id)) in acts
    assert "g" not in coord.groups and coord.timers == {}


def test_illegal_transition_raises():
    from core.broker.groups.state import Group, IllegalStateTransition
    g = Group("g")
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE, 0)


# ============================================================================ simulation

TOPIC_PARTITIONS = 12


def encode_parts(parts):
    return struct.pack(f">{len(parts)}i", *parts)


def decode_parts(data):
    return list(struct.unpack(f">{len(data) // 4}i", data))


def range_assign(member_ids):
    """Kafka's range assignor over one topic: sorted members, contiguous chunks."""
    ms = sorted(member_ids)
    per, extra = divmod(TOPIC_PARTITIONS, len(ms))
    out, start = {}, 0
    for i, m in enumerate(ms):
        n = per + (1 if i < extra else 0)
        out[m] = list(range(start, start + n))
        start += n
    return out


@dataclass
class SimClient:
    name: str
    static: Optional[str]
    v4: bool = True                    # JoinGroup v4+: MEMBER_ID_REQUIRED round trip
    member_id: str = ""
    generation: int = -1
    alive: bool = True
    inflight: Optional[str] = None     # request id of an outstanding join/sync
    owned: tuple = ()
    members_to_assign: tuple = ()
    last_hb: int = 0


class Simulation:
    SESSION, REBALANCE = 10_000, 15_000

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.coord = Coordinator(GroupConfig(initial_rebalance_delay_ms=self.rng.choice([0, 3000]),
                                             max_size=6), seed=seed)
        self.now = 0
        self.clients = [SimClient(f"c{i}", f"inst{i}" if self.rng.random() < 0.3 else None,
                                  v4=self.rng.random() < 0.8)
                        for i in range(6)]
        self.reqs: dict[str, SimClient] = {}
        self.seq = 0
        self.told: dict[int, dict[str, tuple]] = {}   # generation -> member -> partitions
        self.max_stable_gen = 0
        self.events = 0

    def rid(self, client, kind):
        self.seq += 1
        r = f"{kind}{self.seq}"
        self.reqs[r] = client
        return r

    def send(self, ev):
        self.deliver(self.coord.handle(ev))

    def join(self, c):
        c.inflight = self.rid(c, "join")
        c.owned = ()   # eager protocol: revoke everything before rejoining
        self.send(J(c.inflight, self.now, c.member_id, inst=c.static, session=self.SESSION,
                    rebalance=self.REBALANCE, client=c.name, v4=c.v4))

    def deliver(self, actions):
        self.events += 1
        self.check_invariants(actions)
        for a in actions:
            if not isinstance(a, Respond):
                continue
            c = self.reqs.pop(a.request_id)
            res = a.result
            if c.inflight == a.request_id:
                c.inflight = None
            if not c.alive:
                continue
            if isinstance(res, JoinResult):
                self.on_join(c, res)
            elif isinstance(res, SyncResult):
                self.on_sync(c, res)
            elif isinstance(res, HeartbeatResult):
                if res.error in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION):
                    if c.inflight is None:
                        self.join(c)
                elif res.error in (E.UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
                    c.member_id, c.generation, c.owned = "", -1, ()

    def on_join(self, c, res):
        if res.error == E.MEMBER_ID_REQUIRED:
            c.member_id = res.member_id
            self.join(c)
        elif res.error == E.NONE:
            c.member_id, c.generation = res.member_id, res.generation_id
            assignments = ()
            if res.leader == res.member_id and res.members:
                plan = range_assign([m.member_id for m in res.members])
                assignments = tuple((m, encode_parts(p)) for m, p in plan.items())
            c.inflight = self.rid(c, "sync")
            self.send(S(c.inflight, self.now, c.member_id, c.generation, assignments,
                        inst=c.static))
        elif res.error in (E.UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            c.member_id, c.generation = "", -1
        # REBALANCE_IN_PROGRESS / GROUP_MAX_SIZE_REACHED: retry later via the driver loop

    def on_sync(self, c, res):
        if res.error == E.NONE:
            parts = tuple(decode_parts(res.assignment))
            # a static member's new id takes over its old id's assignment (KIP-345), so
            # the owner is the instance id for static members
            gen_told = self.told.setdefault(c.generation, {})
            gen_told[c.static or c.member_id] = parts
            c.owned = parts
        elif res.error in (E.UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            c.member_id, c.generation, c.owned = "", -1, ()
        elif c.inflight is None:
            self.join(c)

    def check_invariants(self, actions):
        g = self.coord.groups.get("g")
        # the coordinator never answers one request twice and answers only known requests
        rids = [a.request_id for a in actions if isinstance(a, Respond)]
        assert len(rids) == len(set(rids))
        assert all(r in self.reqs for r in rids)
        # no two members of one generation are told they own the same partition
        for gen, told in self.told.items():
            seen = {}
            for member, parts in told.items():
                for p in parts:
                    assert p not in seen, f"gen {gen}: partition {p} to {seen.get(p)} and {member}"
                    seen[p] = member
        if g is None:
            return
        if g.state is GroupState.STABLE:
            # one Stable generation at a time, and generations only move forward
            assert g.generation_id >= self.max_stable_gen
            self.max_stable_gen = g.generation_id
            for m in g.members.values():
                assert m.assignment is not None, f"{m.member_id} has no assignment in Stable"
            assert g.leader_id in g.members
        if g.members:
            assert g.leader_id in g.members
        assert len(g.static_members) == len(set(g.static_members.values()))
        for inst, mid in g.static_members.items():
            assert g.members[mid].group_instance_id == inst
        # every member has a liveness timer, so none can linger forever
        for mid in g.members:
            assert ("heartbeat", "g", mid) in self.coord.timers

    def run(self, steps):
        for _ in range(steps):
            self.now += self.rng.choice([0, 1, 10, 100, 500, 1500, 4000])
            self.deliver(self.coord.tick(self.now))
            c = self.rng.choice(self.clients)
            roll = self.rng.random()
            if not c.alive:
                if roll < 0.2:     # restart: a new process; a static one keeps its instance id
                    c.alive, c.member_id, c.generation, c.owned = True, "", -1, ()
                    c.inflight = None
                    self.join(c)
                continue
            if roll < 0.05:
                c.alive = False    # crash: silent, the session timeout must catch it
            elif roll < 0.10 and c.member_id and c.inflight is None:
                r = self.rid(c, "leave")
                self.send(L(r, self.now, (c.member_id, c.static)))
                c.member_id, c.generation, c.owned = "", -1, ()
            elif c.inflight is None and (not c.member_id or c.generation < 0):
                self.join(c)
            elif c.inflight is None and roll < 0.15:
                self.join(c)       # e.g. a metadata change: rejoin
            elif c.member_id and c.generation >= 0:
                self.send(H(self.rid(c, "hb"), self.now, c.member_id, c.generation,
                            inst=c.static))
        # quiesce: everybody alive keeps heartbeating until the group settles
        for _ in range(200):
            self.now += 1000
            self.deliver(self.coord.tick(self.now))
            for c in self.clients:
                if c.alive and c.inflight is None:
                    if c.member_id and c.generation >= 0:
                        self.send(H(self.rid(c, "hb"), self.now, c.member_id, c.generation,
                                    inst=c.static))
                    else:
                        self.join(c)
        return self


def _seeds():
    """Seeds 0-24 by default (CI is deterministic); SEAWAY_GROUP_SEED=N replays one seed;
    SEAWAY_GROUP_FRESH_SEEDS=K adds K fresh random seeds (each printed) for exploration."""
    if "SEAWAY_GROUP_SEED" in os.environ:
        return [int(os.environ["SEAWAY_GROUP_SEED"])]
    fresh = int(os.environ.get("SEAWAY_GROUP_FRESH_SEEDS", "0"))
    return list(range(25)) + [random.SystemRandom().randrange(2**32) for _ in range(fresh)]


@pytest.mark.parametrize("seed", _seeds())
def test_simulation(seed):
    print(f"seed={seed}  replay: SEAWAY_GROUP_SEED={seed} python -m pytest "
          f"tests/unit/test_group_coordinator.py -k simulation")
    sim = Simulation(seed).run(400)
    g = sim.coord.groups.get("g")
    alive = [c for c in sim.clients if c.alive]
    if alive:
        # after quiescing with everyone heartbeating, the group is Stable with every live
        # client in it and all partitions owned exactly once
        assert g is not None and g.state is GroupState.STABLE, (g and g.state)
        assert set(g.members) == {c.member_id for c in alive}
        owned = sorted(p for c in alive for p in c.owned)
        assert owned == list(range(TOPIC_PARTITIONS))
