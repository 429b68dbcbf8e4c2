"""Hostile bytes against every generated decoder.

Whatever arrives — random bytes, valid frames with flipped bits, cut short, with length
prefixes blown up to 2^31 — a decoder either returns a message or raises DecodeError; nothing
else escapes (principle 7: every bad input gets an answer). And lengths are checked before
allocation: decoding N bytes never allocates more than a small multiple of N, whatever the
length prefixes claim.
"""
from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.protocol import messages
from core.protocol.codegen import MessageCodec
from core.protocol.errors import DecodeError, EncodeError
from core.protocol.varint import uvarint_bytes
from tests.support.codec_strategies import StrategyBuilder, plain

FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _codecs():
    """(codec, versions, id) for every request, response, header, data struct and metadata
    record we decode."""
    for key, api in sorted(messages.API.items()):
        versions = list(range(api.min_version, api.max_version + 1))
        yield pytest.param(api.request, versions, id=f"{api.name}-request")
        yield pytest.param(api.response, versions, id=f"{api.name}-response")
    yield pytest.param(messages.REQUEST_HEADER, [0, 1, 2], id="RequestHeader")
    yield pytest.param(messages.RESPONSE_HEADER, [0, 1], id="ResponseHeader")
    for name, codec in sorted(messages.DATA.items()):
        yield pytest.param(codec, list(range(codec.spec.versions.low, codec.spec.versions.high + 1)), id=name)
    for _, codec in sorted(messages.METADATA_RECORDS.items()):
        yield pytest.param(codec, list(range(codec.spec.versions.low, codec.spec.versions.high + 1)),
                           id=codec.spec.name)


CODECS = list(_codecs())


def decode_or_decode_error(codec: MessageCodec, version: int, data: bytes):
    """Decode; DecodeError is an answer, anything else fails the test. A frame that decodes
    must re-encode, and the re-encoding must decode to the same message."""
    try:
        obj = codec.decode(version, data)
    except DecodeError:
        return None
    try:
        again = codec.encode(version, obj)
    except EncodeError as exc:  # pragma: no cover - reported with the frame below
        raise AssertionError(f"decoded {data.hex()} but cannot re-encode it: {exc}") from None
    assert plain(codec.decode(version, again)) == plain(obj)
    return obj


# --------------------------------------------------------------------------- random bytes


@pytest.mark.parametrize("codec,versions", CODECS)
@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_random_bytes(codec, versions, data):
    version = data.draw(st.sampled_from(versions), label="version")
    frame = data.draw(st.binary(max_size=200), label="frame")
    decode_or_decode_error(codec, version, frame)


# --------------------------------------------------------------------------- mutated frames

# Length prefixes that claim far more than any frame holds: int16/int32 maxima, -2 (an
# invalid negative that is not the null marker), and uvarints for 2^31 - 1, 2^31 and 2^35 - 1.
BIG_PREFIXES = [b"\x7f\xff", b"\x7f\xff\xff\xff", b"\xff\xfe", b"\xff\xff\xff\xfe",
                uvarint_bytes((1 << 31) - 1), uvarint_bytes(1 << 31), b"\xff\xff\xff\xff\x7f",
                b"\xff\xff\xff\xff\xff\x01", b"\x80", b"\x00", b"\xff"]


@st.composite
def mutations(draw, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "inflate", "insert", "delete", "append"]))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            i = min(pos, len(data) - 1)
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[pos:]
        elif op == "inflate":
            big = draw(st.sampled_from(BIG_PREFIXES))
            if draw(st.booleans()):
                data[pos:pos + len(big)] = big
            else:
                data[pos:pos] = big
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        else:
            data += draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


@pytest.mark.parametrize("codec,versions", CODECS)
@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_mutated_valid_frames(codec, versions, data):
    version = data.draw(st.sampled_from(versions), label="version")
    obj = data.draw(StrategyBuilder(codec.spec, version).message(), label="message")
    frame = codec.encode(version, obj)
    bad = data.draw(mutations(frame), label="mutated")
    decode_or_decode_error(codec, version, bad)


