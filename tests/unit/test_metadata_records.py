"""The framing of records in __cluster_metadata: metadata records (MetadataRecordSerde) and
KRaft control records (ControlRecordType key + struct at schema version 0).

Golden bytes are written by hand from the layout in core/protocol/metadata_records.py:
uvarint frame version 1, uvarint record type, uvarint record version, then the flexible struct
(compact strings and arrays are uvarint(length + 1); every struct ends with its tagged fields).
A control record key is int16 version 0 + int16 type.
"""
from __future__ import annotations


import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.protocol import dsl, messages as m
from core.protocol.errors import DecodeError, EncodeError
from core.protocol.metadata_records import (
    CONTROL_RECORDS, ControlRecord, ControlRecordType, MetadataRecord, UnknownRecordType,
    decode_control_key, decode_control_record, decode_record, encode_control_key,
    encode_control_record, encode_record, record_type_of)
from core.protocol.varint import uvarint_bytes
from tests.support.codec_strategies import StrategyBuilder, plain


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def s(text: str) -> bytes:
    """A compact string."""
    return uvarint_bytes(len(text) + 1) + text.encode()


TID = bytes(range(16))
INC = bytes(range(16, 32))
DIR = bytes(range(32, 48))

# --------------------------------------------------------------------------- metadata records

GOLDEN_RECORDS = [
    pytest.param(
        MetadataRecord(m.TopicRecord(name="foo", topic_id=TID), 0),
        h("01 02 00") + s("foo") + TID + h("00"),
        id="TopicRecord-v0"),
    pytest.param(
        MetadataRecord(m.NoOpRecord(), 0),
        h("01 14 00 00"),  # type 20; a struct with no fields is just its (empty) tag section
        id="NoOpRecord-v0"),
    pytest.param(
        MetadataRecord(m.FeatureLevelRecord(name="metadata.version", feature_level=21), 0),
        h("01 0c 00") + s("metadata.version") + h("0015 00"),
        id="FeatureLevelRecord-v0"),
    pytest.param(
        MetadataRecord(m.PartitionChangeRecord(partition_id=7, topic_id=TID, leader=2, isr=[2, 3]), 0),
        h("01 05 00 00000007") + TID + h("02  00 09 03 00000002 00000003  01 04 00000002"),
        id="PartitionChangeRecord-v0-leader-and-isr"),
    pytest.param(
        MetadataRecord(m.RegisterBrokerRecord(
            broker_id=1, incarnation_id=INC, broker_epoch=10,
            end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092,
                                                              security_protocol=0)],
            features=[m.RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=1,
                                                           max_supported_version=20)],
            rack=None, fenced=True), 3),
        h("01 00 03"              # frame 1, type 0 (RegisterBrokerRecord), version 3
          " 00000001 00") + INC   # BrokerId, IsMigratingZkBroker (v2+) false, IncarnationId
        + h("000000000000000a"    # BrokerEpoch
            " 02") + s("PLAINTEXT") + s("localhost") + h("2384 0000 00")  # one endpoint, port 9092
        + h("02") + s("metadata.version") + h("0001 0014 00")             # one feature
        + h("00 01 00"            # Rack null, Fenced true, InControlledShutdown (v1+) false
            " 00"),               # no tags: LogDirs (v3+, tag 0) is empty
        id="RegisterBrokerRecord-v3"),
    pytest.param(
        MetadataRecord(m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=1,
                                                        in_controlled_shutdown=1, log_dirs=[DIR]), 2),
        h("01 11 02 00000001 000000000000000a 03  00 01 01  01 01 01  02 11 02") + DIR,
        id="BrokerRegistrationChangeRecord-v2"),
    pytest.param(
        MetadataRecord(m.ConfigRecord(resource_type=2, resource_name="t", name="cleanup.policy", value=None), 0),
        h("01 04 00 02") + s("t") + s("cleanup.policy") + h("00 00"),
        id="ConfigRecord-v0-delete"),
]


@pytest.mark.parametrize("record,frame", GOLDEN_RECORDS)
def test_golden_metadata_records(record, frame):
    assert encode_record(record) == frame
    back = decode_record(frame)
    assert back == record
    assert back.record_type == m.METADATA_RECORDS_BY_NAME[back.name].spec.api_key
    assert back.version == record.version


def test_record_type_and_name():
    rec = decode_record(h("01 02 00") + s("foo") + TID + h("00"))
    assert (rec.record_type, rec.name, rec.version) == (2, "TopicRecord", 0)
    assert isinstance(rec.message, m.TopicRecord)
    assert record_type_of(m.PartitionRecord()) == 3


