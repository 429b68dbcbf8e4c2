"""The follower's rules: what it fetches, how it truncates (Kafka's
AbstractFetcherThread.getOffsetTruncationState), appends, takes the high watermark, and handles
errors."""
from __future__ import annotations

import pytest

from core.broker.replication import (AppendAsFollower, CheckpointEpochs, DivergingEpoch,
                                     EpochEntry, HighWatermarkChanged, LeaderOffsets,
                                     LogStartOffsetChanged, RecordsLost, ReplicaLog, Role,
                                     SendFetch, SendListOffsets, TruncateFullyAndStartAt,
                                     TruncateTo)
from core.broker.replication.follower import offset_to_truncate_to
from core.protocol.errors import ErrorCode as E
from tests.replication.support import (BROKER_EPOCHS, Clock, actions_of, brokers, metadata,
                                       replica, response)


def follower(*, end=30, hw=None, epochs=((1, 0), (2, 10), (4, 20)), start=0, leader_epoch=5,
             clock=None, **config):
    """Broker 2 following broker 1 in `leader_epoch`; returns it and its first SendFetch."""
    r = replica(2, clock=clock, start=start, end=end, hw=end if hw is None else hw,
                epochs=epochs, **config)
    r.apply_metadata(metadata(leader=1, leader_epoch=leader_epoch), brokers())
    [sent] = actions_of(r, SendFetch)
    return r, sent


@pytest.mark.parametrize("diverging, expected", [
    ((4, 25), (25, True)),       # same epoch: the smaller end
    ((4, 35), (30, True)),       # the leader has more of it: nothing to cut
    ((3, 22), (20, False)),      # epoch 3 unknown here: cut at the end of our epoch 2, ask again
    ((2, 15), (15, True)),
    ((0, 0), (0, True)),         # below all our epochs
])
def test_offset_to_truncate_to(diverging, expected):
    log = ReplicaLog(0, 30, 30, [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 20)])
    assert offset_to_truncate_to(log, DivergingEpoch(*diverging)) == expected


def test_offset_to_truncate_to_without_epochs():
    assert offset_to_truncate_to(ReplicaLog(0, 30, 30), DivergingEpoch(4, 12)) == (12, True)


def test_become_follower_fetches_from_the_log_end_with_the_last_epoch():
    r, sent = follower()
    assert r.role is Role.FOLLOWER and r.leader_id == 1
    assert sent.leader_id == 1
    f = sent.fetch
    assert (f.replica_id, f.broker_epoch, f.current_leader_epoch, f.fetch_offset,
            f.last_fetched_epoch, f.log_start_offset) == (2, BROKER_EPOCHS[2], 5, 30, 4, 0)


def test_an_empty_log_fetches_without_a_last_epoch():
    _, sent = follower(end=0, epochs=())
    assert (sent.fetch.fetch_offset, sent.fetch.last_fetched_epoch) == (0, -1)


def test_records_without_epochs_are_trusted_only_below_the_high_watermark():
    r, sent = follower(end=30, hw=12, epochs=())
    assert sent.fetch.fetch_offset == 12 and r.log_end_offset == 12


def test_no_leader_no_fetch():
    r = replica(2, end=5, hw=5, epochs=[(1, 0)])
    r.apply_metadata(metadata(leader=-1), brokers())
    assert r.role is Role.FOLLOWER and actions_of(r, SendFetch) == []


def test_same_epoch_metadata_does_not_restart_fetching():
    r, sent = follower()
    r.apply_metadata(metadata(leader=1, partition_epoch=11, isr=(1, 2)))
    assert actions_of(r, SendFetch) == []
    assert r.follower.in_flight == sent.request_id


def test_append_takes_the_leader_high_watermark_clamped_to_our_log():
    r, sent = follower(hw=25)
    r.on_fetch_response(sent.request_id, response(40, (30, 32, 5), (33, 33, 5), log_start=0))
    actions = r.take_actions()
    assert actions[:3] == [CheckpointEpochs(r.log.epochs.entries), AppendAsFollower(30, 34),
                           HighWatermarkChanged(34)]
    assert [(e.epoch, e.start_offset) for e in r.log.epochs.entries][-1] == (5, 30)
    [again] = [a for a in actions if isinstance(a, SendFetch)]
    assert (again.fetch.fetch_offset, again.fetch.last_fetched_epoch) == (34, 5)


def test_the_follower_high_watermark_follows_the_leader_even_down():
    r, sent = follower(hw=30)
    r.on_fetch_response(sent.request_id, response(22))
    assert r.high_watermark == 22


def test_the_log_start_follows_the_leader_up_to_our_high_watermark():
    r, sent = follower(hw=30)
    r.on_fetch_response(sent.request_id, response(30, log_start=12))
    assert r.log_start_offset == 12
    assert LogStartOffsetChanged(12) in r.take_actions()
    r2, sent2 = follower(hw=5)
    r2.on_fetch_response(sent2.request_id, response(5, log_start=12))
    assert r2.log_start_offset == 0                     # not past our high watermark


def test_answers_to_other_requests_are_ignored():
    r, sent = follower()
    r.on_fetch_response(sent.request_id + 1, response(40, (30, 31, 5)))
    assert r.log_end_offset == 30 and r.take_actions() == []


def test_records_that_do_not_start_at_our_end_are_not_appended():
    clock = Clock()
    r, sent = follower(clock=clock)
    r.on_fetch_response(sent.request_id, response(40, (31, 32, 5)))
    assert r.log_end_offset == 30 and actions_of(r, AppendAsFollower) == []
    clock.advance(1_000)
    r.tick()
    assert len(actions_of(r, SendFetch)) == 1


