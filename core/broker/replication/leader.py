"""The leader's half of a partition replica (Kafka's Partition.scala, leader paths).

Functions over a PartitionReplica whose role is LEADER and its LeaderState: becoming leader,
appending produced batches, answering follower fetches (DivergingEpoch, errors, what to read),
tracking follower progress, advancing the high watermark, proposing ISR changes, handling the
controller's answers and completing acks=all produces.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable

from core.protocol.errors import ErrorCode

from . import isr as isr_rules
from core.log.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from .isr import (CommittedIsr, IsrState, PendingChange, PendingExpand, PendingShrink,
                  ReplicaProgress)
from .messages import (RECOVERED, RECOVERING, AlterPartitionAnswer, AlterPartitionRequest,
                       AppendResult, CompleteProduce, DivergingEpoch, FetchAnswer, FollowerFetch,
                       HighWatermarkChanged, IsrMember, PartitionMetadata, SendAlterPartition,
                       UncleanLeadership)

if TYPE_CHECKING:
    from .replica import PartitionReplica

ACKS_ALL = -1

# AlterPartition errors after which the controller tells us the change was not applied and our
# partition epoch is right: go back to the committed ISR (Partition.handleAlterPartitionError).
REVERT_ERRORS = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
# Errors that mean our view is stale: stay pending until the metadata says what happened.
AWAIT_METADATA_ERRORS = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.INVALID_REQUEST,
    ErrorCode.NEW_LEADER_ELECTED,
})


@dataclass
class PendingProduce:
    required_offset: int          # last offset + 1: acked once the high watermark reaches it
    base_offset: int
    deadline_ms: int


@dataclass
class LeaderState:
    epoch_start_offset: int
    remotes: dict[int, ReplicaProgress]
    isr_state: IsrState
    next_isr_check_ms: int
    produces: dict[Hashable, PendingProduce] = field(default_factory=dict)


# --- transitions ---------------------------------------------------------------------------

def become_leader(replica: PartitionReplica, part: PartitionMetadata) -> None:
    """Partition.makeLeader: take the ISR and assignment from the metadata; in a new leader
    epoch, open it at our log end in the epoch cache and reset what we know of the followers."""
    now = replica.now()
    state = replica.leader
    is_new_leader = state is None
    is_new_epoch = part.leader_epoch > replica.leader_epoch
    followers = [r for r in part.replicas if r != replica.broker_id]
    if state is None:
        state = LeaderState(epoch_start_offset=replica.log.end_offset, remotes={},
                            isr_state=CommittedIsr(frozenset(part.isr), RECOVERED),
                            next_isr_check_ms=now + replica.config.replica_lag_time_max_ms // 2)
        replica.leader = state
    for follower_id in followers:
        state.remotes.setdefault(follower_id, ReplicaProgress(follower_id))
    for gone in [r for r in state.remotes if r not in followers]:
        del state.remotes[gone]
    if is_new_epoch or part.partition_epoch != replica.partition_epoch or \
            not state.isr_state.in_flight:
        # The metadata overrides any change in flight; its answer will be ignored.
        state.isr_state = CommittedIsr(frozenset(part.isr), RECOVERED)
    # else: this image is the state we already hold (the AlterPartition answer told us that
    # partition epoch) and the change in flight was proposed on it, so the controller may still
    # apply it. Kafka's makeLeader resets it here anyway; then the high watermark can advance
    # without a replica the controller is about to add to the ISR (found by the simulation).
    if is_new_epoch:
        start = replica.log.end_offset
        # Cache the epoch now, before anything is written in it: a follower may hold records of
        # a later epoch than any we have written, and must be able to truncate to ours.
        replica.log.assign_epoch(part.leader_epoch, start)
        replica.checkpoint_epochs()
        for progress in state.remotes.values():
            progress.reset(now, start, is_new_leader, progress.replica_id in part.isr)
        replica.leader_epoch = part.leader_epoch
        state.epoch_start_offset = start
        if part.leader_recovery_state == RECOVERING:
            replica.emit(UncleanLeadership(part.leader_epoch, start, replica.log.high_watermark))
    replica.partition_epoch = part.partition_epoch
    replica.leader_id = replica.broker_id
    maybe_increment_high_watermark(replica, state)


def resign(replica: PartitionReplica, state: LeaderState) -> None:
    """No longer leader: every waiting acks=all produce fails with NOT_LEADER_OR_FOLLOWER."""
    for request_id, produce in state.produces.items():
        replica.emit(CompleteProduce(request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                     produce.base_offset))
    state.produces.clear()


# --- produce -------------------------------------------------------------------------------

def effective_min_isr(replica: PartitionReplica, state: LeaderState) -> int:
    """min.insync.replicas, capped at the replication factor (KAFKA-15583)."""
    return min(replica.config.min_insync_replicas, len(state.remotes) + 1)


def append(replica: PartitionReplica, state: LeaderState, record_count: int, acks: int,
           request_id: Hashable, timeout_ms: int) -> AppendResult:
    """Partition.appendRecordsToLeader, then DelayedProduce for acks=all."""
    refused = _refuse(replica, state, acks, request_id)
    if refused is not None:
        return refused
    log = replica.log
    base = log.end_offset
    last = base + record_count - 1
    log.append(base, last, replica.leader_epoch)
    maybe_increment_high_watermark(replica, state)
    return _await_acks(replica, state, base, last, acks, request_id, timeout_ms)


def await_duplicate(replica: PartitionReplica, state: LeaderState, base_offset: int,
                    last_offset: int, acks: int, request_id: Hashable,
                    timeout_ms: int) -> AppendResult:
    """A retried batch the log already holds at base..last (the producer state found it):
    nothing is appended, but the answer waits as the first append's would have. Kafka's
    appendRecordsToLeader checks min.insync.replicas before the log finds the duplicate, and
    the DelayedProduce then waits for the high watermark to pass the duplicate's last offset.
    Answering at once would acknowledge records a new leader may not have (seen in a fault
    run: a deposed leader, still reachable by clients, acknowledged a retry of a batch only it
    held, and the new leader's log never had it)."""
    refused = _refuse(replica, state, acks, request_id)
    if refused is not None:
        return refused
    return _await_acks(replica, state, base_offset, last_offset, acks, request_id, timeout_ms)


def _refuse(replica: PartitionReplica, state: LeaderState, acks: int,
            request_id: Hashable) -> AppendResult | None:
    if acks == ACKS_ALL and request_id is None:
        raise ValueError("an acks=all produce needs a request id to complete it by")
    if acks == ACKS_ALL and len(state.isr_state.isr) < effective_min_isr(replica, state):
        return AppendResult(ErrorCode.NOT_ENOUGH_REPLICAS)
    return None


def _await_acks(replica: PartitionReplica, state: LeaderState, base: int, last: int, acks: int,
                request_id: Hashable, timeout_ms: int) -> AppendResult:
    """Done now (acks 0/1, or the ISR already has base..last), else pending until a
    CompleteProduce for request_id."""
    if acks == ACKS_ALL:
        done, error = enough_replicas_reach(replica, state, last + 1)
        if not done:
            if request_id in state.produces:
                raise ValueError(f"produce request id {request_id!r} is already waiting")
            state.produces[request_id] = PendingProduce(last + 1, base, replica.now() + timeout_ms)
            return AppendResult(ErrorCode.NONE, base, last, replica.leader_epoch, pending=True)
        return AppendResult(error, base, last, replica.leader_epoch)
    return AppendResult(ErrorCode.NONE, base, last, replica.leader_epoch)


def enough_replicas_reach(replica: PartitionReplica, state: LeaderState,
                          required_offset: int) -> tuple[bool, ErrorCode]:
    """Partition.checkEnoughReplicasReachOffset: done once the high watermark covers the
    records; NOT_ENOUGH_REPLICAS_AFTER_APPEND if by then the maximal ISR is below the minimum."""
    if replica.log.high_watermark < required_offset:
        return False, ErrorCode.NONE
    if len(state.isr_state.maximal_isr) >= effective_min_isr(replica, state):
        return True, ErrorCode.NONE
    return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def complete_produces(replica: PartitionReplica, state: LeaderState) -> None:
    if not state.produces:
        return
    for request_id, produce in list(state.produces.items()):
        done, error = enough_replicas_reach(replica, state, produce.required_offset)
        if done:
            del state.produces[request_id]
            replica.emit(CompleteProduce(request_id, error, produce.base_offset))


def expire_produces(replica: PartitionReplica, state: LeaderState, now: int) -> None:
    for request_id, produce in list(state.produces.items()):
        if produce.deadline_ms <= now:
            del state.produces[request_id]
            replica.emit(CompleteProduce(request_id, ErrorCode.REQUEST_TIMED_OUT,
                                         produce.base_offset))


# --- the high watermark ----------------------------------------------------------------------

def maybe_increment_high_watermark(replica: PartitionReplica, state: LeaderState) -> bool:
    """Advance the high watermark to what the maximal ISR (and the followers about to join it)
    all have; never while the committed ISR is below min.insync.replicas (Kafka 3.7+,
    KAFKA-15583), unless configured otherwise. Completes the produces it satisfies."""
    config = replica.config
    if config.hw_requires_min_isr and \
            len(state.isr_state.isr) < effective_min_isr(replica, state):
        return False
    log = replica.log
    if state.remotes:
        candidate = isr_rules.high_watermark_candidate(
            log.end_offset, state.remotes, state.isr_state.maximal_isr, replica.brokers,
            replica.now(), config.replica_lag_time_max_ms)
    else:   # a sole replica: its own log end (the common one-node case, on every append)
        candidate = log.end_offset
    if not log.maybe_increment_high_watermark(candidate):
        return False
    replica.emit(HighWatermarkChanged(log.high_watermark))
    complete_produces(replica, state)
    return True


def low_watermark(replica: PartitionReplica, state: LeaderState) -> int:
    """Partition.lowWatermarkIfLeader: the lowest log start among the leader and the followers
    on live (registered, unfenced) brokers, each as its last fetch reported it. DeleteRecords
    is done when it reaches the offset asked for: every live replica has dropped the records."""
    low = replica.log.start_offset
    for follower_id, progress in state.remotes.items():
        broker = replica.brokers.get(follower_id)
        if broker is not None and not broker.fenced:
            low = min(low, progress.log_start_offset)
    return low


# --- follower fetches ------------------------------------------------------------------------

def answer_fetch(replica: PartitionReplica, state: LeaderState, fetch: FollowerFetch,
                 update_fetch_state: bool) -> FetchAnswer:
    """Partition.fetchRecords for a follower (the epoch checks were made by the caller)."""
    progress = state.remotes.get(fetch.replica_id)
    if progress is None:
        # Not (yet) a replica in this epoch, e.g. one being added: the follower retries.
        return FetchAnswer(ErrorCode.UNKNOWN_LEADER_EPOCH if fetch.current_leader_epoch >= 0
                           else ErrorCode.NOT_LEADER_OR_FOLLOWER)
    log = replica.log
    # The offsets before this read: an append right after it cannot keep a follower from
    # catching up, and the follower learns of a high watermark it moves on its next fetch.
    hw, start, end = log.high_watermark, log.start_offset, log.end_offset
    offset = fetch.fetch_offset
    if fetch.last_fetched_epoch >= 0:
        epoch, epoch_end = log.epochs.end_offset_for(fetch.last_fetched_epoch, end)
        if epoch == UNDEFINED_EPOCH or epoch_end == UNDEFINED_EPOCH_OFFSET or offset < start:
            return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE)
        if epoch < fetch.last_fetched_epoch or epoch_end < offset:
            return FetchAnswer(ErrorCode.NONE, hw, start, end, DivergingEpoch(epoch, epoch_end))
    if offset < start or offset > end:
        return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE)
    if update_fetch_state:
        known = replica.brokers.get(fetch.replica_id)
        if fetch.broker_epoch != -1 and known is not None and \
                known.broker_epoch > fetch.broker_epoch:
            # A fetch from an earlier incarnation of the follower must not count.
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        previous_end = progress.log_end_offset
        progress.update_fetch_state(offset, fetch.log_start_offset, replica.now(), end,
                                    fetch.broker_epoch)
        maybe_expand_isr(replica, state, progress)
        if progress.log_end_offset != previous_end:
            maybe_increment_high_watermark(replica, state)
    return FetchAnswer(ErrorCode.NONE, hw, start, end, read_offset=offset)


