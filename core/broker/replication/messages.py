"""What goes into a PartitionReplica, what it answers, and the actions it asks the driver for.

Field names follow Kafka's messages (Fetch v15+, AlterPartition v3, OffsetForLeaderEpoch v4,
KRaft's PartitionRecord); the driver maps the wire to these and back. Offsets and epochs are
Kafka's longs/ints, -1 where Kafka uses -1 for "absent".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Union

from core.protocol.errors import ErrorCode

from core.log.epochs import EpochEntry

NO_LEADER = -1
RECOVERED, RECOVERING = 0, 1           # LeaderRecoveryState (KIP-704)
UNKNOWN_OFFSET = -1                    # a follower's log end offset before its first fetch
NO_EPOCH = -1                          # "absent" current/last fetched epoch in a request


# --------------------------------------------------------------------------- metadata (inputs)

@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The metadata image's registration of the partition (KRaft's PartitionRecord +
    PartitionChangeRecords)."""
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_recovery_state: int = RECOVERED


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """The metadata image's registration of a broker, as far as ISR eligibility needs it."""
    broker_epoch: int
    fenced: bool = False
    in_controlled_shutdown: bool = False


# --------------------------------------------------------------------------- leader side

@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """One partition of a Fetch request from a follower (replica id set)."""
    replica_id: int
    broker_epoch: int              # ReplicaState.ReplicaEpoch, -1 if not sent
    current_leader_epoch: int      # -1 if not sent
    fetch_offset: int
    last_fetched_epoch: int        # -1 if not sent
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """Fetch response's DivergingEpoch: the follower's log parts from ours at or before
    end_offset; `epoch` is the largest of our epochs at or below its last fetched epoch."""
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The leader's answer to a follower fetch. With no error and no diverging epoch the driver
    reads records from `read_offset` (whole batches, up to the size limits) and sends them with
    these offsets."""
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    diverging_epoch: DivergingEpoch | None = None
    read_offset: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The outcome of append_as_leader. On NONE the driver writes the batch with these offsets
    and leader epoch (partitionLeaderEpoch in the batch header). `pending` means acks=all is not
    yet satisfied: a CompleteProduce for the request id follows."""
    error: ErrorCode
    base_offset: int = -1
    last_offset: int = -1
    leader_epoch: int = -1
    pending: bool = False


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """OffsetForLeaderEpoch's answer for one partition."""
    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class LeaderOffsets:
    """The leader's log start and end, from ListOffsets (EARLIEST and LATEST) for a replica."""
    error: ErrorCode
    log_start_offset: int = -1
    log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class IsrMember:
    broker_id: int
    broker_epoch: int              # -1 skips the controller's broker epoch check


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """One partition of an AlterPartition request (plus the request-level broker id/epoch)."""
    broker_id: int
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: int = RECOVERED

    @property
    def isr(self) -> tuple[int, ...]:
        return tuple(member.broker_id for member in self.new_isr)


@dataclass(frozen=True, slots=True)
class AlterPartitionAnswer:
    """One partition of an AlterPartition response (a top-level error is the driver's to retry:
    it never reaches the replica)."""
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: int = RECOVERED


# --------------------------------------------------------------------------- follower side

@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A batch header in a fetch response: its offsets and partitionLeaderEpoch."""
    base_offset: int
    last_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """One partition of the leader's Fetch response, as the follower received it."""
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    batches: tuple[FetchedBatch, ...] = ()
    diverging_epoch: DivergingEpoch | None = None


# --------------------------------------------------------------------------- actions (outputs)

@dataclass(frozen=True, slots=True)
class SendFetch:
    request_id: int
    leader_id: int
    fetch: FollowerFetch


@dataclass(frozen=True, slots=True)
class SendListOffsets:
    """Ask the leader for its log start and end (ListOffsets EARLIEST and LATEST with our
    replica id and current leader epoch); answer with on_leader_offsets."""
    request_id: int
    leader_id: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class SendAlterPartition:
    """Send to the controller until a per-partition answer comes back (the driver retries
    transport failures and top-level errors, as Kafka's AlterPartitionManager does)."""
    request_id: int
    request: AlterPartitionRequest


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    """Append the fetched batches covering [base_offset, end_offset) to the log."""
    base_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Drop everything at and after `offset`."""
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    """Delete the whole log; it now starts (and ends) at `offset`."""
    offset: int


@dataclass(frozen=True, slots=True)
class CheckpointEpochs:
    """Write the leader epoch checkpoint file with these entries."""
    entries: tuple[EpochEntry, ...]


@dataclass(frozen=True, slots=True)
class HighWatermarkChanged:
    """Consumers may now read below this offset; checkpoint it from time to time."""
    high_watermark: int


@dataclass(frozen=True, slots=True)
class LogStartOffsetChanged:
    """Segments wholly below this offset may be deleted."""
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class CompleteProduce:
    """Answer an acks=all produce that was pending."""
    request_id: Hashable
    error: ErrorCode
    base_offset: int


@dataclass(frozen=True, slots=True)
class RecordsLost:
    """This replica dropped records it had counted as committed (below its high watermark):
    [start_offset, end_offset) as it held them. Only an unclean election can cause this."""
    start_offset: int
    end_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class UncleanLeadership:
    """We lead after an unclean election (leader recovery state RECOVERING): records the old
    ISR had beyond our log end, `log_end_offset`, are gone."""
    leader_epoch: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class StopReplica:
    """The partition is no longer assigned here: stop serving it (`delete`: delete the log)."""
    delete: bool


Action = Union[SendFetch, SendListOffsets, SendAlterPartition, AppendAsFollower, TruncateTo,
               TruncateFullyAndStartAt, CheckpointEpochs, HighWatermarkChanged,
               LogStartOffsetChanged, CompleteProduce, RecordsLost, UncleanLeadership,
               StopReplica]
