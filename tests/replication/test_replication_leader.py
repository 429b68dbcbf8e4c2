"""The leader's rules, table by table: fetch answers, the high watermark, ISR changes and the
controller's answers, acks=all produces, leadership transitions (Kafka's Partition.scala)."""
from __future__ import annotations

import pytest

from core.broker.replication import (AlterPartitionAnswer, BrokerInfo, CheckpointEpochs, FollowerFetch,
                                     CompleteProduce, DivergingEpoch, EpochEndOffset,
                                     HighWatermarkChanged, IsrMember, LeaderOffsets, Role,
                                     SendAlterPartition, StopReplica, UncleanLeadership)
from core.protocol.errors import ErrorCode as E
from tests.replication.support import (BROKER_EPOCHS, Clock, actions_of, brokers, catch_up,
                                       fetch, leader, metadata, replica)

# --- follower fetches --------------------------------------------------------------------------

# Leader of epoch 5 over epochs [(3, 0), (5, 10)], log [0, 15), high watermark 10.
@pytest.mark.parametrize("replica_id, offset, last_epoch, epoch, expected", [
    (2, 15, 5, 5, (E.NONE, None, 15)),
    (2, 12, 5, 5, (E.NONE, None, 12)),
    (2, 10, 3, 5, (E.NONE, None, 10)),              # epoch 3 ends exactly at 10
    (2, 0, -1, 5, (E.NONE, None, 0)),               # no last epoch: no divergence check
    (2, 12, 3, 5, (E.NONE, DivergingEpoch(3, 10), None)),   # epoch 3 ended at 10, not 12
    (2, 8, 4, 5, (E.NONE, DivergingEpoch(3, 10), None)),    # we never had epoch 4
    (2, 16, 5, 5, (E.NONE, DivergingEpoch(5, 15), None)),   # past our end in our epoch
    (2, 5, 7, 5, (E.OFFSET_OUT_OF_RANGE, None, None)),      # an epoch beyond ours
    (2, 16, -1, 5, (E.OFFSET_OUT_OF_RANGE, None, None)),    # past the log end
    (2, 15, 5, 4, (E.FENCED_LEADER_EPOCH, None, None)),     # the follower is behind
    (2, 15, 5, 6, (E.UNKNOWN_LEADER_EPOCH, None, None)),    # we are behind
    (2, 15, 5, -1, (E.NONE, None, 15)),             # no current epoch: no epoch check
    (4, 15, 5, 5, (E.UNKNOWN_LEADER_EPOCH, None, None)),    # not a replica (yet)
    (4, 15, 5, -1, (E.NOT_LEADER_OR_FOLLOWER, None, None)),
])
def test_fetch_answers(replica_id, offset, last_epoch, epoch, expected):
    r = leader(end=10, hw=10)
    r.append_as_leader(5, acks=1)
    answer = r.on_follower_fetch(fetch(replica_id, offset, last_epoch, epoch=epoch))
    assert (answer.error, answer.diverging_epoch, answer.read_offset) == expected
    if answer.error == E.NONE:
        assert (answer.high_watermark, answer.log_start_offset, answer.log_end_offset) == \
            (10, 0, 15)


def test_fetch_below_the_log_start_is_out_of_range_even_with_matching_epochs():
    r = leader(end=10)
    r.log_start_advanced(6)
    assert r.on_follower_fetch(fetch(2, 4, 3)).error == E.OFFSET_OUT_OF_RANGE
    assert r.on_follower_fetch(fetch(2, 4, -1)).error == E.OFFSET_OUT_OF_RANGE
    assert r.on_follower_fetch(fetch(2, 6, 3)).error == E.NONE


