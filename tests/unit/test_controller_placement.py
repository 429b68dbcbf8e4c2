"""Rack-aware replica placement (Kafka's StripedReplicaPlacer)."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from core.controller.placement import PlacementError, StripedReplicaPlacer, UsableBroker
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import Harness, new_topic


def brokers(racks: dict[int, str | None], fenced=()) -> list[UsableBroker]:
    return [UsableBroker(b, rack, b in fenced) for b, rack in racks.items()]


def place(racks, partitions, rf, *, seed=0, fenced=()):
    return StripedReplicaPlacer(random.Random(seed)).place(partitions, rf, brokers(racks, fenced))


THREE_RACKS = {1: "a", 2: "a", 3: "a", 4: "b", 5: "b", 6: "b", 7: "c", 8: "c", 9: "c"}


@pytest.mark.parametrize("seed", range(5))
def test_rf3_over_three_racks_puts_one_replica_in_each(seed):
    for replicas in place(THREE_RACKS, 60, 3, seed=seed):
        assert sorted(THREE_RACKS[b] for b in replicas) == ["a", "b", "c"]


@pytest.mark.parametrize("seed", range(5))
def test_uneven_racks_spread_as_evenly_as_they_can(seed):
    racks = {1: "a", 2: "a", 3: "a", 4: "a", 5: "b", 6: "b"}
    for replicas in place(racks, 40, 2, seed=seed):
        assert sorted(racks[b] for b in replicas) == ["a", "b"]
    for replicas in place(racks, 40, 3, seed=seed):
        assert len(set(replicas)) == 3
        assert set(Counter(racks[b] for b in replicas).values()) == {1, 2}
    # Rack spread comes first: the two brokers of rack b get a replica of every partition.
    load = Counter(b for replicas in place(racks, 40, 2, seed=seed) for b in replicas)
    assert load[5] + load[6] == 40


def test_brokers_without_a_rack_form_one_rack():
    racks = {1: None, 2: None, 3: "x", 4: "x"}
    for replicas in place(racks, 20, 2):
        assert sorted(str(racks[b]) for b in replicas) == ["None", "x"]


@pytest.mark.parametrize("racks", [
    {b: None for b in range(1, 6)},
    {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"},
], ids=["no racks", "three racks"])
def test_replicas_and_leaders_spread_over_brokers(racks):
    n = len(racks)
    placed = place(racks, 60 * n, 3, seed=7)
    for replicas in placed:
        assert len(set(replicas)) == 3
    leaders = Counter(replicas[0] for replicas in placed)
    load = Counter(b for replicas in placed for b in replicas)
    assert set(leaders) == set(racks)
    assert max(leaders.values()) - min(leaders.values()) <= 0.2 * 60
    assert max(load.values()) - min(load.values()) <= 0.2 * 180


def test_fenced_brokers_hold_followers_only_when_needed_and_never_lead():
    racks = {1: None, 2: None, 3: None, 4: None}
    for replicas in place(racks, 30, 3, fenced={4}):
        assert 4 not in replicas
    placed = place(racks, 30, 4, fenced={4})
    assert all(4 in replicas and replicas[0] != 4 for replicas in placed)


@pytest.mark.parametrize("rf, fenced, message", [
    (0, (), "Invalid replication factor 0: the replication factor must be positive."),
    (-2, (), "Invalid replication factor -2: the replication factor must be positive."),
    (4, (), "The target replication factor of 4 cannot be reached because only 3 broker(s) "
            "are registered."),
    (1, (1, 2, 3), "All brokers are currently fenced."),
])
def test_impossible_placements(rf, fenced, message):
    with pytest.raises(PlacementError) as exc:
        place({1: "a", 2: "b", 3: "c"}, 1, rf, fenced=set(fenced))
    assert str(exc.value) == message


def test_a_seed_makes_placement_repeatable():
    assert place(THREE_RACKS, 50, 3, seed=42) == place(THREE_RACKS, 50, 3, seed=42)
    assert place(THREE_RACKS, 50, 3, seed=42) != place(THREE_RACKS, 50, 3, seed=43)


def test_one_unfenced_broker_places_every_partition():
    assert place({1: None}, 5, 1) == [[1]] * 5


# --------------------------------------------------------------------------- through the controller


def test_create_topics_places_rack_aware_and_reports_impossible_factors():
    h = Harness(seed=3)
    h.add_brokers({1: "a", 2: "b", 3: "c"})
    h.create_topic("t", 6, 3)
    for pid in range(6):
        p = h.partition("t", pid)
        assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas and p.leader == p.replicas[0]
    assert Counter(h.partition("t", pid).leader for pid in range(6)) == {1: 2, 2: 2, 3: 2}
    result = h.create(new_topic("big", 1, 4))
    [res] = result.response.topics
    assert res.error_code == E.INVALID_REPLICATION_FACTOR
    assert res.error_message == ("Unable to replicate the partition 4 time(s): The target "
                                 "replication factor of 4 cannot be reached because only 3 "
                                 "broker(s) are registered.")


def test_brokers_in_controlled_shutdown_get_no_new_replicas():
    h = Harness()
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("led", 1, 1, assignments={0: [3]})
    h.heartbeat(3, shut_down=True)
    assert h.image.brokers[3].in_controlled_shutdown
    h.create_topic("t", 12, 2)
    assert all(3 not in h.partition("t", pid).replicas for pid in range(12))
    [res] = h.create(new_topic("wide", 1, 3)).response.topics
    assert res.error_code == E.INVALID_REPLICATION_FACTOR


def test_fenced_replicas_are_placed_but_left_out_of_the_isr():
    h = Harness()
    h.add_brokers({1: None, 2: None})
    h.register(3)                      # registered, still fenced
    h.create_topic("t", 4, 3)
    for pid in range(4):
        p = h.partition("t", pid)
        assert sorted(p.replicas) == [1, 2, 3]
        assert 3 not in p.isr and p.leader in (1, 2)
    h.heartbeat(1, fence=True)
    h.heartbeat(2, fence=True)
    [res] = h.create(new_topic("none", 1, 1)).response.topics
    assert (res.error_code, res.error_message) == (
        E.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 1 time(s): All brokers are currently fenced.")
