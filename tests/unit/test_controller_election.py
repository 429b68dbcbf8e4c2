"""Leader election and PartitionChangeRecords (Kafka's PartitionChangeBuilder), and the
elections the controller runs on its own: after fencing, on unfencing, unclean and preferred."""
from __future__ import annotations

import pytest

from core.controller import ControllerConfig
from core.controller.election import (RECOVERED, RECOVERING, Election, leader_and_isr_updates,
                                      partition_change)
from core.controller.image import MetadataImage, PartitionRegistration
from core.protocol import messages as m

from tests.support.controller_harness import Harness, incarnation

TID = bytes(range(16))


def part(replicas, isr, leader, lrs=RECOVERED):
    return PartitionRegistration(replicas=tuple(replicas), isr=tuple(isr), leader=leader,
                                 leader_recovery_state=lrs)


def alive(*ids):
    return lambda r: r in ids


# (partition, acceptable, target ISR, election) -> (Leader, Isr, LeaderRecoveryState) of the
# record; None: no record.
CASES = [
    ("leader stays while it can lead",
     part([1, 2, 3], [1, 2, 3], 2), alive(1, 2, 3), None, Election.ONLINE, None),
    ("preferred replica takes over when the leader cannot lead",
     part([1, 2, 3], [1, 2, 3], 2), alive(1, 3), None, Election.ONLINE, (1, None, -1)),
    ("replica order, not ISR order, decides",
     part([1, 2, 3], [3, 2], 1), alive(2, 3), None, Election.ONLINE, (2, None, -1)),
    ("a replica outside the ISR never leads cleanly",
     part([1, 2, 3], [1], 1), alive(2, 3), None, Election.ONLINE, (-1, None, -1)),
    ("ISR shrink alone: no leader change, so no leader epoch bump",
     part([1, 2, 3], [1, 2, 3], 1), alive(1, 2, 3), [1, 3], Election.ONLINE, (-2, [1, 3], -1)),
    ("ISR shrink and re-election",
     part([1, 2, 3], [1, 2, 3], 1), alive(2, 3), [2, 3], Election.ONLINE, (2, [2, 3], -1)),
    ("an empty target ISR keeps the last member",
     part([1, 2], [1], 1), alive(2), [], Election.ONLINE, (-1, None, -1)),
    ("unclean: the first live replica, alone in the ISR, recovering",
     part([1, 2, 3], [1], 1), alive(2, 3), [], Election.UNCLEAN, (2, [2], RECOVERING)),
    ("unclean still prefers a clean leader",
     part([1, 2, 3], [1, 3], 1), alive(2, 3), [3], Election.UNCLEAN, (3, [3], -1)),
    ("unclean when already recovering writes no recovery state",
     part([1, 2], [1], -1, RECOVERING), alive(2), None, Election.UNCLEAN, (2, [2], -1)),
    ("unclean with nobody alive",
     part([1, 2], [1], 1), alive(), [], Election.UNCLEAN, (-1, None, -1)),
    ("preferred election moves leadership back",
     part([1, 2, 3], [1, 2, 3], 2), alive(1, 2, 3), None, Election.PREFERRED, (1, None, -1)),
    ("preferred election keeps the leader if the preferred replica is out of sync",
     part([1, 2, 3], [2, 3], 2), alive(1, 2, 3), None, Election.PREFERRED, None),
    ("preferred election falls back to the next replica",
     part([1, 2, 3], [1, 2, 3], -1), alive(2, 3), None, Election.PREFERRED, (2, None, -1)),
    ("nothing to do",
     part([1, 2], [1, 2], 1), alive(1, 2), [1, 2], Election.ONLINE, None),
]


@pytest.mark.parametrize("p, acceptable, target, election, expect",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_partition_change(p, acceptable, target, election, expect):
    record = partition_change(TID, 0, p, acceptable, target_isr=target, election=election)
    if expect is None:
        assert record is None
        return
    leader, isr, lrs = expect
    assert (record.leader, record.isr, record.leader_recovery_state) == (leader, isr, lrs)
    assert record.replicas is None


def test_replayed_changes_bump_the_leader_epoch_only_on_leader_changes():
    base = MetadataImage.empty().apply_all([
        m.TopicRecord(name="t", topic_id=TID),
        m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2, 3], isr=[1, 2, 3],
                          removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0,
                          partition_epoch=0)])
    p = base.partition("t", 0)
    shrink = partition_change(TID, 0, p, alive(1, 2, 3), target_isr=[1, 2])
    after = base.apply(shrink).partition("t", 0)
    assert (after.leader, after.leader_epoch, after.partition_epoch, after.isr) == (1, 0, 1, (1, 2))
    move = partition_change(TID, 0, after, alive(2, 3))
    after = base.apply(shrink).apply(move).partition("t", 0)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (2, 1, 2)


