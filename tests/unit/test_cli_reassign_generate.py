"""`seaway reassign generate`'s proposal: Kafka's AdminUtils.assignReplicasToBrokers, rack-aware
or not (core/cli/reassign_plan.py).

The exact vectors are the ones Kafka's own tests expect (AdminTest, AdminRackAwareTest) for a
fixed start index; the rest checks, for every start index, the properties the algorithm
promises: distinct replicas, leaders and replicas spread evenly, and each partition in as many
racks as it can be.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from core.cli.reassign_plan import Broker, InputError, assign_replicas, propose, rack_alternated_brokers


def brokers(racks: dict[int, str | None]) -> list[Broker]:
    return [Broker(b, r) for b, r in sorted(racks.items())]


def test_rack_unaware_matches_kafka():
    got = assign_replicas([Broker(b) for b in range(5)], 10, 3, fixed_start_index=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@pytest.mark.parametrize("racks, expected", [
    ({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}, [0, 3, 1, 5, 4, 2]),
    ({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2"}, [0, 3, 1, 4, 2]),
    ({0: "a", 1: "a", 2: "a"}, [0, 1, 2]),
    ({7: "z", 3: "a", 5: "a", 1: "a"}, [1, 7, 3, 5]),    # a rack runs out: the others continue
])
def test_rack_alternated_broker_list(racks, expected):
    assert rack_alternated_brokers(racks) == expected


def test_rack_aware_matches_kafka():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas(brokers(racks), 7, 3, fixed_start_index=0, start_partition_id=0)
    assert got == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
                   5: [2, 0, 3], 6: [0, 4, 2]}


CASES = [
    # (racks, partitions, rf, replicas per rack per partition: min, max)
    ("even racks", {0: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 6, 3),
    ("two replicas", {0: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 12, 2),
    ("uneven racks", {0: "r1", 1: "r1", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 6, 3),
    ("fewer racks than replicas", {0: "r1", 1: "r1", 2: "r2", 3: "r2", 4: "r2"}, 10, 3),
    ("more replicas than racks, many brokers", {b: f"r{b % 3}" for b in range(9)}, 9, 5),
    ("one rack", {0: "r", 1: "r", 2: "r", 3: "r"}, 8, 3),
    ("rf 1", {0: "r1", 1: "r2"}, 4, 1),
    ("rf = brokers", {0: "r1", 1: "r2", 2: "r1"}, 3, 3),
]


@pytest.mark.parametrize("name, racks, partitions, rf", CASES, ids=[c[0] for c in CASES])
def test_rack_aware_properties(name, racks, partitions, rf):
    n_racks = len(set(racks.values()))
    for start in range(len(racks)):
        got = assign_replicas(brokers(racks), partitions, rf, fixed_start_index=start)
        assert sorted(got) == list(range(partitions))
        for replicas in got.values():
            assert len(replicas) == rf and len(set(replicas)) == rf
            assert set(replicas) <= set(racks)
            # Every rack holds one replica before any holds two.
            per_rack = Counter(racks[b] for b in replicas)
            assert len(per_rack) == min(rf, n_racks), (start, replicas)
            assert max(per_rack.values()) - min(per_rack.values()) <= 1 or len(per_rack) < n_racks, (start, replicas)
        if partitions % len(racks) == 0:
            leaders = Counter(r[0] for r in got.values())
            assert set(leaders.values()) == {partitions // len(racks)}, (start, got)


def test_uneven_racks_put_each_partition_in_every_rack():
    """Kafka's testAssignmentWithRackAwareWithUnevenRacks: racks of 3, 1 and 2 brokers."""
    racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    for seed in range(20):
        got = assign_replicas(brokers(racks), 6, 3, rng=random.Random(seed))
        assert all(len({racks[b] for b in r}) == 3 for r in got.values()), got
        assert Counter(r[0] for r in got.values()) == Counter({b: 1 for b in racks}), got


@pytest.mark.parametrize("members, partitions, rf, message", [
    ({1: None, 2: None}, 3, 3, "replication factor 3 is larger than the 2 available brokers"),
    ({1: "a"}, 1, 2, "replication factor 2 is larger than the 1 available broker"),
    ({1: "a", 2: None, 3: "b"}, 1, 2, "not all brokers have rack information (none for 2)"),
    ({1: None}, 0, 1, "the number of partitions must be larger than 0"),
    ({1: None}, 1, 0, "the replication factor must be larger than 0"),
])
def test_impossible_assignments_are_errors(members, partitions, rf, message):
    with pytest.raises(InputError) as err:
        assign_replicas(brokers(members), partitions, rf)
    assert str(err.value).startswith(message), str(err.value)


def test_random_start_still_spreads_evenly():
    got = assign_replicas([Broker(b) for b in (4, 5, 6)], 6, 2, rng=random.Random(7))
    assert Counter(r[0] for r in got.values()) == {4: 2, 5: 2, 6: 2}
    assert Counter(b for r in got.values() for b in r) == {4: 4, 5: 4, 6: 4}


def test_propose_keeps_each_topics_partitions_and_replication_factor():
    current = {("a", 0): [1, 2], ("a", 1): [2, 1], ("a", 2): [1, 2], ("b", 0): [1]}
    got = propose(current, [Broker(3), Broker(4), Broker(5)], fixed_start_index=0)
    assert got == {("a", 0): [3, 4], ("a", 1): [4, 5], ("a", 2): [5, 3], ("b", 0): [3]}


def test_propose_names_the_topic_that_cannot_fit():
    with pytest.raises(InputError, match="topic 'wide': replication factor 3 is larger than the 2"):
        propose({("narrow", 0): [1], ("wide", 0): [1, 2, 3]}, [Broker(1), Broker(2)])
