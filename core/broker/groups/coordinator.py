"""The classic group coordinator as a pure state machine.

    coord = Coordinator(GroupConfig(), seed=0)
    actions = coord.handle(JoinGroup(...))     # one request in, actions out
    actions = coord.tick(now_ms)               # fire every timer due at or before now_ms

No clock, no I/O, no randomness except a seeded generator for member ids. Timers live in
the coordinator (`timers`); `ScheduleTimer`/`CancelTimer` tell the driver when to wake it.
Timer keys: ("join", group) rebalance/initial delay, ("sync", group) pending-sync expiry,
("heartbeat", group, member) session (or new-member) expiry.

Semantics follow Kafka's GroupCoordinator.scala / GroupMetadataManager.java (classic).
"""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

from core.protocol.consumer_protocol import PROTOCOL_TYPE, decode_subscription
from core.protocol.errors import DecodeError, ErrorCode as E

from .events import (
    FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, Action, CancelTimer, DeleteGroups, DeleteResult, DescribeGroups, DescribeResult,
    GroupDescription, GroupMetadataRecord, Heartbeat, HeartbeatResult, JoinGroup, JoinMember,
    JoinResult, LeaveGroup, LeaveMemberResult, LeaveResult, ListedGroup, ListGroups,
    ListResult, MemberDescription, PersistGroup, Respond, ScheduleTimer,
    SyncGroup, SyncResult,
)
from .state import Group, GroupState as S, Member


@dataclass(frozen=True)
class GroupConfig:
    """Kafka's broker properties, Kafka's defaults."""
    min_session_timeout_ms: int = 6000              # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000         # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000          # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1                       # group.max.size
    new_member_join_timeout_ms: int = 300_000       # Kafka's NewMemberJoinTimeoutMs


