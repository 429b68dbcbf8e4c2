"""The Follower role: pull entries from the leader, one request at a time.

Each Fetch says "my log ends at fetch_offset, and the entry before it has last_fetched_epoch".
Both are durable when the Fetch leaves (persist-before-send), so the leader may count them.
The leader answers with one of:

- entries (and its high watermark): append them; HW = min(leader's HW, our log end);
- DivergingEpoch(epoch, end_offset): our log disagrees after that point; truncate and fetch again;
- SnapshotId: the leader no longer has what we need; fetch that snapshot with FetchSnapshot,
  chunk by chunk (position, size), install it, then fetch entries after it.

Only the answer to the request in flight is used: a late or duplicated answer to an earlier
Fetch describes a log we may no longer have. Answers from an older epoch are ignored.

A voter that hears nothing from its leader for quorum.fetch.timeout.ms becomes Prospective. An
observer in that case forgets the leader and looks for it again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.protocol.errors import ErrorCode
from core.raft.entries import OffsetAndEpoch, SnapshotId
from core.raft.errors import RaftStateError
from core.raft.messages import (FetchRequest, FetchResponse, FetchSnapshotRequest,
                                FetchSnapshotResponse, RaftMessage)
from core.raft.ready import Snapshot

if TYPE_CHECKING:
    from core.raft.node import RaftNode


@dataclass(slots=True)
class SnapshotTransfer:
    snapshot_id: SnapshotId
    data: bytearray


@dataclass(slots=True)
class FollowerState:
    leader_id: int
    fetch_deadline: int
    # When the leader last answered a fetch or sent BeginQuorumEpoch. A follower that heard from
    # its leader within the fetch timeout refuses pre-votes: the leader is alive, whoever asks is
    # merely cut off from it.
    last_leader_contact_ms: int | None = None
    in_flight_correlation_id: int | None = None
    in_flight_sent_at: int = 0
    next_fetch_at: int = 0
    snapshot_transfer: SnapshotTransfer | None = None

    def can_grant_vote(self, node: RaftNode, candidate_id: int, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        if not pre_vote:
            return False   # this epoch has a leader
        contact = self.last_leader_contact_ms
        heard_recently = (contact is not None
                          and node.now() - contact < node.config.fetch_timeout_ms)
        return log_up_to_date and not heard_recently


def fetch_request(node: RaftNode) -> FetchRequest:
    end = node.log.end_offset_and_epoch()
    max_bytes = node.config.fetch_max_bytes
    return FetchRequest(cluster_id=node.cluster_id, replica_id=node.node_id,
                        max_wait_ms=node.config.fetch_max_wait_ms, max_bytes=max_bytes,
                        current_leader_epoch=node.epoch, fetch_offset=end.offset,
                        last_fetched_epoch=end.epoch, log_start_offset=node.log.start_offset,
                        partition_max_bytes=max_bytes)


def send_fetch(node: RaftNode) -> None:
    state = node.role_state(FollowerState)
    transfer = state.snapshot_transfer
    if transfer is None:
        request: FetchRequest | FetchSnapshotRequest = fetch_request(node)
    else:
        request = FetchSnapshotRequest(cluster_id=node.cluster_id, replica_id=node.node_id,
                                       max_bytes=node.config.fetch_snapshot_max_bytes,
                                       current_leader_epoch=node.epoch,
                                       snapshot_id=transfer.snapshot_id,
                                       position=len(transfer.data))
    state.in_flight_correlation_id = node.send(state.leader_id, request)
    state.in_flight_sent_at = node.now()


def heard_from_leader(node: RaftNode) -> None:
    state = node.role_state(FollowerState)
    now = node.now()
    state.last_leader_contact_ms = now
    state.fetch_deadline = now + node.config.fetch_timeout_ms


def leader_resigned(node: RaftNode, election_backoff_ms: int) -> None:
    """EndQuorumEpoch from our leader: campaign after our rank's backoff, and stop defending
    the leader against pre-votes, since it has gone."""
    state = node.role_state(FollowerState)
    state.last_leader_contact_ms = None
    state.fetch_deadline = node.now() + election_backoff_ms


def step(node: RaftNode, message: RaftMessage) -> None:
    state = node.role_state(FollowerState)
    data = message.data
    if (not isinstance(data, (FetchResponse, FetchSnapshotResponse))
            or message.correlation_id != state.in_flight_correlation_id
            or message.source_id != state.leader_id):
        node.handle_response_header(message)   # late answers may still bring a later epoch
        return
    state.in_flight_correlation_id = None
    # If this answer does not lead straight to the next request, retry after a pause.
    state.next_fetch_at = node.now() + node.config.retry_backoff_ms
    if isinstance(data, FetchSnapshotResponse) and data.partition_error_code in (
            ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
        # The leader replaced or lost that snapshot: a plain Fetch will name the current one.
        state.snapshot_transfer = None
    if node.handle_response_header(message):
        return
    heard_from_leader(node)
    if isinstance(data, FetchResponse):
        _handle_fetch_response(node, state, data)
    else:
        _handle_fetch_snapshot_response(node, state, data)


def _handle_fetch_response(node: RaftNode, state: FollowerState, response: FetchResponse) -> None:
    log = node.log
    if response.diverging_epoch is not None:
        diverging = response.diverging_epoch
        log.truncate_to_end_offset(OffsetAndEpoch(diverging.end_offset, diverging.epoch))
        if log.end_offset < node.high_watermark:
            raise RaftStateError(f"leader {state.leader_id} made us truncate to "
                                 f"{log.end_offset}, below our high watermark "
                                 f"{node.high_watermark}")
    elif response.snapshot_id is not None:
        state.snapshot_transfer = SnapshotTransfer(response.snapshot_id, bytearray())
    else:
        records = response.records
        if records and records[0].offset == log.end_offset:
            log.append(records)
        if response.high_watermark >= 0:
            node.update_high_watermark(min(response.high_watermark, log.end_offset))
    send_fetch(node)


def _handle_fetch_snapshot_response(node: RaftNode, state: FollowerState,
                                    response: FetchSnapshotResponse) -> None:
    transfer = state.snapshot_transfer
    if transfer is not None:
        chunk = response.unaligned_records
        if (response.snapshot_id != transfer.snapshot_id
                or response.position != len(transfer.data)
                or response.position + len(chunk) > response.size):
            state.snapshot_transfer = None   # start over from a plain Fetch
        else:
            transfer.data += chunk
            if len(transfer.data) == response.size:
                node.install_snapshot(Snapshot(transfer.snapshot_id, bytes(transfer.data)))
                state.snapshot_transfer = None
    send_fetch(node)


def tick(node: RaftNode) -> None:
    state = node.role_state(FollowerState)
    now = node.now()
    if now >= state.fetch_deadline:
        if node.is_voter:
            node.become_prospective()
        else:
            node.become_unattached(node.epoch)
        return
    if (state.in_flight_correlation_id is not None
            and now - state.in_flight_sent_at >= node.config.request_timeout_ms):
        state.in_flight_correlation_id = None   # lost; ask again
        state.next_fetch_at = now
    if state.in_flight_correlation_id is None and now >= state.next_fetch_at:
        send_fetch(node)


def next_deadline(node: RaftNode) -> int | None:
    state = node.role_state(FollowerState)
    if state.in_flight_correlation_id is not None:
        retry = state.in_flight_sent_at + node.config.request_timeout_ms
    else:
        retry = state.next_fetch_at
    return min(state.fetch_deadline, retry)