@pytest.mark.parametrize("b3, low", [
    (BrokerInfo(BROKER_EPOCHS[3]), 4),                  # 3 has not dropped its records yet
    (BrokerInfo(BROKER_EPOCHS[3], in_controlled_shutdown=True), 4),   # still alive
    (BrokerInfo(BROKER_EPOCHS[3], fenced=True), 6),     # a fenced broker is not waited for
])
def test_the_low_watermark_is_the_lowest_log_start_of_the_live_replicas(b3, low):
    r = leader(end=10)
    assert r.low_watermark == -1, "followers that never fetched have an unknown log start"
    r.apply_metadata(metadata(), brokers(b3=b3))
    r.log_start_advanced(6)                             # DeleteRecords on the leader
    for follower_id, start in ((2, 7), (3, 4)):
        r.on_follower_fetch(FollowerFetch(follower_id, BROKER_EPOCHS[follower_id], 5, 10, 3, start))
    assert r.low_watermark == low
    r.on_follower_fetch(FollowerFetch(3, BROKER_EPOCHS[3], 5, 10, 3, 6))
    assert r.low_watermark == 6
    assert replica(2).low_watermark == 0, "not a leader: its own log start"


def test_only_a_leader_answers_fetches():
    follower = replica(2)
    assert follower.on_follower_fetch(fetch(3, 0)).error == E.NOT_LEADER_OR_FOLLOWER  # no role
    follower.apply_metadata(metadata(), brokers())
    assert follower.on_follower_fetch(fetch(3, 0)).error == E.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("broker_epoch, error", [
    (BROKER_EPOCHS[2], E.NONE), (-1, E.NONE), (BROKER_EPOCHS[2] + 1, E.NONE),
    (BROKER_EPOCHS[2] - 1, E.NOT_LEADER_OR_FOLLOWER),   # an earlier incarnation's fetch
])
def test_fetch_from_an_earlier_incarnation_does_not_count(broker_epoch, error):
    r = leader(end=10, isr=(1,))
    answer = r.on_follower_fetch(fetch(2, 10, broker_epoch=broker_epoch))
    assert answer.error == error
    progress = r.leader.remotes[2]
    assert progress.log_end_offset == (10 if error == E.NONE else -1)


def test_the_answer_carries_the_high_watermark_from_before_the_fetch():
    r = leader(end=10, isr=(1, 2))
    r.append_as_leader(3, acks=1)
    answer = r.on_follower_fetch(fetch(2, 13))
    assert answer.high_watermark == 10 and r.high_watermark == 13


def test_a_diverging_answer_does_not_update_the_follower_state():
    r = leader(end=10)
    assert r.on_follower_fetch(fetch(2, 12, 3)).diverging_epoch == DivergingEpoch(3, 10)
    assert r.leader.remotes[2].log_end_offset == -1
    assert r.on_follower_fetch(fetch(2, 10, 3), update_fetch_state=False).error == E.NONE
    assert r.leader.remotes[2].log_end_offset == -1


# --- the high watermark ------------------------------------------------------------------------

def test_high_watermark_is_the_minimum_over_the_isr():
    r = leader(end=10)
    r.append_as_leader(10, acks=1)                      # log end 20
    catch_up(r, 2, offset=17)
    assert r.high_watermark == 10                       # 3 has not fetched in this epoch
    catch_up(r, 3, offset=14)
    assert r.high_watermark == 14
    catch_up(r, 3, offset=20)
    assert r.high_watermark == 17
    catch_up(r, 2, offset=20)
    assert r.high_watermark == 20


def test_high_watermark_never_goes_back():
    r = leader(end=10)
    r.append_as_leader(5, acks=1)
    catch_up(r, 2, 3)
    assert r.high_watermark == 15
    catch_up(r, 2, offset=12)                           # a follower restarted with less
    assert r.high_watermark == 15


def test_high_watermark_waits_for_a_caught_up_follower_about_to_join():
    clock = Clock()
    r = leader(end=10, isr=(1, 2), clock=clock)
    r.append_as_leader(10, acks=1)
    catch_up(r, 2)
    assert r.high_watermark == 20
    catch_up(r, 3, offset=20)                           # caught up: joins (pending)
    r.take_actions()
    r.append_as_leader(5, acks=1)                       # 25
    catch_up(r, 3, offset=22)
    catch_up(r, 2)
    assert r.high_watermark == 22


