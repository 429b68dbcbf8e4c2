"""Inputs and outputs of the classic group coordinator (sans-IO).

Every input event carries the request id the driver uses to route the answer, and `now_ms`,
the driver's clock. The coordinator never reads a clock and never does I/O: it returns
actions, which the driver executes in order. `PersistGroup` must be durable before any
`Respond` that follows it in the same batch is sent (etcd-raft's `Ready` contract).

Wire-version differences are the driver's business: it fills the event fields a version
lacks with the defaults below (e.g. JoinGroup v0 has no rebalance timeout: pass the session
timeout) and drops result fields a version cannot carry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Optional, Union

from core.protocol.errors import ErrorCode

GROUP_MAX_SIZE_REACHED = ErrorCode.GROUP_MAX_SIZE_REACHED
FENCED_INSTANCE_ID = ErrorCode.FENCED_INSTANCE_ID

Protocols = tuple[tuple[str, bytes], ...]  # (protocol name, member metadata), in preference order


# ----------------------------------------------------------------------------- input events

@dataclass(frozen=True)
class JoinGroup:
    request_id: Hashable
    now_ms: int
    group_id: str
    member_id: str                       # "" = UNKNOWN_MEMBER_ID
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool = False  # JoinGroup v9+
    reason: Optional[str] = None


@dataclass(frozen=True)
class SyncGroup:
    request_id: Hashable
    now_ms: int
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()  # only the leader sends them
    group_instance_id: Optional[str] = None
    protocol_type: Optional[str] = None   # v5+, None = not sent
    protocol_name: Optional[str] = None   # v5+, None = not sent


@dataclass(frozen=True)
class Heartbeat:
    request_id: Hashable
    now_ms: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class LeaveGroup:
    """v0-v2 carry one member id; the driver wraps it as a one-element batch."""
    request_id: Hashable
    now_ms: int
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True)
class DescribeGroups:
    request_id: Hashable
    now_ms: int
    group_ids: tuple[str, ...]


@dataclass(frozen=True)
class ListGroups:
    request_id: Hashable
    now_ms: int
    states_filter: tuple[str, ...] = ()   # v4+, empty = all


@dataclass(frozen=True)
class DeleteGroups:
    request_id: Hashable
    now_ms: int
    group_ids: tuple[str, ...]


Event = Union[JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups,
              DeleteGroups]


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class JoinMember:
    member_id: str
    group_instance_id: Optional[str]
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinMember, ...] = ()  # only for the leader
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode


@dataclass(frozen=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: Optional[str]
    error: ErrorCode


@dataclass(frozen=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[LeaveMemberResult, ...] = ()


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    metadata: bytes      # empty unless the group is Stable
    assignment: bytes    # empty unless the group is Stable


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol_name: str   # "" unless Stable
    members: tuple[MemberDescription, ...] = ()


@dataclass(frozen=True)
class DescribeResult:
    groups: tuple[GroupDescription, ...]


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class ListResult:
    error: ErrorCode
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True)
class DeleteResult:
    results: tuple[tuple[str, ErrorCode], ...]


@dataclass(frozen=True)
class CommitResult:
    """What an offset commit answers: one code for every partition of the request."""
    error: ErrorCode


Result = Union[JoinResult, SyncResult, HeartbeatResult, LeaveResult, DescribeResult,
               ListResult, DeleteResult, CommitResult]


# ----------------------------------------------------------------------------- persistence

@dataclass(frozen=True)
class MemberRecord:
    """One member in the group metadata record (Kafka's GroupMetadataValue.MemberMetadata)."""
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes   # metadata of the selected protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataRecord:
    """What goes to __consumer_offsets for a group (Kafka's GroupMetadataValue)."""
    protocol_type: str
    generation_id: int
    protocol_name: Optional[str]
    leader: Optional[str]
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...] = ()


# ----------------------------------------------------------------------------- actions

@dataclass(frozen=True)
class Respond:
    request_id: Hashable
    result: Result


@dataclass(frozen=True)
class ScheduleTimer:
    """Arm (or re-arm) the timer `key`; the driver calls `Coordinator.tick` at or after at_ms."""
    key: tuple
    at_ms: int


@dataclass(frozen=True)
class CancelTimer:
    key: tuple


@dataclass(frozen=True)
class PersistGroup:
    """Write the group's metadata record; `metadata=None` is a tombstone (group deleted)."""
    group_id: str
    metadata: Optional[GroupMetadataRecord]


Action = Union[Respond, ScheduleTimer, CancelTimer, PersistGroup]