# --- ISR changes -----------------------------------------------------------------------------

def maybe_expand_isr(replica: PartitionReplica, state: LeaderState,
                     progress: ReplicaProgress) -> None:
    """Partition.maybeExpandIsr: propose adding a follower that has caught up."""
    current = state.isr_state
    if current.in_flight or progress.replica_id in current.isr:
        return
    if not isr_rules.is_replica_isr_eligible(progress, replica.brokers):
        return
    if not isr_rules.is_follower_in_sync(progress, replica.log.high_watermark,
                                         state.epoch_start_offset):
        return
    assert isinstance(current, CommittedIsr)
    request_id = replica.next_request_id()
    sent = _alter_request(replica, state, current, current.isr | {progress.replica_id})
    state.isr_state = PendingExpand(request_id, sent, current, progress.replica_id)
    replica.emit(SendAlterPartition(request_id, sent))


def maybe_shrink_isr(replica: PartitionReplica, state: LeaderState) -> None:
    """Partition.maybeShrinkIsr: propose removing the followers that fell behind."""
    current = state.isr_state
    if current.in_flight:
        return
    out = isr_rules.out_of_sync_replicas(current.isr, replica.broker_id, state.remotes,
                                         replica.log.end_offset, replica.now(),
                                         replica.config.replica_lag_time_max_ms)
    if not out:
        return
    assert isinstance(current, CommittedIsr)
    request_id = replica.next_request_id()
    sent = _alter_request(replica, state, current, current.isr - out)
    state.isr_state = PendingShrink(request_id, sent, current, out)
    replica.emit(SendAlterPartition(request_id, sent))