class Coordinator:
    def __init__(self, config: GroupConfig = GroupConfig(), seed: int = 0):
        self.config = config
        self.groups: dict[str, Group] = {}
        self.timers: dict[tuple, tuple[int, int]] = {}   # key -> (at_ms, seq)
        self._seq = 0
        self._rng = random.Random(seed)
        self._out: list[Action] = []

    # ================================================================ entry points
    def handle(self, event) -> list[Action]:
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"unknown event {type(event).__name__}")
        self._out = []
        handler(self, event)
        out, self._out = self._out, []
        return out

    step = handle

    def tick(self, now_ms: int) -> list[Action]:
        """Fire every timer due at or before now_ms, earliest first."""
        self._out = []
        while True:
            due = [(at, seq, key) for key, (at, seq) in self.timers.items() if at <= now_ms]
            if not due:
                break
            _, _, key = min(due)
            del self.timers[key]
            self._fire(key, now_ms)
        out, self._out = self._out, []
        return out

    def next_deadline(self) -> Optional[int]:
        return min((at for at, _ in self.timers.values()), default=None)

    # ================================================================ helpers
    def _respond(self, request_id, result) -> None:
        self._out.append(Respond(request_id, result))

    def _schedule(self, key: tuple, at_ms: int) -> None:
        self._seq += 1
        self.timers[key] = (at_ms, self._seq)
        self._out.append(ScheduleTimer(key, at_ms))

    def _cancel(self, key: tuple) -> None:
        if self.timers.pop(key, None) is not None:
            self._out.append(CancelTimer(key))

    @staticmethod
    def _hb_key(group: Group, member_id: str) -> tuple:
        return ("heartbeat", group.group_id, member_id)

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"

    def _persist(self, group: Group) -> None:
        self._out.append(PersistGroup(group.group_id, group.to_record()))

    def _join_result(self, group: Group, member: Member, *, with_members: bool,
                     leader: Optional[str] = None, skip: bool = False) -> JoinResult:
        members: tuple[JoinMember, ...] = ()
        if with_members:
            members = tuple(JoinMember(m.member_id, m.group_instance_id,
                                       m.metadata_for(group.protocol_name))
                            for m in group.members.values())
        leader_id = leader if leader is not None else group.leader_id
        assert leader_id is not None   # a group that answers a join has a leader
        return JoinResult(E.NONE, group.generation_id, group.protocol_type,
                          group.protocol_name, leader_id, member.member_id, members, skip)

    def _validate_member(self, group: Group, member_id: str,
                         instance_id: Optional[str])-> Optional[E]:
        if instance_id is not None:
            existing = group.static_members.get(instance_id)
            if existing is None:
                return E.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return FENCED_INSTANCE_ID
        if not group.has(member_id):
            return E.UNKNOWN_MEMBER_ID
        return None

    def _heartbeat_member(self, group: Group, member: Member, now_ms: int) -> None:
        self._schedule(self._hb_key(group, member.member_id), now_ms + member.session_timeout_ms)

    # ================================================================ JoinGroup
    def handle_join(self, ev: JoinGroup) -> None:
        def fail(code: E, member_id: str = ev.member_id) -> None:
            self._respond(ev.request_id, JoinResult(code, member_id=member_id))

        if not ev.group_id:
            return fail(E.INVALID_GROUP_ID)
        if not (self.config.min_session_timeout_ms <= ev.session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return fail(E.INVALID_SESSION_TIMEOUT)
        group = self.groups.get(ev.group_id)
        created = False
        if group is None:
            if ev.member_id:
                return fail(E.UNKNOWN_MEMBER_ID)
            group = self.groups[ev.group_id] = Group(ev.group_id, state_timestamp_ms=ev.now_ms)
            created = True
        if not self._accept_joining_member(group, ev.member_id):
            if group.has(ev.member_id):
                self._remove_member_and_update_group(group, ev.member_id, ev.now_ms)
            elif ev.member_id in group.pending_members:
                group.pending_members.discard(ev.member_id)
                self._cancel(self._hb_key(group, ev.member_id))
            fail(GROUP_MAX_SIZE_REACHED)
        elif not ev.member_id:
            self._join_new_member(group, ev)
        else:
            self._join_current_member(group, ev)
        if created and not group.members and not group.pending_members and \
                group.is_(S.EMPTY):
            # a join that failed on a brand-new group leaves nothing behind
            del self.groups[group.group_id]

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        limit = self.config.max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.is_(S.PREPARING_REBALANCE):
            # counting awaiting members lets the last rejoiners be kicked out when the group
            # is above a (lowered) max size
            return (group.has(member_id) and group.members[member_id].awaiting_join is not None) \
                or group.awaiting_join_count() < limit
        return group.has(member_id) or len(group.members) < limit

    def _join_new_member(self, group: Group, ev: JoinGroup) -> None:
        if group.is_(S.DEAD):
            return self._respond(ev.request_id, JoinResult(E.COORDINATOR_NOT_AVAILABLE))
        if not group.supports_protocols(ev.protocol_type, [n for n, _ in ev.protocols]):
            return self._respond(ev.request_id, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL))
        if ev.group_instance_id is not None:
            new_id = self._new_member_id(ev.group_instance_id)
            return self._static_member_join(group, ev, new_id)
        new_id = self._new_member_id(ev.client_id)
        if ev.require_known_member_id:
            # KIP-394: hand out the id, expect a second join carrying it
            group.pending_members.add(new_id)
            self._schedule(self._hb_key(group, new_id), ev.now_ms + ev.session_timeout_ms)
            return self._respond(ev.request_id,
                                 JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id))
        self._add_member_and_rebalance(group, ev, new_id)

    def _static_member_join(self, group: Group, ev: JoinGroup, new_id: str) -> None:
        instance_id = ev.group_instance_id
        assert instance_id is not None   # only a static member joins here
        old_id = group.static_members.get(instance_id)
        if old_id is None:
            return self._add_member_and_rebalance(group, ev, new_id)
        # KIP-345: a known instance id rejoins with a fresh member id; fence the old one
        current_leader = group.leader_id
        old = group.members[old_id]
        if old.awaiting_join is not None:
            self._respond(old.awaiting_join, JoinResult(FENCED_INSTANCE_ID, member_id=old_id))
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            self._respond(old.awaiting_sync, SyncResult(FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        self._cancel(self._hb_key(group, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.client_id, member.client_host = ev.client_id, ev.client_host
        member.protocols = tuple(ev.protocols)
        member.rebalance_timeout_ms = ev.rebalance_timeout_ms
        member.session_timeout_ms = ev.session_timeout_ms
        self._heartbeat_member(group, member, ev.now_ms)
        if group.is_(S.STABLE):
            if group.select_protocol() == group.protocol_name:
                # nothing changes for the group: persist the new id, answer at once
                self._persist(group)
                if ev.supports_skip_assignment:
                    # v9+: the leader learns it leads, with the members, but must not assign
                    is_leader = group.is_leader(new_id)
                    result = self._join_result(group, member, with_members=is_leader,
                                               skip=is_leader)
                else:
                    # older clients get the previous leader id, so a restarted leader does
                    # not compute an assignment a Stable group would never distribute
                    result = self._join_result(group, member, with_members=False,
                                               leader=current_leader)
                self._respond(ev.request_id, result)
                return
            member.awaiting_join = ev.request_id
            self._maybe_prepare_rebalance(group, ev.now_ms)
        elif group.is_(S.COMPLETING_REBALANCE):
            member.awaiting_join = ev.request_id
            self._maybe_prepare_rebalance(group, ev.now_ms)
        else:  # PreparingRebalance: it joins with the rest
            member.awaiting_join = ev.request_id
            self.maybe_complete_join(group, ev.now_ms)

    def _add_member_and_rebalance(self, group: Group, ev: JoinGroup, member_id: str) -> None:
        member = Member(member_id, ev.group_instance_id, ev.client_id, ev.client_host,
                        ev.rebalance_timeout_ms, ev.session_timeout_ms, ev.protocol_type,
                        tuple(ev.protocols), awaiting_join=ev.request_id, is_new=True)
        group.pending_members.discard(member_id)
        group.add(member)
        group.new_member_added = True
        # a new member cannot heartbeat until its join completes: bound its wait instead
        self._schedule(self._hb_key(group, member_id),
                       ev.now_ms + self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, ev.now_ms)
        self.maybe_complete_join(group, ev.now_ms)

    def _join_current_member(self, group: Group, ev: JoinGroup) -> None:
        if group.is_(S.DEAD):
            return self._respond(ev.request_id, JoinResult(E.COORDINATOR_NOT_AVAILABLE,
                                                           member_id=ev.member_id))
        if not group.supports_protocols(ev.protocol_type, [n for n, _ in ev.protocols]):
            return self._respond(ev.request_id, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL,
                                                           member_id=ev.member_id))
        if ev.member_id in group.pending_members:
            return self._add_member_and_rebalance(group, ev, ev.member_id)
        err = self._validate_member(group, ev.member_id, ev.group_instance_id)
        if err is not None:
            return self._respond(ev.request_id, JoinResult(err, member_id=ev.member_id))
        member = group.members[ev.member_id]
        same = tuple(ev.protocols) == member.protocols
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, ev)
        elif group.is_(S.COMPLETING_REBALANCE):
            if same:  # the join response was lost: send it again
                self._respond(ev.request_id, self._join_result(
                    group, member, with_members=group.is_leader(member.member_id)))
            else:
                self._update_member_and_rebalance(group, member, ev)
        elif group.is_(S.STABLE):
            if group.is_leader(member.member_id) or not same:
                self._update_member_and_rebalance(group, member, ev)
            else:
                self._respond(ev.request_id, self._join_result(group, member, with_members=False))
        else:
            self._respond(ev.request_id, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=ev.member_id))

    def _update_member_and_rebalance(self, group: Group, member: Member, ev: JoinGroup) -> None:
        if member.awaiting_join is not None and member.awaiting_join != ev.request_id:
            # superseded by this join; answer the old request so no request is left hanging
            self._respond(member.awaiting_join, JoinResult(E.REBALANCE_IN_PROGRESS,
                                                           member_id=member.member_id))
        member.protocols = tuple(ev.protocols)
        member.rebalance_timeout_ms = ev.rebalance_timeout_ms
        member.session_timeout_ms = ev.session_timeout_ms
        member.client_id, member.client_host = ev.client_id, ev.client_host
        member.awaiting_join = ev.request_id
        self._maybe_prepare_rebalance(group, ev.now_ms)
        self.maybe_complete_join(group, ev.now_ms)

    # ================================================================ rebalance
    def _maybe_prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self.become_preparing_rebalance(group, now_ms)

    def become_preparing_rebalance(self, group: Group, now_ms: int) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            # the assignment of this generation will never come: tell the waiting followers
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    self._respond(m.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
                    m.awaiting_sync = None
        for m in group.members.values():
            m.assignment = None
        group.pending_sync.clear()
        self._cancel(("sync", group.group_id))
        if group.is_(S.EMPTY):
            # KIP-134: let more members arrive before the first generation
            delay = self.config.initial_rebalance_delay_ms
            group.join_kind = "initial"
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
        else:
            delay = group.rebalance_timeout_ms()
            group.join_kind = "normal"
        group.transition_to(S.PREPARING_REBALANCE, now_ms)
        self._schedule(("join", group.group_id), now_ms + delay)
        self.maybe_complete_join(group, now_ms)   # e.g. the last member just left

    def maybe_complete_join(self, group: Group, now_ms: int) -> None:
        if group.is_(S.PREPARING_REBALANCE) and group.join_kind == "normal" \
                and group.has_all_members_joined():
            self.complete_join(group, now_ms)

    def _on_join_timer(self, group: Group, now_ms: int) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        if group.join_kind == "initial" and group.new_member_added \
                and group.initial_delay_remaining_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms = max(
                group.initial_delay_remaining_ms - self.config.initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self._schedule(("join", group.group_id), now_ms + delay)
            return
        self.complete_join(group, now_ms)

    def complete_join(self, group: Group, now_ms: int) -> None:
        self._cancel(("join", group.group_id))
        group.join_kind = "normal"
        for m in [m for m in group.members.values()
                  if m.awaiting_join is None and m.group_instance_id is None]:
            self._remove_member(group, m.member_id)   # dynamic, did not rejoin in time
        if group.is_(S.DEAD):
            return
        if group.members and not self._maybe_elect_new_joined_leader(group):
            # only static members that have not rejoined are left: wait for them (or for
            # their session timeouts) one more rebalance timeout
            self._schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
            return
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition_to(S.EMPTY, now_ms)
            self._persist(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(S.COMPLETING_REBALANCE, now_ms)
        for m in group.members.values():
            rid, m.awaiting_join, m.is_new = m.awaiting_join, None, False
            if rid is not None:   # a static member that did not rejoin has nothing parked
                self._respond(rid, self._join_result(
                    group, m, with_members=group.is_leader(m.member_id)))
            self._heartbeat_member(group, m, now_ms)
        group.pending_sync = set(group.members)
        self._schedule(("sync", group.group_id), now_ms + group.rebalance_timeout_ms())

    @staticmethod
    def _maybe_elect_new_joined_leader(group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in group.members.values():
            if m.awaiting_join is not None:
                group.leader_id = m.member_id
                return True
        return False

    def _remove_member(self, group: Group, member_id: str) -> None:
        member = group.remove(member_id)
        self._cancel(self._hb_key(group, member_id))
        if member.awaiting_join is not None:   # e.g. a new member's join timed out
            self._respond(member.awaiting_join, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=""))
        if member.awaiting_sync is not None:
            self._respond(member.awaiting_sync, SyncResult(E.UNKNOWN_MEMBER_ID))

    def _remove_member_and_update_group(self, group: Group, member_id: str, now_ms: int) -> None:
        self._remove_member(group, member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms)
        elif group.is_(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join(group, now_ms)

    def _remove_pending_member(self, group: Group, member_id: str, now_ms: int) -> None:
        group.pending_members.discard(member_id)
        self._cancel(self._hb_key(group, member_id))
        if group.is_(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join(group, now_ms)

    # ================================================================ SyncGroup
    def handle_sync(self, ev: SyncGroup) -> None:
        def fail(code: E) -> None:
            self._respond(ev.request_id, SyncResult(code))

        group = self.groups.get(ev.group_id)
        if group is None:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        err = self._validate_member(group, ev.member_id, ev.group_instance_id)
        if err is not None:
            return fail(err)
        if ev.generation_id != group.generation_id:
            return fail(E.ILLEGAL_GENERATION)
        if (ev.protocol_type is not None and ev.protocol_type != group.protocol_type) or \
                (ev.protocol_name is not None and ev.protocol_name != group.protocol_name):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(S.EMPTY):
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.is_(S.PREPARING_REBALANCE):
            return fail(E.REBALANCE_IN_PROGRESS)
        member = group.members[ev.member_id]
        self._mark_synced(group, ev.member_id)
        self._heartbeat_member(group, member, ev.now_ms)
        if group.is_(S.STABLE):
            return self._respond(ev.request_id, SyncResult(
                E.NONE, group.protocol_type, group.protocol_name, member.assignment or b""))
        # CompletingRebalance
        if member.awaiting_sync is not None:
            self._respond(member.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = ev.request_id
        if group.is_leader(ev.member_id):
            given = dict(ev.assignments)
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")   # bytes pass through untouched
            group.transition_to(S.STABLE, ev.now_ms)
            self._persist(group)                           # persist before any response
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    rid, m.awaiting_sync = m.awaiting_sync, None
                    self._respond(rid, SyncResult(E.NONE, group.protocol_type,
                                                  group.protocol_name, m.assignment or b""))
                    self._heartbeat_member(group, m, ev.now_ms)

    def _mark_synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(("sync", group.group_id))

    def _on_sync_timer(self, group: Group, now_ms: int) -> None:
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            for mid in sorted(group.pending_sync):
                if group.has(mid):
                    self._remove_member(group, mid)
            self._maybe_prepare_rebalance(group, now_ms)

    # ================================================================ Heartbeat
    def handle_heartbeat(self, ev: Heartbeat) -> None:
        def answer(code: E) -> None:
            self._respond(ev.request_id, HeartbeatResult(code))

        group = self.groups.get(ev.group_id)
        if group is None:
            return answer(E.UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return answer(E.COORDINATOR_NOT_AVAILABLE)
        err = self._validate_member(group, ev.member_id, ev.group_instance_id)
        if err is not None:
            return answer(err)
        if ev.generation_id != group.generation_id:
            return answer(E.ILLEGAL_GENERATION)
        if group.is_(S.EMPTY):
            return answer(E.UNKNOWN_MEMBER_ID)
        member = group.members[ev.member_id]
        if not member.is_new:
            self._heartbeat_member(group, member, ev.now_ms)
        answer(E.REBALANCE_IN_PROGRESS if group.is_(S.PREPARING_REBALANCE) else E.NONE)

    def _on_heartbeat_timer(self, group: Group, member_id: str, now_ms: int) -> None:
        if member_id in group.pending_members:
            return self._remove_pending_member(group, member_id, now_ms)
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.awaiting_join is not None
                                  or member.awaiting_sync is not None):
            # a member parked in a rebalance is alive by definition
            return self._heartbeat_member(group, member, now_ms)
        self._remove_member_and_update_group(group, member_id, now_ms)

    # ================================================================ LeaveGroup
    def handle_leave(self, ev: LeaveGroup) -> None:
        group = self.groups.get(ev.group_id)
        if group is None:
            return self._respond(ev.request_id, LeaveResult(E.NONE, tuple(
                LeaveMemberResult(m.member_id, m.group_instance_id, E.UNKNOWN_MEMBER_ID)
                for m in ev.members)))
        if group.is_(S.DEAD):
            return self._respond(ev.request_id, LeaveResult(E.COORDINATOR_NOT_AVAILABLE))
        results = []
        for lm in ev.members:
            member_id = lm.member_id
            if lm.group_instance_id is not None:
                existing = group.static_members.get(lm.group_instance_id)
                if existing is None:
                    code = E.UNKNOWN_MEMBER_ID
                elif member_id and member_id != existing:
                    code = FENCED_INSTANCE_ID
                else:
                    member_id, code = existing, E.NONE
            elif member_id in group.pending_members:
                self._remove_pending_member(group, member_id, ev.now_ms)
                results.append(LeaveMemberResult(lm.member_id, None, E.NONE))
                continue
            else:
                code = E.NONE if group.has(member_id) else E.UNKNOWN_MEMBER_ID
            if code is E.NONE and group.has(member_id):
                self._remove_member_and_update_group(group, member_id, ev.now_ms)
            results.append(LeaveMemberResult(lm.member_id, lm.group_instance_id, code))
        self._respond(ev.request_id, LeaveResult(E.NONE, tuple(results)))

    # ================================================================ admin
    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, E.NONE, S.DEAD.value, "", "")
        stable = group.is_(S.STABLE)
        members = tuple(MemberDescription(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.metadata_for(group.protocol_name) if stable else b"",
            (m.assignment or b"") if stable else b"") for m in group.members.values())
        return GroupDescription(group_id, E.NONE, group.state.value, group.protocol_type or "",
                                group.protocol_name or "" if stable else "", members)

    def handle_describe(self, ev: DescribeGroups) -> None:
        self._respond(ev.request_id,
                      DescribeResult(tuple(self.describe_group(g) for g in ev.group_ids)))

    def handle_list(self, ev: ListGroups) -> None:
        wanted = {s.lower() for s in ev.states_filter}
        groups = tuple(ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
                       for g in self.groups.values()
                       if not wanted or g.state.value.lower() in wanted)
        self._respond(ev.request_id, ListResult(E.NONE, groups))

    def handle_delete(self, ev: DeleteGroups) -> None:
        results = []
        for gid in ev.group_ids:
            group = self.groups.get(gid)
            if group is None or group.is_(S.DEAD):
                results.append((gid, E.GROUP_ID_NOT_FOUND))
            elif not group.is_(S.EMPTY):
                results.append((gid, E.NON_EMPTY_GROUP))
            else:
                self._drop_group(group, ev.now_ms)
                self._out.append(PersistGroup(gid, None))
                results.append((gid, E.NONE))
        self._respond(ev.request_id, DeleteResult(tuple(results)))

    # ================================================================ committed offsets
    # Offsets live in the driver's OffsetStore; the coordinator only says whether a commit
    # may happen, because that depends on the group's generation and members.
    def validate_offset_commit(self, group_id: str, generation_id: int, member_id: str,
                               instance_id: Optional[str], now_ms: int
                               ) -> tuple[Optional[E], list[Action]]:
        """(error or None, actions). A commit by a group member counts as its heartbeat. A
        commit with no generation and no member (a consumer that assigns partitions itself)
        creates an Empty group on first use, as Kafka does, so that it can be listed and
        deleted; it is refused while the group has members."""
        self._out = []
        err = self._check_offset_commit(group_id, generation_id, member_id, instance_id, now_ms)
        out, self._out = self._out, []
        return err, out

    def _check_offset_commit(self, group_id, generation_id, member_id, instance_id, now_ms):
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return E.ILLEGAL_GENERATION   # from a generation this coordinator never had
            self.ensure_group(group_id, now_ms)
            return None
        if group.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id or instance_id is not None:
            err = self._validate_member(group, member_id, instance_id)
            if err is not None:
                return err
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif not group.is_(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID        # only members commit for a group with members
        if group.is_(S.COMPLETING_REBALANCE):
            # the member has its new generation but not yet its assignment
            return E.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is not None and not member.is_new:
            self._heartbeat_member(group, member, now_ms)
        return None

    def ensure_group(self, group_id: str, now_ms: int) -> Group:
        """An Empty group with no protocol, for offsets committed outside group management
        (or loaded without a metadata record). Nothing is persisted for it."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        return group

    def subscribed_topics(self, group_id: str) -> Optional[set[str]]:
        """Topics the members of a "consumer" group subscribe to, or None when unknown (not a
        consumer group, no protocol chosen yet, or a subscription that does not parse)."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type != PROTOCOL_TYPE or group.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in group.members.values():
                topics.update(decode_subscription(m.metadata_for(group.protocol_name)).topics)
        except (DecodeError, KeyError):
            return None
        return topics

    def remove_group_if_empty(self, group_id: str, now_ms: int) -> list[Action]:
        """Called once a group's last offset expired: an Empty group with nothing left goes
        away, with a tombstone so that it stays gone after a reload. Not while a new member is
        between its two KIP-394 joins: its second join would find no group (Kafka removes it
        anyway, and the member starts over); once that member timed out, a later run does."""
        self._out = []
        group = self.groups.get(group_id)
        if group is not None and group.is_(S.EMPTY) and not group.pending_members:
            self._drop_group(group, now_ms)
            self._out.append(PersistGroup(group_id, None))
        out, self._out = self._out, []
        return out

    def load_group(self, group_id: str, record: Optional[GroupMetadataRecord],
                   now_ms: int) -> list[Action]:
        """Restore a group from its latest __consumer_offsets record (coordinator failover or
        restart). A group with members comes back Stable in its generation, each member with
        a fresh session deadline; a tombstone (None) removes the group."""
        self._out = []
        old = self.groups.get(group_id)
        if old is not None:
            for key in [k for k in self.timers if k[1] == group_id]:
                self._cancel(key)
            del self.groups[group_id]
        if record is not None:
            group = Group.from_record(group_id, record)
            if group.members:
                for m in group.members.values():
                    self._heartbeat_member(group, m, now_ms)
            self.groups[group_id] = group
        out, self._out = self._out, []
        return out

    def unload_group(self, group_id: str, now_ms: int) -> list[Action]:
        """The coordinator moved away (offsets partition emigrated): answer parked requests
        with NOT_COORDINATOR and forget the group. Nothing is persisted."""
        self._out = []
        group = self.groups.get(group_id)
        if group is not None:
            for m in group.members.values():
                if m.awaiting_join is not None:
                    self._respond(m.awaiting_join, JoinResult(E.NOT_COORDINATOR,
                                                              member_id=m.member_id))
                if m.awaiting_sync is not None:
                    self._respond(m.awaiting_sync, SyncResult(E.NOT_COORDINATOR))
                m.awaiting_join = m.awaiting_sync = None
            self._drop_group(group, now_ms)
        out, self._out = self._out, []
        return out

    def _drop_group(self, group: Group, now_ms: int) -> None:
        group.transition_to(S.DEAD, now_ms)
        for key in [k for k in self.timers if k[1] == group.group_id]:
            self._cancel(key)
        del self.groups[group.group_id]

    # ================================================================ timers
    def _fire(self, key: tuple, now_ms: int) -> None:
        group = self.groups.get(key[1])
        if group is None:
            return
        if key[0] == "join":
            self._on_join_timer(group, now_ms)
        elif key[0] == "sync":
            self._on_sync_timer(group, now_ms)
        elif key[0] == "heartbeat":
            self._on_heartbeat_timer(group, key[2], now_ms)

    # By event class, its handler (whose argument type the table cannot say, hence Any).
    _HANDLERS: dict[type, Callable[[Coordinator, Any], None]] = {
        JoinGroup: handle_join, SyncGroup: handle_sync, Heartbeat: handle_heartbeat,
        LeaveGroup: handle_leave, DescribeGroups: handle_describe, ListGroups: handle_list,
        DeleteGroups: handle_delete,
    }
