"""PartitionReplica: this broker's replica of one partition, as a pure state machine.

See the package docstring for the theory of operation and the driver contract.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping

from core.protocol.errors import ErrorCode

from . import follower, leader
from .follower import FollowerState
from .leader import LeaderState
from .log import ReplicaLog
from .messages import (NO_LEADER, RECOVERED, Action, AlterPartitionAnswer, AppendResult,
                       BrokerInfo, CheckpointEpochs, EpochEndOffset, FetchAnswer, FetchResponse,
                       FollowerFetch, LeaderOffsets, LogStartOffsetChanged, PartitionMetadata,
                       StopReplica)

Clock = Callable[[], int]


class Role(enum.Enum):
    NONE = "none"            # no metadata applied yet: the partition is not served here
    LEADER = "leader"
    FOLLOWER = "follower"
    STOPPED = "stopped"      # no longer assigned here; the driver drops the object


@dataclass(frozen=True)
class ReplicationConfig:
    """Kafka's broker/topic properties, Kafka's defaults."""
    replica_lag_time_max_ms: int = 30_000       # replica.lag.time.max.ms
    min_insync_replicas: int = 1                # min.insync.replicas
    replica_fetch_backoff_ms: int = 1_000       # replica.fetch.backoff.ms
    # Kafka 3.7+ (KAFKA-15583): the high watermark does not advance while the ISR is below
    # min.insync.replicas, so an acks=all produce caught by a shrink waits (and times out, or
    # completes when the ISR grows back). False gives Kafka <= 3.6, where the high watermark
    # advances on the smaller ISR and such a produce fails with
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    hw_requires_min_isr: bool = True


class PartitionReplica:
    def __init__(self, broker_id: int, broker_epoch: int, *, clock: Clock,
                 config: ReplicationConfig | None = None, log: ReplicaLog | None = None):
        """`broker_epoch` is this broker's registration epoch (sent in Fetch and
        AlterPartition); `log` is the local log as recovered (an empty one by default)."""
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.config = config or ReplicationConfig()
        self._clock = clock
        self.log = log if log is not None else ReplicaLog()
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = 0
        self.replicas: tuple[int, ...] = ()
        self.metadata_isr: tuple[int, ...] = ()
        self.brokers: dict[int, BrokerInfo] = {}
        self.leader: LeaderState | None = None
        self.follower: FollowerState | None = None
        self._outbox: list[Action] = []
        self._next_request_id = 1

    def __repr__(self) -> str:
        return (f"Replica({self.broker_id} {self.role.value} leader={self.leader_id} "
                f"epoch={self.leader_epoch} pe={self.partition_epoch} isr={sorted(self.isr)} "
                f"{self.log!r})")

    # --- plumbing used by leader.py and follower.py ---------------------------------------------

    def now(self) -> int:
        return self._clock()

    def emit(self, action: Action) -> None:
        self._outbox.append(action)

    def next_request_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        return request_id

    def checkpoint_epochs(self) -> None:
        if self.log.take_epochs_changed():
            self.emit(CheckpointEpochs(self.log.epochs.entries))

    # --- what the driver reads --------------------------------------------------------------------

    def take_actions(self) -> list[Action]:
        """The actions produced since the last call, to carry out in order."""
        self.checkpoint_epochs()
        actions, self._outbox = self._outbox, []
        return actions

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.start_offset

    @property
    def low_watermark(self) -> int:
        """On a leader, the lowest log start of its live replicas (leader.low_watermark);
        elsewhere this replica's own."""
        if self.leader is None:
            return self.log.start_offset
        return leader.low_watermark(self, self.leader)

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR: the leader's, else the metadata's."""
        if self.leader is not None:
            return self.leader.isr_state.isr
        return frozenset(self.metadata_isr)

    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.leader is not None:
            return self.leader.isr_state.maximal_isr
        return frozenset(self.metadata_isr)

    @property
    def under_replicated(self) -> bool:
        """Kafka's UnderReplicated gauge: a leader whose ISR lacks some replica."""
        return self.leader is not None and len(self.leader.isr_state.isr) < len(self.replicas)

    @property
    def under_min_isr(self) -> bool:
        """Kafka's UnderMinIsr gauge: acks=all produces are refused."""
        return self.leader is not None and \
            len(self.leader.isr_state.isr) < leader.effective_min_isr(self, self.leader)

    @property
    def at_min_isr(self) -> bool:
        """Kafka's AtMinIsr gauge: one more replica out of the ISR and acks=all is refused."""
        return self.leader is not None and \
            len(self.leader.isr_state.isr) == leader.effective_min_isr(self, self.leader)

    def next_deadline_ms(self) -> int | None:
        """When tick() has something to do (None: nothing until an input arrives)."""
        if self.leader is not None:
            return leader.next_deadline(self, self.leader)
        if self.follower is not None:
            return follower.next_deadline(self.follower)
        return None

    # --- metadata ---------------------------------------------------------------------------------

    def apply_metadata(self, partition: PartitionMetadata,
                       brokers: Mapping[int, BrokerInfo] | None = None) -> None:
        """The metadata image changed: the partition's registration and (if given) the brokers'.
        Leads, follows or stops as it says (ReplicaManager.applyDelta)."""
        if self.role is Role.STOPPED:
            return
        if brokers is not None:
            self.brokers = dict(brokers)
        if self.broker_id not in partition.replicas:
            self.stop(delete=True)
            return
        if partition.partition_epoch < self.partition_epoch:
            return   # the AlterPartition answer already told us something newer
        self.replicas = tuple(partition.replicas)
        self.metadata_isr = tuple(partition.isr)
        if partition.leader == self.broker_id:
            if self.follower is not None:
                self.follower = None
            self.role = Role.LEADER
            leader.become_leader(self, partition)
        else:
            if self.leader is not None:
                leader.resign(self, self.leader)
                self.leader = None
            self.role = Role.FOLLOWER
            follower.become_follower(self, partition)

    def stop(self, delete: bool = False) -> None:
        """StopReplica: no longer serve the partition here."""
        if self.role is Role.STOPPED:
            return
        if self.leader is not None:
            leader.resign(self, self.leader)
        self.leader = None
        self.follower = None
        self.role = Role.STOPPED
        self.leader_id = NO_LEADER
        self.emit(StopReplica(delete))

    # --- requests a leader answers ------------------------------------------------------------

    def local_log_error(self, current_leader_epoch: int, require_leader: bool) -> ErrorCode:
        """Partition.getLocalLog: the error a request naming `current_leader_epoch` (-1: none)
        gets here, or NONE. KIP-320: an older epoch is fenced, a newer one is unknown yet."""
        if self.role in (Role.NONE, Role.STOPPED):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch >= 0:
            if self.leader_epoch > current_leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if self.leader_epoch < current_leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
        if require_leader and self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def append_as_leader(self, record_count: int, *, acks: int,
                         request_id: Hashable = None, timeout_ms: int = 30_000) -> AppendResult:
        """A produced batch of `record_count` records (already validated by the driver):
        assigns its offsets and epoch. acks=-1 may leave it pending (see AppendResult)."""
        if record_count <= 0:
            raise ValueError("a batch holds at least one record")
        if self.role is not Role.LEADER:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert self.leader is not None   # the leader role has its state
        return leader.append(self, self.leader, record_count, acks, request_id, timeout_ms)

    def duplicate_as_leader(self, base_offset: int, last_offset: int, *, acks: int,
                            request_id: Hashable = None, timeout_ms: int = 30_000) -> AppendResult:
        """A retried batch already in the log at base..last: answered (maybe later, see
        AppendResult.pending) as its first append would have been; nothing is written."""
        if self.role is not Role.LEADER:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        # Below the log start is fine (retention may have taken the batch; its producer
        # state stays); beyond the end would mean the producer state outlived a truncation.
        if not base_offset <= last_offset < self.log.end_offset:
            raise ValueError(f"duplicate at {base_offset}..{last_offset} is beyond the log end "
                             f"{self.log.end_offset}")
        assert self.leader is not None   # the leader role has its state
        return leader.await_duplicate(self, self.leader, base_offset, last_offset, acks,
                                      request_id, timeout_ms)

    def on_follower_fetch(self, fetch: FollowerFetch, *,
                          update_fetch_state: bool = True) -> FetchAnswer:
        """A follower's Fetch for this partition. Pass update_fetch_state=False when answering
        a fetch that waited (long poll) and was already counted (Kafka's DelayedFetch)."""
        error = self.local_log_error(fetch.current_leader_epoch, require_leader=True)
        if error != ErrorCode.NONE:
            return FetchAnswer(error)
        assert self.leader is not None   # local_log_error required the leader role
        return leader.answer_fetch(self, self.leader, fetch, update_fetch_state)

    def offset_for_leader_epoch(self, leader_epoch: int,
                                current_leader_epoch: int = -1) -> EpochEndOffset:
        """OffsetForLeaderEpoch (leader only): the end of `leader_epoch` in our log."""
        error = self.local_log_error(current_leader_epoch, require_leader=True)
        if error != ErrorCode.NONE:
            return EpochEndOffset(error)
        found = self.log.end_offset_for_epoch(leader_epoch)
        if found is None:
            return EpochEndOffset(ErrorCode.NONE)
        return EpochEndOffset(ErrorCode.NONE, found.epoch, found.offset)

    def leader_offsets(self, current_leader_epoch: int = -1) -> LeaderOffsets:
        """ListOffsets EARLIEST/LATEST from a replica: our log start and end."""
        error = self.local_log_error(current_leader_epoch, require_leader=True)
        if error != ErrorCode.NONE:
            return LeaderOffsets(error)
        return LeaderOffsets(ErrorCode.NONE, self.log.start_offset, self.log.end_offset)

    def on_alter_partition_response(self, request_id: int,
                                    answer: AlterPartitionAnswer) -> None:
        if self.leader is not None:
            leader.on_alter_partition_response(self, self.leader, request_id, answer)

    # --- answers a follower receives ------------------------------------------------------------

    def on_fetch_response(self, request_id: int, response: FetchResponse) -> None:
        if self.follower is not None:
            follower.on_fetch_response(self, self.follower, request_id, response)

    def on_fetch_failed(self, request_id: int) -> None:
        if self.follower is not None:
            follower.on_fetch_failed(self, self.follower, request_id)

    def on_leader_offsets(self, request_id: int, answer: LeaderOffsets) -> None:
        if self.follower is not None:
            follower.on_leader_offsets(self, self.follower, request_id, answer)

    # --- the log and the clock ------------------------------------------------------------------

    def log_start_advanced(self, offset: int) -> None:
        """Retention or DeleteRecords moved the log start (at most to the high watermark)."""
        if self.log.maybe_increment_start_offset(offset):
            self.checkpoint_epochs()
            self.emit(LogStartOffsetChanged(self.log.start_offset))

    def tick(self) -> None:
        """The clock moved: time out produces, check the ISR, retry fetches after backoff."""
        if self.leader is not None:
            leader.tick(self, self.leader)
        elif self.follower is not None:
            follower.tick(self, self.follower)


__all__ = ["PartitionReplica", "ReplicationConfig", "Role", "RECOVERED"]