def _alter_request(replica: PartitionReplica, state: LeaderState, current: CommittedIsr,
                   isr: frozenset[int]) -> AlterPartitionRequest:
    """The proposal, with the broker epoch each member last fetched with (-1 if unknown:
    Partition.addBrokerEpochToIsr)."""
    members = []
    for broker_id in sorted(isr):
        if broker_id == replica.broker_id:
            epoch = replica.broker_epoch
        else:
            progress = state.remotes.get(broker_id)
            epoch = progress.broker_epoch if progress is not None and \
                progress.broker_epoch is not None else -1
        members.append(IsrMember(broker_id, epoch))
    return AlterPartitionRequest(replica.broker_id, replica.broker_epoch, replica.leader_epoch,
                                 replica.partition_epoch, tuple(members),
                                 current.leader_recovery_state)


def on_alter_partition_response(replica: PartitionReplica, state: LeaderState, request_id: int,
                                answer: AlterPartitionAnswer) -> None:
    """Partition.submitAlterPartition's callback."""
    pending = state.isr_state
    if not isinstance(pending, PendingChange) or pending.request_id != request_id:
        return   # the metadata (or an earlier answer) moved us on: this answer is stale
    error = answer.error
    if error == ErrorCode.NONE:
        if answer.leader_epoch != replica.leader_epoch or \
                answer.partition_epoch < replica.partition_epoch:
            return   # stays pending until the metadata catches up with the controller
        state.isr_state = CommittedIsr(frozenset(answer.isr), answer.leader_recovery_state)
        replica.partition_epoch = answer.partition_epoch
        maybe_increment_high_watermark(replica, state)
    elif error in REVERT_ERRORS:
        state.isr_state = pending.last_committed
    elif error in AWAIT_METADATA_ERRORS:
        return
    else:
        # Unexpected: send the same proposal again.
        state.isr_state = dataclasses.replace(pending, request_id=replica.next_request_id())
        replica.emit(SendAlterPartition(state.isr_state.request_id, pending.sent))


