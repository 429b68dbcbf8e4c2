"""Record batches (magic v2) and the varints inside them, against the Kafka spec.

Golden bytes here are written independently of core/protocol: varints from the protobuf
encoding guide (LEB128, zig-zag), batches assembled field by field with struct.pack following
https://kafka.apache.org/documentation/#recordbatch, a CRC-32C implemented below from the
Castagnoli polynomial, and four batches from Sarama's test suite (IBM/sarama record_test.go)
as bytes another Kafka client wrote. build_batch must reproduce the hand-made bytes exactly and
decode_batch must read both; scan_batches must answer each kind of damage with the error code a
Kafka broker answers with; and no hostile batch may make decode_batch raise anything but
DecodeError.
"""
from __future__ import annotations

import random
import struct
import zlib

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings, strategies as st

from core.protocol.compression import Compression, decompress
from core.protocol.errors import DecodeError, ErrorCode
from core.protocol.records import (
    ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, HEADER_SIZE, BatchInfo, ControlRecord,
    InvalidBatch, Record, assign_offsets, build_batch, decode_batch, iter_batch_headers, iter_records,
    read_batch_header, scan_batches, set_log_append_time)
from core.protocol.varint import (
    read_uvarint, read_uvarlong, read_varint, read_varlong, uvarint_bytes, varint_bytes, write_uvarint,
    write_varint)

FAST = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------- references
# Written from the specs, sharing no code with core/protocol.


