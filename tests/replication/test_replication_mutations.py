"""The simulation has teeth: with a known bug planted, some seed of the default run fails.

Each case patches one rule of the replication state machine out (a mutation) and runs
simulation seeds until an invariant breaks; one that survives the seeds means the simulation no
longer looks where that bug would show. Most are caught within the first few dozen seeds.

Rules the simulation cannot reach are pinned by the unit tests instead: the broker epoch checks
(a fetch from an earlier incarnation, ISR eligibility) and the handling of each AlterPartition
error, because the simulated driver never delivers a fetch across a restart or a stale
AlterPartition answer (test_replication_leader.py).
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from unittest import mock

import pytest

from core.broker.replication import follower, isr, leader, log
from core.broker.replication.isr import CommittedIsr, PendingExpand, PendingShrink
from core.protocol.errors import ErrorCode
from tests.replication.simulation import run_seed
from tests.support.simulation import assert_mutation_caught

SEEDS = 2000   # the rarest planted bug (metadata resets a change in flight) needs ~900


@contextmanager
def high_watermark_is_the_maximum():
    def candidate(leader_end, remotes, maximal_isr, brokers, now, max_lag):
        return max([leader_end] + [p.log_end_offset for p in remotes.values()])
    with mock.patch.object(isr, "high_watermark_candidate", candidate):
        yield


@contextmanager
def acks_all_does_not_wait():
    with mock.patch.object(leader, "enough_replicas_reach",
                           lambda replica, state, offset: (True, ErrorCode.NONE)):
        yield


@contextmanager
def followers_join_before_catching_up():
    with mock.patch.object(isr, "is_follower_in_sync", lambda progress, hw, start: True):
        yield


@contextmanager
def followers_join_without_reaching_the_epoch_start():
    with mock.patch.object(isr, "is_follower_in_sync",
                           lambda progress, hw, start: progress.log_end_offset >= hw):
        yield


@contextmanager
def a_proposed_shrink_counts_at_once():
    maximal = property(lambda self: self.last_committed.isr - self.out_of_sync)
    with mock.patch.object(PendingShrink, "maximal_isr", maximal):
        yield


@contextmanager
def a_proposed_expansion_does_not_count():
    with mock.patch.object(PendingExpand, "maximal_isr",
                           property(lambda self: self.last_committed.isr)):
        yield


@contextmanager
def isr_changes_without_the_controller():
    expand, shrink = leader.maybe_expand_isr, leader.maybe_shrink_isr

    def commit(state):
        if state.isr_state.in_flight:
            state.isr_state = CommittedIsr(frozenset(state.isr_state.sent.isr), 0)

    def expand_now(replica, state, progress):
        expand(replica, state, progress)
        commit(state)

    def shrink_now(replica, state):
        shrink(replica, state)
        commit(state)
    with mock.patch.object(leader, "maybe_expand_isr", expand_now), \
            mock.patch.object(leader, "maybe_shrink_isr", shrink_now):
        yield


@contextmanager
def metadata_resets_a_change_in_flight():
    """Kafka's makeLeader: an image of the partition epoch we hold drops the pending change."""
    become = leader.become_leader

    def reset(replica, part):
        state = replica.leader
        if state is not None and part.leader_epoch == replica.leader_epoch:
            state.isr_state = CommittedIsr(frozenset(part.isr), 0)
        become(replica, part)
    with mock.patch.object(leader, "become_leader", reset):
        yield


@contextmanager
def leaders_never_report_divergence():
    answer = leader.answer_fetch

    def lenient(replica, state, fetch, update_fetch_state):
        found = answer(replica, state, fetch, update_fetch_state)
        if found.diverging_epoch is not None and fetch.fetch_offset <= replica.log.end_offset:
            return answer(replica, state, dataclasses.replace(fetch, last_fetched_epoch=-1),
                          update_fetch_state)
        return found
    with mock.patch.object(leader, "answer_fetch", lenient):
        yield


@contextmanager
def followers_truncate_to_the_leader_offset_only():
    def truncation(log, diverging):
        return min(diverging.end_offset, log.end_offset), True
    with mock.patch.object(follower, "offset_to_truncate_to", truncation):
        yield


@contextmanager
def follower_high_watermark_not_clamped():
    def update(self, high_watermark):
        changed = high_watermark != self.high_watermark
        self.high_watermark = max(self.high_watermark, high_watermark)
        return changed
    with mock.patch.object(log.ReplicaLog, "update_high_watermark", update):
        yield


@contextmanager
def followers_take_any_fetch_answer():
    on_response = follower.on_fetch_response

    def careless(replica, state, request_id, response):
        if state.in_flight is not None and not state.listing_offsets:
            request_id = state.in_flight
        on_response(replica, state, request_id, response)
    with mock.patch.object(follower, "on_fetch_response", careless):
        yield


@contextmanager
def a_duplicate_is_answered_at_once():
    """The bug the fault run found: a retried batch the log holds, acknowledged without
    waiting for the ISR to have it."""
    def at_once(replica, state, base, last, acks, request_id, timeout_ms):
        return leader.AppendResult(ErrorCode.NONE, base, last, replica.leader_epoch)
    with mock.patch.object(leader, "await_duplicate", at_once):
        yield


MUTATIONS = {
    "a duplicate is answered at once": a_duplicate_is_answered_at_once,
    "high watermark is the maximum": high_watermark_is_the_maximum,
    "acks=all does not wait": acks_all_does_not_wait,
    "followers join before catching up": followers_join_before_catching_up,
    "followers join without reaching the epoch start":
        followers_join_without_reaching_the_epoch_start,
    "a proposed shrink counts at once": a_proposed_shrink_counts_at_once,
    "a proposed expansion does not count": a_proposed_expansion_does_not_count,
    "ISR changes without the controller": isr_changes_without_the_controller,
    "metadata resets a change in flight": metadata_resets_a_change_in_flight,
    "leaders never report divergence": leaders_never_report_divergence,
    "followers truncate to the leader's offset only": followers_truncate_to_the_leader_offset_only,
    "follower high watermark not clamped to its log": follower_high_watermark_not_clamped,
    "followers take any fetch answer": followers_take_any_fetch_answer,
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_simulation_catches(mutation: str) -> None:
    assert_mutation_caught(mutation, MUTATIONS[mutation], run_seed, range(SEEDS))