def test_encode_version_defaults_to_the_newest():
    rec = m.PartitionRecord(topic_id=TID)
    assert encode_record(rec)[:3] == h("01 03 02")
    assert encode_record(rec, 1)[:3] == h("01 03 01")
    assert encode_record(MetadataRecord(rec, 0))[:3] == h("01 03 00")
    assert decode_record(encode_record(rec, 0)) == MetadataRecord(rec, 0)


@pytest.mark.parametrize("message,version,words", [
    (m.PartitionRecord(), 3, "PartitionRecord has no version 3"),
    (m.LeaderChangeMessage(), None, "LeaderChangeMessage is not a metadata record"),
    (m.ProduceRequest(), None, "ProduceRequest is not a metadata record"),
])
def test_encode_refuses(message, version, words):
    with pytest.raises(EncodeError, match=words):
        encode_record(message, version)


TOPIC_FRAME = h("01 02 00") + s("foo") + TID + h("00")

BAD_RECORDS = [
    pytest.param(b"", "empty", id="empty"),
    pytest.param(h("00 02 00") + TOPIC_FRAME[3:], "frame version 0", id="frame-version-0"),
    pytest.param(h("02 02 00") + TOPIC_FRAME[3:], "frame version 2", id="frame-version-2"),
    pytest.param(h("80 80 02 02 00"), "frame version 32768 is too large", id="frame-version-too-large"),
    pytest.param(h("01 06 00 00"), "unknown metadata record type 6", id="unknown-type-6"),
    pytest.param(h("01 7f 00 00"), "unknown metadata record type 127", id="unknown-type-127"),
    pytest.param(h("01 80 80 02 00 00"), "type 32768 is too large", id="type-too-large"),
    pytest.param(h("01 02 01") + TOPIC_FRAME[3:], r"TopicRecord \(type 2\) version 1 is not supported",
                 id="unsupported-version"),
    pytest.param(h("01 02 ff ff ff ff 0f"), "too large", id="version-uvarint-2^32"),
    pytest.param(h("01 02 80"), "version: varint runs past", id="version-cut-short"),
    pytest.param(h("01 82"), "type: varint runs past", id="type-cut-short"),
    pytest.param(h("01 02 ff ff ff ff ff 01"), "longer than 5 bytes", id="varint-too-long"),
    pytest.param(TOPIC_FRAME + h("00"), "trailing", id="trailing-garbage"),
    pytest.param(h("01 02 00") + uvarint_bytes(1 << 31) + b"x" * 32, "more than 32767", id="name-length-2^31"),
    pytest.param(h("01 03 00 00000000") + TID + uvarint_bytes((1 << 31) - 1) + b"\x00" * 16,
                 "more than the frame holds", id="replicas-count-2^31"),
]


@pytest.mark.parametrize("frame,words", BAD_RECORDS)
def test_malformed_records_are_decode_errors(frame, words):
    with pytest.raises(DecodeError, match=words):
        decode_record(frame)


def test_unknown_type_names_the_type():
    with pytest.raises(UnknownRecordType) as info:
        decode_record(h("01 06 00 00"))
    assert info.value.record_type == 6


@pytest.mark.parametrize("record,frame", GOLDEN_RECORDS)
def test_every_truncation_is_a_decode_error(record, frame):
    for cut in range(len(frame)):
        with pytest.raises(DecodeError):
            decode_record(frame[:cut])


def test_every_record_type_is_registered_by_type_and_name():
    for rtype, codec in m.METADATA_RECORDS.items():
        assert codec.spec.kind == "record" and codec.spec.api_key == rtype
        assert m.METADATA_RECORDS_BY_NAME[codec.spec.name] is codec
        assert getattr(m, codec.spec.name) is codec.cls
    assert len(m.METADATA_RECORDS_BY_NAME) == len(m.METADATA_RECORDS)


# --------------------------------------------------------------------------- the DSL's `record`


def test_record_header_parses_like_data_with_a_type():
    spec = dsl.parse_schema("# c\nrecord FooRecord 30\nversions 0-1\nflexible 0+\n  A int32\n  B []uuid v1+ tag=0\n")
    assert (spec.kind, spec.name, spec.api_key, str(spec.versions)) == ("record", "FooRecord", 30, "0-1")
    assert [f.name for f in spec.root.fields] == ["A", "B"]
    empty = dsl.parse_schema("record EmptyRecord 31\nversions 0\nflexible 0+\n")
    assert empty.root.fields == [] and empty.api_key == 31


