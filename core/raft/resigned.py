"""The Resigned role: a leader stepping down without leaving its epoch.

It serves no fetches and grants no votes in its epoch. It tells the other voters with
EndQuorumEpoch (re-sent until each acknowledges), naming its preferred successors, the voters
furthest replicated first, so the best placed one campaigns at once instead of after a fetch
timeout. If nobody takes over within an election timeout it campaigns itself, as Kafka does.

A node that restarts and finds it led the epoch in its quorum state starts here too: entries of
that epoch it had not flushed are gone, so it must never lead that epoch again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.raft.messages import EndQuorumEpochRequest, EndQuorumEpochResponse, RaftMessage

if TYPE_CHECKING:
    from core.raft.node import RaftNode


@dataclass(slots=True)
class ResignedState:
    preferred_successors: tuple[int, ...]
    unacknowledged_voters: set[int]
    deadline: int
    resend_at: int = 0

    def can_grant_vote(self, node: RaftNode, candidate_id: int, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return pre_vote and log_up_to_date


def on_become(node: RaftNode) -> None:
    _send_end_quorum_epoch(node)


def _send_end_quorum_epoch(node: RaftNode) -> None:
    state = node.role_state(ResignedState)
    request = EndQuorumEpochRequest(cluster_id=node.cluster_id, leader_id=node.node_id,
                                    leader_epoch=node.epoch,
                                    preferred_successors=state.preferred_successors)
    for voter_id in sorted(state.unacknowledged_voters):
        node.send(voter_id, request)
    state.resend_at = node.now() + node.config.request_timeout_ms


def step(node: RaftNode, message: RaftMessage) -> None:
    if node.handle_response_header(message):
        return
    if isinstance(message.data, EndQuorumEpochResponse):
        state = node.role_state(ResignedState)
        state.unacknowledged_voters.discard(message.source_id)


def tick(node: RaftNode) -> None:
    state = node.role_state(ResignedState)
    now = node.now()
    if now >= state.deadline:
        node.become_candidate(retries=1)
    elif state.unacknowledged_voters and now >= state.resend_at:
        _send_end_quorum_epoch(node)


def next_deadline(node: RaftNode) -> int | None:
    state = node.role_state(ResignedState)
    if state.unacknowledged_voters:
        return min(state.deadline, state.resend_at)
    return state.deadline
