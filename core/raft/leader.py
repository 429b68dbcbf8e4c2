"""The Leader role: serve Fetch and FetchSnapshot, decide the high watermark.

Each Fetch is validated against our epoch cache (log.validate_offset_and_epoch). A valid one
tells us how far the fetcher's log durably reaches, which may move the high watermark, and gets
the entries after its fetch offset, up to its byte limit. A fetch that finds nothing new is
parked for up to its max wait and answered as soon as there is something to say: new entries,
a new high watermark, or the end of our leadership. The others get a DivergingEpoch or a
SnapshotId instead of entries.

BeginQuorumEpoch goes to every other voter when the epoch starts, and again to those that have
neither answered it nor fetched.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from core.protocol.errors import ErrorCode
from core.raft.entries import UNKNOWN_OFFSET, SnapshotId
from core.raft.log import ValidationKind, ValidOffsetAndEpoch
from core.raft.messages import (BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                                EpochEndOffset, FetchRequest, FetchResponse,
                                FetchSnapshotRequest, FetchSnapshotResponse, LeaderIdAndEpoch,
                                RaftMessage)
from core.raft.progress import LeaderState

if TYPE_CHECKING:
    from core.raft.node import RaftNode


def on_become(node: RaftNode) -> None:
    _send_begin_quorum_epoch(node)


def _send_begin_quorum_epoch(node: RaftNode) -> None:
    state = node.role_state(LeaderState)
    request = BeginQuorumEpochRequest(cluster_id=node.cluster_id, leader_id=node.node_id,
                                      leader_epoch=node.epoch)
    for voter_id in sorted(state.unacknowledged_voters):
        node.send(voter_id, request)
    state.begin_epoch_resend_at = node.now() + node.config.begin_quorum_epoch_resend_ms


def on_append(node: RaftNode) -> None:
    _complete_parked_fetches(node, only_expired=False)


def on_flush(node: RaftNode) -> None:
    state = node.role_state(LeaderState)
    if state.update_local_end(node.log.persisted_end_offset, node.now()):
        _publish_high_watermark(node)


def abandon(node: RaftNode) -> None:
    """We stop leading: parked fetches learn it now rather than after their max wait. Their
    answers carry the node's new epoch and leader, already set by the transition."""
    state = node.role_state(LeaderState)
    parked, state.parked_fetches = state.parked_fetches, {}
    for message, _, _ in parked.values():
        node.respond(message, FetchResponse(
            partition_error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
            current_leader=node.leader_and_epoch()))


def _publish_high_watermark(node: RaftNode) -> None:
    state = node.role_state(LeaderState)
    assert state.high_watermark is not None
    node.update_high_watermark(state.high_watermark)
    _complete_parked_fetches(node, only_expired=False)


def step(node: RaftNode, message: RaftMessage) -> None:
    data = message.data
    if isinstance(data, FetchRequest):
        _handle_fetch_request(node, message, data)
    elif isinstance(data, FetchSnapshotRequest):
        _handle_fetch_snapshot_request(node, message, data)
    elif not node.handle_response_header(message) and isinstance(data, BeginQuorumEpochResponse):
        state = node.role_state(LeaderState)
        state.voter_heard(message.source_id, node.now())


def _handle_fetch_request(node: RaftNode, message: RaftMessage, request: FetchRequest) -> None:
    # The node already checked the cluster id, the arguments and the epoch: this is ours to serve.
    state = node.role_state(LeaderState)
    now = node.now()
    replica_id = request.replica_id
    state.voter_heard(replica_id, now)
    validation = node.log.validate_offset_and_epoch(request.fetch_offset,
                                                    request.last_fetched_epoch)
    hw_moved = False
    if validation.kind is ValidationKind.VALID and replica_id >= 0:
        hw_moved = state.update_replica(replica_id, request.fetch_offset, node.log.end_offset, now)
        if hw_moved:
            _publish_high_watermark(node)
    state.parked_fetches.pop(replica_id, None)   # superseded: the replica gave up on it
    if (validation.kind is ValidationKind.VALID and not hw_moved and request.max_wait_ms > 0
            and request.fetch_offset == node.log.end_offset and replica_id >= 0):
        state.parked_fetches[replica_id] = (message, request, now + request.max_wait_ms)
        return
    node.respond(message, _fetch_response(node, request, validation))


