"""Partition reassignment (KIP-455) against the QuorumController: AlterPartitionReassignments
(45), ListPartitionReassignments (46), completion through AlterPartition and the controller's
own partition changes, elections during a reassignment, the dynamic replication throttle rates,
and the broker side (core/broker/handlers/forwarded.py: authorization, forwarding, the
one-node answer)."""
from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from core.broker.context import RequestContext
from core.broker.handlers import forwarded
from core.controller import ControllerConfig, reassignment
from core.controller.election import RECOVERED
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import Harness, alter, call, only

A = m.AlterPartitionReassignmentsRequest
L = m.ListPartitionReassignmentsRequest
UNCLEAN = {"unclean.leader.election.enable": "true"}


def reassign_request(parts: dict[str, dict[int, list[int] | None]]):
    return A(timeout_ms=1000, topics=[
        A.ReassignableTopic(name=t, partitions=[
            A.ReassignablePartition(partition_index=i, replicas=r) for i, r in ps.items()])
        for t, ps in parts.items()])


def reassign(h: Harness, parts: dict[str, dict[int, list[int] | None]], *, commit: bool = True):
    """(records, {topic: [(partition, error code, error message)]})."""
    records, answer = call(h, 45, reassign_request(parts), 0, commit=commit)
    assert (answer.error_code, answer.error_message) == (0, None)
    return records, {t.name: [(p.partition_index, p.error_code, p.error_message)
                              for p in t.partitions] for t in answer.responses}


def started(h: Harness, parts) -> list:
    records, results = reassign(h, parts)
    assert all(code == 0 for rs in results.values() for _, code, _ in rs), results
    return records


def listing(h: Harness, topics: dict[str, list[int]] | None = None):
    request = L(timeout_ms=1000, topics=None if topics is None else [
        L.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
        for t, ps in topics.items()])
    records, answer = call(h, 46, request, 0)
    assert records == [] and (answer.error_code, answer.error_message) == (0, None)
    return {t.name: [(p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas)
                     for p in t.partitions] for t in answer.topics}


def state(h: Harness, topic: str = "t", partition: int = 0):
    p = h.partition(topic, partition)
    return (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader)


def epochs(h: Harness, topic: str = "t", partition: int = 0):
    p = h.partition(topic, partition)
    return p.leader_epoch, p.partition_epoch


def check_reassignment_invariants(h: Harness) -> None:
    for topic in h.image.topics.values():
        for pid, p in topic.partitions.items():
            where = f"{topic.name}-{pid}: {p}"
            assert set(p.adding_replicas) <= set(p.replicas), where
            assert set(p.removing_replicas) <= set(p.replicas), where
            assert not set(p.adding_replicas) & set(p.removing_replicas), where
            if p.removing_replicas:
                # Kafka's order: the target first, the replicas being removed last.
                n = len(p.removing_replicas)
                assert list(p.replicas[-n:]) == sorted(p.removing_replicas), where


def five_brokers(h: Harness, **kw) -> None:
    """Brokers 1-5; t-0 on [1, 2, 3], led by 1, ISR [1, 2, 3]."""
    h.add_brokers({b: None for b in (1, 2, 3, 4, 5)})
    h.create_topic("t", 1, 3, assignments={0: [1, 2, 3]}, **kw)


def isr_change(h: Harness, isr, *, version: int = 3, **kw):
    """An AlterPartition from the leader: (records, the partition's answer)."""
    records, answer = call(h, 56, alter(h, isr, version=version, **kw), version)
    assert answer.error_code == 0
    return records, only(answer)


# --------------------------------------------------------------------------- errors


def fence(b):
    return lambda h: h.heartbeat(b, fence=True)


def unclean_revert_setup(h: Harness) -> None:
    """u-0 moving from [1] to [2, 3]; 2 caught up, then 1 was fenced: 2 leads, ISR [2]."""
    h.create_topic("u", 1, 1, assignments={0: [1]})
    started(h, {"u": {0: [2, 3]}})
    isr_change(h, [1, 2], topic="u")
    h.heartbeat(1, fence=True)
    assert state(h, "u") == ((2, 3, 1), (2, 3), (1,), (2,), 2)