@pytest.mark.parametrize("text,words", [
    ("record FooRecord\nversions 0\n", "expected 'record NAME TYPE'"),
    ("record FooRecord x\nversions 0\n", "record type 'x' is not a number"),
    ("record FooRecord 40000\nversions 0\n", "out of range"),
    ("record FooRecord 1\ndata Foo\nversions 0\n", "a file declares one thing"),
    ("record FooRecord 1\nversions 0\nversions 1\n", "'versions' given twice"),
])
def test_record_header_errors(text, words):
    with pytest.raises(dsl.SchemaError, match=words):
        dsl.parse_schema(text)


def test_load_all_refuses_a_record_type_declared_twice(tmp_path):
    (tmp_path / "a.ks").write_text("record ARecord 1\nversions 0\nflexible 0+\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.ks").write_text("record BRecord 1\nversions 0\nflexible 0+\n")
    with pytest.raises(dsl.SchemaError, match="record type 1 is already ARecord"):
        dsl.load_all(tmp_path)


# --------------------------------------------------------------------------- control records

V = m.VotersRecord

GOLDEN_CONTROL = [
    pytest.param(
        ControlRecordType.LEADER_CHANGE,
        m.LeaderChangeMessage(version=0, leader_id=1,
                              voters=[m.LeaderChangeMessage.Voter(voter_id=i) for i in (1, 2, 3)],
                              granting_voters=[m.LeaderChangeMessage.Voter(voter_id=i) for i in (1, 2)]),
        h("0000 0002"),
        h("0000 00000001  04 00000001 00 00000002 00 00000003 00  03 00000001 00 00000002 00  00"),
        id="LeaderChange"),
    pytest.param(
        ControlRecordType.SNAPSHOT_HEADER,
        m.SnapshotHeaderRecord(version=0, last_contained_log_timestamp=1_700_000_000_000),
        h("0000 0003"), h("0000 0000018bcfe56800 00"), id="SnapshotHeader"),
    pytest.param(
        ControlRecordType.SNAPSHOT_FOOTER, m.SnapshotFooterRecord(version=0),
        h("0000 0004"), h("0000 00"), id="SnapshotFooter"),
    pytest.param(
        ControlRecordType.KRAFT_VERSION, m.KRaftVersionRecord(version=0, k_raft_version=1),
        h("0000 0005"), h("0000 0001 00"), id="KRaftVersion"),
    pytest.param(
        ControlRecordType.KRAFT_VOTERS,
        V(version=0, voters=[V.Voter(voter_id=1, voter_directory_id=DIR,
                                     endpoints=[V.Endpoint(name="CONTROLLER", host="localhost", port=9093)],
                                     k_raft_version_feature=V.KRaftVersionFeature(min_supported_version=0,
                                                                                  max_supported_version=1))]),
        h("0000 0006"),
        h("0000 02 00000001") + DIR + h("02") + s("CONTROLLER") + s("localhost") + h("2385 00")
        + h("0000 0001 00"  # KRaftVersionFeature and its tags
            " 00 00"),      # the voter's tags, the record's tags
        id="Voters"),
]


@pytest.mark.parametrize("ctype,message,key,value", GOLDEN_CONTROL)
def test_golden_control_records(ctype, message, key, value):
    assert encode_control_key(ctype) == key
    assert encode_control_record(message) == (key, value)
    back = decode_control_record(key, value)
    assert back == ControlRecord(ctype, message)
    assert back.version == 0
    for cut in range(len(value)):
        with pytest.raises(DecodeError):
            decode_control_record(key, value[:cut])


def test_leader_change_is_written_in_schema_version_0():
    # Kafka writes and reads LeaderChangeMessage at version 0 (ControlRecordUtils), so the
    # voters' directory ids (v1+) never reach the log.
    msg = m.LeaderChangeMessage(leader_id=1, voters=[m.LeaderChangeMessage.Voter(voter_id=1, voter_directory_id=DIR)])
    _, value = encode_control_record(msg)
    assert DIR not in value
    assert decode_control_record(h("0000 0002"), value).message.voters[0].voter_directory_id == bytes(16)


def test_control_key_of_a_newer_version_reads_as_version_0():
    # Kafka: a key version it does not know is parsed with the version 0 layout.
    assert decode_control_key(h("0001 0003")) == 3
    assert decode_control_key(h("0000 0002 ffff")) == 2