@pytest.mark.parametrize("info, waits", [
    (BrokerInfo(BROKER_EPOCHS[3]), True),
    (BrokerInfo(BROKER_EPOCHS[3], fenced=True), False),
    (BrokerInfo(BROKER_EPOCHS[3], in_controlled_shutdown=True), False),
    (BrokerInfo(BROKER_EPOCHS[3] - 1), False),          # an incarnation the image lacks
])
def test_high_watermark_waits_only_for_eligible_caught_up_followers(info, waits):
    clock = Clock()
    r = replica(1, clock=clock, end=10, hw=10, epochs=[(3, 0)])
    r.apply_metadata(metadata(isr=(1, 2)), brokers(b3=info))
    r.append_as_leader(5, acks=1)                       # 15
    catch_up(r, 3, offset=15)                           # caught up now
    r.append_as_leader(5, acks=1)                       # 20; 3 stays caught up for the lag
    catch_up(r, 2)
    assert r.high_watermark == (15 if waits else 20)


def test_high_watermark_ignores_a_follower_that_is_not_caught_up():
    clock = Clock()
    r = leader(end=10, isr=(1, 2), clock=clock)
    r.append_as_leader(10, acks=1)
    catch_up(r, 3, offset=5)
    clock.advance(20_000)                               # past replica.lag.time.max.ms
    catch_up(r, 3, offset=6)
    catch_up(r, 2)
    assert r.high_watermark == 20


@pytest.mark.parametrize("gated, hw", [(True, 10), (False, 15)])
def test_high_watermark_does_not_move_while_the_isr_is_below_the_minimum(gated, hw):
    # Kafka 3.7+ (KAFKA-15583); earlier Kafka advanced on the smaller ISR.
    r = leader(end=10, isr=(1,), min_insync_replicas=2, hw_requires_min_isr=gated)
    r.append_as_leader(5, acks=1)
    assert r.high_watermark == hw


def test_an_isr_member_that_never_fetched_holds_the_high_watermark():
    r = leader(end=10, isr=(1, 2))
    r.append_as_leader(5, acks=1)
    assert r.leader.remotes[2].log_end_offset == -1     # unknown until its first fetch
    assert r.high_watermark == 10


# --- ISR changes ---------------------------------------------------------------------------------

def test_expansion_needs_the_high_watermark_and_the_start_of_our_epoch():
    # Epoch 5 starts at 10; our high watermark is still 6 (we were a lagging follower) and
    # stays there until 2, in the ISR, fetches.
    r = leader(end=10, hw=6, isr=(1, 2))
    r.append_as_leader(5, acks=1)                       # 15
    catch_up(r, 3, offset=8)                            # >= our high watermark of 6 ...
    assert r.high_watermark == 6
    assert actions_of(r, SendAlterPartition) == []      # ... but not the epoch start
    catch_up(r, 3, offset=10)                           # reaches both
    [sent] = actions_of(r, SendAlterPartition)
    assert sent.request.isr == (1, 2, 3)
    # broker epochs: ours, the one 3 fetched with, -1 for 2 which has not fetched from us
    assert sent.request.new_isr == (IsrMember(1, 101), IsrMember(2, -1), IsrMember(3, 103))
    assert (sent.request.leader_epoch, sent.request.partition_epoch) == (5, 10)
    assert r.isr == {1, 2} and r.maximal_isr == {1, 2, 3}


@pytest.mark.parametrize("info", [
    BrokerInfo(BROKER_EPOCHS[3], fenced=True),
    BrokerInfo(BROKER_EPOCHS[3], in_controlled_shutdown=True),
    BrokerInfo(BROKER_EPOCHS[3] - 1),                   # an incarnation the image lacks
])
def test_ineligible_followers_do_not_join(info):
    r = replica(1, end=10, hw=10, epochs=[(3, 0)])
    r.apply_metadata(metadata(isr=(1, 2)), brokers(b3=info))
    catch_up(r, 3)
    assert actions_of(r, SendAlterPartition) == []