# (name, setup, partitions of the request for t/u, error, message). Each row is checked with
# the rest of the cluster as five_brokers() leaves it; rows with error None are the contrast:
# the same kind of request, valid.
PARTITION_ERRORS = [
    ("unknown topic", None, {"nope": {0: [1, 2, 3]}}, E.UNKNOWN_TOPIC_OR_PARTITION,
     "Unable to find a topic named nope."),
    ("unknown partition", None, {"t": {3: [1, 2, 3]}}, E.UNKNOWN_TOPIC_OR_PARTITION,
     "Unable to find partition t:3."),
    ("negative partition", None, {"t": {-1: [1, 2, 3]}}, E.UNKNOWN_TOPIC_OR_PARTITION,
     "Unable to find partition t:-1."),
    ("cancel on an unknown partition", None, {"t": {3: None}}, E.UNKNOWN_TOPIC_OR_PARTITION,
     "Unable to find partition t:3."),
    ("empty target", None, {"t": {0: []}}, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes an empty replica list."),
    ("a broker twice", None, {"t": {0: [4, 2, 4]}}, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 4 more than once."),
    ("an unregistered broker", None, {"t": {0: [1, 2, 9]}}, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ("a negative broker id", None, {"t": {0: [1, -1]}}, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker -1, but no such broker is registered."),
    ("a fenced broker is a valid target", fence(4), {"t": {0: [1, 2, 4]}}, None, None),
    ("cancel with nothing in progress", None, {"t": {0: None}}, E.NO_REASSIGNMENT_IN_PROGRESS,
     None),
    ("cancel that needs an unclean election", unclean_revert_setup, {"u": {0: None}},
     E.INVALID_REPLICA_ASSIGNMENT, "Unable to revert partition assignment for u:0 because it "
                                   "would require an unclean leader election."),
]


@pytest.mark.parametrize("setup, parts, code, message", [c[1:] for c in PARTITION_ERRORS],
                         ids=[c[0] for c in PARTITION_ERRORS])
def test_partition_errors(setup, parts, code, message):
    h = Harness()
    five_brokers(h)
    if setup is not None:
        setup(h)
    before = h.image
    records, results = reassign(h, parts)
    [(name, [(index, got, got_message)])] = results.items()
    assert (name, index) == next((t, i) for t, ps in parts.items() for i in ps)
    if code is None:
        assert got == 0 and len(records) == 1
        return
    assert (got, got_message) == (code, message)
    assert records == [] and h.image == before


def test_each_partition_succeeds_or_fails_on_its_own_in_request_order():
    h = Harness()
    five_brokers(h)
    h.create_topic("u", 2, 1, assignments={0: [1], 1: [2]})
    records, results = reassign(h, {"u": {1: [3], 0: [9], 5: [1]}, "t": {0: [1, 2, 4]}})
    assert {t: [(i, c) for i, c, _ in rs] for t, rs in results.items()} == {
        "u": [(1, 0), (0, E.INVALID_REPLICA_ASSIGNMENT), (5, E.UNKNOWN_TOPIC_OR_PARTITION)],
        "t": [(0, 0)]}
    assert [(r.partition_id, r.replicas) for r in records] == [(1, [3, 2]), (0, [1, 2, 4, 3])]


def test_an_empty_request_changes_nothing():
    h = Harness()
    five_brokers(h)
    records, answer = call(h, 45, A(timeout_ms=1, topics=[]), 0)
    assert (records, answer.error_code, answer.responses) == ([], 0, [])


def test_a_request_past_the_record_limit_fails_the_partitions_past_it(monkeypatch):
    from core.controller import common
    h = Harness()
    five_brokers(h)
    h.create_topic("u", 3, 1, assignments={0: [1], 1: [2], 2: [3]})
    monkeypatch.setattr(common, "MAX_RECORDS_PER_USER_OP", 2)
    # Room for two: a no-op takes none.
    records, results = reassign(h, {"u": {0: [4], 1: [2], 2: [5]}, "t": {0: [3, 4]}})
    assert [(i, c) for i, c, _ in results["u"]] == [(0, 0), (1, 0), (2, 0)]
    assert results["t"][0][1:] == (E.POLICY_VIOLATION,
                                   "Unable to perform excessively large batch operation.")
    assert len(records) == 2


# --------------------------------------------------------------------------- starting


@pytest.mark.parametrize("target, replicas, adding, removing", [
    ([4, 2, 5], [4, 2, 5, 1, 3], [4, 5], [1, 3]),
    ([5, 4], [5, 4, 1, 2, 3], [4, 5], [1, 2, 3]),
    ([3, 4], [3, 4, 1, 2], [4], [1, 2]),
    ([5, 4, 1, 2, 3], [5, 4, 1, 2, 3], [4, 5], []),
    ([2, 1, 3, 4], [2, 1, 3, 4], [4], []),
])
def test_starting_lists_the_target_first_then_the_replicas_being_removed(target, replicas,
                                                                        adding, removing):
    h = Harness()
    five_brokers(h)
    [record] = started(h, {"t": {0: target}})
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == \
        (replicas, adding, removing or None)
    # Only the replica lists change: same leader, same ISR, no leader epoch bump.
    assert (record.leader, record.isr, record.leader_recovery_state) == (-2, None, -1)
    assert state(h) == (tuple(replicas), tuple(adding), tuple(removing), (1, 2, 3), 1)
    assert epochs(h) == (0, 1)
    check_reassignment_invariants(h)
    # The committed image has it too.
    c = h.ctl.committed_image.partition("t", 0)
    assert (c.replicas, c.adding_replicas, c.removing_replicas) == \
        (tuple(replicas), tuple(adding), tuple(removing))


def test_the_current_replica_list_is_a_no_op():
    h = Harness()
    five_brokers(h)
    records, results = reassign(h, {"t": {0: [1, 2, 3]}})
    assert (records, results) == ([], {"t": [(0, 0, None)]})
    assert listing(h) == {}


def test_a_reorder_completes_at_once_without_moving_the_leader():
    h = Harness()
    five_brokers(h)
    [record] = started(h, {"t": {0: [3, 2, 1]}})
    assert (record.replicas, record.adding_replicas, record.removing_replicas, record.leader,
            record.isr) == ([3, 2, 1], None, None, -2, None)
    assert state(h) == ((3, 2, 1), (), (), (1, 2, 3), 1)
    assert epochs(h) == (0, 1)
    assert listing(h) == {}


@pytest.mark.parametrize("target, leader", [([2, 3], 2), ([1, 3], 1), ([3], 3)])
def test_dropping_in_sync_replicas_completes_at_once_and_bumps_the_leader_epoch(target, leader):
    h = Harness()
    five_brokers(h)
    [record] = started(h, {"t": {0: target}})
    # Written completed: no adding/removing ever shows.
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == \
        (target, None, None)
    assert (record.leader, record.isr) == (leader, target)
    assert state(h) == (tuple(target), (), (), tuple(target), leader)
    assert epochs(h) == (1, 1)
    assert listing(h) == {}


def test_dropping_replicas_waits_for_every_target_replica_in_the_isr():
    """Kafka completes only once the ISR holds the whole target, not just the adding ones."""
    h = Harness()
    five_brokers(h)
    isr_change(h, [1, 2])                      # 3 fell behind
    started(h, {"t": {0: [2, 3]}})
    assert state(h) == ((2, 3, 1), (), (1,), (1, 2), 1)
    assert listing(h) == {"t": [(0, [2, 3, 1], [], [1])]}
    # 3 catches up: the leader's AlterPartition completes the move, which takes leadership
    # from the leader that asked.
    before = epochs(h)
    records, p = isr_change(h, [1, 2, 3])
    [record] = records
    assert (record.replicas, record.isr, record.leader, record.adding_replicas,
            record.removing_replicas) == ([2, 3], [2, 3], 2, None, [])
    assert (p.error_code, p.leader_id, p.isr) == (E.NEW_LEADER_ELECTED, 0, [])
    assert state(h) == ((2, 3), (), (), (2, 3), 2)
    assert epochs(h) == (before[0] + 1, before[1] + 1)
    assert listing(h) == {}


# --------------------------------------------------------------------------- completion


def moving_to_4_and_5(h: Harness, target=(4, 2, 5)) -> None:
    five_brokers(h)
    started(h, {"t": {0: list(target)}})


def test_completion_waits_for_every_adding_replica():
    h = Harness()
    moving_to_4_and_5(h, [1, 4, 5])
    records, p = isr_change(h, [1, 2, 3, 4])
    assert records[0].isr == [1, 2, 3, 4] and records[0].replicas is None
    assert (p.error_code, p.isr, p.leader_id, p.leader_epoch) == (0, [1, 2, 3, 4], 1, 0)
    assert state(h) == ((1, 4, 5, 2, 3), (4, 5), (2, 3), (1, 2, 3, 4), 1)
    assert listing(h) == {"t": [(0, [1, 4, 5, 2, 3], [4, 5], [2, 3])]}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_the_isr_change_that_completes_it_keeps_a_leader_that_stays(version):
    h = Harness()
    moving_to_4_and_5(h, [1, 4, 5])
    isr_change(h, [1, 2, 3, 4], version=version)
    records, p = isr_change(h, [1, 2, 5, 3, 4], version=version)
    [record] = records
    assert (record.replicas, record.adding_replicas, record.removing_replicas, record.isr) == \
        ([1, 4, 5], [], [], [1, 5, 4])
    # The replica set shrank: the leader epoch bumps though the leader stays.
    assert record.leader == 1
    assert (p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch) == \
        (0, 1, 1, [1, 5, 4], 3)
    assert state(h) == ((1, 4, 5), (), (), (1, 5, 4), 1)
    assert listing(h) == {}
    check_reassignment_invariants(h)


@pytest.mark.parametrize("version, code", [(0, E.FENCED_LEADER_EPOCH),
                                           (1, E.FENCED_LEADER_EPOCH),
                                           (2, E.NEW_LEADER_ELECTED), (3, E.NEW_LEADER_ELECTED)])
def test_completion_moves_the_leader_off_a_removed_replica(version, code):
    h = Harness()
    moving_to_4_and_5(h)
    isr_change(h, [1, 2, 3, 4], version=version)
    records, p = isr_change(h, [1, 2, 3, 4, 5], version=version)
    [record] = records
    # The first target replica of the new ISR leads; the record is written all the same.
    assert (record.replicas, record.isr, record.leader) == ([4, 2, 5], [2, 4, 5], 4)
    assert (p.error_code, p.leader_id, p.isr, p.partition_epoch) == (code, 0, [], 0)
    assert state(h) == ((4, 2, 5), (), (), (2, 4, 5), 4)
    assert epochs(h) == (1, 3)
    assert h.ctl.committed_image.partition("t", 0).leader == 4
    # The new leader's view is the one that counts now; the old one's epoch is fenced.
    _, answer = call(h, 56, alter(h, [4, 2, 5]), 3)
    assert only(answer).error_code == 0
    _, answer = call(h, 56, alter(h, [1, 2], broker=1, leader_epoch=0), 3)
    assert only(answer).error_code == E.FENCED_LEADER_EPOCH


def test_the_leader_can_add_only_replicas_to_the_isr():
    h = Harness()
    moving_to_4_and_5(h, [1, 2, 4])
    for isr, code in [([1, 2, 3, 5], E.INVALID_REQUEST),        # 5 is no replica
                      ([1, 2, 3, 4], 0)]:                       # 4 is being added
        records, answer = call(h, 56, alter(h, isr), 3)
        assert only(answer).error_code == code, isr
    assert state(h) == ((1, 2, 4), (), (), (1, 2, 4), 1)


def test_an_adding_replica_that_is_not_active_cannot_join_the_isr():
    h = Harness()
    moving_to_4_and_5(h, [1, 2, 4])
    h.heartbeat(4, fence=True)
    before = h.image
    records, answer = call(h, 56, alter(h, [1, 2, 3, 4]), 3)
    assert (only(answer).error_code, records) == (E.INELIGIBLE_REPLICA, [])
    assert h.image == before


def test_fencing_completes_a_reassignment_its_isr_change_allows():
    """Every partition change checks for completion (Kafka's PartitionChangeBuilder): the
    leader being removed is fenced, and what is left of the ISR covers the target."""
    h = Harness()
    five_brokers(h)
    # A state no request of ours leaves behind (it would have completed at once), as another
    # controller might have written it.
    h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0,
                                     replicas=[2, 3, 1], removing_replicas=[1]))
    h.heartbeat(1, fence=True)
    assert state(h) == ((2, 3), (), (), (2, 3), 2)


# --------------------------------------------------------------------------- elections


def test_a_leader_that_must_change_goes_to_the_target_before_a_replica_being_removed():
    h = Harness()
    five_brokers(h)
    started(h, {"t": {0: [4, 5, 3]}})                    # replicas [4, 5, 3, 1, 2]
    isr_change(h, [1, 2, 3, 4])
    h.heartbeat(1, fence=True)
    # 2 is in the ISR and active too, but it is being removed: 4 (the first target replica in
    # the ISR) leads.
    assert state(h) == ((4, 5, 3, 1, 2), (4, 5), (1, 2), (2, 3, 4), 4)


def test_elections_try_replicas_being_removed_last_whatever_the_replica_order():
    h = Harness()
    five_brokers(h)
    # A log whose replica order does not put the target first.
    h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0,
                                     replicas=[1, 2, 3, 4], removing_replicas=[1, 2],
                                     adding_replicas=[4]))
    h.heartbeat(1, fence=True)
    assert state(h)[3:] == ((2, 3), 3)


