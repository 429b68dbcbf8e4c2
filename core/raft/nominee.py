"""The two campaigning roles: Prospective (KIP-996 pre-vote) and Candidate.

A Prospective asks VoteRequest(pre_vote=true) in its current epoch. Nothing is persisted and
nobody is bound: it only learns whether a majority WOULD vote for it. A majority of yes makes it
a Candidate; a majority of no, or its election timeout, sends it back to following the leader it
knew (or to Unattached). A voter that was cut off therefore cannot bump the epoch of a quorum
that is doing fine without it.

A Candidate bumps the epoch and votes for itself (both persisted before the requests leave),
then asks VoteRequest(pre_vote=false). A majority of yes makes it Leader. A majority of no makes
it wait a binary exponential backoff before it tries again; an election timeout without a
verdict makes it try again at once (as Prospective first, like every attempt).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from core.raft.election import EpochElection, binary_exponential_backoff_ms
from core.raft.entries import NO_LEADER
from core.raft.errors import RaftStateError
from core.raft.messages import RaftMessage, VoteResponse

if TYPE_CHECKING:
    from core.raft.node import RaftNode


class ProspectiveState:
    __slots__ = ("election", "deadline", "retries")

    def __init__(self, voters: frozenset[int], local_id: int, deadline: int, retries: int):
        self.election = EpochElection(voters)
        self.election.record(local_id, True)
        self.deadline = deadline
        self.retries = retries   # elections lost as Candidate in a row, for the backoff

    def can_grant_vote(self, node: RaftNode, candidate_id: int, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        if pre_vote:
            return log_up_to_date
        voted_id = node.quorum_state.voted_id
        if voted_id != NO_LEADER:
            return voted_id == candidate_id
        if node.leader_id != NO_LEADER:
            return False   # we still know this epoch's leader; it was elected, so no new vote
        return log_up_to_date


class CandidateState:
    __slots__ = ("election", "deadline", "retries", "backoff_until")

    def __init__(self, voters: frozenset[int], local_id: int, deadline: int, retries: int):
        self.election = EpochElection(voters)
        self.election.record(local_id, True)
        self.deadline = deadline
        self.retries = retries
        self.backoff_until: int | None = None   # set once the vote is lost

    def can_grant_vote(self, node: RaftNode, candidate_id: int, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        # We voted for ourselves in this epoch; a pre-vote binds nobody, so that we can answer.
        return pre_vote and log_up_to_date


def _state(node: RaftNode) -> ProspectiveState | CandidateState:
    state = node.state
    if not isinstance(state, (ProspectiveState, CandidateState)):
        raise RaftStateError(f"a {node.role.value} node is not campaigning")
    return state


def on_become(node: RaftNode, pre_vote: bool) -> None:
    request = node.vote_request(pre_vote)
    for voter_id in node.other_voters():
        node.send(voter_id, request)
    _maybe_conclude(node)   # a single voter has its majority already


def step(node: RaftNode, message: RaftMessage) -> None:
    if node.handle_response_header(message) or not isinstance(message.data, VoteResponse):
        return
    state = _state(node)
    if isinstance(state, CandidateState) and state.backoff_until is not None:
        return   # this attempt is over; a late yes changes nothing
    state.election.record(message.source_id, message.data.vote_granted)
    _maybe_conclude(node)


def _maybe_conclude(node: RaftNode) -> None:
    state = _state(node)
    if state.election.is_vote_granted:
        if isinstance(state, ProspectiveState):
            node.become_candidate(state.retries + 1)
        else:
            node.become_leader()
    elif state.election.is_vote_rejected:
        if isinstance(state, ProspectiveState):
            _prospective_lost(node)
        else:
            state.backoff_until = node.now() + binary_exponential_backoff_ms(
                node.config, node.rng, state.retries)


def _prospective_lost(node: RaftNode) -> None:
    # The quorum did not want an election: go back to the leader we knew, if any.
    if node.leader_id != NO_LEADER:
        node.become_follower(node.epoch, node.leader_id)
    else:
        node.become_unattached(node.epoch)


def tick(node: RaftNode) -> None:
    state = _state(node)
    now = node.now()
    if isinstance(state, CandidateState):
        if state.backoff_until is not None:
            if now >= state.backoff_until:
                node.become_prospective(state.retries)
        elif now >= state.deadline:
            node.become_prospective(state.retries)
    elif now >= state.deadline:
        _prospective_lost(node)


def next_deadline(node: RaftNode) -> int | None:
    state = _state(node)
    if isinstance(state, CandidateState) and state.backoff_until is not None:
        return state.backoff_until
    return state.deadline
