"""KRaft's RPCs as sans-IO values.

Field names follow Kafka's message specs (VoteRequest.json, FetchResponse.json, ...) in
snake_case. The Topics/Partitions nesting is flattened: the quorum replicates exactly one
partition, __cluster_metadata-0, so the driver's codec wraps these fields in it. Where Kafka has
two error codes (top level and per partition) both are kept: the top level answers for the request
as a whole (INCONSISTENT_CLUSTER_ID), the partition level for Raft's own checks.

Optional structs that Kafka encodes as tagged fields defaulting to -1 (DivergingEpoch,
SnapshotId) are `None` when absent. Records are modelled as a tuple of Entry values; the wire
codec will carry them as record batches.

Every message travels inside a RaftMessage that names its source, destination and correlation id,
as Kafka's request header does: a response carries the id of the request it answers, which is how
a replica tells the answer to its current request from a late or duplicated one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from core.protocol.api_keys import ApiKey
from core.protocol.errors import ErrorCode
from core.raft.entries import NO_LEADER, UNKNOWN_OFFSET, Entry, SnapshotId

NONE = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int = NO_LEADER
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Fetch's DivergingEpoch: the follower should truncate to the end of this epoch."""
    epoch: int
    end_offset: int


# --- Vote (api key 52) -------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest:
    api_key: ClassVar[int] = ApiKey.VOTE
    cluster_id: str | None
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    # KIP-996 (VoteRequest v2's PreVote): ask "would you vote for me?" without bumping the epoch
    # or binding the voter. The shared v0-1 spec predates it; the codec step adds v2.
    pre_vote: bool = False
    voter_id: int = NO_LEADER  # v1+: the voter the candidate meant to ask


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse:
    api_key: ClassVar[int] = ApiKey.VOTE
    error_code: ErrorCode = NONE
    partition_error_code: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    vote_granted: bool = False


# --- BeginQuorumEpoch (53) ------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochRequest:
    api_key: ClassVar[int] = ApiKey.BEGIN_QUORUM_EPOCH
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    voter_id: int = NO_LEADER


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochResponse:
    api_key: ClassVar[int] = ApiKey.BEGIN_QUORUM_EPOCH
    error_code: ErrorCode = NONE
    partition_error_code: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int = -1


# --- EndQuorumEpoch (54) --------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochRequest:
    api_key: ClassVar[int] = ApiKey.END_QUORUM_EPOCH
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    # Voters ranked by how far they had replicated; the first campaigns at once, the others back
    # off longer the further down they are (v0 PreferredSuccessors; v1 adds directory ids).
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochResponse:
    api_key: ClassVar[int] = ApiKey.END_QUORUM_EPOCH
    error_code: ErrorCode = NONE
    partition_error_code: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int = -1


# --- Fetch (1), KRaft's use of it -----------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    api_key: ClassVar[int] = ApiKey.FETCH
    cluster_id: str | None
    replica_id: int           # v15+: ReplicaState.ReplicaId; observers send theirs too
    replica_epoch: int = -1   # v15+: the broker epoch; KRaft replicas send -1
    max_wait_ms: int
    min_bytes: int = 0
    max_bytes: int
    current_leader_epoch: int
    fetch_offset: int         # the fetcher's log end offset, durable on its disk
    last_fetched_epoch: int   # the epoch of the entry at fetch_offset - 1
    log_start_offset: int = UNKNOWN_OFFSET
    partition_max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse:
    api_key: ClassVar[int] = ApiKey.FETCH
    error_code: ErrorCode = NONE
    partition_error_code: ErrorCode = NONE
    high_watermark: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    snapshot_id: SnapshotId | None = None
    records: tuple[Entry, ...] = ()


# --- FetchSnapshot (59) ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotRequest:
    api_key: ClassVar[int] = ApiKey.FETCH_SNAPSHOT
    cluster_id: str | None
    replica_id: int
    max_bytes: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotResponse:
    api_key: ClassVar[int] = ApiKey.FETCH_SNAPSHOT
    error_code: ErrorCode = NONE
    partition_error_code: ErrorCode = NONE
    snapshot_id: SnapshotId = SnapshotId(UNKNOWN_OFFSET, -1)
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    size: int = 0               # the whole snapshot's size in bytes
    position: int = 0           # where this chunk starts
    unaligned_records: bytes = b""


# --- DescribeQuorum (55) --------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumRequest:
    api_key: ClassVar[int] = ApiKey.DESCRIBE_QUORUM


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumResponse:
    api_key: ClassVar[int] = ApiKey.DESCRIBE_QUORUM
    error_code: ErrorCode = NONE
    partition_error_code: ErrorCode = NONE
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    high_watermark: int = UNKNOWN_OFFSET
    current_voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()


RaftRequest = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
               | FetchSnapshotRequest | DescribeQuorumRequest)
RaftResponse = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
                | FetchSnapshotResponse | DescribeQuorumResponse)
REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
                 FetchSnapshotRequest, DescribeQuorumRequest)


@dataclass(frozen=True, slots=True)
class RaftMessage:
    """One request or response between two replicas (or an admin client and a replica)."""
    source_id: int
    destination_id: int
    correlation_id: int
    data: RaftRequest | RaftResponse

    @property
    def is_request(self) -> bool:
        return isinstance(self.data, REQUEST_TYPES)