def _fetch_response(node: RaftNode, request: FetchRequest,
                    validation: ValidOffsetAndEpoch) -> FetchResponse:
    state = node.role_state(LeaderState)
    hw = state.high_watermark if state.high_watermark is not None else UNKNOWN_OFFSET
    common = _FetchResponseCommon(high_watermark=hw, log_start_offset=node.log.start_offset,
                                  current_leader=node.leader_and_epoch())
    position = validation.offset_and_epoch
    if validation.kind is ValidationKind.DIVERGING:
        return FetchResponse(diverging_epoch=EpochEndOffset(position.epoch, position.offset),
                             **common)
    if validation.kind is ValidationKind.SNAPSHOT:
        return FetchResponse(snapshot_id=SnapshotId(position.offset, position.epoch), **common)
    max_bytes = min(request.max_bytes, request.partition_max_bytes)
    return FetchResponse(records=node.log.read(request.fetch_offset, max_bytes), **common)


class _FetchResponseCommon(TypedDict):
    """The fields every FetchResponse of the leader carries."""
    high_watermark: int
    log_start_offset: int
    current_leader: LeaderIdAndEpoch


def _complete_parked_fetches(node: RaftNode, only_expired: bool) -> None:
    state = node.role_state(LeaderState)
    if not state.parked_fetches:
        return
    now = node.now()
    for replica_id, (message, request, deadline) in list(state.parked_fetches.items()):
        if only_expired and deadline > now:
            continue
        del state.parked_fetches[replica_id]
        # Re-validate: a snapshot may have moved the log start past the fetch offset meanwhile.
        validation = node.log.validate_offset_and_epoch(request.fetch_offset,
                                                        request.last_fetched_epoch)
        node.respond(message, _fetch_response(node, request, validation))


def _handle_fetch_snapshot_request(node: RaftNode, message: RaftMessage,
                                   request: FetchSnapshotRequest) -> None:
    state = node.role_state(LeaderState)
    state.voter_heard(request.replica_id, node.now())
    data = node.snapshot_data(request.snapshot_id)
    current_leader = node.leader_and_epoch()
    if data is None:
        error = ErrorCode.SNAPSHOT_NOT_FOUND
    elif not 0 <= request.position <= len(data):
        error = ErrorCode.POSITION_OUT_OF_RANGE
    else:
        max_bytes = max(1, min(request.max_bytes, node.config.fetch_snapshot_max_bytes))
        chunk = data[request.position:request.position + max_bytes]
        node.respond(message, FetchSnapshotResponse(
            snapshot_id=request.snapshot_id, current_leader=current_leader, size=len(data),
            position=request.position, unaligned_records=bytes(chunk)))
        return
    node.respond(message, FetchSnapshotResponse(partition_error_code=error,
                                                snapshot_id=request.snapshot_id,
                                                current_leader=current_leader))


def tick(node: RaftNode) -> None:
    state = node.role_state(LeaderState)
    now = node.now()
    _complete_parked_fetches(node, only_expired=True)
    if state.check_quorum_expired(now):
        # A majority has not fetched for 1.5 fetch timeouts: we are probably cut off, and the
        # others may have elected someone. Stop claiming the epoch.
        node.become_resigned(())
        return
    if state.unacknowledged_voters and now >= state.begin_epoch_resend_at:
        _send_begin_quorum_epoch(node)


def next_deadline(node: RaftNode) -> int | None:
    state = node.role_state(LeaderState)
    deadline = state.check_quorum_deadline if len(node.voters) > 1 else None
    if state.unacknowledged_voters:
        deadline = (state.begin_epoch_resend_at if deadline is None
                    else min(deadline, state.begin_epoch_resend_at))
    for _, _, parked_deadline in state.parked_fetches.values():
        deadline = parked_deadline if deadline is None else min(deadline, parked_deadline)
    return deadline