def test_a_leader_being_removed_keeps_leading_until_completion():
    h = Harness()
    moving_to_4_and_5(h)
    h.clock.advance(ControllerConfig().leader_imbalance_check_interval_ms)
    for b in (1, 2, 3, 4, 5):
        h.heartbeat(b)
    h.tick()
    assert state(h)[4] == 1


def test_a_preferred_election_during_a_reassignment_elects_the_first_target_replica():
    h = Harness()
    moving_to_4_and_5(h)
    isr_change(h, [1, 2, 3, 4])
    E_ = m.ElectLeadersRequest
    records, answer = call(h, 43, E_(election_type=0, timeout_ms=1, topic_partitions=[
        E_.TopicPartitions(topic="t", partitions=[0])]), 2)
    assert answer.replica_election_results[0].partition_result[0].error_code == 0
    assert state(h) == ((4, 2, 5, 1, 3), (4, 5), (1, 3), (1, 2, 3, 4), 4)


def test_a_broker_that_joins_hosts_nothing_until_a_reassignment_gives_it_partitions():
    h = Harness(ControllerConfig(auto_leader_rebalance_enable=True))
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("t", 6, 2)
    h.create_topic("u", 1, 3, assignments={0: [1, 2, 3]})
    before = {(t.name, p): part.replicas for t in h.image.topics.values()
              for p, part in t.partitions.items()}
    h.add_brokers({4: None})
    for _ in range(3):
        h.clock.advance(max(ControllerConfig().leader_imbalance_check_interval_ms,
                            ControllerConfig().unclean_leader_election_interval_ms))
        for b in (1, 2, 3, 4):
            h.heartbeat(b)
        h.tick()
    after = {(t.name, p): part.replicas for t in h.image.topics.values()
             for p, part in t.partitions.items()}
    assert after == before
    assert not any(4 in r for r in after.values())
    started(h, {"u": {0: [4, 2, 3]}})
    assert 4 in h.partition("u").replicas


