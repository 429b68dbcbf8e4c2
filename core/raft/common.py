"""Requests every role answers the same way, before or instead of its own step function.

Vote, BeginQuorumEpoch and EndQuorumEpoch are voter-only: they are refused from and to
non-voters (INCONSISTENT_VOTER_SET) and from older epochs (FENCED_LEADER_EPOCH); a later epoch
moves the node into it first. That holds for a pre-vote too, as in Kafka: a pre-vote binds
nobody, but its epoch exists, since the prospective stands in it.

Fetch and FetchSnapshot are leader-only: anyone else answers with the error and the leader it
knows, which is how observers and lagging replicas find the leader.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from core.protocol.errors import ErrorCode
from core.raft import follower
from core.raft.election import log_is_up_to_date, strict_exponential_backoff_ms
from core.raft.entries import NO_LEADER, OffsetAndEpoch
from core.raft.messages import (BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                                EndQuorumEpochRequest, EndQuorumEpochResponse, FetchRequest,
                                FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse,
                                RaftMessage, VoteRequest, VoteResponse)
from core.raft.roles import Role

if TYPE_CHECKING:
    from core.raft.node import RaftNode


def validate_voter_only_request(node: RaftNode, remote_id: int, epoch: int) -> ErrorCode:
    if epoch < node.epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if remote_id < 0:
        return ErrorCode.INVALID_REQUEST
    if not node.is_voter or remote_id not in node.voters:
        return ErrorCode.INCONSISTENT_VOTER_SET
    return ErrorCode.NONE


def validate_leader_only_request(node: RaftNode, epoch: int) -> ErrorCode:
    if epoch < node.epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if epoch > node.epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    if node.role is not Role.LEADER:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.NONE


def handle_vote_request(node: RaftNode, message: RaftMessage, request: VoteRequest) -> None:
    if not node.cluster_id_matches(request.cluster_id):
        node.respond(message, VoteResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID))
        return
    # A candidate bumps its epoch before asking, so its log cannot hold its own epoch yet;
    # a pre-vote does not bump, so its log may end in the epoch it asks in.
    if request.pre_vote:
        illegal_epoch = request.last_offset_epoch > request.candidate_epoch
    else:
        illegal_epoch = request.last_offset_epoch >= request.candidate_epoch
    error = (ErrorCode.INVALID_REQUEST
             if request.last_offset < 0 or request.last_offset_epoch < 0 or illegal_epoch
             else validate_voter_only_request(node, request.candidate_id,
                                              request.candidate_epoch))
    if error == ErrorCode.NONE:
        if request.candidate_epoch > node.epoch:
            node.become_unattached(request.candidate_epoch)
        candidate_log = OffsetAndEpoch(request.last_offset, request.last_offset_epoch)
        up_to_date = log_is_up_to_date(candidate_log, node.log.end_offset_and_epoch())
        granted = node.state.can_grant_vote(
            node, request.candidate_id, up_to_date, request.pre_vote)
        if granted and not request.pre_vote and node.quorum_state.voted_id == NO_LEADER:
            # Bind ourselves: the Ready that carries this answer persists the vote first.
            node.become_unattached(node.epoch, request.candidate_id)
    else:
        granted = False
    node.respond(message, VoteResponse(partition_error_code=error, leader_id=node.leader_id,
                                       leader_epoch=node.epoch, vote_granted=granted))


def handle_begin_quorum_epoch_request(node: RaftNode, message: RaftMessage,
                                      request: BeginQuorumEpochRequest) -> None:
    if not node.cluster_id_matches(request.cluster_id):
        node.respond(message, BeginQuorumEpochResponse(
            error_code=ErrorCode.INCONSISTENT_CLUSTER_ID))
        return
    error = validate_voter_only_request(node, request.leader_id, request.leader_epoch)
    if error == ErrorCode.NONE:
        node.maybe_transition(request.leader_id, request.leader_epoch)
        if node.role is Role.FOLLOWER:
            follower.heard_from_leader(node)
    node.respond(message, BeginQuorumEpochResponse(
        partition_error_code=error, leader_id=node.leader_id, leader_epoch=node.epoch))


def handle_end_quorum_epoch_request(node: RaftNode, message: RaftMessage,
                                    request: EndQuorumEpochRequest) -> None:
    if not node.cluster_id_matches(request.cluster_id):
        node.respond(message, EndQuorumEpochResponse(
            error_code=ErrorCode.INCONSISTENT_CLUSTER_ID))
        return
    error = validate_voter_only_request(node, request.leader_id, request.leader_epoch)
    if error == ErrorCode.NONE:
        node.maybe_transition(request.leader_id, request.leader_epoch)
        if node.role is Role.FOLLOWER and node.leader_id == request.leader_id:
            successors = request.preferred_successors
            position = successors.index(node.node_id) if node.node_id in successors else -1
            follower.leader_resigned(node, strict_exponential_backoff_ms(
                node.config, position, len(successors)))
    node.respond(message, EndQuorumEpochResponse(
        partition_error_code=error, leader_id=node.leader_id, leader_epoch=node.epoch))


def reject_leader_only_request(node: RaftNode, message: RaftMessage,
                               request: FetchRequest | FetchSnapshotRequest) -> bool:
    """Answer a Fetch or FetchSnapshot that is not for us to serve. True if answered."""
    response_type = FetchResponse if isinstance(request, FetchRequest) else FetchSnapshotResponse
    if not node.cluster_id_matches(request.cluster_id):
        node.respond(message, response_type(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID))
        return True
    if isinstance(request, FetchRequest) and (
            request.fetch_offset < 0 or request.last_fetched_epoch < 0
            or request.max_wait_ms < 0
            or request.last_fetched_epoch > request.current_leader_epoch):
        error = ErrorCode.INVALID_REQUEST
    else:
        error = validate_leader_only_request(node, request.current_leader_epoch)
    if error == ErrorCode.NONE:
        return False
    node.respond(message, response_type(partition_error_code=error,
                                        current_leader=node.leader_and_epoch()))
    return True
