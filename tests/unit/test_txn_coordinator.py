"""The pure transaction coordinator: answers per state, as Kafka's TransactionCoordinator
gives them, and what it writes and sends."""
from __future__ import annotations

import pytest

from core.broker.transactions.coordinator import TxnConfig, map_append_error
from core.broker.transactions.events import (AddPartitions, AddResult, EndResult, InitProducerId, InitResult,
                                             LogWritten, MarkersWritten, SendMarkers, Unpark, WriteTxnLog)
from core.broker.transactions.state import MAX_EPOCH, IllegalTransition, TxnMetadata, TxnState as S
from core.protocol.errors import ErrorCode as E
from tests.support.txn_harness import TxnHarness

T1, T2 = ("orders", 0), ("orders", 1)


def reach(state: S) -> tuple[TxnHarness, int, int]:
    """A harness with transactional id "t" in `state`; returns it, the producer id and epoch."""
    h = TxnHarness.new()
    r = h.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    if state is S.EMPTY:
        return h, pid, epoch
    assert h.add("t", pid, epoch, T1) == AddResult(E.NONE)
    if state is S.ONGOING:
        return h, pid, epoch
    h.auto_markers = state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    assert h.end("t", pid, epoch, commit=state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)) == EndResult(E.NONE)
    assert h.meta("t").state is state
    return h, pid, epoch


# Kafka's handleEndTransaction, for a client with the right id and epoch.
END_TABLE = [
    (S.EMPTY, True, E.INVALID_TXN_STATE),
    (S.EMPTY, False, E.INVALID_TXN_STATE),
    (S.ONGOING, True, E.NONE),
    (S.ONGOING, False, E.NONE),
    (S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_COMMIT, False, E.INVALID_TXN_STATE),
    (S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, True, E.INVALID_TXN_STATE),
    (S.COMPLETE_COMMIT, True, E.NONE),           # a retry of a finished commit
    (S.COMPLETE_COMMIT, False, E.INVALID_TXN_STATE),
    (S.COMPLETE_ABORT, False, E.NONE),
    (S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
]


@pytest.mark.parametrize("state,commit,code", END_TABLE)
def test_end_txn_answers_per_state(state, commit, code):
    h, pid, epoch = reach(state)
    before = len(h.log)
    assert h.end("t", pid, epoch, commit) == EndResult(code)
    if state is not S.ONGOING:
        assert len(h.log) == before, "an answer that changes nothing writes nothing"


ADD_TABLE = [
    (S.EMPTY, E.NONE),
    (S.ONGOING, E.NONE),
    (S.PREPARE_COMMIT, None),     # waits for the previous transaction to complete
    (S.PREPARE_ABORT, None),
    (S.COMPLETE_COMMIT, E.NONE),
    (S.COMPLETE_ABORT, E.NONE),
]


@pytest.mark.parametrize("state,code", ADD_TABLE)
def test_add_partitions_answers_per_state(state, code):
    h, pid, epoch = reach(state)
    before = len(h.log)
    request = AddPartitions(99, h.now, "t", pid, epoch, frozenset({T2}))
    h.run(h.coordinator.handle(request))
    if code is None:
        assert 99 not in h.responses and len(h.log) == before, "parked: no answer, nothing written"
        h.run(h.coordinator.handle(MarkersWritten("t", pid, epoch, 1, h.now)))
        code = E.NONE
    assert h.responses[99] == AddResult(code)
    assert h.log[-1][1].state is S.ONGOING and T2 in h.meta("t").partitions


INIT_TABLE = [
    (S.EMPTY, E.NONE),
    (S.ONGOING, E.CONCURRENT_TRANSACTIONS),      # aborts it under a bumped epoch first
    (S.PREPARE_COMMIT, E.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, E.CONCURRENT_TRANSACTIONS),
    (S.COMPLETE_COMMIT, E.NONE),
    (S.COMPLETE_ABORT, E.NONE),
]


@pytest.mark.parametrize("state,code", INIT_TABLE)
def test_init_producer_id_answers_per_state(state, code):
    h, pid, epoch = reach(state)
    r = h.init("t")
    assert r.error == code
    if code == E.NONE:
        assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1)