# --------------------------------------------------------------------------- cancelling


def test_cancel_reverts_to_the_original_replicas_and_reelects_off_an_adding_replica():
    h = Harness()
    five_brokers(h)
    h.create_topic("u", 1, 2, assignments={0: [1, 2]})
    started(h, {"u": {0: [3, 4]}})                       # [3, 4, 1, 2]
    isr_change(h, [1, 2, 3], topic="u")
    h.heartbeat(1, fence=True)
    assert state(h, "u") == ((3, 4, 1, 2), (3, 4), (1, 2), (2, 3), 3)
    h.heartbeat(1)
    before = epochs(h, "u")
    records, results = reassign(h, {"u": {0: None}})
    assert results == {"u": [(0, 0, None)]}
    [record] = records
    assert (record.replicas, record.adding_replicas, record.removing_replicas, record.isr,
            record.leader) == ([1, 2], [], [], [2], 2)
    assert state(h, "u") == ((1, 2), (), (), (2,), 2)
    assert epochs(h, "u") == (before[0] + 1, before[1] + 1)
    assert listing(h) == {}


def test_cancel_keeps_a_leader_that_was_already_a_replica():
    h = Harness()
    moving_to_4_and_5(h)
    isr_change(h, [1, 2, 3, 4])
    records, results = reassign(h, {"t": {0: None}})
    [record] = records
    # Kafka's revert takes the adding replicas out of the list, so the original brokers come
    # back in the order the reassignment gave them (2 was kept first): [2, 1, 3], not [1, 2, 3].
    assert (record.replicas, record.isr, record.adding_replicas, record.removing_replicas) == \
        ([2, 1, 3], [1, 2, 3], [], [])
    # 4 and 5 leave the replicas: the leader epoch bumps, the leader stays.
    assert record.leader == 1
    assert state(h) == ((2, 1, 3), (), (), (1, 2, 3), 1)
    assert epochs(h) == (1, 3)