def test_updates_for_a_removed_broker_use_unclean_per_topic():
    reg = [m.RegisterBrokerRecord(broker_id=b, incarnation_id=incarnation(b), broker_epoch=b,
                                  end_points=[], features=[], rack=None, fenced=False)
           for b in (1, 2)]
    topics = []
    for i, name in enumerate(("clean", "dirty")):
        tid = bytes([i + 1] * 16)
        topics += [m.TopicRecord(name=name, topic_id=tid),
                   m.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2], isr=[1],
                                     removing_replicas=[], adding_replicas=[], leader=1,
                                     leader_epoch=0, partition_epoch=0)]
    image = MetadataImage.empty().apply_all(reg + topics)
    parts = [(t, 0, t.partitions[0]) for t in image.topics.values()]
    records = leader_and_isr_updates(image, iter(parts), remove=1,
                                     unclean=lambda name: name == "dirty")
    by_topic = {image.topics[bytes(r.topic_id)].name: r for r in records}
    assert (by_topic["clean"].leader, by_topic["clean"].isr) == (-1, None)
    assert (by_topic["dirty"].leader, by_topic["dirty"].isr,
            by_topic["dirty"].leader_recovery_state) == (2, [2], RECOVERING)


# --------------------------------------------------------------------------- in the controller


def three_brokers_one_isr(h: Harness, configs=None):
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("t", 1, 3, assignments={0: [1, 2, 3]}, configs=configs)
    t = h.image.topic("t")
    # Brokers 2 and 3 fell out of the ISR (as an AlterPartition from the leader would say).
    h.inject(m.PartitionChangeRecord(topic_id=t.id, partition_id=0, isr=[1]))


def test_without_unclean_election_the_partition_waits_for_its_last_isr_member():
    h = Harness()
    three_brokers_one_isr(h)
    h.heartbeat(1, fence=True)
    p = h.partition("t")
    assert (p.leader, p.isr) == (-1, (1,))
    h.clock.advance(ControllerConfig().unclean_leader_election_interval_ms)
    h.heartbeat(2)
    h.heartbeat(3)
    h.tick()
    assert h.partition("t").leader == -1
    h.heartbeat(1)                               # the last ISR member returns and leads
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (1, (1,), RECOVERED)


def test_topic_unclean_config_elects_a_live_replica_when_the_isr_dies():
    h = Harness()
    three_brokers_one_isr(h, configs={"unclean.leader.election.enable": "true"})
    h.heartbeat(1, fence=True)
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_cluster_default_unclean_applies_to_topics_without_their_own():
    h = Harness(ControllerConfig(unclean_leader_election_enable=True))
    three_brokers_one_isr(h)
    h.heartbeat(1, fence=True)
    assert h.partition("t").leader == 2
    h2 = Harness(ControllerConfig(unclean_leader_election_enable=True))
    three_brokers_one_isr(h2, configs={"unclean.leader.election.enable": "false"})
    h2.heartbeat(1, fence=True)
    assert h2.partition("t").leader == -1


def test_enabling_unclean_later_takes_effect_at_the_next_periodic_check():
    h = Harness()
    three_brokers_one_isr(h)
    h.heartbeat(1, fence=True)
    C = m.IncrementalAlterConfigsRequest
    h.call("incremental_alter_configs", C(resources=[C.AlterConfigsResource(
        resource_type=4, resource_name="", configs=[C.AlterableConfig(
            name="unclean.leader.election.enable", config_operation=0, value="true")])]), 1)
    assert h.partition("t").leader == -1
    interval = ControllerConfig().unclean_leader_election_interval_ms
    h.clock.advance(interval - 1)
    h.heartbeat(2)
    h.heartbeat(3)
    assert h.tick() == []
    h.clock.advance(1)
    records = h.tick()
    assert len(records) == 1
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_unfencing_a_replica_outside_the_isr_elects_it_only_if_unclean():
    for unclean, leader in ((False, -1), (True, 2)):
        h = Harness(ControllerConfig(unclean_leader_election_enable=unclean))
        h.add_brokers({1: None, 2: None})
        h.create_topic("t", 1, 2, assignments={0: [1, 2]})
        h.heartbeat(2, fence=True)               # ISR [1]
        h.heartbeat(1, fence=True)               # leaderless (or led by nobody alive)
        h.heartbeat(2)
        assert h.partition("t").leader == leader


def led_by_the_second_replica(h: Harness) -> None:
    """t-0 on [1, 2], led by 2 after 1 was fenced, with 1 back in the ISR."""
    h.add_brokers({1: None, 2: None})
    h.create_topic("t", 1, 2, assignments={0: [1, 2]})
    h.heartbeat(1, fence=True)
    h.heartbeat(1)
    t = h.image.topic("t")
    h.inject(m.PartitionChangeRecord(topic_id=t.id, partition_id=0, isr=[2, 1]))
    assert h.partition("t").leader == 2


def test_preferred_leaders_come_back_after_the_imbalance_interval():
    h = Harness()
    led_by_the_second_replica(h)
    interval = ControllerConfig().leader_imbalance_check_interval_ms
    h.clock.advance(interval // 2)
    h.heartbeat(1)
    h.heartbeat(2)
    h.tick()
    assert h.partition("t").leader == 2          # not due yet
    h.clock.advance(interval // 2)
    h.heartbeat(1)
    h.heartbeat(2)
    records = h.tick()
    assert [type(r).__name__ for r in records] == ["PartitionChangeRecord"]
    assert h.partition("t").leader == 1


def test_no_preferred_leader_elections_when_auto_rebalance_is_off():
    h = Harness(ControllerConfig(auto_leader_rebalance_enable=False))
    led_by_the_second_replica(h)
    for _ in range(4):
        h.clock.advance(ControllerConfig().leader_imbalance_check_interval_ms)
        h.heartbeat(1)
        h.heartbeat(2)
        h.tick()
    assert h.partition("t").leader == 2
