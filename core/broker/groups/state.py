"""Group states, their legal transitions, and the in-memory group/member records.

Follows Kafka's classic group (GroupMetadata.scala / ClassicGroup.java):

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                 ▲   │                                                 │ leader SyncGroup
      │                 │   └──no member left──▶ Empty                        ▼
      │                 └──────── member join/leave/expiry/leader rejoin ─── Stable
    Dead ◀── any state (deleted or unloaded)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Hashable, Optional

from .events import GroupMetadataRecord, MemberRecord, Protocols


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"   # a.k.a. AwaitingSync
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState

#: state -> the states it may be entered from
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass
class Member:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: Optional[bytes] = None       # None = none from the current generation
    awaiting_join: Optional[Hashable] = None  # request id of a parked JoinGroup
    awaiting_sync: Optional[Hashable] = None  # request id of a parked SyncGroup
    is_new: bool = False                      # joined, never completed a join yet

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: Optional[str]) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError("member supports none of the candidate protocols")


@dataclass
class Group:
    group_id: str
    state: GroupState = S.EMPTY
    generation_id: int = 0
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    leader_id: Optional[str] = None
    members: dict[str, Member] = field(default_factory=dict)   # insertion ordered
    pending_members: set[str] = field(default_factory=set)     # got MEMBER_ID_REQUIRED
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_sync: set[str] = field(default_factory=set)         # joined, not yet synced
    new_member_added: bool = False
    join_kind: str = "normal"          # "initial" (KIP-134 delayed) or "normal"
    initial_delay_remaining_ms: int = 0
    state_timestamp_ms: int = 0

    # -- state ---------------------------------------------------------------------------
    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    # -- members -------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give the member `old_id` the id `new_id`, keeping its place in the member order."""
        member = self.members[old_id]
        member.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    # -- protocols -----------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and \
            any(n in self.candidate_protocols() for n in names)

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol that all members support;
        the most votes win. Ties go to the protocol the leader (or first member) prefers."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise RuntimeError("no protocol supported by all members")
        votes: dict[str, int] = {}
        for m in self.members.values():
            v = m.vote(candidates)
            votes[v] = votes.get(v, 0) + 1
        first = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(first.protocol_names())}
        return max(votes, key=lambda n: (votes[n], -order.get(n, len(order))))

    # -- persistence ---------------------------------------------------------------------
    def to_record(self) -> GroupMetadataRecord:
        """The record for __consumer_offsets: members only once a protocol is chosen."""
        members: tuple[MemberRecord, ...] = ()
        if self.protocol_name is not None:
            members = tuple(
                MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             m.rebalance_timeout_ms, m.session_timeout_ms,
                             m.metadata_for(self.protocol_name), m.assignment or b"")
                for m in self.members.values())
        return GroupMetadataRecord(self.protocol_type or "", self.generation_id,
                                   self.protocol_name, self.leader_id if members else None,
                                   self.state_timestamp_ms, members)

    @classmethod
    def from_record(cls, group_id: str, record: GroupMetadataRecord) -> "Group":
        """A loaded group is Stable if it has members, else Empty (Kafka does the same)."""
        group = cls(group_id, generation_id=record.generation_id,
                    protocol_type=record.protocol_type or None,
                    protocol_name=record.protocol_name,
                    state_timestamp_ms=record.current_state_timestamp_ms)
        for mr in record.members:
            group.add(Member(mr.member_id, mr.group_instance_id, mr.client_id, mr.client_host,
                             mr.rebalance_timeout_ms, mr.session_timeout_ms,
                             record.protocol_type,
                             ((record.protocol_name or "", mr.subscription),),
                             assignment=mr.assignment))
        if group.members:
            if record.leader in group.members:
                group.leader_id = record.leader
            group.state = S.STABLE
        return group