def test_cancel_that_needs_an_unclean_election_when_the_topic_allows_it():
    h = Harness()
    h.add_brokers({b: None for b in (1, 2, 3)})
    h.create_topic("u", 1, 1, assignments={0: [1]}, configs=UNCLEAN)
    started(h, {"u": {0: [2, 3]}})
    isr_change(h, [1, 2], topic="u")
    h.heartbeat(1, fence=True)
    records, results = reassign(h, {"u": {0: None}})
    assert results == {"u": [(0, 0, None)]}
    # Back on 1 alone, which is fenced: no leader until it returns.
    assert state(h, "u") == ((1,), (), (), (1,), -1)
    h.heartbeat(1)
    assert state(h, "u") == ((1,), (), (), (1,), 1)
    assert h.partition("u").leader_recovery_state == RECOVERED


def test_a_partition_named_twice_is_changed_twice():
    h = Harness()
    five_brokers(h)
    request = reassign_request({"t": {0: [4, 5, 1]}})
    request.topics.append(A.ReassignableTopic(name="t", partitions=[
        A.ReassignablePartition(partition_index=0, replicas=None)]))
    records, answer = call(h, 45, request, 0)
    assert [[p.error_code for p in t.partitions] for t in answer.responses] == [[0], [0]]
    assert [r.replicas for r in records] == [[4, 5, 1, 2, 3], [1, 2, 3]]
    assert state(h) == ((1, 2, 3), (), (), (1, 2, 3), 1)