def ref_crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def ref_uvarint(n: int) -> bytes:
    """LEB128: seven bits a byte, least significant first, high bit set on all but the last."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ref_varint(n: int) -> bytes:
    """Zig-zag: 0, -1, 1, -2, 2 ... map to 0, 1, 2, 3, 4 ..."""
    return ref_uvarint(2 * n if n >= 0 else -2 * n - 1)


def _nullable(b: bytes | None) -> bytes:
    return ref_varint(-1) if b is None else ref_varint(len(b)) + b


def hand_record(offset_delta: int, timestamp_delta: int, key, value, headers) -> bytes:
    """One record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    key, value, header count, headers (key length + key, value length + value)."""
    body = struct.pack(">b", 0)
    body += ref_varint(timestamp_delta)
    body += ref_varint(offset_delta)
    body += _nullable(key)
    body += _nullable(value)
    body += ref_varint(len(headers))
    for hkey, hvalue in headers:
        hkey = hkey.encode() if isinstance(hkey, str) else hkey
        body += ref_varint(len(hkey)) + hkey
        body += _nullable(hvalue)
    return ref_varint(len(body)) + body


def hand_batch(records: bytes, *, count: int, last_offset_delta: int, base_timestamp: int,
               max_timestamp: int, base_offset: int = 0, partition_leader_epoch: int = -1,
               magic: int = 2, attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1) -> bytes:
    """A v2 batch, field by field; the CRC covers attributes through the end."""
    covered = (struct.pack(">h", attributes)
               + struct.pack(">i", last_offset_delta)
               + struct.pack(">q", base_timestamp)
               + struct.pack(">q", max_timestamp)
               + struct.pack(">q", producer_id)
               + struct.pack(">h", producer_epoch)
               + struct.pack(">i", base_sequence)
               + struct.pack(">i", count)
               + records)
    crc = ref_crc32c(covered)
    batch_length = 4 + 1 + 4 + len(covered)  # partitionLeaderEpoch, magic, crc, the rest
    return (struct.pack(">q", base_offset)
            + struct.pack(">i", batch_length)
            + struct.pack(">i", partition_leader_epoch)
            + struct.pack(">b", magic)
            + struct.pack(">I", crc)
            + covered)


def recrc(buf: bytearray, pos: int = 0) -> bytearray:
    """Recompute the CRC of the batch at `pos` after patching a covered field."""
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 17, ref_crc32c(bytes(buf[pos + 21:pos + 12 + length])))
    return buf


# --------------------------------------------------------------------------- CRC-32C


def test_crc32c_package_is_castagnoli_not_ieee():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert zlib.crc32(b"123456789") == 0xCBF43926  # CRC-32 (IEEE), which a batch must not use
    assert ref_crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    # iSCSI (RFC 3720, B.4) vectors
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    rng = random.Random(7)
    for n in (1, 3, 61, 1000):
        data = rng.randbytes(n)
        assert crc32c(data) == ref_crc32c(data)
        assert crc32c(memoryview(data)) == ref_crc32c(data)


# --------------------------------------------------------------------------- varints

UVARINTS = [  # protobuf encoding guide and the Kafka protocol guide
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (150, "9601"), (300, "ac02"),
    (16383, "ff7f"), (16384, "808001"), (2**21 - 1, "ffff7f"), (2**28 - 1, "ffffff7f"),
    (2**31 - 1, "ffffffff07"), (2**32 - 1, "ffffffff0f"),
]

VARINTS = [  # zig-zag
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (2, "04"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (-65, "8101"), (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"),
    (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
]

VARLONGS = VARINTS + [
    (2**31, "8080808010"), (-(2**31) - 1, "8180808010"),
    (2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize("value, hexed", UVARINTS)
def test_uvarint_golden(value, hexed):
    encoded = bytes.fromhex(hexed)
    assert ref_uvarint(value) == encoded
    assert uvarint_bytes(value) == encoded
    out = bytearray(b"\xaa")
    write_uvarint(out, value)
    assert out == b"\xaa" + encoded
    assert read_uvarint(b"\x99" + encoded + b"\x01", 1) == (value, 1 + len(encoded))
    assert read_uvarlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value, hexed", VARINTS)
def test_varint_golden(value, hexed):
    encoded = bytes.fromhex(hexed)
    assert ref_varint(value) == encoded
    assert varint_bytes(value) == encoded
    out = bytearray(b"\xaa")
    write_varint(out, value)
    assert out == b"\xaa" + encoded
    assert read_varint(b"\x99" + encoded + b"\x01", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize("value, hexed", VARLONGS)
def test_varlong_golden(value, hexed):
    encoded = bytes.fromhex(hexed)
    assert ref_varint(value) == encoded
    assert varint_bytes(value) == encoded
    out = bytearray()
    write_varint(out, value)
    assert out == encoded
    assert read_varlong(memoryview(b"\x99" + encoded), 1) == (value, 1 + len(encoded))


def test_uvarint_five_byte_limit():
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)
    for bad in (b"\x80\x80\x80\x80\x80\x00", b"\xff\xff\xff\xff\xff\x01", b"\xff" * 100):
        with pytest.raises(DecodeError):
            read_uvarint(bad, 0)
        with pytest.raises(DecodeError):
            read_varint(bad, 0)


def test_varlong_ten_byte_limit():
    assert read_varlong(b"\xff" * 9 + b"\x01", 0) == (-(2**63), 10)
    for bad in (b"\x80" * 10 + b"\x00", b"\xff" * 10 + b"\x01", b"\xff" * 100):
        with pytest.raises(DecodeError):
            read_uvarlong(bad, 0)
        with pytest.raises(DecodeError):
            read_varlong(bad, 0)


def test_varint_cannot_hold_an_int64():
    # an int64 that needs more than five bytes is refused by the int32 reader
    with pytest.raises(DecodeError):
        read_varint(bytes.fromhex("ffffffffffffffffff01"), 0)


@pytest.mark.parametrize("reader", [read_uvarint, read_varint, read_uvarlong, read_varlong])
@pytest.mark.parametrize("buf, pos", [(b"", 0), (b"\x80", 0), (b"\xff\xff", 0), (b"\x01", 1), (b"\x01", 5),
                                      (b"\x80\x80\x80\x80", 0), (b"\x05\x80\x80", 1)])
def test_truncated_varint(reader, buf, pos):
    with pytest.raises(DecodeError):
        reader(buf, pos)


def test_unsigned_varint_rejects_negative():
    with pytest.raises(ValueError):
        uvarint_bytes(-1)


INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@FAST
@given(INT64)
def test_varlong_round_trip(value):
    encoded = varint_bytes(value)
    assert encoded == ref_varint(value)
    out = bytearray()
    write_varint(out, value)
    assert out == encoded
    assert 1 <= len(encoded) <= 10
    assert read_varlong(encoded + b"\x7f", 0) == (value, len(encoded))
    with pytest.raises(DecodeError):
        read_varlong(encoded[:-1], 0)


@FAST
@given(INT32)
def test_varint_round_trip(value):
    encoded = varint_bytes(value)
    assert len(encoded) <= 5
    assert read_varint(encoded, 0) == (value, len(encoded))


@FAST
@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(value):
    encoded = uvarint_bytes(value)
    assert encoded == ref_uvarint(value)
    assert read_uvarint(encoded, 0) == (value, len(encoded))


# --------------------------------------------------------------------------- golden batches

T0 = 1_700_000_000_000

GOLDEN_RECORDS = [
    (b"key0", b"value0", [("h1", b"v1")], T0),
    (None, b"", [], T0 + 250),
    (b"", None, [("a", None), ("b", b"\x00\xff")], T0 + 100),
    (bytes(200), bytes(range(256)), [("\u00fc-utf8", b"x" * 130)], T0 + 70_000),  # multi-byte lengths
]


def golden_records_bytes(records, base_ts):
    return b"".join(hand_record(i, ts - base_ts, k, v, h) for i, (k, v, h, ts) in enumerate(records))


def check_decoded(decoded, records, *, base_offset=0, ts_type=0, append_time=None):
    assert len(decoded) == len(records)
    for i, (rec, (key, value, headers, ts)) in enumerate(zip(decoded, records)):
        assert isinstance(rec, Record)
        assert rec.offset == base_offset + i
        assert rec.key == key
        assert rec.value == value
        assert rec.headers == [(hk, hv) for hk, hv in headers]
        assert rec.timestamp == (append_time if ts_type else ts)
        assert rec.timestamp_type == ts_type


def test_hand_builder_matches_sarama():
    # the reference builder above, checked against bytes a Go client wrote (Sarama's
    # "uncompressed record" case): timestamp delta 5, header key 08090a, value 0b0c
    record = hand_record(0, 5, b"\x01\x02\x03\x04", b"\x05\x06\x07", [(b"\x08\x09\x0a", b"\x0b\x0c")])
    batch = hand_batch(record, count=1, last_offset_delta=0, base_timestamp=1479847795000, max_timestamp=0,
                       partition_leader_epoch=0, producer_id=0, producer_epoch=0, base_sequence=0)
    assert batch == SARAMA["uncompressed"]


def test_build_batch_matches_hand_made_bytes():
    records_bytes = golden_records_bytes(GOLDEN_RECORDS, T0)
    expected = hand_batch(records_bytes, count=4, last_offset_delta=3, base_timestamp=T0,
                          max_timestamp=T0 + 70_000)
    built = build_batch(GOLDEN_RECORDS)
    assert built.hex() == expected.hex()
    # spot-check a few fields at their spec offsets
    assert struct.unpack_from(">qiib", built) == (0, len(built) - 12, -1, 2)
    assert struct.unpack_from(">I", built, 17)[0] == ref_crc32c(built[21:])
    assert struct.unpack_from(">i", built, 57)[0] == 4


def test_build_batch_producer_fields_match_hand_made_bytes():
    records = GOLDEN_RECORDS[:2]
    expected = hand_batch(golden_records_bytes(records, T0), count=2, last_offset_delta=1,
                          base_timestamp=T0, max_timestamp=T0 + 250, base_offset=100,
                          partition_leader_epoch=7, attributes=ATTR_TRANSACTIONAL, producer_id=1234,
                          producer_epoch=5, base_sequence=42)
    built = build_batch(records, base_offset=100, producer_id=1234, producer_epoch=5, base_sequence=42,
                        partition_leader_epoch=7, transactional=True)
    assert built.hex() == expected.hex()
    (info,) = scan_batches(built, from_client=True)
    assert (info.base_offset, info.partition_leader_epoch, info.producer_id, info.producer_epoch,
            info.base_sequence) == (100, 7, 1234, 5, 42)
    assert info.is_transactional and not info.is_control
    assert (info.last_offset, info.next_offset) == (101, 102)


@pytest.mark.parametrize("codec", [c for c in Compression if c], ids=lambda c: c.name)
def test_build_batch_compressed_layout(codec):
    built = build_batch(GOLDEN_RECORDS, compression=codec)
    payload = built[HEADER_SIZE:]
    assert decompress(codec, payload) == golden_records_bytes(GOLDEN_RECORDS, T0)
    expected = hand_batch(payload, count=4, last_offset_delta=3, base_timestamp=T0, max_timestamp=T0 + 70_000,
                          attributes=int(codec))
    assert built == expected
    (info,) = scan_batches(built, from_client=True)
    assert info.compression == codec
    check_decoded(decode_batch(built, info), GOLDEN_RECORDS)


def test_decode_golden_batch():
    buf = hand_batch(golden_records_bytes(GOLDEN_RECORDS, T0), count=4, last_offset_delta=3, base_timestamp=T0,
                     max_timestamp=T0 + 70_000, base_offset=5000)
    (info,) = scan_batches(buf, from_client=True)
    assert info.position == 0 and info.size == len(buf)
    assert (info.base_offset, info.records_count, info.last_offset_delta) == (5000, 4, 3)
    assert (info.base_timestamp, info.max_timestamp) == (T0, T0 + 70_000)
    assert info.crc == ref_crc32c(buf[21:])
    decoded = decode_batch(buf, info)
    check_decoded(decoded, GOLDEN_RECORDS, base_offset=5000)
    assert decoded[3].headers == [("\u00fc-utf8", b"x" * 130)]


def test_decode_negative_timestamp_delta_and_offset_gaps():
    # Java producers take baseTimestamp from the first record, so later deltas may be negative;
    # compaction leaves gaps in offset deltas while keeping lastOffsetDelta.
    records = (hand_record(0, 0, b"a", b"1", [])
               + hand_record(3, -100, b"b", b"2", [])
               + hand_record(7, 5, b"c", b"3", []))
    buf = hand_batch(records, count=3, last_offset_delta=7, base_timestamp=1000, max_timestamp=1005,
                     base_offset=40)
    (info,) = scan_batches(buf)  # a broker-side (replicated, compacted) batch is fine
    decoded = decode_batch(buf, info)
    assert [(r.offset, r.timestamp, r.key) for r in decoded] == [(40, 1000, b"a"), (43, 900, b"b"), (47, 1005, b"c")]
    assert info.next_offset == 48
    with pytest.raises(InvalidBatch) as exc:  # but a producer may not send gaps
        scan_batches(buf, from_client=True)
    assert exc.value.code == ErrorCode.INVALID_RECORD


def test_assign_offsets_follows_last_offset_delta():
    # a batch whose offset range is wider than its count (compacted) advances by the range
    gappy = hand_batch(hand_record(0, 0, b"a", b"", []) + hand_record(5, 0, b"b", b"", []), count=2,
                       last_offset_delta=5, base_timestamp=0, max_timestamp=0)
    buf = bytearray(gappy + build_batch([(b"c", b"", [], 0)]))
    infos = scan_batches(buf)
    assert assign_offsets(buf, infos, 10) == 17
    assert [r.offset for r in iter_records(buf)] == [10, 15, 16]


def test_control_batch():
    commit_key = struct.pack(">hh", 0, 1)
    abort_key = struct.pack(">hh", 0, 0)
    marker_value = struct.pack(">hi", 0, 3)  # version, coordinator epoch
    buf = build_batch([(commit_key, marker_value, [], 10), (abort_key, marker_value, [], 10)],
                      base_offset=9, producer_id=77, producer_epoch=1, transactional=True, control=True)
    (info,) = scan_batches(buf)
    assert info.is_control and info.is_transactional
    assert struct.unpack_from(">h", buf, 21)[0] == ATTR_CONTROL | ATTR_TRANSACTIONAL
    decoded = decode_batch(buf, info)
    assert [(type(r), r.offset, r.type, r.producer_id) for r in decoded] == [
        (ControlRecord, 9, 1, 77), (ControlRecord, 10, 0, 77)]
    assert list(iter_records(buf)) == []
    assert len(list(iter_records(buf, skip_control=False))) == 2


def test_build_batch_needs_records():
    with pytest.raises(ValueError):
        build_batch([])


# Batches from IBM/sarama record_test.go (recordBatchTestCases), transcribed byte for byte:
# another client's bytes, CRCs included. One record: key 01020304, value 050607, header
# 08090a=0b0c, timestamp delta 5 ms; the gzip payload is Go's, the snappy payload is raw
# (unframed, as librdkafka and Sarama write it), the lz4 payload an independent-block frame.
def _sarama(length: int, crc: list[int], attributes: int, payload: list[int]) -> bytes:
    return bytes([
        0, 0, 0, 0, 0, 0, 0, 0,  # First Offset
        0, 0, 0, length,  # Length
        0, 0, 0, 0,  # Partition Leader Epoch
        2,  # Version
        *crc,  # CRC
        0, attributes,  # Attributes
        0, 0, 0, 0,  # Last Offset Delta
        0, 0, 1, 88, 141, 205, 89, 56,  # First Timestamp
        0, 0, 0, 0, 0, 0, 0, 0,  # Max Timestamp
        0, 0, 0, 0, 0, 0, 0, 0,  # Producer ID
        0, 0,  # Producer Epoch
        0, 0, 0, 0,  # First Sequence
        0, 0, 0, 1,  # Number of Records
        *payload,
    ])


SARAMA = {
    "uncompressed": _sarama(70, [84, 121, 97, 253], 0, [
        40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12]),
    "gzip": _sarama(95, [231, 74, 206, 165], 1, [
        31, 139, 8, 0, 0, 9, 110, 136, 0, 255, 0, 21, 0, 234, 255, 40, 0, 10, 0, 8, 1, 2,
        3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12, 3, 0, 173, 201, 88, 103, 21, 0, 0, 0]),
    "snappy-raw": _sarama(72, [21, 0, 159, 97], 2, [
        21, 80, 40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12]),
    "lz4": _sarama(89, [169, 74, 119, 197], 3, [
        4, 34, 77, 24, 100, 112, 185, 21, 0, 0, 128, 40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2,
        6, 8, 9, 10, 4, 11, 12, 0, 0, 0, 0, 12, 59, 239, 146]),
}
SARAMA_EMPTY = bytes([  # "empty record": no records, all timestamps 0
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 49, 0, 0, 0, 0, 2, 89, 95, 183, 221, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("name", list(SARAMA))
def test_decode_sarama_batches(name):
    buf = SARAMA[name]
    (info,) = scan_batches(buf, from_client=True)  # CRC-32C verified
    assert info.compression == ["uncompressed", "gzip", "snappy-raw", "lz4"].index(name)
    (rec,) = decode_batch(buf, info)
    assert rec == Record(offset=0, timestamp=1479847795000 + 5, key=b"\x01\x02\x03\x04", value=b"\x05\x06\x07",
                         headers=[("\x08\t\n", b"\x0b\x0c")], timestamp_type=0)


def test_sarama_empty_batch():
    (info,) = scan_batches(SARAMA_EMPTY)
    assert info.records_count == 0 and decode_batch(SARAMA_EMPTY, info) == []
    with pytest.raises(InvalidBatch) as exc:
        scan_batches(SARAMA_EMPTY, from_client=True)
    assert exc.value.code == ErrorCode.INVALID_RECORD


# --------------------------------------------------------------------------- round trips

HEADER_KEYS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
RECORD = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.lists(st.tuples(HEADER_KEYS, st.none() | st.binary(max_size=30)), max_size=4),
    st.integers(-1, 2**43),
)
RECORDS = st.lists(RECORD, min_size=1, max_size=25)
CODECS = st.sampled_from(list(Compression))


def _check_header(info: BatchInfo, records, codec):
    timestamps = [r[3] for r in records]
    assert info.magic == 2
    assert info.records_count == len(records)
    assert info.last_offset_delta == len(records) - 1
    assert info.base_timestamp == min(timestamps)
    assert info.max_timestamp == max(timestamps)
    assert info.compression == codec
    assert not info.is_control and not info.is_transactional


@settings(FAST, max_examples=150)
@given(records=RECORDS, codec=CODECS, first_offset=st.integers(0, 2**62),
       now=st.integers(0, 2**43))
def test_round_trip(records, codec, first_offset, now):
    buf = bytearray(build_batch(records, compression=codec))
    (info,) = scan_batches(buf, from_client=True)
    _check_header(info, records, codec)
    check_decoded(decode_batch(buf, info), records)

    # the broker assigns offsets: baseOffset is outside the CRC, nothing else moves
    before = bytes(buf)
    assert assign_offsets(buf, [info], first_offset) == first_offset + len(records)
    assert buf[8:] == before[8:] and struct.unpack_from(">q", buf)[0] == first_offset
    (info,) = scan_batches(buf, from_client=True)
    check_decoded(decode_batch(buf, info), records, base_offset=first_offset)

    # LogAppendTime: the attributes flag and maxTimestamp change, so the CRC is redone
    before = bytes(buf)
    set_log_append_time(buf, [info], now)
    (stamped,) = scan_batches(buf, from_client=True)
    assert stamped.attributes == info.attributes | ATTR_LOG_APPEND_TIME
    assert stamped.compression == codec
    assert stamped.max_timestamp == now and stamped.base_timestamp == info.base_timestamp
    assert stamped.crc == ref_crc32c(bytes(buf[21:]))
    changed = [i for i in range(len(buf)) if buf[i] != before[i]]
    assert all(17 <= i < 25 or 35 <= i < 43 for i in changed)  # crc, attributes, maxTimestamp
    check_decoded(decode_batch(buf, stamped), records, base_offset=first_offset, ts_type=1, append_time=now)


@settings(FAST, max_examples=60)
@given(batches=st.lists(st.tuples(RECORDS, CODECS), min_size=1, max_size=4), first_offset=st.integers(0, 2**40))
def test_several_batches(batches, first_offset):
    buf = bytearray(b"".join(build_batch(records, compression=codec) for records, codec in batches))
    infos = scan_batches(buf, from_client=True)
    assert len(infos) == len(batches)
    assert sum(i.size for i in infos) == len(buf)
    assert [i.position for i in infos] == [sum(i.size for i in infos[:n]) for n in range(len(infos))]
    total = sum(len(records) for records, _ in batches)
    assert assign_offsets(buf, infos, first_offset) == first_offset + total
    infos = scan_batches(buf, from_client=True)
    offset = first_offset
    for info, (records, codec) in zip(infos, batches):
        assert info.base_offset == offset
        _check_header(info, records, codec)
        check_decoded(decode_batch(buf, info), records, base_offset=offset)
        offset += len(records)
    assert [r.offset for r in iter_records(buf)] == list(range(first_offset, first_offset + total))
    set_log_append_time(buf, infos, 123)
    assert all(i.max_timestamp == 123 for i in scan_batches(buf, from_client=True))
    assert {r.timestamp for r in iter_records(buf)} == {123}


def test_read_batch_header_at_offset():
    one = build_batch(GOLDEN_RECORDS[:1], base_offset=3)
    buf = b"\x00" * 5 + one
    info = read_batch_header(buf, 5)
    assert (info.position, info.size, info.base_offset, info.records_count) == (5, len(one), 3, 1)


# --------------------------------------------------------------------------- scan_batches errors


def _valid(n: int = 3, codec: Compression = Compression.NONE) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, b"v" * i, [], 100 + i) for i in range(n)], compression=codec))


def _code(buf, **kwargs) -> ErrorCode:
    with pytest.raises(InvalidBatch) as exc:
        scan_batches(buf, **kwargs)
    assert isinstance(exc.value, ValueError)
    return exc.value.code


def test_scan_empty():
    assert _code(b"") == ErrorCode.CORRUPT_MESSAGE
    assert _code(bytearray()) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("trailing", [1, 11, 12, HEADER_SIZE - 1])
def test_scan_trailing_bytes_shorter_than_a_header(trailing):
    assert _code(bytes(_valid()) + bytes(trailing)) == ErrorCode.CORRUPT_MESSAGE
    assert _code(bytes(_valid())[:trailing]) == ErrorCode.CORRUPT_MESSAGE


def test_scan_batch_length_past_end():
    buf = _valid()
    struct.pack_into(">i", buf, 8, len(buf) - 12 + 1)
    assert _code(buf) == ErrorCode.CORRUPT_MESSAGE
    assert _code(_valid()[:-1]) == ErrorCode.CORRUPT_MESSAGE
    assert _code(bytes(_valid()) + _valid()[:-3]) == ErrorCode.CORRUPT_MESSAGE  # second batch cut short
    huge = _valid()
    struct.pack_into(">i", huge, 8, 2**31 - 1)
    assert _code(huge) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("length", [HEADER_SIZE - 12 - 1, 0, -1, -(2**31)])
def test_scan_batch_length_shorter_than_header(length):
    buf = _valid()
    struct.pack_into(">i", buf, 8, length)
    assert _code(buf) == ErrorCode.CORRUPT_MESSAGE
    assert _code(buf, verify_crc=False) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_scan_bad_crc(codec):
    good = _valid(codec=codec)
    assert scan_batches(good, from_client=True)
    for pos in (17, 20, 21, 30, 57, HEADER_SIZE, len(good) - 1):  # crc itself, covered header, records
        bad = bytearray(good)
        bad[pos] ^= 0x04
        assert _code(bad) == ErrorCode.CORRUPT_MESSAGE
        scan_batches(bad, verify_crc=False)  # framing alone is fine
    second = bytes(good) + bytes(bad)
    assert _code(second) == ErrorCode.CORRUPT_MESSAGE


def test_crc_does_not_cover_base_offset_or_leader_epoch():
    buf = _valid()
    struct.pack_into(">q", buf, 0, 2**40)
    struct.pack_into(">i", buf, 12, 99)
    (info,) = scan_batches(buf, from_client=True)
    assert (info.base_offset, info.partition_leader_epoch) == (2**40, 99)


@pytest.mark.parametrize("magic, code", [(0, ErrorCode.INVALID_RECORD), (1, ErrorCode.INVALID_RECORD),
                                         (3, ErrorCode.CORRUPT_MESSAGE), (127, ErrorCode.CORRUPT_MESSAGE)])
def test_scan_magic(magic, code):
    buf = _valid()
    buf[16] = magic  # magic is outside the CRC
    assert _code(buf) == code
    assert _code(buf, from_client=True) == code


def test_scan_max_batch_size():
    buf = _valid()
    assert scan_batches(buf, max_batch_size=len(buf))  # the whole batch, log overhead included
    assert _code(buf, max_batch_size=len(buf) - 1) == ErrorCode.MESSAGE_TOO_LARGE
    two = bytes(_valid(1)) + bytes(buf)
    assert _code(two, max_batch_size=len(buf) - 1) == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("count, last_offset_delta", [(2, 2), (4, 2), (3, 1), (3, 3), (3, -1)])
def test_scan_client_count_disagrees_with_offsets(count, last_offset_delta):
    buf = _valid(3)
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">i", buf, 23, last_offset_delta)
    recrc(buf)
    if count != last_offset_delta + 1:
        scan_batches(buf)  # a broker reading its own log does not check this
        assert _code(buf, from_client=True) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("count, last_offset_delta", [(0, -1), (0, 0), (-1, -2)])
def test_scan_client_zero_records(count, last_offset_delta):
    buf = _valid(1)
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">i", buf, 23, last_offset_delta)
    recrc(buf)
    assert _code(buf, from_client=True) == ErrorCode.INVALID_RECORD


def test_scan_client_count_cannot_fit():
    buf = _valid(3)  # a few dozen bytes of records
    for count in (1000, 2**31 - 1):
        struct.pack_into(">i", buf, 57, count)
        struct.pack_into(">i", buf, 23, count - 1)
        recrc(buf)
        assert _code(buf, from_client=True) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec_bits", [5, 6, 7])
def test_scan_client_unknown_codec(codec_bits):
    buf = _valid(3)
    struct.pack_into(">h", buf, 21, codec_bits)
    recrc(buf)
    assert _code(buf, from_client=True) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    (info,) = scan_batches(buf)  # framing and CRC are fine
    with pytest.raises(DecodeError):
        decode_batch(buf, info)


# --------------------------------------------------------------------------- hostile batches

FUZZ = settings(deadline=None, database=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _decode_or_decode_error(buf, info, **kwargs):
    try:
        return decode_batch(buf, info, verify_crc=False, max_decompressed=1 << 20, **kwargs)
    except DecodeError:
        return None


@FUZZ
@given(records=RECORDS, codec=CODECS, data=st.data())
def test_decode_batch_fuzz(records, codec, data):
    buf = bytearray(build_batch(records, compression=codec))
    (info,) = scan_batches(buf)
    mutation = data.draw(st.sampled_from(["flip", "truncate", "header", "garbage", "uncompressed-garbage"]))
    if mutation == "flip":
        original = bytes(buf)
        for _ in range(data.draw(st.integers(1, 3))):
            buf[data.draw(st.integers(HEADER_SIZE, len(buf) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        if buf != original:  # CRC-32C detects every error of up to three bits
            with pytest.raises(DecodeError):
                decode_batch(buf, info)
    elif mutation == "truncate":
        del buf[data.draw(st.integers(0, len(buf) - 1)):]
        with pytest.raises(DecodeError):
            decode_batch(buf, info)  # the CRC catches every cut
    elif mutation == "header":
        info = info._replace(
            records_count=data.draw(st.integers(-(2**31), 2**31 - 1) | st.integers(0, 30)),
            attributes=data.draw(st.integers(-(2**15), 2**15 - 1) | st.sampled_from([ATTR_CONTROL, 0, 5, 7])),
            last_offset_delta=data.draw(st.integers(-(2**31), 2**31 - 1)))
    else:
        payload = data.draw(st.binary(max_size=300))
        buf[HEADER_SIZE:] = payload
        if mutation == "uncompressed-garbage":
            info = info._replace(attributes=data.draw(st.sampled_from([0, ATTR_CONTROL])),
                                 records_count=data.draw(st.integers(0, 40)))
        info = info._replace(size=len(buf))
    _decode_or_decode_error(buf, info)


def test_every_single_bit_flip_and_cut():
    """Exhaustive over a small batch: the record parser itself (CRC off) raises only DecodeError
    for any one-bit flip, and the CRC (on) catches every one of them."""
    records = [(b"key", b"value", [("h", b"x"), ("n", None)], 5), (None, b"", [], 7), (b"", None, [], 6)]
    good = build_batch(records)
    (info,) = scan_batches(good)
    for pos in range(HEADER_SIZE, len(good)):
        for bit in range(8):
            bad = bytearray(good)
            bad[pos] ^= 1 << bit
            _decode_or_decode_error(bad, info)
            with pytest.raises(DecodeError):
                decode_batch(bad, info)
    for cut in range(len(good)):
        with pytest.raises(DecodeError):
            decode_batch(good[:cut], info, verify_crc=False)


def test_control_record_with_short_key():
    buf = bytearray(build_batch([(b"\x00", b"", [], 1), (None, None, [], 1)], control=True))
    (info,) = scan_batches(buf)
    assert [r.type for r in decode_batch(buf, info)] == [-1, -1]


def test_decode_batch_bad_crc_and_bounds():
    buf = bytearray(build_batch(GOLDEN_RECORDS, compression=Compression.ZSTD))
    (info,) = scan_batches(buf)
    with pytest.raises(DecodeError):  # more than max_decompressed after inflating
        decode_batch(buf, info, max_decompressed=100)
    buf[-1] ^= 1
    with pytest.raises(DecodeError):
        decode_batch(buf, info)


def test_decode_refuses_counts_the_payload_cannot_hold():
    buf = bytearray(build_batch(GOLDEN_RECORDS))
    (info,) = scan_batches(buf)
    for count in (-1, len(buf), 2**31 - 1):
        with pytest.raises(DecodeError):
            decode_batch(buf, info._replace(records_count=count), verify_crc=False)


def _raw_record(body: bytes) -> bytes:
    return hand_batch(ref_varint(len(body)) + body, count=1, last_offset_delta=0, base_timestamp=0,
                      max_timestamp=0)


@pytest.mark.parametrize("body", [
    # attributes, timestampDelta, offsetDelta, key, value, header count, header key length -1
    b"\x00\x00\x00\x01\x01\x02" + ref_varint(-1) + b"\x01",
    # header key length -3, pointing back into the record
    b"\x00\x00\x00\x01\x01\x02" + ref_varint(-3) + b"\x01" + b"\x00" * 4,
    # key longer than the record
    b"\x00\x00\x00" + ref_varint(50) + b"ab\x01\x00",
    # value longer than the record
    b"\x00\x00\x00\x01" + ref_varint(50) + b"ab\x00",
    # header count larger than the bytes left
    b"\x00\x00\x00\x01\x01" + ref_varint(100),
    # a field left over after the headers
    b"\x00\x00\x00\x01\x01\x00\x00",
], ids=["hkey-len-minus-1", "hkey-len-minus-3", "key-past-record", "value-past-record", "header-count", "leftover"])
def test_decode_rejects_malformed_records(body):
    # Kafka's DefaultRecord.readFrom refuses a negative header key size; lengths past the
    # record and bytes left over are a corrupt record too
    buf = _raw_record(body)
    (info,) = scan_batches(buf, from_client=True)
    with pytest.raises(DecodeError):
        decode_batch(buf, info)


def test_decode_rejects_negative_record_length():
    buf = hand_batch(ref_varint(-1) + b"\x00" * 10, count=1, last_offset_delta=0, base_timestamp=0,
                     max_timestamp=0)
    (info,) = scan_batches(buf, from_client=True)
    with pytest.raises(DecodeError):
        decode_batch(buf, info)


def test_trailing_bytes_after_records_count():
    # more records than the count: the surplus is never decoded (the count governs)
    extra = hand_record(1, 0, b"surplus", b"", [])
    buf = hand_batch(hand_record(0, 0, b"k", b"v", []) + extra, count=1, last_offset_delta=0,
                     base_timestamp=1, max_timestamp=1)
    (info,) = scan_batches(buf, from_client=True)
    assert [r.key for r in decode_batch(buf, info)] == [b"k"]


# --------------------------------------------------------------------------- iter_batch_headers


def test_iter_batch_headers_stops_quietly_on_partial_batch():
    a = build_batch([(b"a", b"1", [], 1)], base_offset=0)
    b = build_batch([(b"b", b"2", [], 2), (b"c", b"3", [], 3)], base_offset=1, compression=Compression.LZ4)
    c = build_batch([(b"d", b"4", [], 4)], base_offset=3)
    whole = a + b + c
    assert [i.base_offset for i in iter_batch_headers(whole)] == [0, 1, 3]
    assert [r.key for r in iter_records(whole)] == [b"a", b"b", b"c", b"d"]
    for cut in range(len(a) + len(b), len(whole)):  # a fetch response cut inside the last batch
        assert [i.base_offset for i in iter_batch_headers(whole[:cut])] == [0, 1]
        assert [r.offset for r in iter_records(whole[:cut])] == [0, 1, 2]
    assert list(iter_batch_headers(b"")) == []
    assert list(iter_batch_headers(a[:HEADER_SIZE - 1])) == []
    assert [i.position for i in iter_batch_headers(whole, len(a))] == [len(a), len(a) + len(b)]


def test_iter_batch_headers_stops_on_nonsense_length():
    a = build_batch([(b"a", b"1", [], 1)])
    bad = bytearray(a)
    struct.pack_into(">i", bad, 8, 3)
    assert [i.base_offset for i in iter_batch_headers(a + bytes(bad) + a)] == [0]
