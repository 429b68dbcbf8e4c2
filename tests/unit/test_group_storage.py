"""__consumer_offsets records: Kafka's byte layout, Kafka's group placement, lenient reading."""
import struct

import pytest

from core.broker.groups import storage
from core.broker.groups.events import GroupMetadataRecord, MemberRecord
from core.protocol.codegen import DecodeError


@pytest.mark.parametrize("group,java_hash", [
    # String.hashCode() values computed by hand from s[0]*31^(n-1) + ... (int32 wraparound)
    ("group", 98629247),
    ("", 0),
    ("a", 97),
    ("console-consumer-12345", None),
    ("über-gruppe", None),
    ("😀", None),   # a surrogate pair: Java hashes the two UTF-16 code units
])
def test_partition_for_matches_java_string_hashcode(group, java_hash):
    def java_hash_code(s: str) -> int:
        h = 0
        for unit in struct.unpack(f">{len(s.encode('utf-16-be', 'surrogatepass')) // 2}H",
                                  s.encode("utf-16-be", "surrogatepass")):
            h = (31 * h + unit) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h

    h = java_hash_code(group)
    if java_hash is not None:
        assert h == java_hash
    expected = 0 if h == -(1 << 31) else abs(h)
    for n in (1, 3, 50, 97):
        assert storage.partition_for(group, n) == expected % n


def test_partition_for_min_int_hash_is_zero():
    # "polygenelubricants" hashes to Integer.MIN_VALUE; Kafka's Utils.abs maps it to 0
    assert storage.partition_for("polygenelubricants", 50) == 0


def test_offset_key_layout_is_kafkas():
    key = storage.offset_key("g", "t", 3)
    # int16 version 1, string "g", string "t", int32 partition
    assert key == bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
    assert storage.decode_key(key) == storage.OffsetKey("g", "t", 3)


def test_offset_key_version_0_reads_the_same():
    key = bytes.fromhex("0000" "0001" "67" "0001" "74" "00000003")
    assert storage.decode_key(key) == storage.OffsetKey("g", "t", 3)


def test_offset_value_v3_layout():
    value = storage.offset_value(storage.CommittedOffset(10, 2, "meta", 1000))
    assert value == bytes.fromhex("0003" "000000000000000a" "00000002" "0004" + b"meta".hex()
                                  + "00000000000003e8")
    assert storage.decode_offset_value(value) == storage.CommittedOffset(10, 2, "meta", 1000, -1)


def test_offset_value_with_expiry_is_v1():
    value = storage.offset_value(storage.CommittedOffset(10, -1, "", 1000, 5000))
    assert value[:2] == b"\x00\x01"
    assert storage.decode_offset_value(value) == storage.CommittedOffset(10, -1, "", 1000, 5000)


def test_offset_value_v0_has_neither_epoch_nor_expiry():
    value = bytes.fromhex("0000" "0000000000000007" "0000" "0000000000000001")
    assert storage.decode_offset_value(value) == storage.CommittedOffset(7, -1, "", 1, -1)


def test_offset_value_from_a_newer_version_is_read_with_our_newest_layout():
    v4 = bytearray(storage.offset_value(storage.CommittedOffset(5, 1, "m", 9)))
    # v4 is v3's fields as flexible types plus tagged fields; write one by hand
    v4 = (b"\x00\x04" + struct.pack(">qi", 5, 1) + bytes([2]) + b"m" + struct.pack(">q", 9) + b"\x00")
    assert storage.decode_offset_value(v4) == storage.CommittedOffset(5, 1, "m", 9, -1)
    v5 = b"\x00\x05" + v4[2:] + b"future bytes"
    assert storage.decode_offset_value(v5) == storage.CommittedOffset(5, 1, "m", 9, -1)


def test_group_value_roundtrip_and_version():
    record = GroupMetadataRecord("consumer", 3, "range", "m1", 777, (
        MemberRecord("m1", "instance-1", "client", "/10.0.0.1", 300000, 45000, b"sub", b"asg"),
        MemberRecord("m2", None, "client", "/10.0.0.2", 60000, 10000, b"", b""),
    ))
    value = storage.group_value(record)
    assert value[:2] == b"\x00\x03"
    assert storage.decode_group_value(value) == record


def test_empty_group_value_has_null_protocol_and_leader():
    record = GroupMetadataRecord("consumer", 4, None, None, 123, ())
    assert storage.decode_group_value(storage.group_value(record)) == record


def test_group_value_v0_without_rebalance_timeout_uses_session_timeout():
    # v0: protocolType, generation, protocol, leader, members[memberId, clientId, clientHost,
    # sessionTimeout, subscription, assignment]
    def s(x):
        return struct.pack(">h", len(x)) + x
    body = (s(b"consumer") + struct.pack(">i", 2) + s(b"range") + s(b"m")
            + struct.pack(">i", 1) + s(b"m") + s(b"c") + s(b"/h") + struct.pack(">i", 7000)
            + struct.pack(">i", 1) + b"x" + struct.pack(">i", 1) + b"y")
    rec = storage.decode_group_value(b"\x00\x00" + body)
    assert rec.generation_id == 2 and rec.protocol_name == "range" and rec.leader == "m"
    assert rec.current_state_timestamp_ms == -1
    (member,) = rec.members
    assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (7000, 7000)
    assert (member.subscription, member.assignment) == (b"x", b"y")


def test_group_key_and_unknown_key_versions():
    assert storage.group_key("g") == bytes.fromhex("0002" "0001" "67")
    assert storage.decode_key(storage.group_key("g")) == storage.GroupKey("g")
    # KIP-848 consumer-group records use key versions 3+: skipped, not an error
    assert storage.decode_key(b"\x00\x03\x00\x01g") is None


@pytest.mark.parametrize("blob", [b"", b"\x00", b"\x00\x01\x00\x05ab", b"\xff\xff\x00\x00"])
def test_bad_keys_are_decode_errors(blob):
    with pytest.raises(DecodeError):
        storage.decode_key(blob)


@pytest.mark.parametrize("blob", [b"", b"\x00\x03\x00", b"\xff\xfe" + bytes(30)])
def test_bad_values_are_decode_errors(blob):
    with pytest.raises(DecodeError):
        storage.decode_offset_value(blob)
    with pytest.raises(DecodeError):
        storage.decode_group_value(blob)