def test_one_isr_change_at_a_time():
    r = leader(end=10, isr=(1,))
    catch_up(r, 2, 3)
    [sent] = actions_of(r, SendAlterPartition)
    assert sent.request.isr == (1, 2)


def test_shrink_after_the_lag_time():
    clock = Clock()
    r = leader(end=10, clock=clock)
    catch_up(r, 2, 3)
    r.append_as_leader(5, acks=1)
    catch_up(r, 2)                                      # 2 keeps up, 3 stops fetching
    clock.advance(10_000)                               # exactly the lag: still in sync
    r.tick()
    assert actions_of(r, SendAlterPartition) == []
    clock.advance(5_001)                                # next check (every lag / 2)
    assert r.next_deadline_ms() <= clock.now
    catch_up(r, 2)
    r.tick()
    [sent] = actions_of(r, SendAlterPartition)
    assert sent.request.isr == (1, 2)
    assert r.maximal_isr == {1, 2, 3}                   # it still counts until committed


def test_a_follower_with_our_log_end_stays_in_sync_without_fetching():
    clock = Clock()
    r = leader(end=10, clock=clock)
    catch_up(r, 2, 3)
    clock.advance(60_000)
    r.tick()
    assert actions_of(r, SendAlterPartition) == []


def test_steady_small_appends_keep_a_follower_caught_up():
    # Its fetch offset never equals our log end, but it always reaches the log end we had at
    # its previous fetch (Replica.updateFetchStateOrThrow).
    clock = Clock()
    r = leader(end=10, clock=clock, isr=(1, 2))
    catch_up(r, 2)
    for _ in range(10):
        r.append_as_leader(1, acks=1)
        clock.advance(4_000)
        offset = r.log_end_offset
        r.append_as_leader(1, acks=1)
        catch_up(r, 2, offset=offset)
        r.tick()
    assert actions_of(r, SendAlterPartition) == []


def committed(r, *isr, partition_epoch=11, request=None):
    pending = r.leader.isr_state
    r.on_alter_partition_response(
        pending.request_id if request is None else request,
        AlterPartitionAnswer(E.NONE, 1, 5, tuple(isr), partition_epoch))


def test_shrink_takes_effect_when_the_controller_says_so():
    clock = Clock()
    r = leader(end=10, clock=clock, min_insync_replicas=2)
    catch_up(r, 2)
    r.append_as_leader(5, acks=-1, request_id="p")
    catch_up(r, 2)
    assert r.high_watermark == 10                       # 3 is in the ISR, at -1
    clock.advance(15_001)
    r.tick()
    r.take_actions()
    assert r.high_watermark == 10                       # proposed, not yet committed
    committed(r, 1, 2)
    assert r.isr == {1, 2} and r.partition_epoch == 11
    assert r.high_watermark == 15
    assert actions_of(r, CompleteProduce) == [CompleteProduce("p", E.NONE, 10)]


@pytest.mark.parametrize("error, outcome", [
    (E.OPERATION_NOT_ATTEMPTED, "revert"),
    (E.INELIGIBLE_REPLICA, "revert"),
    (E.FENCED_LEADER_EPOCH, "pending"),
    (E.INVALID_UPDATE_VERSION, "pending"),
    (E.UNKNOWN_TOPIC_OR_PARTITION, "pending"),
    (E.UNKNOWN_TOPIC_ID, "pending"),
    (E.INVALID_REQUEST, "pending"),
    (E.NEW_LEADER_ELECTED, "pending"),
    (E.UNKNOWN_SERVER_ERROR, "retry"),
    (E.NOT_CONTROLLER, "retry"),
])
def test_alter_partition_errors(error, outcome):
    r = leader(end=10, isr=(1, 2))
    catch_up(r, 3)
    [sent] = actions_of(r, SendAlterPartition)
    r.on_alter_partition_response(sent.request_id, AlterPartitionAnswer(error))
    resent = actions_of(r, SendAlterPartition)
    state = r.leader.isr_state
    if outcome == "revert":
        assert not state.in_flight and r.maximal_isr == {1, 2} and resent == []
        catch_up(r, 3)                                  # and may propose again
        assert len(actions_of(r, SendAlterPartition)) == 1
    elif outcome == "pending":
        # Stale view: wait for the metadata, proposing nothing meanwhile.
        assert state.in_flight and r.maximal_isr == {1, 2, 3} and resent == []
        r.apply_metadata(metadata(partition_epoch=11, isr=(1, 2)))
        assert not r.leader.isr_state.in_flight and r.isr == {1, 2}
    else:
        [again] = resent
        assert again.request == sent.request and again.request_id != sent.request_id
        assert r.leader.isr_state.request_id == again.request_id


