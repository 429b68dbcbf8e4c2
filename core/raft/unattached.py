"""The Unattached role: an epoch without a known leader.

A voter waits out a randomized election timeout, then campaigns (as Prospective). It may have
voted in this epoch already; the vote binds until the epoch ends. An observer cannot campaign,
so it looks for the leader instead: it sends Fetch to a random voter, whose answer names the
leader it knows (Kafka's observers do this through controller.quorum.bootstrap.servers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.raft import follower
from core.raft.entries import NO_LEADER
from core.raft.messages import FetchResponse, RaftMessage

if TYPE_CHECKING:
    from core.raft.node import RaftNode


@dataclass(slots=True)
class UnattachedState:
    election_deadline: int | None          # voters only
    discovery_correlation_id: int | None = None
    discovery_sent_at: int = 0
    next_discovery_at: int = 0

    def can_grant_vote(self, node: RaftNode, candidate_id: int, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        if pre_vote:
            return log_up_to_date
        voted_id = node.quorum_state.voted_id
        if voted_id != NO_LEADER:
            return voted_id == candidate_id   # a candidate asking again gets the same answer
        return log_up_to_date


def on_become(node: RaftNode) -> None:
    if not node.is_voter:
        _send_discovery_fetch(node)


def _send_discovery_fetch(node: RaftNode) -> None:
    state = node.role_state(UnattachedState)
    target = node.rng.choice(sorted(node.voters))
    state.discovery_correlation_id = node.send(target, follower.fetch_request(node))
    state.discovery_sent_at = node.now()


def step(node: RaftNode, message: RaftMessage) -> None:
    state = node.role_state(UnattachedState)
    if (isinstance(message.data, FetchResponse)
            and message.correlation_id == state.discovery_correlation_id):
        state.discovery_correlation_id = None
        # Ask again later if this voter did not know the leader either.
        state.next_discovery_at = node.now() + node.config.fetch_max_wait_ms
    # A response naming the leader of our epoch or a later one makes us its follower.
    node.handle_response_header(message)


def tick(node: RaftNode) -> None:
    state = node.role_state(UnattachedState)
    now = node.now()
    if node.is_voter:
        if state.election_deadline is not None and now >= state.election_deadline:
            node.become_prospective()
        return
    if (state.discovery_correlation_id is not None
            and now - state.discovery_sent_at >= node.config.request_timeout_ms):
        state.discovery_correlation_id = None
    if state.discovery_correlation_id is None and now >= state.next_discovery_at:
        _send_discovery_fetch(node)


def next_deadline(node: RaftNode) -> int | None:
    state = node.role_state(UnattachedState)
    if node.is_voter:
        return state.election_deadline
    if state.discovery_correlation_id is not None:
        return state.discovery_sent_at + node.config.request_timeout_ms
    return state.next_discovery_at
