"""Rack-aware replica placement: Kafka's StripedReplicaPlacer.

The rules (StripedReplicaPlacer.java, ClusterControlManager.usableBrokers):

* Usable brokers are the registered ones that are not in controlled shutdown. Fenced brokers
  are usable too, but only once the unfenced brokers of their rack are used up, and never as
  the first replica (the leader): a new partition must start with an unfenced leader.
* A broker without a rack is in the "no rack" rack; it sorts before every named rack.
* Replicas of a partition go to the racks round robin, so that RF=3 over three racks puts one
  replica in each, and RF=3 over two racks puts two in one rack and one in the other. Inside a
  rack, brokers are handed out round robin too.
* Each partition starts one rack further on than the one before, and each rack's round starts
  one broker further on, which gives the characteristic striped layout and spreads leaders.
  Starting points are random; after as many partitions as there are unfenced brokers the rack
  order and each rack's broker order are shuffled so that long runs do not repeat.
* A replication factor that is not positive, a cluster whose brokers are all fenced, or fewer
  usable brokers than the replication factor is an error, with Kafka's messages.

Randomness comes from the `random.Random` given, so a seeded placer is deterministic.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from .image import MetadataImage


@dataclass(frozen=True, slots=True)
class UsableBroker:
    id: int
    rack: str | None
    fenced: bool


class PlacementError(Exception):
    """The placement is impossible (Kafka's InvalidReplicationFactorException)."""


def usable_brokers(image: MetadataImage) -> list[UsableBroker]:
    # A fenced broker has left controlled shutdown as far as placement goes (Kafka resets the
    # shutdown offset on fencing), so only unfenced shutting-down brokers are excluded.
    return [UsableBroker(b.id, b.rack, b.fenced) for b in image.brokers.values()
            if not (b.in_controlled_shutdown and not b.fenced)]


class _Cycle:
    """Brokers handed out round robin: a new round starts one broker further on and gives
    each broker at most once."""
    __slots__ = ("ids", "start", "given", "round")

    def __init__(self, ids: list[int], rng: random.Random):
        self.ids = sorted(ids)
        self.start = rng.randrange(len(self.ids)) if self.ids else 0
        self.given = 0
        self.round = 0

    def next(self, round_: int) -> int | None:
        if not self.ids:
            return None
        if round_ != self.round:
            self.round, self.given = round_, 0
            self.start = (self.start + 1) % len(self.ids)
        if self.given >= len(self.ids):
            return None
        self.given += 1
        return self.ids[(self.start + self.given - 1) % len(self.ids)]


class _Rack:
    __slots__ = ("unfenced", "fenced")

    def __init__(self, unfenced: list[int], fenced: list[int], rng: random.Random):
        self.unfenced = _Cycle(unfenced, rng)
        self.fenced = _Cycle(fenced, rng)

    def next(self, round_: int) -> int | None:
        broker = self.unfenced.next(round_)
        return broker if broker is not None else self.fenced.next(round_)


class _RackList:
    def __init__(self, rng: random.Random, brokers: Iterable[UsableBroker]):
        self.rng = rng
        members: dict[str | None, tuple[list[int], list[int]]] = {}
        for b in brokers:
            unfenced, fenced = members.setdefault(b.rack, ([], []))
            (fenced if b.fenced else unfenced).append(b.id)
        names = sorted(members, key=lambda r: (r is not None, r or ""))
        self.racks = [_Rack(*members[name], rng) for name in names]
        self.total = sum(len(u) + len(f) for u, f in members.values())
        self.unfenced = sum(len(u) for u, _ in members.values())
        self.offset = rng.randrange(len(self.racks)) if self.racks else 0
        self.round = 0
        self.since_shuffle = 0

    def _shuffle(self) -> None:
        self.rng.shuffle(self.racks)
        for rack in self.racks:
            self.rng.shuffle(rack.unfenced.ids)
            self.rng.shuffle(rack.fenced.ids)

    def place(self, replication_factor: int) -> list[int]:
        if self.since_shuffle == self.unfenced and self.unfenced > 1:
            self._shuffle()
            self.since_shuffle = 0
        n = len(self.racks)
        self.offset %= n
        first = self.offset
        while (leader := self.racks[first].unfenced.next(self.round)) is None:
            first = (first + 1) % n
        replicas = [leader]
        index, skip = self.offset, first
        while len(replicas) < replication_factor:
            if index == skip:
                # The leader's rack already gave a replica this time round the racks.
                skip = -1
                broker = None
            else:
                broker = self.racks[index].next(self.round)
            index = (index + 1) % n
            if broker is not None:
                replicas.append(broker)
        self.round += 1
        self.offset += 1
        self.since_shuffle += 1
        return replicas


class StripedReplicaPlacer:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def place(self, num_partitions: int, replication_factor: int,
              brokers: Iterable[UsableBroker]) -> list[list[int]]:
        """Replica lists (leader first) for `num_partitions` new partitions; PlacementError
        with Kafka's message when it cannot be done."""
        racks = _RackList(self.rng, brokers)
        if replication_factor <= 0:
            raise PlacementError(f"Invalid replication factor {replication_factor}: the "
                                 "replication factor must be positive.")
        if racks.unfenced == 0:
            raise PlacementError("All brokers are currently fenced.")
        if replication_factor > racks.total:
            raise PlacementError(f"The target replication factor of {replication_factor} cannot "
                                 f"be reached because only {racks.total} broker(s) are registered.")
        return [racks.place(replication_factor) for _ in range(num_partitions)]
