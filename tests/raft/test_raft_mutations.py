"""The simulation has teeth: with a known bug planted, some seed of the first 1,000 fails.

Each case patches one rule of the Raft implementation out (a mutation) and runs simulation seeds
until an invariant breaks. A mutation that survives 1,000 seeds means the simulation no longer
looks where that bug would show. Most are caught within the first few dozen seeds.

Not every rule is within the random simulation's reach. Dropping "commit only once an entry of
the leader's own epoch is on a majority" survived 8,000 seeds: it needs a precise sequence of
two leader failures and a fetch split between epochs (Raft's figure 8); the interaction script
testdata/hw_own_epoch.txt pins that rule instead.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from unittest import mock

import pytest

from core.raft import common, follower, progress, unattached
from core.raft.entries import NO_LEADER
from core.raft.log import RaftLog, ValidationKind, ValidOffsetAndEpoch
from core.raft.node import RaftNode
from tests.raft.simulation import run_seed
from tests.support.simulation import assert_mutation_caught

SEEDS = 1000


@contextmanager
def votes_ignore_the_log():
    with mock.patch.object(common, "log_is_up_to_date", lambda candidate, local: True):
        yield


@contextmanager
def observers_count_toward_the_high_watermark():
    def everyone(self):
        return list(self.voter_progress.values()) + list(self.observer_progress.values())
    with mock.patch.object(progress.LeaderState, "hw_candidate_progress", everyone):
        yield


@contextmanager
def voters_forget_their_vote():
    def grant(self, node, candidate_id, log_up_to_date, pre_vote):
        return log_up_to_date
    with mock.patch.object(unattached.UnattachedState, "can_grant_vote", grant):
        yield


@contextmanager
def votes_persisted_after_sending():
    ready = RaftNode.ready

    def late_vote(self):
        result = ready(self)
        state = result.quorum_state
        if state is not None and state.voted_id != NO_LEADER and state.leader_id == NO_LEADER:
            return dataclasses.replace(result, quorum_state=None)   # persisted one Ready late
        return result
    with mock.patch.object(RaftNode, "ready", late_vote):
        yield


@contextmanager
def followers_take_any_fetch_answer():
    step = follower.step

    def careless(node, message):
        state = node.state
        if isinstance(state, follower.FollowerState):
            state.in_flight_correlation_id = message.correlation_id
        step(node, message)
    with mock.patch.object(follower, "step", careless):
        yield


@contextmanager
def follower_high_watermark_unclamped():
    handle = follower._handle_fetch_response

    def unclamped(node, state, response):
        handle(node, state, response)
        if response.diverging_epoch is None and response.snapshot_id is None:
            node.high_watermark = max(node.high_watermark, response.high_watermark)
    with mock.patch.object(follower, "_handle_fetch_response", unclamped):
        yield


@contextmanager
def followers_truncate_to_the_leader_offset_only():
    def truncate(self, diverging):
        self.truncate_to(max(diverging.offset, self.start_offset))
        return self.end_offset
    with mock.patch.object(RaftLog, "truncate_to_end_offset", truncate):
        yield


@contextmanager
def leaders_never_report_divergence():
    validate = RaftLog.validate_offset_and_epoch

    def lenient(self, offset, epoch):
        result = validate(self, offset, epoch)
        if result.kind is ValidationKind.DIVERGING and offset <= self.end_offset:
            return ValidOffsetAndEpoch(ValidationKind.VALID, result.offset_and_epoch)
        return result
    with mock.patch.object(RaftLog, "validate_offset_and_epoch", lenient):
        yield


MUTATIONS = {
    "votes ignore the log": votes_ignore_the_log,
    "observers count toward the high watermark": observers_count_toward_the_high_watermark,
    "voters forget their vote": voters_forget_their_vote,
    "votes persisted after sending": votes_persisted_after_sending,
    "followers take any fetch answer": followers_take_any_fetch_answer,
    "follower high watermark not clamped to its log": follower_high_watermark_unclamped,
    "followers truncate to the leader's offset only": followers_truncate_to_the_leader_offset_only,
    "leaders never report divergence": leaders_never_report_divergence,
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_simulation_catches(mutation: str) -> None:
    assert_mutation_caught(mutation, MUTATIONS[mutation], run_seed, range(SEEDS))