@pytest.mark.parametrize("answer", [
    AlterPartitionAnswer(E.NONE, 1, 4, (1, 2, 3), 11),      # another leader epoch
    AlterPartitionAnswer(E.NONE, 1, 5, (1, 2, 3), 9),       # an older partition epoch
])
def test_successful_answers_from_another_view_leave_the_change_pending(answer):
    r = leader(end=10, isr=(1, 2))
    catch_up(r, 3)
    [sent] = actions_of(r, SendAlterPartition)
    r.on_alter_partition_response(sent.request_id, answer)
    assert r.leader.isr_state.in_flight and r.partition_epoch == 10


def test_a_stale_answer_is_ignored():
    r = leader(end=10, isr=(1, 2))
    catch_up(r, 3)
    [sent] = actions_of(r, SendAlterPartition)
    r.on_alter_partition_response(sent.request_id + 100,
                                  AlterPartitionAnswer(E.NONE, 1, 5, (1, 2, 3), 11))
    assert r.leader.isr_state.in_flight and r.isr == {1, 2}
    r.apply_metadata(metadata(partition_epoch=11, isr=(1, 2)))   # the metadata moved on
    r.on_alter_partition_response(sent.request_id, AlterPartitionAnswer(E.INELIGIBLE_REPLICA))
    assert r.isr == {1, 2} and not r.leader.isr_state.in_flight


def test_metadata_of_the_state_we_hold_keeps_a_change_in_flight():
    # The answer to one change told us partition epoch 11; we proposed the next change on it;
    # then the image of epoch 11 arrives. The controller may still apply our proposal, so it
    # must keep counting (Kafka's makeLeader would drop it; the simulation found the loss).
    r = leader(end=10, isr=(1,))
    catch_up(r, 2)
    committed(r, 1, 2)
    r.append_as_leader(5, acks=1)
    catch_up(r, 2)
    catch_up(r, 3, offset=15)
    assert r.maximal_isr == {1, 2, 3}
    r.apply_metadata(metadata(partition_epoch=11, isr=(1, 2)))
    assert r.maximal_isr == {1, 2, 3}
    r.append_as_leader(5, acks=1)
    catch_up(r, 2)
    assert r.high_watermark == 15                       # waits for 3 too
    r.apply_metadata(metadata(partition_epoch=12, isr=(1, 2, 3)))
    assert r.isr == {1, 2, 3} and not r.leader.isr_state.in_flight


# --- produce -----------------------------------------------------------------------------------

def test_acks_all_is_refused_before_the_append_when_the_isr_is_too_small():
    r = leader(end=10, isr=(1,), min_insync_replicas=2)
    assert r.append_as_leader(3, acks=-1, request_id="p").error == E.NOT_ENOUGH_REPLICAS
    assert r.log_end_offset == 10
    assert r.append_as_leader(3, acks=1).error == E.NONE      # only acks=all checks


def test_under_replicated_and_under_min_isr():
    r = leader(end=10, isr=(1, 2), min_insync_replicas=2)
    assert r.under_replicated and not r.under_min_isr
    r.apply_metadata(metadata(partition_epoch=11, isr=(1,)))
    assert r.under_min_isr
    r.apply_metadata(metadata(partition_epoch=12, isr=(1, 2, 3)))
    assert not r.under_replicated and not r.under_min_isr