def test_a_new_target_replaces_the_one_in_progress():
    h = Harness()
    moving_to_4_and_5(h)                                  # [4, 2, 5, 1, 3]
    [record] = started(h, {"t": {0: [5, 1]}})
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == \
        ([5, 1, 2, 3, 4], [], [2, 3, 4])
    assert listing(h) == {"t": [(0, [5, 1, 2, 3, 4], [], [2, 3, 4])]}
    # Cancelling now goes back to the full list the second request started from.
    reassign(h, {"t": {0: None}})
    assert state(h)[:3] == ((5, 1, 2, 3, 4), (), ())
    check_reassignment_invariants(h)


# --------------------------------------------------------------------------- listing


def test_listing():
    h = Harness()
    five_brokers(h)
    h.create_topic("a", 3, 1, assignments={0: [1], 1: [2], 2: [3]})
    started(h, {"t": {0: [4, 2, 5]}, "a": {2: [4], 0: [5]}})
    everything = {"a": [(0, [5, 1], [5], [1]), (2, [4, 3], [4], [3])],
                  "t": [(0, [4, 2, 5, 1, 3], [4, 5], [1, 3])]}
    assert listing(h) == everything
    assert list(listing(h)) == ["a", "t"]
    # Named: in request order; unknown topics and partitions, partitions not being moved and
    # topics with nothing left out.
    assert listing(h, {"t": [0], "nope": [0], "a": [2, 1, 9, 0]}) == {
        "t": everything["t"], "a": [(2, [4, 3], [4], [3]), (0, [5, 1], [5], [1])]}
    assert listing(h, {"a": [1]}) == {}
    assert listing(h, {}) == {}
    # Once done, gone from the list.
    isr_change(h, [1, 2, 3, 4, 5])
    assert list(listing(h)) == ["a"]


def test_listing_reads_what_the_controller_has_proposed():
    """Read from the pending image; the driver holds the answer back until the records before
    it commit (has_uncommitted)."""
    h = Harness()
    five_brokers(h)
    reassign(h, {"t": {0: [4, 2, 5]}}, commit=False)
    records, answer = call(h, 46, L(timeout_ms=1, topics=None), 0, commit=False)
    assert records == [] and [t.name for t in answer.topics] == ["t"]
    assert h.ctl.has_uncommitted


# --------------------------------------------------------------------------- error responses


def test_whole_request_errors_have_kafkas_shape():
    request = reassign_request({"t": {0: [1], 1: None}, "u": {}})
    r = reassignment.error_response(45, request, E.NOT_CONTROLLER, "moved")
    assert (r.error_code, r.error_message) == (E.NOT_CONTROLLER, "moved")
    assert [(t.name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions])
            for t in r.responses] == [("t", [(0, E.NOT_CONTROLLER, "moved"),
                                             (1, E.NOT_CONTROLLER, "moved")]), ("u", [])]
    listed = L(timeout_ms=1, topics=[L.ListPartitionReassignmentsTopics(name="t",
                                                                        partition_indexes=[2])])
    r = reassignment.error_response(46, listed, E.NOT_CONTROLLER, None)
    assert r.error_code == E.NOT_CONTROLLER
    assert [(t.name, [(p.partition_index, p.replicas) for p in t.partitions])
            for t in r.topics] == [("t", [(2, [])])]
    assert reassignment.error_response(46, L(timeout_ms=1, topics=None), E.NOT_CONTROLLER,
                                       None).topics == []
    for key, req in ((45, request), (46, listed)):
        m.API[key].response.encode(0, reassignment.error_response(key, req, E.NOT_CONTROLLER,
                                                                  None))


# --------------------------------------------------------------------------- throttle rates


IAC = m.IncrementalAlterConfigsRequest
C = m.AlterConfigsRequest
BROKER = 4


def set_broker_configs(h: Harness, name: str, values: dict[str, str | None]):
    request = IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
        resource_type=BROKER, resource_name=name, configs=[
            IAC.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v)
            for k, v in values.items()])])
    records, answer = call(h, 44, request, 1)
    [res] = answer.responses
    return records, res.error_code, res.error_message


@pytest.mark.parametrize("name", ["", "1"])
@pytest.mark.parametrize("key", ["leader.replication.throttled.rate",
                                 "follower.replication.throttled.rate"])
