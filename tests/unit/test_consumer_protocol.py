"""The "consumer" embedded protocol (core/protocol/consumer_protocol.py): the subscription a
member puts in JoinGroup and the assignment the leader hands out in SyncGroup.

Other clients' leaders read our blobs and we read theirs, so the bytes are pinned against
Kafka's layout (an int16 version, then the struct), every version round-trips, a newer
version than ours is read with our newest layout (Kafka only appends fields), and anything
truncated or garbled is a DecodeError, never another exception.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.protocol.consumer_protocol import (ASSIGNMENT_VERSION, SUBSCRIPTION_VERSION, Assignment,
                                             Subscription, decode_assignment, decode_subscription,
                                             encode_assignment, encode_subscription)
from core.protocol.errors import DecodeError


def kstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def full_subscription(version: int) -> Subscription:
    return Subscription(topics=["orders", "payments"], user_data=b"\x00\x00\x00\x07",
                        owned_partitions={"orders": [0, 2], "payments": [1]}, generation_id=7,
                        rack_id="rack-a", version=version)


def expected_after_roundtrip(version: int) -> Subscription:
    """What survives version `version`: later fields come back as their defaults."""
    full = full_subscription(version)
    return Subscription(topics=full.topics, user_data=full.user_data,
                        owned_partitions=full.owned_partitions if version >= 1 else {},
                        generation_id=full.generation_id if version >= 2 else -1,
                        rack_id=full.rack_id if version >= 3 else None, version=version)


@pytest.mark.parametrize("version", range(SUBSCRIPTION_VERSION + 1))
def test_subscription_roundtrips_every_version(version):
    blob = encode_subscription(full_subscription(version))
    assert struct.unpack_from(">h", blob)[0] == version
    assert decode_subscription(blob) == expected_after_roundtrip(version)


@pytest.mark.parametrize("version", range(ASSIGNMENT_VERSION + 1))
def test_assignment_roundtrips_every_version(version):
    a = Assignment({"orders": [0, 2], "payments": [1]}, user_data=b"ud", version=version)
    blob = encode_assignment(a)
    assert struct.unpack_from(">h", blob)[0] == version
    assert decode_assignment(blob) == a


def test_subscription_bytes_match_kafkas_layout():
    v0 = encode_subscription(Subscription(["t"], user_data=None, version=0))
    assert v0 == struct.pack(">h", 0) + struct.pack(">i", 1) + kstr("t") + struct.pack(">i", -1)
    v3 = encode_subscription(Subscription(["t"], user_data=b"u", owned_partitions={"t": [3]},
                                          generation_id=9, rack_id="r", version=3))
    assert v3 == (struct.pack(">h", 3) + struct.pack(">i", 1) + kstr("t")
                  + struct.pack(">i", 1) + b"u"
                  + struct.pack(">i", 1) + kstr("t") + struct.pack(">ii", 1, 3)
                  + struct.pack(">i", 9) + kstr("r"))


def test_assignment_bytes_match_kafkas_layout():
    blob = encode_assignment(Assignment({"t": [0, 5]}, user_data=None, version=0))
    assert blob == (struct.pack(">h", 0) + struct.pack(">i", 1) + kstr("t") + struct.pack(">iii", 2, 0, 5)
                    + struct.pack(">i", -1))


def test_empty_assignment_blob_means_no_partitions():
    """The coordinator gives members the leader left out zero bytes."""
    assert decode_assignment(b"").partitions == {}


def test_newer_subscription_version_reads_with_our_newest_layout():
    body = encode_subscription(full_subscription(SUBSCRIPTION_VERSION))[2:]
    newer = struct.pack(">h", SUBSCRIPTION_VERSION + 5) + body + b"\x00\x01future-field"
    got = decode_subscription(newer)
    assert got.version == SUBSCRIPTION_VERSION + 5
    assert (got.topics, got.owned_partitions, got.generation_id, got.rack_id, got.user_data) == (
        ["orders", "payments"], {"orders": [0, 2], "payments": [1]}, 7, "rack-a", b"\x00\x00\x00\x07")


def test_newer_assignment_version_reads_with_our_newest_layout():
    body = encode_assignment(Assignment({"t": [1]}, version=ASSIGNMENT_VERSION))[2:]
    got = decode_assignment(struct.pack(">h", 42) + body + b"trailing")
    assert got.partitions == {"t": [1]} and got.version == 42


@pytest.mark.parametrize("version", range(SUBSCRIPTION_VERSION + 1))
def test_every_truncated_subscription_is_a_decode_error(version):
    blob = encode_subscription(full_subscription(version))
    for cut in range(len(blob)):
        with pytest.raises(DecodeError):
            decode_subscription(blob[:cut])


@pytest.mark.parametrize("version", range(ASSIGNMENT_VERSION + 1))
def test_every_truncated_assignment_is_a_decode_error(version):
    blob = encode_assignment(Assignment({"orders": [0, 2]}, user_data=b"xy", version=version))
    for cut in range(1, len(blob)):  # zero bytes is the valid empty assignment
        with pytest.raises(DecodeError):
            decode_assignment(blob[:cut])


def test_negative_version_is_a_decode_error():
    body = encode_subscription(full_subscription(0))[2:]
    with pytest.raises(DecodeError):
        decode_subscription(struct.pack(">h", -1) + body)
    with pytest.raises(DecodeError):
        decode_assignment(struct.pack(">h", -2) + body)


def test_huge_array_count_fails_before_allocating():
    blob = struct.pack(">h", 0) + struct.pack(">i", 2**31 - 1) + kstr("t")
    with pytest.raises(DecodeError):
        decode_subscription(blob)
    with pytest.raises(DecodeError):
        decode_assignment(blob)


@given(st.binary(max_size=200))
@settings(max_examples=500, deadline=None)
def test_garbage_decodes_or_raises_decode_error(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except DecodeError:
            pass


@given(topics=st.lists(st.text(min_size=1, max_size=20), max_size=5, unique=True),
       owned=st.dictionaries(st.text(min_size=1, max_size=10), st.lists(st.integers(0, 2**31 - 1), max_size=5),
                             max_size=3),
       generation=st.integers(-1, 2**31 - 1), rack=st.none() | st.text(max_size=10),
       user_data=st.none() | st.binary(max_size=20))
@settings(max_examples=200, deadline=None)
def test_subscription_v3_roundtrips_any_content(topics, owned, generation, rack, user_data):
    sub = Subscription(topics, user_data, owned, generation, rack, version=3)
    assert decode_subscription(encode_subscription(sub)) == sub
