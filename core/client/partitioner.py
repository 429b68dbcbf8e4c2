"""Choosing a partition for a record, as the Java client does.

Keyed records go to `toPositive(murmur2(key)) % numPartitions` over *all* partitions (not
only those with a leader), so a key always lands on the same partition while the partition
count stays the same; other Kafka clients agree on this (librdkafka calls it
"murmur2_random"), which is what lets a key's records from different clients end up together.

Unkeyed records use a sticky partition (KIP-480/KIP-794): stay on one partition until about
`batch_size` bytes went to it, then pick another at random among partitions with a leader.
That fills whole batches instead of spraying one record per partition per request.
"""
from __future__ import annotations

import itertools
import random
from typing import Callable, Protocol

__all__ = ["murmur2", "to_positive", "murmur2_partition", "DefaultPartitioner",
           "RoundRobinPartitioner", "Partitioner", "make_partitioner"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: MurmurHash2, seed 0x9747b28c, as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[end4 + 2] << 16
    if rest >= 2:
        h ^= data[end4 + 1] << 8
    if rest >= 1:
        h ^= data[end4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs())."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class Partitioner(Protocol):
    def partition(self, topic: str, key: bytes | None, partitions: list[int],
                  available: list[int]) -> int: ...

    def on_append(self, topic: str, partition: int, nbytes: int) -> None: ...


class DefaultPartitioner:
    """murmur2 for keyed records, sticky for unkeyed ones (see module docstring)."""

    def __init__(self, batch_size: int = 1 << 20):
        self.batch_size = batch_size
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes since switch]

    def partition(self, topic, key, partitions, available):
        if key is not None:
            return murmur2_partition(key, len(partitions))
        state = self._sticky.get(topic)
        if state is None or state[0] not in (available or partitions):
            choices = available or partitions
            state = self._sticky[topic] = [random.choice(choices), 0]
        return state[0]

    def on_append(self, topic, partition, nbytes):
        state = self._sticky.get(topic)
        if state is None or state[0] != partition:
            return
        state[1] += nbytes
        if state[1] >= self.batch_size:
            del self._sticky[topic]  # next unkeyed record picks a new partition


class RoundRobinPartitioner:
    """Every record, keyed or not, to the next available partition in turn."""

    def __init__(self):
        self._counters: dict[str, itertools.count] = {}

    def partition(self, topic, key, partitions, available):
        choices = available or partitions
        n = next(self._counters.setdefault(topic, itertools.count()))
        return choices[n % len(choices)]

    def on_append(self, topic, partition, nbytes):
        pass


class _CallablePartitioner:
    def __init__(self, fn: Callable):
        self.fn = fn

    def partition(self, topic, key, partitions, available):
        return self.fn(topic, key, partitions, available)

    def on_append(self, topic, partition, nbytes):
        pass


def make_partitioner(spec, batch_size: int) -> Partitioner:
    """"default"/"murmur2", "round_robin", a Partitioner, or a callable
    `(topic, key, partitions, available) -> partition`."""
    if spec is None or spec in ("default", "murmur2", "murmur2_random"):
        return DefaultPartitioner(batch_size)
    if spec in ("round_robin", "roundrobin"):
        return RoundRobinPartitioner()
    if isinstance(spec, str):
        raise ValueError(f"unknown partitioner {spec!r}")
    if hasattr(spec, "partition"):
        return spec
    if callable(spec):
        return _CallablePartitioner(spec)
    raise ValueError(f"unknown partitioner {spec!r}")