def test_wrong_producer_id_or_epoch_is_refused_and_changes_nothing():
    h, pid, epoch = reach(S.ONGOING)
    before = (h.meta("t"), len(h.log))
    assert h.add("t", pid + 1, epoch, T2) == AddResult(E.INVALID_PRODUCER_ID_MAPPING)
    assert h.add("t", pid, epoch - 1, T2) == AddResult(E.PRODUCER_FENCED)
    assert h.add("t", pid, epoch + 1, T2) == AddResult(E.PRODUCER_FENCED)
    assert h.end("t", pid + 1, epoch, True) == EndResult(E.INVALID_PRODUCER_ID_MAPPING)
    assert h.end("t", pid, epoch - 1, True) == EndResult(E.PRODUCER_FENCED)
    assert h.add("unknown", pid, epoch, T2) == AddResult(E.INVALID_PRODUCER_ID_MAPPING)
    assert h.end("unknown", pid, epoch, True) == EndResult(E.INVALID_PRODUCER_ID_MAPPING)
    assert (h.meta("t"), len(h.log)) == before


@pytest.mark.parametrize("tid,timeout,code", [
    ("", 60_000, E.INVALID_REQUEST),
    ("x" * 32768, 60_000, E.INVALID_REQUEST),         # too long to be a __transaction_state key
    ("é" * 16384, 60_000, E.INVALID_REQUEST),         # counted in UTF-8 bytes
    ("t", 0, E.INVALID_TRANSACTION_TIMEOUT),
    ("t", -5, E.INVALID_TRANSACTION_TIMEOUT),
    ("t", 900_001, E.INVALID_TRANSACTION_TIMEOUT),    # above transaction.max.timeout.ms
])
def test_bad_init_is_refused_and_nothing_is_written(tid, timeout, code):
    h = TxnHarness.new()
    assert h.init(tid, timeout_ms=timeout) == InitResult(code)
    assert h.log == [] and h.coordinator.entries == {}


def test_init_for_a_new_id_writes_empty_at_epoch_zero():
    h = TxnHarness.new()
    r = h.init("t", timeout_ms=30_000)
    assert r.error == E.NONE and r.producer_epoch == 0
    assert h.log == [("t", TxnMetadata("t", r.producer_id, 0, 30_000, S.EMPTY, last_update_ms=h.now))]


def test_a_second_producer_fences_the_first_and_aborts_its_transaction():
    h, pid, epoch = reach(S.ONGOING)
    # The new producer's first InitProducerId aborts under epoch + 1 and asks it to retry.
    assert h.init("t").error == E.CONCURRENT_TRANSACTIONS
    abort = h.markers[-1]
    assert (abort.commit, abort.producer_epoch, abort.partitions) == (False, epoch + 1, frozenset({T1}))
    r = h.init("t")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 2)
    # The old producer is fenced everywhere.
    assert h.add("t", pid, epoch, T2) == AddResult(E.PRODUCER_FENCED)
    assert h.end("t", pid, epoch, True) == EndResult(E.PRODUCER_FENCED)
    states = [m.state for _, m in h.log]
    assert states == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced():
    h = TxnHarness.new()
    r = h.init("t", timeout_ms=5_000)
    pid, epoch = r.producer_id, r.producer_epoch
    h.add("t", pid, epoch, T1, T2)
    h.tick(5_000)
    assert h.meta("t").state is S.ONGOING, "not before the timeout has passed"
    h.tick(1)
    assert h.meta("t").state is S.COMPLETE_ABORT
    assert h.markers[-1] == SendMarkers("t", pid, epoch + 1, 1, False, frozenset({T1, T2}), h.meta("t").start_ms)
    assert h.end("t", pid, epoch, True) == EndResult(E.PRODUCER_FENCED)


def test_commit_answers_after_prepare_and_completes_after_markers():
    h, pid, epoch = reach(S.ONGOING)
    h.auto_markers = False
    assert h.end("t", pid, epoch, True) == EndResult(E.NONE)
    assert h.meta("t").state is S.PREPARE_COMMIT
    assert h.markers == [SendMarkers("t", pid, epoch, 1, True, frozenset({T1}), h.meta("t").start_ms)]
    # the next transaction's first AddPartitionsToTxn waits until the markers are written
    assert h.add("t", pid, epoch, T1) is None
    h.run(h.coordinator.handle(MarkersWritten("t", pid, epoch, 1, h.now)))
    complete, ongoing = h.log[-2][1], h.log[-1][1]
    assert (complete.state, complete.partitions) == (S.COMPLETE_COMMIT, frozenset())
    assert (ongoing.state, ongoing.partitions) == (S.ONGOING, frozenset({T1}))
    assert list(h.responses.values())[-1] == AddResult(E.NONE)