# --- time ------------------------------------------------------------------------------------

def tick(replica: PartitionReplica, state: LeaderState) -> None:
    now = replica.now()
    expire_produces(replica, state, now)
    if now >= state.next_isr_check_ms:
        # Kafka's isr-expiration task runs every replica.lag.time.max.ms / 2.
        state.next_isr_check_ms = now + max(1, replica.config.replica_lag_time_max_ms // 2)
        maybe_shrink_isr(replica, state)


def next_deadline(replica: PartitionReplica, state: LeaderState) -> int | None:
    """The next ISR check, but only while some ISR follower lacks part of our log: one that has
    all of it is caught up however long ago it fetched (ReplicaProgress.is_caught_up), so an
    idle partition needs no timer. An append makes the check due again."""
    deadline = state.next_isr_check_ms if _isr_may_shrink(replica, state) else None
    for produce in state.produces.values():
        deadline = produce.deadline_ms if deadline is None else min(deadline, produce.deadline_ms)
    return deadline


def _isr_may_shrink(replica: PartitionReplica, state: LeaderState) -> bool:
    end = replica.log.end_offset
    for replica_id in state.isr_state.isr:
        if replica_id == replica.broker_id:
            continue
        progress = state.remotes.get(replica_id)
        if progress is None or progress.log_end_offset != end:
            return True
    return False