def test_replication_throttle_rates_are_dynamic_broker_configs(name, key):
    h = Harness()
    five_brokers(h)
    records, code, _ = set_broker_configs(h, name, {key: "1048576"})
    assert code == 0
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in records] == \
        [(BROKER, name, key, "1048576")]
    assert h.image.broker_config(name)[key] == "1048576"
    _, code, _ = set_broker_configs(h, name, {key: "0"})
    assert code == 0 and h.image.broker_config(name)[key] == "0"
    _, code, _ = set_broker_configs(h, name, {key: None})
    assert code == 0 and key not in h.image.broker_config(name)


@pytest.mark.parametrize("value, message", [
    ("-1", "-1 is below the minimum 0"), ("fast", "'fast' is not a valid long"),
    ("9223372036854775808", "is not a valid long"), ("1.5", "is not a valid long")])
def test_replication_throttle_rates_must_be_longs_of_at_least_zero(value, message):
    h = Harness()
    five_brokers(h)
    before = h.image
    records, code, got = set_broker_configs(h, "", {"leader.replication.throttled.rate": value})
    # INVALID_REQUEST: Kafka's answer to a broker setting its validation refuses (KAFKA-13609)
    assert (code, records) == (E.INVALID_REQUEST, [])
    assert got.startswith("leader.replication.throttled.rate: ") and message in got
    assert h.image == before


def test_throttle_rates_through_alter_configs_and_not_as_topic_configs():
    h = Harness()
    five_brokers(h)
    request = C(validate_only=False, resources=[C.AlterConfigsResource(
        resource_type=BROKER, resource_name="2", configs=[
            C.AlterableConfig(name="follower.replication.throttled.rate", value="500")])])
    _, answer = call(h, 33, request, 2)
    assert answer.responses[0].error_code == 0
    assert h.image.broker_config(2) == {"follower.replication.throttled.rate": "500"}
    request = IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
        resource_type=2, resource_name="t", configs=[IAC.AlterableConfig(
            name="leader.replication.throttled.rate", config_operation=0, value="5")])])
    _, answer = call(h, 44, request, 1)
    assert answer.responses[0].error_code == E.INVALID_CONFIG


# --------------------------------------------------------------------------- the broker side


class Authorizer:
    def __init__(self, allow: bool):
        self.allow = allow
        self.asked = []

    def authorize(self, principal, operation, resource_type, name, host="*") -> bool:
        self.asked.append((operation.name, resource_type.name, name))
        return self.allow


class Channel:
    """A controller channel answering from the harness's controller (as the runner would)."""

    def __init__(self, h: Harness):
        self.h = h
        self.sent = []

    async def send(self, api_key, request, version, timeout_s):
        self.sent.append((api_key, version))
        return call(self.h, api_key, request, version)[1]

    async def send_tracked(self, api_key, request, version, timeout_s):
        return await self.send(api_key, request, version, timeout_s), False   # answered at once


class Loader:
    """The broker's metadata loader: the controller's committed image, or a frozen one."""

    next_offset = 0

    def __init__(self, h: Harness, frozen=None):
        self.h = h
        self.frozen = frozen

    @property
    def image(self):
        return self.frozen if self.frozen is not None else self.h.ctl.committed_image


class Sync:
    synced_offset = 0

    def __init__(self):
        self.shown = []

    async def wait_synced(self, predicate, timeout_s):
        self.shown.append(predicate())
        return self.shown[-1]


class KRaft:
    """The broker's link to the quorum; its reconciled image is the loader's."""

    def __init__(self, h: Harness, loader: Loader):
        self.channel, self.quorum, self.sync = Channel(h), SimpleNamespace(loader=loader), Sync()

    @property
    def image(self):
        return self.quorum.loader.image


def broker_ctx(api_key: int, *, allow: bool = True, topics=None, h: Harness | None = None,
               lagging: bool = False):
    """A request context on broker 7 holding `topics` (name -> partition count) that, with `h`,
    forwards to `h`'s controller; a `lagging` broker's image is the one before the request."""
    kraft = None
    if h is not None:
        kraft = KRaft(h, Loader(h, h.ctl.committed_image if lagging else None))
    broker = SimpleNamespace(kraft=kraft, node_id=7, topics={
        name: SimpleNamespace(partitions=[object()] * n) for name, n in (topics or {}).items()})
    return RequestContext(broker=broker, authorizer=Authorizer(allow), listener=None,
                          peer="test", api_key=api_key, api_version=0)


def on_broker(ctx, request):
    handler = forwarded.HANDLES[ctx.api_key]
    answer = anyio.run(handler, ctx, request)
    api = m.API[ctx.api_key]
    return api.response.decode(0, api.response.encode(0, answer))