def test_each_transaction_of_an_epoch_starts_later_than_the_last_so_its_markers_name_it():
    """(producer id, epoch, start_ms) names one transaction in its markers
    (core/protocol/txn_markers.py): transactions begun within one millisecond, or after the
    clock stepped back, still get distinct, increasing starts."""
    h, pid, epoch = reach(S.ONGOING)
    starts = [h.meta("t").start_ms]
    for clock_step in (0, 0, -5_000, 0):
        h.now += clock_step
        assert h.end("t", pid, epoch, True) == EndResult(E.NONE)
        assert h.markers[-1].start_ms == starts[-1]
        assert h.add("t", pid, epoch, T1) == AddResult(E.NONE)
        starts.append(h.meta("t").start_ms)
    assert starts == sorted(set(starts)) and starts[1] == starts[0] + 1, starts
    assert h.meta("t").start_ms == h.log[-1][1].start_ms, "the log holds it, for a new coordinator"


def test_a_parked_add_is_written_with_the_completion_in_one_batch_and_waits_again_if_it_fails():
    h, pid, epoch = reach(S.PREPARE_COMMIT)
    h.auto_write = False
    h.run(h.coordinator.handle(AddPartitions("a", h.now, "t", pid, epoch, frozenset({T2}))))
    h.run(h.coordinator.handle(MarkersWritten("t", pid, epoch, 1, h.now)))
    [w] = h.unwritten
    assert [(md.state, md.partitions) for md in w.records] == [
        (S.COMPLETE_COMMIT, frozenset()), (S.ONGOING, frozenset({T2}))], "one write, two records"
    assert "a" not in h.responses, "answered only once the batch is written"

    h.finish_writes(E.COORDINATOR_NOT_AVAILABLE)       # neither record landed
    assert "a" not in h.responses and h.meta("t").state is S.PREPARE_COMMIT, "it waits for the completion"
    h.now += 1_000
    h.run(h.coordinator.tick(h.now))                    # the completion is retried, with it again
    [w] = h.unwritten
    assert [md.state for md in w.records] == [S.COMPLETE_COMMIT, S.ONGOING]
    h.finish_writes()
    assert h.responses["a"] == AddResult(E.NONE)
    assert [md.state for _, md in h.log[-2:]] == [S.COMPLETE_COMMIT, S.ONGOING]


def test_a_parked_add_is_sent_away_when_the_driver_gives_up_or_the_partition_moves():
    h, pid, epoch = reach(S.PREPARE_COMMIT)
    h.run(h.coordinator.handle(AddPartitions("a", h.now, "t", pid, epoch, frozenset({T1}))))
    h.run(h.coordinator.handle(AddPartitions("b", h.now, "t", pid, epoch, frozenset({T2}))))
    h.run(h.coordinator.handle(Unpark("t", "a")))
    assert h.responses["a"] == AddResult(E.CONCURRENT_TRANSACTIONS)
    h.run(h.coordinator.handle(Unpark("t", "a")))       # twice: nothing more
    h.run(h.coordinator.handle(AddPartitions("v", h.now, "t", pid, epoch, frozenset({T1}), verify_only=True)))
    assert h.responses["v"] == AddResult(E.CONCURRENT_TRANSACTIONS), "a leader's check never waits"
    h.run(h.coordinator.unload_partition(0))
    assert h.responses["b"] == AddResult(E.NOT_COORDINATOR)
    assert len(h.responses) == len(set(h.responses))


def test_a_fenced_producer_is_refused_at_once_not_parked_behind_its_abort():
    h, pid, epoch = reach(S.ONGOING)
    h.auto_markers = False
    assert h.init("t").error == E.CONCURRENT_TRANSACTIONS     # a new producer: abort under epoch + 1
    assert h.meta("t").state is S.PREPARE_ABORT
    assert h.add("t", pid, epoch, T2) == AddResult(E.PRODUCER_FENCED)


