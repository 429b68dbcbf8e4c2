"""The producer's partitioner must agree with the Java client's: same key, same partition.

Vectors come from Kafka's own tests (clients/src/test/.../utils/UtilsTest.testMurmur2) and
from librdkafka's src/rdmurmur2.c (`java_murmur2_results`, which librdkafka checks against
the Java client). kafka-python's implementation, a port of the Java code, is a third opinion.
"""
from __future__ import annotations

import random

import pytest

from core.client.partitioner import (DefaultPartitioner, RoundRobinPartitioner, make_partitioner,
                                     murmur2, murmur2_partition, to_positive)

KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _signed(u: int) -> int:
    return u - (1 << 32) if u & 0x80000000 else u


LIBRDKAFKA = {
    b"kafka": _signed(0xD067CF64),
    b"giberish123456789": _signed(0x8F552B0C),
    b"1234": _signed(0x9FC97B14),
    b"234": _signed(0xE7C009CA),
    b"34": _signed(0x873930DA),
    b"4": _signed(0x5A4B5CA1),
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": _signed(0x78424F1C),
    b"reAmbleWillBeRemoved,ThePrePartThatIs": _signed(0x4A62B377),
    b"eAmbleWillBeRemoved,ThePrePartThatIs": _signed(0xE0E4E09E),
    b"AmbleWillBeRemoved,ThePrePartThatIs": _signed(0x62B8B43F),
    b"": _signed(0x106E08D9),
}


@pytest.mark.parametrize("key,expected", sorted({**KAFKA_UTILS_TEST, **LIBRDKAFKA}.items()))
def test_murmur2_matches_java(key, expected):
    assert murmur2(key) == expected


def test_to_positive_clears_sign_bit_not_abs():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(5) == 5


def test_partition_for_known_keys():
    # toPositive(murmur2(key)) % n, computed by hand from the vectors above
    assert murmur2_partition(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10 == 1173551340 % 10 == 0
    assert murmur2_partition(b"foobar", 3) == (-790332482 & 0x7FFFFFFF) % 3
    assert murmur2_partition(b"abc", 7) == 479470107 % 7


def test_agrees_with_kafka_python():
    kp = pytest.importorskip("kafka.partitioner.default")
    rng = random.Random(42)
    for n in range(300):
        key = bytes(rng.randrange(256) for _ in range(n % 41))
        assert to_positive(murmur2(key)) == kp.murmur2(key) & 0x7FFFFFFF


def test_default_partitioner_keyed_uses_all_partitions():
    p = DefaultPartitioner()
    # Keyed records ignore availability: a key must not move when a leader is missing.
    assert p.partition("t", b"21", list(range(10)), [3]) == 0
    assert p.partition("t", b"abc", list(range(10)), [3]) == 479470107 % 10 == 7


def test_default_partitioner_sticky_for_unkeyed_until_batch_size():
    p = DefaultPartitioner(batch_size=100)
    parts = list(range(8))
    first = p.partition("t", None, parts, parts)
    for _ in range(5):
        assert p.partition("t", None, parts, parts) == first
        p.on_append("t", first, 10)
    p.on_append("t", first, 60)  # 110 bytes: switch
    seen = {p.partition("t", None, parts, parts) for _ in range(1)}
    assert seen <= set(parts)
    # Sticky partitions come from the available ones.
    p2 = DefaultPartitioner()
    assert p2.partition("u", None, parts, [3]) == 3


def test_round_robin():
    p = RoundRobinPartitioner()
    assert [p.partition("t", b"k", [0, 1, 2], [0, 1, 2]) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_make_partitioner():
    assert isinstance(make_partitioner("default", 10), DefaultPartitioner)
    assert isinstance(make_partitioner("round_robin", 10), RoundRobinPartitioner)
    custom = make_partitioner(lambda topic, key, parts, avail: parts[-1], 10)
    assert custom.partition("t", b"k", [0, 1, 2], []) == 2
    with pytest.raises(ValueError):
        make_partitioner("nope", 10)