# --------------------------------------------------------------------------- allocation bound


def peak_allocation(codec: MessageCodec, version: int, frame: bytes) -> tuple[int, object]:
    """Bytes allocated at the peak while decoding `frame` (the codec compiled beforehand)."""
    try:  # compile the version's codec, and warm up, outside the measurement
        codec.decode(version, frame)
    except DecodeError:
        pass
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        try:
            result = codec.decode(version, frame)
        except DecodeError as exc:
            result = exc
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return peak, result


def allowed(n: int) -> int:
    return 64 * n + 64 * 1024


def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def s16(t): return i16(len(t)) + t.encode()
def cstr(t): return uvarint_bytes(len(t) + 1) + t.encode()


PAD = b"\x00" * 64  # some bytes after the lying prefix, so that the frame is not simply short

HUGE_CLAIMS = [
    # Metadata v1 request: topics array count 2^31 - 1.
    pytest.param(3, "request", 1, i32(0x7FFFFFFF) + PAD, id="metadata-v1-topics-2^31-1"),
    # Metadata v9 request: compact topics array, uvarint 2^31 -> count 2^31 - 1.
    pytest.param(3, "request", 9, uvarint_bytes(1 << 31) + PAD, id="metadata-v9-compact-topics-2^31"),
    # Metadata v12 request: the 5-byte uvarint maximum (2^35 - 1).
    pytest.param(3, "request", 12, b"\xff\xff\xff\xff\x7f" + PAD, id="metadata-v12-compact-topics-2^35"),
    # Produce v3 request: records length 2^31 - 1.
    pytest.param(0, "request", 3,
                 i16(-1) + i16(-1) + i32(1000) + i32(1) + s16("t") + i32(1) + i32(0) + i32(0x7FFFFFFF) + PAD,
                 id="produce-v3-records-2^31-1"),
    # Produce v9 request: compact records length uvarint 2^31.
    pytest.param(0, "request", 9,
                 b"\x00" + i16(-1) + i32(1000) + b"\x02" + cstr("t") + b"\x02" + i32(0)
                 + uvarint_bytes(1 << 31) + PAD, id="produce-v9-compact-records-2^31"),
    # Produce v3 request: transactional id string length 32767.
    pytest.param(0, "request", 3, i16(0x7FFF) + PAD, id="produce-v3-string-32767"),
    # ApiVersions v3 request: compact string length uvarint 2^31.
    pytest.param(18, "request", 3, uvarint_bytes(1 << 31) + PAD, id="api-versions-v3-compact-string-2^31"),
    # Metadata v1 response: no brokers, one topic with one partition whose replica array claims 2^31 - 1 int32s.
    pytest.param(3, "response", 1,
                 i32(0) + i32(-1) + i32(1) + i16(0) + s16("t") + b"\x00" + i32(1) + i16(0) + i32(0) + i32(1)
                 + i32(0x7FFFFFFF) + PAD, id="metadata-v1-replica-nodes-2^31-1"),
    # Metadata v1 response: an int32 array whose count fits the frame's byte count but not 4x it.
    pytest.param(3, "response", 1,
                 i32(0) + i32(-1) + i32(1) + i16(0) + s16("t") + b"\x00" + i32(1) + i16(0) + i32(0) + i32(1)
                 + i32(60) + PAD, id="metadata-v1-replica-nodes-count-vs-width"),
    # Fetch v12 request: the top-level tagged field 0 (ClusterId) claiming 2^31 bytes.
    pytest.param(1, "request", 12,
                 i32(-1) + i32(500) + i32(1) + i32(1000) + b"\x00" + i32(0) + i32(-1) + b"\x01\x01\x01"
                 + b"\x01\x00" + uvarint_bytes(1 << 31) + PAD, id="fetch-v12-tag-size-2^31"),
    # Fetch v4 response: aborted transactions count 2^31 - 1.
    pytest.param(1, "response", 4,
                 i32(0) + i32(1) + s16("t") + i32(1) + i32(0) + i16(0) + (b"\x00" * 8) * 2
                 + i32(0x7FFFFFFF) + PAD, id="fetch-v4-aborted-txns-2^31-1"),
    # DescribeConfigs v0 request: a nullable []string claiming 2^31 - 1 keys.
    pytest.param(32, "request", 0, i32(1) + b"\x02" + s16("t") + i32(0x7FFFFFFF) + PAD,
                 id="describe-configs-v0-keys-2^31-1"),
]