def test_markers_of_an_older_coordinator_or_producer_epoch_are_ignored():
    h, pid, epoch = reach(S.PREPARE_COMMIT)
    for stale in (MarkersWritten("t", pid, epoch, 0, h.now), MarkersWritten("t", pid, epoch - 1, 1, h.now),
                  MarkersWritten("t", pid + 1, epoch, 1, h.now)):
        h.run(h.coordinator.handle(stale))
        assert h.meta("t").state is S.PREPARE_COMMIT


def test_requests_during_a_write_get_concurrent_transactions():
    h, pid, epoch = reach(S.ONGOING)
    h.auto_write = False
    first = h.end("t", pid, epoch, True)
    assert first is None, "answered only once the prepare record is written"
    assert h.add("t", pid, epoch, T2) == AddResult(E.CONCURRENT_TRANSACTIONS)
    assert h.end("t", pid, epoch, True) == EndResult(E.CONCURRENT_TRANSACTIONS)
    assert h.init("t").error == E.CONCURRENT_TRANSACTIONS
    h.finish_writes()
    assert EndResult(E.NONE) in h.responses.values()


def test_a_failed_write_changes_nothing_and_reports_the_error():
    h, pid, epoch = reach(S.ONGOING)
    h.auto_write = False
    before = h.meta("t")
    rid_count = len(h.responses)
    h.end("t", pid, epoch, True)
    h.finish_writes(E.COORDINATOR_NOT_AVAILABLE)
    assert h.meta("t") == before
    assert list(h.responses.values())[rid_count:] == [EndResult(E.COORDINATOR_NOT_AVAILABLE)]
    assert h.markers == []


def test_a_failed_fence_spends_no_epoch():
    h = TxnHarness.new()
    r = h.init("t", timeout_ms=1_000)
    pid, epoch = r.producer_id, r.producer_epoch
    h.add("t", pid, epoch, T1)
    h.auto_write = False
    h.tick(2_000)
    h.finish_writes(E.NOT_COORDINATOR)
    assert h.meta("t").producer_epoch == epoch and h.meta("t").state is S.ONGOING
    h.auto_write = True
    h.tick(1)
    assert h.meta("t").state is S.COMPLETE_ABORT and h.meta("t").producer_epoch == epoch + 1


def test_a_failed_complete_write_is_retried_after_the_backoff():
    h, pid, epoch = reach(S.PREPARE_COMMIT)
    h.auto_write = False
    h.run(h.coordinator.handle(MarkersWritten("t", pid, epoch, 1, h.now)))
    h.finish_writes(E.COORDINATOR_NOT_AVAILABLE)
    assert h.meta("t").state is S.PREPARE_COMMIT
    h.tick(TxnConfig().retry_backoff_ms - 1)
    assert h.unwritten == []
    h.tick(1)
    h.finish_writes()
    assert h.meta("t").state is S.COMPLETE_COMMIT


def test_new_id_whose_first_write_fails_is_forgotten():
    h = TxnHarness.new(auto_write=False)
    h.init("t")
    h.finish_writes(E.COORDINATOR_NOT_AVAILABLE)
    assert "t" not in h.coordinator.entries
    assert h.coordinator.describe("t") == E.TRANSACTIONAL_ID_NOT_FOUND


# KIP-360: a producer that names its id and epoch.
def test_reinit_with_current_epoch_bumps_and_a_lost_answer_is_given_again():
    h, pid, epoch = reach(S.COMPLETE_ABORT)
    r = h.init("t", pid=pid, epoch=epoch)
    assert (r.error, r.producer_epoch) == (E.NONE, epoch + 1)
    # the answer was lost; the producer retries with the epoch it still holds
    again = h.init("t", pid=pid, epoch=epoch)
    assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, pid, epoch + 1)
    assert h.init("t", pid=pid, epoch=epoch - 5).error == E.PRODUCER_FENCED
    assert h.init("t", pid=pid + 77, epoch=epoch + 1).error == E.PRODUCER_FENCED


def test_an_exhausted_epoch_rotates_the_producer_id():
    h = TxnHarness.new()
    pid = h.init("t").producer_id
    entry = h.coordinator.entries["t"]
    entry.meta = TxnMetadata("t", pid, MAX_EPOCH - 1, 60_000, S.COMPLETE_COMMIT)
    r = h.init("t", pid=pid, epoch=MAX_EPOCH - 1)
    assert r.error == E.NONE and r.producer_id != pid and r.producer_epoch == 0
    assert h.meta("t").last_producer_id == pid
    # a retry from the old id with its exhausted epoch is the same producer, not a fenced one
    retry = h.init("t", pid=pid, epoch=MAX_EPOCH - 1)
    assert retry == r