@pytest.mark.parametrize("key,value,error,words", [
    pytest.param(None, h("0000 00"), DecodeError, "key is null", id="null-key"),
    pytest.param(h("0000 00"), h("0000 00"), DecodeError, "key is 3 bytes", id="short-key"),
    pytest.param(h("ffff 0004"), h("0000 00"), DecodeError, "negative version -1", id="negative-key-version"),
    pytest.param(h("0000 0000"), h("0000 00000000"), UnknownRecordType, "type 0 is a transaction marker",
                 id="abort-marker"),
    pytest.param(h("0000 0001"), h("0000 00000000"), UnknownRecordType, "type 1 is a transaction marker",
                 id="commit-marker"),
    pytest.param(h("0000 0007"), h("0000 00"), UnknownRecordType, "unknown control record type 7", id="type-7"),
    pytest.param(h("0000 ffff"), h("0000 00"), UnknownRecordType, "unknown control record type -1", id="type-minus-1"),
    pytest.param(h("0000 0004"), b"", DecodeError, "SNAPSHOT_FOOTER control record has no value", id="empty-value"),
    pytest.param(h("0000 0004"), None, DecodeError, "has no value", id="null-value"),
    pytest.param(h("0000 0004"), h("0000 00 00"), DecodeError, "trailing", id="trailing-garbage"),
    pytest.param(h("0000 0006"), h("0000") + uvarint_bytes(1 << 31) + b"\x00" * 8, DecodeError,
                 "more than the frame holds", id="voters-count-2^31"),
])
def test_malformed_control_records(key, value, error, words):
    with pytest.raises(error, match=words):
        decode_control_record(key, value)


def test_encode_control_record_refuses_other_messages():
    with pytest.raises(EncodeError, match="TopicRecord is not a KRaft control record"):
        encode_control_record(m.TopicRecord())


def test_control_record_types_are_kafkas():
    assert {t.name: int(t) for t in ControlRecordType} == {
        "ABORT": 0, "COMMIT": 1, "LEADER_CHANGE": 2, "SNAPSHOT_HEADER": 3, "SNAPSHOT_FOOTER": 4,
        "KRAFT_VERSION": 5, "KRAFT_VOTERS": 6}
    assert {t: c.spec.name for t, c in CONTROL_RECORDS.items()} == {
        ControlRecordType.LEADER_CHANGE: "LeaderChangeMessage",
        ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeaderRecord",
        ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooterRecord",
        ControlRecordType.KRAFT_VERSION: "KRaftVersionRecord",
        ControlRecordType.KRAFT_VOTERS: "VotersRecord"}


# --------------------------------------------------------------------------- properties

PROPS = settings(max_examples=25, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RECORD_VERSIONS = [(codec, v) for _, codec in sorted(m.METADATA_RECORDS.items())
                   for v in range(codec.spec.versions.low, codec.spec.versions.high + 1)]


@PROPS
@given(data=st.data())
def test_framed_records_roundtrip(data):
    codec, version = data.draw(st.sampled_from(RECORD_VERSIONS), label="record version")
    message = data.draw(StrategyBuilder(codec.spec, version).message(), label="record")
    frame = encode_record(message, version)
    back = decode_record(frame)
    assert (back.record_type, back.version) == (codec.spec.api_key, version)
    assert plain(back.message) == plain(message)
    assert encode_record(back) == frame


@PROPS
@given(data=st.data())
def test_control_records_roundtrip(data):
    ctype = data.draw(st.sampled_from(sorted(CONTROL_RECORDS)), label="type")
    codec = CONTROL_RECORDS[ctype]
    message = data.draw(StrategyBuilder(codec.spec, 0).message(), label="record")
    key, value = encode_control_record(message)
    back = decode_control_record(key, value)
    assert back.type == ctype and plain(back.message) == plain(message)


@settings(PROPS, max_examples=300)
@given(frame=st.one_of(st.binary(max_size=64),
                       st.builds(lambda t, v, body: b"\x01" + uvarint_bytes(t) + uvarint_bytes(v) + body,
                                 st.integers(0, 40), st.integers(0, 4), st.binary(max_size=64))))
def test_random_values_decode_or_raise_decode_error(frame):
    try:
        rec = decode_record(frame)
    except DecodeError:
        return
    again = decode_record(encode_record(rec))
    assert (again.record_type, again.version) == (rec.record_type, rec.version)
    assert plain(again.message) == plain(rec.message)


@settings(PROPS, max_examples=200)
@given(key=st.one_of(st.none(), st.binary(max_size=6)), value=st.one_of(st.none(), st.binary(max_size=48)))
def test_random_control_records_decode_or_raise_decode_error(key, value):
    try:
        decode_control_record(key, value)
    except DecodeError:
        pass