def codes(answer):
    return {t.name: [(p.partition_index, p.error_code) for p in t.partitions]
            for t in answer.responses}


@pytest.mark.parametrize("kraft", [False, True])
@pytest.mark.parametrize("api_key, operation", [(45, "ALTER"), (46, "DESCRIBE")])
def test_reassignments_need_the_cluster_permission(kraft, api_key, operation):
    h = Harness()
    five_brokers(h)
    ctx = broker_ctx(api_key, allow=False, topics={"t": 1}, h=h if kraft else None)
    if api_key == 45:
        answer = on_broker(ctx, reassign_request({"t": {0: [4, 2, 5]}}))
        assert codes(answer) == {"t": [(0, E.CLUSTER_AUTHORIZATION_FAILED)]}
    else:
        answer = on_broker(ctx, L(timeout_ms=1, topics=None))
    assert answer.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert ctx.authorizer.asked == [(operation, "CLUSTER", "kafka-cluster")]
    assert state(h)[:3] == ((1, 2, 3), (), ())
    if kraft:
        assert ctx.broker.kraft.channel.sent == []


def test_a_kraft_broker_forwards_and_waits_until_its_image_shows_the_change():
    h = Harness()
    five_brokers(h)
    h.create_topic("u", 1, 1, assignments={0: [1]})
    started(h, {"u": {0: [2]}})
    ctx = broker_ctx(45, h=h)
    answer = on_broker(ctx, reassign_request({"t": {0: [4, 2, 5], 1: [1]}, "u": {0: None}}))
    assert codes(answer) == {"t": [(0, 0), (1, E.UNKNOWN_TOPIC_OR_PARTITION)], "u": [(0, 0)]}
    assert ctx.broker.kraft.channel.sent == [(45, 0)]
    assert ctx.broker.kraft.sync.shown == [True]
    ctx = broker_ctx(46, h=h)
    answer = on_broker(ctx, L(timeout_ms=1, topics=None))
    assert [(t.name, [p.replicas for p in t.partitions]) for t in answer.topics] == \
        [("t", [[4, 2, 5, 1, 3]])]
    assert ctx.broker.kraft.channel.sent == [(46, 0)] and ctx.broker.kraft.sync.shown == []


def test_the_broker_does_not_count_a_stale_image_as_showing_the_change():
    h = Harness()
    five_brokers(h)
    ctx = broker_ctx(45, h=h, lagging=True)
    on_broker(ctx, reassign_request({"t": {0: [4, 2, 5]}}))
    assert ctx.broker.kraft.sync.shown == [False]


def test_a_kraft_broker_waits_for_nothing_when_nothing_succeeded():
    h = Harness()
    five_brokers(h)
    ctx = broker_ctx(45, h=h)
    answer = on_broker(ctx, reassign_request({"t": {0: None}}))
    assert codes(answer) == {"t": [(0, E.NO_REASSIGNMENT_IN_PROGRESS)]}
    assert ctx.broker.kraft.sync.shown == []


def test_a_one_node_cluster_is_its_own_only_broker():
    h = Harness()
    h.add_brokers({7: None})
    h.create_topic("t", 2, 1)
    ctx = broker_ctx(45, h=h)
    answer = on_broker(ctx, reassign_request({"t": {0: [7], 1: [7, 8], 2: [7], 3: None},
                                              "nope": {0: [7]}}))
    assert answer.error_code == 0
    assert codes(answer) == {"t": [(0, 0), (1, E.INVALID_REPLICA_ASSIGNMENT),
                                   (2, E.UNKNOWN_TOPIC_OR_PARTITION),
                                   (3, E.UNKNOWN_TOPIC_OR_PARTITION)],
                             "nope": [(0, E.UNKNOWN_TOPIC_OR_PARTITION)]}
    answer = on_broker(ctx, reassign_request({"t": {0: [7, 7], 1: []}}))
    assert codes(answer) == {"t": [(0, E.INVALID_REPLICA_ASSIGNMENT),
                                   (1, E.INVALID_REPLICA_ASSIGNMENT)]}
    answer = on_broker(ctx, reassign_request({"t": {1: None}}))
    assert codes(answer) == {"t": [(1, E.NO_REASSIGNMENT_IN_PROGRESS)]}
    answer = on_broker(broker_ctx(46, h=h), L(timeout_ms=1, topics=None))
    assert (answer.error_code, answer.topics) == (0, [])
    assert ctx.authorizer.asked == [("ALTER", "CLUSTER", "kafka-cluster")] * 3