def test_verify_only_reports_per_partition_and_writes_nothing():
    h, pid, epoch = reach(S.ONGOING)
    before = len(h.log)
    r = h.add("t", pid, epoch, T1, T2, verify_only=True)
    assert r.error == E.NONE and r.error_for(T1) == E.NONE and r.error_for(T2) == E.INVALID_TXN_STATE
    assert len(h.log) == before
    assert h.add("t", pid, epoch - 1, T1, verify_only=True).error == E.PRODUCER_FENCED


def test_loading_resends_markers_of_prepared_transactions_with_the_new_epoch():
    h, pid, epoch = reach(S.PREPARE_ABORT)
    records = {}
    for tid, meta in h.log:
        records[tid] = meta
    c = h.coordinator
    h.run(c.unload_partition(0))
    assert c.describe("t") == E.NOT_COORDINATOR
    h.markers.clear()
    c.begin_loading(0)
    assert h.init("t").error == E.COORDINATOR_LOAD_IN_PROGRESS
    h.auto_markers = True
    h.run(c.load_partition(0, coordinator_epoch=2, records=records, now_ms=h.now))
    assert h.markers == [SendMarkers("t", pid, epoch, 2, False, frozenset({T1}), h.meta("t").start_ms)]
    assert h.meta("t").state is S.COMPLETE_ABORT


def test_unload_answers_waiting_requests_and_a_late_write_report_is_ignored():
    h, pid, epoch = reach(S.ONGOING)
    h.auto_write = False
    h.end("t", pid, epoch, True)
    write = h.unwritten.pop()
    assert isinstance(write, WriteTxnLog)
    h.run(h.coordinator.unload_partition(0))
    assert EndResult(E.NOT_COORDINATOR) in h.responses.values()
    assert h.coordinator.handle(LogWritten("t", write.token, h.now)) == []


def test_expired_ids_are_tombstoned_and_ongoing_ones_are_kept():
    h = TxnHarness.new(TxnConfig(id_expiration_ms=10_000))
    done = h.init("done")
    h.add("done", done.producer_id, done.producer_epoch, T1)
    h.end("done", done.producer_id, done.producer_epoch, True)
    busy = h.init("busy", timeout_ms=900_000)
    h.add("busy", busy.producer_id, busy.producer_epoch, T1)
    h.tick(10_001, expire_ids=True)
    assert "done" not in h.coordinator.entries and h.log[-1] == ("done", None)
    assert h.meta("busy").state is S.ONGOING


def test_listing_filters_by_state_producer_and_duration():
    h = TxnHarness.new()
    a = h.init("a")
    h.add("a", a.producer_id, a.producer_epoch, T1)
    h.tick(5_000)
    b = h.init("b")
    h.add("b", b.producer_id, b.producer_epoch, T1)
    c = h.coordinator
    assert {m.transactional_id for m in c.listed()} == {"a", "b"}
    assert [m.transactional_id for m in c.listed(states=[S.EMPTY])] == []
    assert [m.transactional_id for m in c.listed(producer_ids=[b.producer_id])] == ["b"]
    assert [m.transactional_id for m in c.listed(min_duration_ms=4_000, now_ms=h.now)] == ["a"]


def test_transitions_outside_kafkas_table_raise():
    meta = TxnMetadata("t", 1, 0, 1000, S.EMPTY)
    with pytest.raises(IllegalTransition):
        meta.prepare_end(True, 0)
    with pytest.raises(IllegalTransition):
        meta.prepare_complete(0)


@pytest.mark.parametrize("code,mapped", [
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
def test_append_errors_map_as_kafkas(code, mapped):
    assert map_append_error(code) == mapped


def test_init_needs_a_fresh_id_only_for_new_ids():
    h = TxnHarness.new()
    h.init("t")
    c = h.coordinator
    actions = c.handle(InitProducerId("x", h.now, "t", 60_000))
    assert all(not type(a).__name__ == "NeedProducerId" for a in actions)
