"""MirrorMaker 2's internal record formats (mirror/records.py).

The golden bytes are written by hand from the Java schema definitions in Apache Kafka:

  connect/mirror/src/main/java/org/apache/kafka/connect/mirror/OffsetSync.java
      KEY_SCHEMA    = topic STRING, partition INT32
      VALUE_SCHEMA  = upstreamOffset INT64, offset INT64          (no version header)
  connect/mirror-client/src/main/java/org/apache/kafka/connect/mirror/Checkpoint.java
      KEY_SCHEMA    = group STRING, topic STRING, partition INT32
      HEADER_SCHEMA = version INT16; VALUE_SCHEMA_V0 = upstreamOffset INT64, offset INT64,
                      metadata STRING; value = header then body (serializeValue)
  connect/mirror-client/src/main/java/org/apache/kafka/connect/mirror/Heartbeat.java
      KEY_SCHEMA    = sourceClusterAlias STRING, targetClusterAlias STRING
      HEADER_SCHEMA = version INT16; VALUE_SCHEMA_V0 = timestamp INT64

and the protocol types of clients/src/main/java/org/apache/kafka/common/protocol/types/Type.java:
INT16/INT32/INT64 big-endian two's complement; STRING = INT16 byte length (0..32767, negative
refused) then that many bytes of UTF-8. `Schema.write` puts fields back to back, in order.
The example values are those of Kafka's own OffsetSyncTest, CheckpointTest and HeartbeatTest.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.protocol.errors import DecodeError, EncodeError
from mirror.records import (
    VERSION, Checkpoint, Heartbeat, OffsetSync, decode_checkpoint, decode_heartbeat,
    decode_offset_sync, encode_checkpoint, encode_heartbeat, encode_offset_sync)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def s(text: str) -> bytes:
    """A Kafka STRING: int16 length of the UTF-8 bytes, then the bytes."""
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


# --------------------------------------------------------------------------- golden bytes

GOLDEN = [
    pytest.param(
        OffsetSync("topic-1", 2, 3, 4), encode_offset_sync, decode_offset_sync,
        s("topic-1") + h("00000002"),
        h("0000000000000003 0000000000000004"),
        id="OffsetSync"),
    pytest.param(
        OffsetSync("t", 0, 0, 2**63 - 1), encode_offset_sync, decode_offset_sync,
        h("0001 74 00000000"),
        h("0000000000000000 7fffffffffffffff"),
        id="OffsetSync-int64-max"),
    pytest.param(
        OffsetSync("é", -1, -1, 2**40), encode_offset_sync, decode_offset_sync,
        h("0002 c3a9 ffffffff"),  # the length counts UTF-8 bytes, not characters
        h("ffffffffffffffff 0000010000000000"),
        id="OffsetSync-utf8-negative"),
    pytest.param(
        Checkpoint("group-1", "topic-2", 3, 4, 5, "metadata-6"), encode_checkpoint,
        decode_checkpoint,
        s("group-1") + s("topic-2") + h("00000003"),
        h("0000") + h("0000000000000004 0000000000000005") + s("metadata-6"),
        id="Checkpoint"),
    pytest.param(
        Checkpoint("", "orders", 11, 1000, 990), encode_checkpoint, decode_checkpoint,
        h("0000") + h("0006") + b"orders" + h("0000000b"),
        h("0000 00000000000003e8 00000000000003de 0000"),  # empty metadata is a 0-length STRING
        id="Checkpoint-empty-strings"),
    pytest.param(
        Heartbeat("source-1", "target-2", 1234567890), encode_heartbeat, decode_heartbeat,
        s("source-1") + s("target-2"),
        h("0000 00000000499602d2"),
        id="Heartbeat"),
    pytest.param(
        Heartbeat("eu-west", "us-east", 1_700_000_000_000), encode_heartbeat, decode_heartbeat,
        h("0007") + b"eu-west" + h("0007") + b"us-east",
        h("0000 0000018bcfe56800"),
        id="Heartbeat-epoch-millis"),
]


@pytest.mark.parametrize("obj, encode, decode, key, value", GOLDEN)
def test_golden_bytes(obj, encode, decode, key, value):
    assert encode(obj) == (key, value)
    assert decode(key, value) == obj


@pytest.mark.parametrize("obj, encode, decode, key, value", GOLDEN)
def test_decoders_accept_any_bytes_like(obj, encode, decode, key, value):
    assert decode(bytearray(key), memoryview(value)) == obj


def test_value_version_is_zero():
    assert VERSION == 0
    assert encode_checkpoint(Checkpoint("g", "t", 0, 0, 0))[1][:2] == h("0000")
    assert encode_heartbeat(Heartbeat("a", "b", 0))[1][:2] == h("0000")


def test_longest_string_round_trips():
    topic = "x" * 32767
    key, value = encode_offset_sync(OffsetSync(topic, 0, 1, 2))
    assert key[:2] == h("7fff") and len(key) == 2 + 32767 + 4
    assert decode_offset_sync(key, value).topic == topic


# --------------------------------------------------------------------------- round trips

strings = st.text(max_size=40)
int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
RECORDS = st.one_of(
    st.builds(OffsetSync, strings, int32, int64, int64),
    st.builds(Checkpoint, strings, strings, int32, int64, int64, strings),
    st.builds(Heartbeat, strings, strings, int64),
).filter(lambda r: not any(isinstance(v, str) and _has_surrogate(v) for v in _fields(r)))
CODECS = {OffsetSync: (encode_offset_sync, decode_offset_sync),
          Checkpoint: (encode_checkpoint, decode_checkpoint),
          Heartbeat: (encode_heartbeat, decode_heartbeat)}


def _fields(record) -> list:
    return [getattr(record, name) for name in record.__slots__]


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


@settings(max_examples=300, deadline=None)
@given(RECORDS)
def test_round_trip(record):
    encode, decode = CODECS[type(record)]
    key, value = encode(record)
    assert decode(key, value) == record
    assert encode(decode(key, value)) == (key, value)


# --------------------------------------------------------------------------- bad input

GOOD_SYNC = encode_offset_sync(OffsetSync("topic-1", 2, 3, 4))
GOOD_CHECKPOINT = encode_checkpoint(Checkpoint("group-1", "topic-2", 3, 4, 5, "metadata-6"))
GOOD_HEARTBEAT = encode_heartbeat(Heartbeat("source-1", "target-2", 1234567890))

BAD = [
    pytest.param(decode_offset_sync, b"", GOOD_SYNC[1],
                 "OffsetSync key: too short: the length of string field 'topic' needs 2 bytes",
                 id="sync-key-empty"),
    pytest.param(decode_offset_sync, s("topic-1") + h("0000"), GOOD_SYNC[1],
                 "OffsetSync key: too short: field 'partition' (int32) needs 4 bytes at byte 9, "
                 "2 left", id="sync-key-short-partition"),
    pytest.param(decode_offset_sync, h("ffff") + b"x" * 10, GOOD_SYNC[1],
                 "OffsetSync key: bad string length -1 for field 'topic' at byte 0 (negative)",
                 id="sync-key-negative-length"),
    pytest.param(decode_offset_sync, h("7fff") + b"abc", GOOD_SYNC[1],
                 "OffsetSync key: bad string length 32767 for field 'topic' at byte 0: only 3 "
                 "bytes left", id="sync-key-length-past-end"),
    pytest.param(decode_offset_sync, h("0002 c328 00000000"), GOOD_SYNC[1],
                 "OffsetSync key: string field 'topic' is not valid UTF-8", id="sync-key-utf8"),
    pytest.param(decode_offset_sync, GOOD_SYNC[0] + b"\0", GOOD_SYNC[1],
                 "OffsetSync key: 1 unexpected trailing bytes after byte 13",
                 id="sync-key-trailing"),
    pytest.param(decode_offset_sync, GOOD_SYNC[0], GOOD_SYNC[1][:15],
                 "OffsetSync value: too short: field 'offset' (int64) needs 8 bytes at byte 8, "
                 "7 left", id="sync-value-short"),
    pytest.param(decode_offset_sync, GOOD_SYNC[0], GOOD_SYNC[1] + b"\0\0",
                 "OffsetSync value: 2 unexpected trailing bytes after byte 16",
                 id="sync-value-trailing"),
    pytest.param(decode_offset_sync, None, GOOD_SYNC[1], "OffsetSync key: missing (null)",
                 id="sync-key-null"),
    pytest.param(decode_offset_sync, GOOD_SYNC[0], None, "OffsetSync value: missing (null)",
                 id="sync-value-tombstone"),
    pytest.param(decode_offset_sync, "topic", GOOD_SYNC[1],
                 "OffsetSync key: expected bytes, got str", id="sync-key-str"),
    pytest.param(decode_checkpoint, GOOD_CHECKPOINT[0], b"\0",
                 "Checkpoint value: too short: field 'version' (int16) needs 2 bytes at byte 0, "
                 "1 left", id="checkpoint-value-short-version"),
    pytest.param(decode_checkpoint, GOOD_CHECKPOINT[0], h("0001") + GOOD_CHECKPOINT[1][2:],
                 "Checkpoint value: unknown version 1 (known: [0])",
                 id="checkpoint-value-version-1"),
    pytest.param(decode_checkpoint, GOOD_CHECKPOINT[0], h("8000") + GOOD_CHECKPOINT[1][2:],
                 "Checkpoint value: unknown version -32768", id="checkpoint-value-version-neg"),
    pytest.param(decode_checkpoint, GOOD_CHECKPOINT[0], GOOD_CHECKPOINT[1][:-1],
                 "Checkpoint value: bad string length 10 for field 'metadata' at byte 18: only "
                 "9 bytes left", id="checkpoint-value-metadata-cut"),
    pytest.param(decode_checkpoint, GOOD_CHECKPOINT[0][:-4], GOOD_CHECKPOINT[1],
                 "Checkpoint key: too short: field 'partition' (int32) needs 4 bytes at byte 18",
                 id="checkpoint-key-no-partition"),
    pytest.param(decode_checkpoint, s("group-1") + h("fffe"), GOOD_CHECKPOINT[1],
                 "Checkpoint key: bad string length -2 for field 'topic' at byte 9 (negative)",
                 id="checkpoint-key-negative-topic"),
    pytest.param(decode_heartbeat, GOOD_HEARTBEAT[0], h("0000 00000000"),
                 "Heartbeat value: too short: field 'timestamp' (int64) needs 8 bytes at byte 2,"
                 " 4 left", id="heartbeat-value-short"),
    pytest.param(decode_heartbeat, GOOD_HEARTBEAT[0], h("0002") + GOOD_HEARTBEAT[1][2:],
                 "Heartbeat value: unknown version 2", id="heartbeat-value-version"),
    pytest.param(decode_heartbeat, GOOD_HEARTBEAT[0], GOOD_HEARTBEAT[1] + b"\0",
                 "Heartbeat value: 1 unexpected trailing bytes after byte 10",
                 id="heartbeat-value-trailing"),
    pytest.param(decode_heartbeat, s("source-1"), GOOD_HEARTBEAT[1],
                 "Heartbeat key: too short: the length of string field 'targetClusterAlias' "
                 "needs 2 bytes at byte 10, 0 left", id="heartbeat-key-no-target"),
]


@pytest.mark.parametrize("decode, key, value, message", BAD)
def test_bad_input_names_the_problem(decode, key, value, message):
    with pytest.raises(DecodeError) as info:
        decode(key, value)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


UNWRITABLE = [
    pytest.param(encode_offset_sync, OffsetSync("x" * 32768, 0, 0, 0),
                 "OffsetSync key: field 'topic' is 32768 bytes of UTF-8, more than the 32767",
                 id="string-too-long"),
    pytest.param(encode_offset_sync, OffsetSync("é" * 16384, 0, 0, 0),
                 "field 'topic' is 32768 bytes of UTF-8", id="string-too-long-in-bytes"),
    pytest.param(encode_offset_sync, OffsetSync("t", 2**31, 0, 0),
                 "OffsetSync key: field 'partition' = 2147483648 does not fit an int32",
                 id="partition-int32"),
    pytest.param(encode_offset_sync, OffsetSync("t", 0, 2**63, 0),
                 "OffsetSync value: field 'upstreamOffset' = 9223372036854775808 does not fit "
                 "an int64", id="offset-int64"),
    pytest.param(encode_offset_sync, OffsetSync("t", True, 0, 0),
                 "field 'partition' must be an int, got bool", id="bool"),
    pytest.param(encode_checkpoint, Checkpoint("g", "t", 0, 0, 0, None),
                 "Checkpoint value: field 'metadata' must be a str, got NoneType",
                 id="metadata-none"),
    pytest.param(encode_heartbeat, Heartbeat("a\ud800", "b", 0),
                 "Heartbeat key: field 'sourceClusterAlias' is not encodable as UTF-8",
                 id="lone-surrogate"),
    pytest.param(encode_heartbeat, Heartbeat("a", "b", 1.5),
                 "Heartbeat value: field 'timestamp' must be an int, got float", id="float"),
]


@pytest.mark.parametrize("encode, obj, message", UNWRITABLE)
def test_unwritable_objects_are_refused(encode, obj, message):
    with pytest.raises(EncodeError) as info:
        encode(obj)
    assert message in str(info.value)


# --------------------------------------------------------------------------- fuzz

DECODERS = [decode_offset_sync, decode_checkpoint, decode_heartbeat]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from(DECODERS), st.binary(max_size=64), st.binary(max_size=64))
def test_random_bytes_decode_or_raise_value_error(decode, key, value):
    try:
        decoded = decode(key, value)
    except ValueError:
        return
    # Whatever decodes is canonical: it encodes back to exactly the same bytes.
    encode = CODECS[type(decoded)][0]
    assert encode(decoded) == (key, value)


@FUZZ
@given(st.data(), st.sampled_from([
    (decode_offset_sync, GOOD_SYNC), (decode_checkpoint, GOOD_CHECKPOINT),
    (decode_heartbeat, GOOD_HEARTBEAT)]))
def test_mutated_records_decode_or_raise_value_error(data, case):
    """Random bytes rarely get past the first length; mutating a valid record reaches every
    field."""
    decode, (key, value) = case
    which = data.draw(st.sampled_from(["key", "value"]))
    buf = bytearray(key if which == "key" else value)
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        if action == "flip" and buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del buf[data.draw(st.integers(0, len(buf))):]
        else:
            buf += data.draw(st.binary(min_size=1, max_size=4))
    key, value = (bytes(buf), value) if which == "key" else (key, bytes(buf))
    try:
        decoded = decode(key, value)
    except ValueError:
        return
    assert CODECS[type(decoded)][0](decoded) == (key, value)


# --------------------------------------------------------------------------- Seaway's extent header

def test_an_offset_syncs_extent_rides_in_a_header_mm2_never_reads():
    from mirror.records import EXTENT_HEADER, offset_sync_headers
    sync = OffsetSync("orders", 3, 1000, 70, extent=512)
    key, value = encode_offset_sync(sync)
    assert value == encode_offset_sync(OffsetSync("orders", 3, 1000, 70))[1]   # MM2's bytes unchanged
    headers = offset_sync_headers(sync)
    assert headers == [(EXTENT_HEADER, b"512")]
    assert decode_offset_sync(key, value, headers) == sync
    assert decode_offset_sync(key, value) == OffsetSync("orders", 3, 1000, 70)     # MM2's own syncs
    assert offset_sync_headers(OffsetSync("orders", 3, 1000, 70)) == []
    assert decode_offset_sync(key, value, [("other", b"x"), (EXTENT_HEADER, bytearray(b"7"))]).extent == 7


@pytest.mark.parametrize("raw", [b"", b"-1", b"1e3", b" 5", b"99999999999999999999", b"9223372036854775808", None])
def test_a_bad_extent_header_is_refused(raw):
    from mirror.records import EXTENT_HEADER
    key, value = encode_offset_sync(OffsetSync("t", 0, 1, 2))
    with pytest.raises(DecodeError, match=f"OffsetSync header {EXTENT_HEADER}: .* is not an extent"):
        decode_offset_sync(key, value, [(EXTENT_HEADER, raw)])
