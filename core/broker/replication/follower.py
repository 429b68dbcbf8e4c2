"""The follower's half of a partition replica (Kafka's AbstractFetcherThread and
ReplicaFetcherThread for one partition).

A follower pulls: one Fetch at a time to its leader, from its log end, naming the epoch of its
last record. The answer is records to append, a DivergingEpoch to truncate to, or an error:

    NONE + batches           append, take the leader's high watermark (clamped to our log end)
    NONE + DivergingEpoch    truncate (offset_to_truncate_to), fetch again from the new end
    OFFSET_OUT_OF_RANGE      ask the leader for its log start and end (ListOffsets), then
                             truncate to its end if ours is beyond it, or start over at its
                             start if ours is before it (fetchOffsetAndTruncate)
    FENCED_LEADER_EPOCH      our epoch is behind: stop fetching until the metadata moves on
    anything else            back off replica.fetch.backoff.ms and retry

Truncating below our own high watermark drops records we had counted as committed; that only
happens after an unclean election, and is reported (RecordsLost).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.protocol.errors import ErrorCode

from .log import ReplicaLog
from .messages import (NO_EPOCH, NO_LEADER, AppendAsFollower, DivergingEpoch, FetchResponse,
                       FollowerFetch, HighWatermarkChanged, LeaderOffsets, LogStartOffsetChanged,
                       PartitionMetadata, RecordsLost, SendFetch, SendListOffsets, TruncateTo,
                       TruncateFullyAndStartAt)

if TYPE_CHECKING:
    from .replica import PartitionReplica


@dataclass
class FollowerState:
    leader_id: int
    fetch_offset: int
    last_fetched_epoch: int | None
    in_flight: int | None = None          # request id of the Fetch or ListOffsets under way
    listing_offsets: bool = False         # the request under way is a ListOffsets
    backoff_until_ms: int | None = None
    failed: bool = False                  # fenced: wait for new metadata


def offset_to_truncate_to(log: ReplicaLog, diverging: DivergingEpoch) -> tuple[int, bool]:
    """AbstractFetcherThread.getOffsetTruncationState: where to cut our log given the leader's
    DivergingEpoch, and whether that is final.

    If we know the leader's epoch, cut at the smaller of the two ends of that epoch: below it
    both logs hold the same records. If we do not, cut at the end of our largest epoch below it;
    the next fetch names that epoch and the leader answers again (not final).
    """
    end = log.end_offset
    ours = log.end_offset_for_epoch(diverging.epoch)
    if ours is None:
        return min(diverging.end_offset, end), True
    if ours.epoch != diverging.epoch:
        return min(ours.offset, end), False
    return min(ours.offset, diverging.end_offset, end), True


# --- transitions -----------------------------------------------------------------------------

def become_follower(replica: PartitionReplica, part: PartitionMetadata) -> None:
    """Partition.makeFollower plus the fetcher restart ReplicaManager does on a new epoch."""
    is_new_epoch = part.leader_epoch > replica.leader_epoch
    replica.leader_id = part.leader
    replica.leader_epoch = part.leader_epoch
    replica.partition_epoch = part.partition_epoch
    if not is_new_epoch and replica.follower is not None:
        return
    replica.follower = None
    if part.leader == NO_LEADER:
        return   # offline: nobody to fetch from until a leader is elected
    log = replica.log
    latest = log.latest_epoch
    if latest is None and log.end_offset > log.start_offset:
        # Records but no epochs (never the case for logs we write): trust only the HW.
        _truncate(replica, log.high_watermark)
    replica.follower = FollowerState(part.leader, log.end_offset, log.latest_epoch)
    maybe_send_fetch(replica, replica.follower)


def maybe_send_fetch(replica: PartitionReplica, state: FollowerState) -> None:
    if state.in_flight is not None or state.failed:
        return
    if state.backoff_until_ms is not None:
        if replica.now() < state.backoff_until_ms:
            return
        state.backoff_until_ms = None
    log = replica.log
    request_id = replica.next_request_id()
    state.in_flight = request_id
    state.listing_offsets = False
    fetch = FollowerFetch(replica.broker_id, replica.broker_epoch, replica.leader_epoch,
                          state.fetch_offset,
                          NO_EPOCH if state.last_fetched_epoch is None
                          else state.last_fetched_epoch,
                          log.start_offset)
    replica.emit(SendFetch(request_id, state.leader_id, fetch))


def _back_off(replica: PartitionReplica, state: FollowerState) -> None:
    state.backoff_until_ms = replica.now() + replica.config.replica_fetch_backoff_ms


def _refresh_position(replica: PartitionReplica, state: FollowerState) -> None:
    state.fetch_offset = replica.log.end_offset
    state.last_fetched_epoch = replica.log.latest_epoch


def _truncate(replica: PartitionReplica, offset: int) -> None:
    log = replica.log
    old_hw = log.high_watermark
    if log.truncate_to(offset):
        replica.emit(TruncateTo(offset))
        if offset < old_hw:
            replica.emit(RecordsLost(offset, old_hw, replica.leader_epoch))
            replica.emit(HighWatermarkChanged(log.high_watermark))
    replica.checkpoint_epochs()


# --- answers ---------------------------------------------------------------------------------

def on_fetch_response(replica: PartitionReplica, state: FollowerState, request_id: int,
                      response: FetchResponse) -> None:
    if state.in_flight != request_id or state.listing_offsets:
        return
    state.in_flight = None
    error = response.error
    if error == ErrorCode.NONE:
        if response.diverging_epoch is not None:
            offset, _final = offset_to_truncate_to(replica.log, response.diverging_epoch)
            _truncate(replica, offset)
            _refresh_position(replica, state)
        elif not _append(replica, state, response):
            _back_off(replica, state)
            return
    elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
        request = replica.next_request_id()
        state.in_flight = request
        state.listing_offsets = True
        replica.emit(SendListOffsets(request, state.leader_id, replica.leader_epoch))
        return
    elif error == ErrorCode.FENCED_LEADER_EPOCH:
        # The leader is in a later epoch than the one we fetched in, which is still ours:
        # wait for the metadata to bring the new epoch (AbstractFetcherThread.onPartitionFenced).
        state.failed = True
        return
    else:
        _back_off(replica, state)
        return
    maybe_send_fetch(replica, state)


def _append(replica: PartitionReplica, state: FollowerState, response: FetchResponse) -> bool:
    """ReplicaFetcherThread.processPartitionData; False if the records do not fit our log."""
    log = replica.log
    batches = response.batches
    if batches:
        first = batches[0]
        if first.base_offset != log.end_offset:
            straddles_start = (log.end_offset == log.start_offset
                               and first.base_offset < log.end_offset <= first.last_offset)
            if not straddles_start:
                return False
            # The leader's log start is inside this batch (DeleteRecords): restart the log at
            # the batch (Partition.appendRecordsToFollowerOrFutureReplica).
            log.truncate_fully_and_start_at(first.base_offset)
            replica.emit(TruncateFullyAndStartAt(first.base_offset))
        expected = first.base_offset
        for batch in batches:
            if batch.base_offset != expected or batch.last_offset < batch.base_offset:
                raise ValueError(f"fetched batches are not contiguous: {batches}")
            expected = batch.last_offset + 1
        base = log.end_offset
        for batch in batches:
            log.append(batch.base_offset, batch.last_offset, batch.leader_epoch)
        replica.checkpoint_epochs()   # the epochs are durable before records that need them
        replica.emit(AppendAsFollower(base, log.end_offset))
        _refresh_position(replica, state)
    if log.update_high_watermark(response.high_watermark):
        replica.emit(HighWatermarkChanged(log.high_watermark))
    if 0 <= response.log_start_offset <= log.high_watermark and \
            log.maybe_increment_start_offset(response.log_start_offset):
        replica.checkpoint_epochs()
        replica.emit(LogStartOffsetChanged(log.start_offset))
    return True


def on_fetch_failed(replica: PartitionReplica, state: FollowerState, request_id: int) -> None:
    """The Fetch (or ListOffsets) got no answer: a lost connection, a timeout."""
    if state.in_flight != request_id:
        return
    state.in_flight = None
    state.listing_offsets = False
    _back_off(replica, state)


def on_leader_offsets(replica: PartitionReplica, state: FollowerState, request_id: int,
                      answer: LeaderOffsets) -> None:
    """AbstractFetcherThread.fetchOffsetAndTruncate, after OFFSET_OUT_OF_RANGE."""
    if state.in_flight != request_id or not state.listing_offsets:
        return
    state.in_flight = None
    state.listing_offsets = False
    if answer.error == ErrorCode.FENCED_LEADER_EPOCH:
        state.failed = True
        return
    if answer.error != ErrorCode.NONE:
        _back_off(replica, state)
        return
    log = replica.log
    if answer.log_end_offset < log.end_offset:
        # Our log runs past the leader's (an unclean election without epochs to tell where we
        # part): keep what it has.
        _truncate(replica, answer.log_end_offset)
    elif answer.log_start_offset > log.end_offset:
        # The leader deleted everything we have and more: start over at its log start.
        old_hw = log.high_watermark
        log.truncate_fully_and_start_at(answer.log_start_offset)
        replica.checkpoint_epochs()
        replica.emit(TruncateFullyAndStartAt(answer.log_start_offset))
        if log.high_watermark != old_hw:
            replica.emit(HighWatermarkChanged(log.high_watermark))
    _refresh_position(replica, state)
    maybe_send_fetch(replica, state)


# --- time ------------------------------------------------------------------------------------

def tick(replica: PartitionReplica, state: FollowerState) -> None:
    maybe_send_fetch(replica, state)


def next_deadline(state: FollowerState) -> int | None:
    if state.in_flight is None and not state.failed:
        return state.backoff_until_ms
    return None