@pytest.mark.parametrize("key,kind,version,frame", HUGE_CLAIMS)
def test_huge_length_claims_do_not_allocate(key, kind, version, frame):
    codec = getattr(messages.API[key], kind)
    peak, result = peak_allocation(codec, version, frame)
    assert isinstance(result, DecodeError), f"expected a DecodeError, got {result!r}"
    assert peak < allowed(len(frame)), f"decoding {len(frame)} bytes allocated {peak} bytes at the peak"


def _many_small_elements(count: int) -> list:
    """Valid frames that pack as many objects as possible into as few bytes as possible: the
    worst honest case for the allocation bound."""
    return [
        # Metadata v9 request: `count` topics, each an empty compact name and no tags (2 bytes).
        pytest.param(3, "request", 9, uvarint_bytes(count + 1) + b"\x01\x00" * count + b"\x01\x00\x00\x00",
                     id="metadata-v9-many-topics"),
        # CreatePartitions v2 request: one topic with `count` assignments, each an empty
        # compact []int32 and no tags (2 bytes, two objects).
        pytest.param(37, "request", 2, b"\x02" + cstr("t") + i32(1) + uvarint_bytes(count + 1)
                     + b"\x01\x00" * count + b"\x00" + i32(0) + b"\x00\x00", id="create-partitions-v2-many-assignments"),
        # DeleteTopics v0 request: `count` empty topic names (2 bytes each).
        pytest.param(20, "request", 0, i32(count) + b"\x00\x00" * count + i32(0), id="delete-topics-v0-many-names"),
        # Metadata v1 response: a partition with `count` replicas (4 bytes each, big ints).
        pytest.param(3, "response", 1,
                     i32(0) + i32(-1) + i32(1) + i16(0) + s16("t") + b"\x00" + i32(1) + i16(0) + i32(0) + i32(1)
                     + i32(count) + i32(1 << 30) * count + i32(0), id="metadata-v1-many-replicas"),
        # DescribeCluster v0 request: `count` unknown tagged fields of 0 bytes (3 bytes each).
        pytest.param(60, "request", 0, b"\x00" + uvarint_bytes(count)
                     + b"".join(uvarint_bytes(200 + i) + b"\x00" for i in range(count)), id="describe-cluster-v0-many-tags"),
    ]


@pytest.mark.parametrize("key,kind,version,frame", _many_small_elements(20000))
def test_dense_valid_frames_stay_within_the_bound(key, kind, version, frame):
    codec = getattr(messages.API[key], kind)
    peak, result = peak_allocation(codec, version, frame)
    assert not isinstance(result, DecodeError), f"the frame should be valid: {result}"
    assert peak < allowed(len(frame)), (
        f"decoding {len(frame)} bytes allocated {peak} bytes at the peak ({peak / len(frame):.1f} per byte)")


@pytest.mark.parametrize("codec,versions", CODECS)
@settings(FUZZ, max_examples=10)
@given(data=st.data())
def test_mutated_frames_allocation_bound(codec, versions, data):
    version = data.draw(st.sampled_from(versions), label="version")
    obj = data.draw(StrategyBuilder(codec.spec, version).message(), label="message")
    bad = data.draw(mutations(codec.encode(version, obj)), label="mutated")
    peak, _ = peak_allocation(codec, version, bad)
    assert peak < allowed(len(bad))