def test_a_batch_across_the_start_of_an_empty_log_restarts_it():
    # The leader's log start is inside the batch (DeleteRecords); we start over at the batch.
    r, sent = follower(start=12, end=12, hw=12, epochs=())
    r.on_fetch_response(sent.request_id, response(20, (10, 14, 5), log_start=12))
    actions = r.take_actions()
    assert TruncateFullyAndStartAt(10) in actions and AppendAsFollower(10, 15) in actions
    assert (r.log_start_offset, r.log_end_offset) == (12, 15)


def test_divergence_truncates_and_fetches_again():
    r, sent = follower(hw=18)
    r.on_fetch_response(sent.request_id, response(18, diverging=DivergingEpoch(4, 25)))
    actions = r.take_actions()
    assert TruncateTo(25) in actions
    assert not [a for a in actions if isinstance(a, RecordsLost)]   # above our HW: not lost
    [again] = [a for a in actions if isinstance(a, SendFetch)]
    assert (again.fetch.fetch_offset, again.fetch.last_fetched_epoch) == (25, 4)


def test_divergence_in_steps_when_we_do_not_know_the_leader_epoch():
    r, sent = follower(hw=8)
    r.on_fetch_response(sent.request_id, response(8, diverging=DivergingEpoch(3, 22)))
    [again] = actions_of(r, SendFetch)
    assert r.log_end_offset == 20
    assert (again.fetch.fetch_offset, again.fetch.last_fetched_epoch) == (20, 2)
    r.on_fetch_response(again.request_id, response(8, diverging=DivergingEpoch(2, 14)))
    assert r.log_end_offset == 14
    assert [(e.epoch, e.start_offset) for e in r.log.epochs.entries] == [(1, 0), (2, 10)]


def test_truncating_committed_records_reports_the_loss():
    # Only an unclean election can make a leader lack what we had as committed.
    r, sent = follower(hw=28)
    r.on_fetch_response(sent.request_id, response(3, diverging=DivergingEpoch(2, 14)))
    actions = r.take_actions()
    assert TruncateTo(14) in actions
    assert RecordsLost(14, 28, 5) in actions and HighWatermarkChanged(14) in actions
    assert r.high_watermark == 14


def out_of_range():
    r, sent = follower(hw=20)
    r.on_fetch_response(sent.request_id, response(-1, error=E.OFFSET_OUT_OF_RANGE))
    [ask] = actions_of(r, SendListOffsets)
    return r, ask


def test_out_of_range_asks_the_leader_for_its_offsets():
    r, ask = out_of_range()
    assert (ask.leader_id, ask.current_leader_epoch) == (1, 5)
    r.on_fetch_response(ask.request_id, response(40, (30, 31, 5)))   # not a fetch answer
    assert r.log_end_offset == 30


@pytest.mark.parametrize("start, end, truncation, position", [
    (0, 25, TruncateTo(25), 25),                    # the leader has less: keep what it has
    (40, 50, TruncateFullyAndStartAt(40), 40),      # it deleted all we have: start over there
    (5, 50, None, 30),                              # neither: fetch from our end again
])
def test_out_of_range_then_truncate_or_restart(start, end, truncation, position):
    r, ask = out_of_range()
    r.on_leader_offsets(ask.request_id, LeaderOffsets(E.NONE, start, end))
    actions = r.take_actions()
    if truncation is not None:
        assert truncation in actions
    [again] = [a for a in actions if isinstance(a, SendFetch)]
    assert again.fetch.fetch_offset == position == r.log_end_offset


def test_fenced_stops_fetching_until_a_new_epoch():
    clock = Clock()
    r, sent = follower(clock=clock)
    r.on_fetch_response(sent.request_id, response(-1, error=E.FENCED_LEADER_EPOCH))
    clock.advance(60_000)
    r.tick()
    assert r.take_actions() == [] and r.next_deadline_ms() is None
    r.apply_metadata(metadata(leader=3, leader_epoch=6, partition_epoch=11), brokers())
    [again] = actions_of(r, SendFetch)
    assert (again.leader_id, again.fetch.current_leader_epoch) == (3, 6)


def test_errors_asking_for_the_leader_offsets():
    r, ask = out_of_range()
    r.on_leader_offsets(ask.request_id, LeaderOffsets(E.FENCED_LEADER_EPOCH))
    assert r.follower.failed
    r, ask = out_of_range()
    r.on_leader_offsets(ask.request_id, LeaderOffsets(E.NOT_LEADER_OR_FOLLOWER))
    assert r.next_deadline_ms() is not None and not r.follower.failed


@pytest.mark.parametrize("error", [E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_LEADER_EPOCH,
                                   E.UNKNOWN_TOPIC_OR_PARTITION, E.KAFKA_STORAGE_ERROR])
def test_other_errors_back_off(error):
    clock = Clock()
    r, sent = follower(clock=clock, replica_fetch_backoff_ms=500)
    r.on_fetch_response(sent.request_id, response(-1, error=error))
    assert r.take_actions() == [] and r.next_deadline_ms() == clock.now + 500
    clock.advance(499)
    r.tick()
    assert r.take_actions() == []
    clock.advance(1)
    r.tick()
    assert len(actions_of(r, SendFetch)) == 1


def test_no_answer_backs_off():
    clock = Clock()
    r, sent = follower(clock=clock, replica_fetch_backoff_ms=500)
    r.on_fetch_failed(sent.request_id)
    assert r.next_deadline_ms() == clock.now + 500


def test_a_new_leader_restarts_fetching_and_drops_the_old_request():
    r, sent = follower()
    r.apply_metadata(metadata(leader=3, leader_epoch=6, partition_epoch=11), brokers())
    [again] = actions_of(r, SendFetch)
    r.on_fetch_response(sent.request_id, response(40, (30, 31, 5)))
    assert r.log_end_offset == 30
    assert r.follower.in_flight == again.request_id