def test_min_insync_is_capped_at_the_replication_factor():
    r = leader(end=10, isr=(1, 2), replicas=(1, 2), min_insync_replicas=3)
    assert r.append_as_leader(1, acks=-1, request_id="p").error == E.NONE


def test_acks_all_completes_when_the_isr_has_the_records():
    r = leader(end=10)
    catch_up(r, 2, 3)
    result = r.append_as_leader(3, acks=-1, request_id="p")
    assert (result.error, result.base_offset, result.last_offset, result.leader_epoch,
            result.pending) == (E.NONE, 10, 12, 5, True)
    catch_up(r, 2)
    assert actions_of(r, CompleteProduce) == []
    catch_up(r, 3)
    assert actions_of(r, CompleteProduce) == [CompleteProduce("p", E.NONE, 10)]


def test_acks_all_on_a_lone_leader_completes_at_once():
    r = leader(end=10, isr=(1,))
    result = r.append_as_leader(3, acks=-1, request_id="p")
    assert (result.error, result.pending) == (E.NONE, False)


def test_a_shrink_below_the_minimum_holds_acks_all_until_timeout():
    # Kafka 3.7+: the high watermark stops, so the produce waits and times out (or completes
    # if the ISR grows back in time).
    clock = Clock()
    r = leader(end=10, isr=(1, 2), min_insync_replicas=2, clock=clock)
    catch_up(r, 2)
    r.append_as_leader(3, acks=-1, request_id="p", timeout_ms=30_000)
    fenced = brokers(b2=BrokerInfo(BROKER_EPOCHS[2], fenced=True))
    r.apply_metadata(metadata(partition_epoch=11, isr=(1,)), fenced)   # the controller fenced 2
    assert r.high_watermark == 10 and actions_of(r, CompleteProduce) == []
    clock.advance(29_999)
    r.tick()
    assert actions_of(r, CompleteProduce) == []
    clock.advance(1)
    assert r.next_deadline_ms() <= clock.now
    r.tick()
    assert actions_of(r, CompleteProduce) == [CompleteProduce("p", E.REQUEST_TIMED_OUT, 10)]


def test_a_shrink_below_the_minimum_then_a_rejoin_completes_acks_all():
    r = leader(end=10, isr=(1, 2), min_insync_replicas=2)
    catch_up(r, 2)
    r.append_as_leader(3, acks=-1, request_id="p")
    r.apply_metadata(metadata(partition_epoch=11, isr=(1,)),
                     brokers(b2=BrokerInfo(BROKER_EPOCHS[2], fenced=True)))
    r.apply_metadata(metadata(partition_epoch=11, isr=(1,)), brokers())   # unfenced again
    catch_up(r, 2)
    [sent] = actions_of(r, SendAlterPartition)
    assert sent.request.isr == (1, 2) and r.high_watermark == 10
    committed(r, 1, 2, partition_epoch=12)
    assert actions_of(r, CompleteProduce) == [CompleteProduce("p", E.NONE, 10)]


def test_a_shrink_below_the_minimum_fails_acks_all_after_append_before_kafka_3_7():
    r = leader(end=10, isr=(1, 2), min_insync_replicas=2, hw_requires_min_isr=False)
    catch_up(r, 2)
    r.append_as_leader(3, acks=-1, request_id="p")
    r.apply_metadata(metadata(partition_epoch=11, isr=(1,)),
                     brokers(b2=BrokerInfo(BROKER_EPOCHS[2], fenced=True)))
    assert actions_of(r, CompleteProduce) == [
        CompleteProduce("p", E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 10)]


def test_losing_the_leadership_fails_waiting_produces():
    r = leader(end=10)
    r.append_as_leader(3, acks=-1, request_id="p")
    r.apply_metadata(metadata(leader=2, leader_epoch=6, partition_epoch=11), brokers())
    assert actions_of(r, CompleteProduce) == [
        CompleteProduce("p", E.NOT_LEADER_OR_FOLLOWER, 10)]
    assert r.append_as_leader(1, acks=1).error == E.NOT_LEADER_OR_FOLLOWER


def test_a_re_elected_leader_keeps_waiting_produces():
    r = leader(end=10)
    r.append_as_leader(3, acks=-1, request_id="p")
    r.apply_metadata(metadata(leader_epoch=6, partition_epoch=11))
    assert actions_of(r, CompleteProduce) == []
    catch_up(r, 2, 3, offset=13)
    assert actions_of(r, CompleteProduce) == [CompleteProduce("p", E.NONE, 10)]


# A retried batch the log already holds (the producer state found it at base..last): answered
# as its first append would have been, so acks=all waits for the ISR to have the original. The
# fault run found a deposed leader, still reachable by clients, acknowledging such a retry of a
# batch only it held.
def test_a_duplicate_above_the_high_watermark_waits_for_the_isr():
    r = leader(end=10)
    catch_up(r, 2, 3)
    r.append_as_leader(3, acks=-1, request_id="p", timeout_ms=30_000)
    result = r.duplicate_as_leader(10, 12, acks=-1, request_id="d")
    assert (result.error, result.base_offset, result.last_offset, result.pending) == (E.NONE, 10, 12, True)
    assert r.log_end_offset == 13                                  # nothing written
    catch_up(r, 2)
    assert actions_of(r, CompleteProduce) == []
    catch_up(r, 3)
    assert sorted(actions_of(r, CompleteProduce), key=str) == [
        CompleteProduce("d", E.NONE, 10), CompleteProduce("p", E.NONE, 10)]


@pytest.mark.parametrize("acks, base, last, expected", [
    (-1, 4, 6, (E.NONE, False)),        # below the high watermark: committed, answered now
    (1, 10, 12, (E.NONE, False)),       # acks=1 never waits
    (0, 10, 12, (E.NONE, False)),
])
def test_a_duplicate_that_need_not_wait(acks, base, last, expected):
    r = leader(end=10)
    catch_up(r, 2, 3)
    r.append_as_leader(3, acks=1)
    result = r.duplicate_as_leader(base, last, acks=acks, request_id="d")
    assert (result.error, result.pending) == expected
    assert result.base_offset == base and r.log_end_offset == 13


def test_a_duplicate_is_refused_like_an_append():
    r = leader(end=10, isr=(1,), min_insync_replicas=2)
    assert r.duplicate_as_leader(5, 6, acks=-1, request_id="d").error == E.NOT_ENOUGH_REPLICAS
    follower = replica(1, end=10, hw=10, epochs=[(3, 0)])
    follower.apply_metadata(metadata(leader=2), brokers())
    assert follower.duplicate_as_leader(5, 6, acks=1).error == E.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(ValueError):
        leader(end=10).duplicate_as_leader(9, 10, acks=1)          # beyond the log end


def test_a_waiting_duplicate_times_out_or_fails_with_the_leadership():
    clock = Clock()
    r = leader(end=10, clock=clock)
    r.append_as_leader(3, acks=1)
    r.duplicate_as_leader(10, 12, acks=-1, request_id="d", timeout_ms=1_000)
    r.duplicate_as_leader(11, 12, acks=-1, request_id="e", timeout_ms=5_000)
    clock.advance(1_000)
    r.tick()
    assert actions_of(r, CompleteProduce) == [CompleteProduce("d", E.REQUEST_TIMED_OUT, 10)]
    r.apply_metadata(metadata(leader=2, leader_epoch=6, partition_epoch=11), brokers())
    assert actions_of(r, CompleteProduce) == [CompleteProduce("e", E.NOT_LEADER_OR_FOLLOWER, 11)]


# --- transitions -------------------------------------------------------------------------------

def test_become_leader_opens_the_epoch_at_the_log_end():
    r = replica(1, end=10, hw=7, epochs=[(3, 0)])
    r.apply_metadata(metadata(), brokers())
    assert r.role is Role.LEADER and r.leader_epoch == 5
    assert [(e.epoch, e.start_offset) for e in r.log.epochs.entries] == [(3, 0), (5, 10)]
    assert actions_of(r, CheckpointEpochs)
    assert r.leader.epoch_start_offset == 10
    assert r.high_watermark == 7                        # until the ISR fetches


def test_a_new_leader_resets_what_it_knew_of_its_followers():
    clock = Clock()
    r = replica(1, clock=clock, end=10, hw=10)
    r.apply_metadata(metadata(isr=(1, 2)), brokers())
    progress = r.leader.remotes
    assert progress[2].last_caught_up_time_ms == clock.now     # ISR: caught up now
    assert progress[3].last_caught_up_time_ms == 0              # not: never
    assert progress[2].log_end_offset == -1


def test_a_re_elected_leader_keeps_follower_offsets():
    r = leader(end=10)
    catch_up(r, 2, 3)
    r.apply_metadata(metadata(leader_epoch=6, partition_epoch=11))
    assert r.leader.remotes[2].log_end_offset == 10
    assert r.leader.epoch_start_offset == 10


def test_unclean_leadership_is_reported_and_recovered():
    r = replica(1, end=8, hw=8, epochs=[(3, 0)])
    r.apply_metadata(metadata(isr=(1,), lrs=1), brokers())
    assert actions_of(r, UncleanLeadership) == [UncleanLeadership(5, 8, 8)]
    catch_up(r, 2)
    [sent] = actions_of(r, SendAlterPartition)
    assert sent.request.leader_recovery_state == 0      # RECOVERED, as Kafka 3.7 sends it


def test_older_metadata_is_ignored():
    r = leader(end=10, partition_epoch=10)
    r.apply_metadata(metadata(leader=2, leader_epoch=4, partition_epoch=9))
    assert r.role is Role.LEADER and r.leader_epoch == 5


def test_removed_from_the_replicas_stops():
    r = leader(end=10)
    r.append_as_leader(1, acks=-1, request_id="p")
    r.apply_metadata(metadata(leader=2, leader_epoch=6, partition_epoch=11, replicas=(2, 3),
                              isr=(2, 3)))
    assert r.role is Role.STOPPED
    actions = r.take_actions()
    assert CompleteProduce("p", E.NOT_LEADER_OR_FOLLOWER, 10) in actions
    assert StopReplica(True) in actions


def test_isr_shrink_by_the_controller_advances_the_high_watermark():
    r = leader(end=10)
    r.append_as_leader(5, acks=1)
    catch_up(r, 2)
    r.take_actions()
    r.apply_metadata(metadata(partition_epoch=11, isr=(1, 2)))
    assert HighWatermarkChanged(15) in r.take_actions()


# --- OffsetForLeaderEpoch and ListOffsets --------------------------------------------------------

@pytest.mark.parametrize("epoch, current, expected", [
    (5, -1, EpochEndOffset(E.NONE, 5, 12)),
    (4, 5, EpochEndOffset(E.NONE, 3, 10)),
    (3, 5, EpochEndOffset(E.NONE, 3, 10)),
    (6, 5, EpochEndOffset(E.NONE, -1, -1)),
    (3, 4, EpochEndOffset(E.FENCED_LEADER_EPOCH)),
    (3, 6, EpochEndOffset(E.UNKNOWN_LEADER_EPOCH)),
])
def test_offset_for_leader_epoch(epoch, current, expected):
    r = leader(end=10)
    r.append_as_leader(2, acks=1)
    assert r.offset_for_leader_epoch(epoch, current) == expected


def test_offset_for_leader_epoch_on_a_follower():
    f = replica(2)
    f.apply_metadata(metadata(), brokers())
    assert f.offset_for_leader_epoch(3, 5).error == E.NOT_LEADER_OR_FOLLOWER


def test_leader_offsets():
    r = leader(end=10)
    r.log_start_advanced(4)
    assert r.leader_offsets(5) == LeaderOffsets(E.NONE, 4, 10)
    assert r.leader_offsets(4).error == E.FENCED_LEADER_EPOCH
