"""The generated codec: encode -> decode gives back the same message, for every API, both
directions and every version we advertise, with objects drawn by hypothesis from the schema
itself. Golden byte strings, written by hand from the Kafka protocol guide, check that the
format is Kafka's and not merely self-consistent.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.protocol import messages
from core.protocol.codegen import MessageCodec
from core.protocol.errors import DecodeError, EncodeError
from core.protocol.varint import uvarint_bytes
from tests.support.codec_strategies import StrategyBuilder, plain

def _cases():
    for key, api in sorted(messages.API.items()):
        for v in range(api.min_version, api.max_version + 1):
            for kind in ("request", "response"):
                yield pytest.param(key, kind, v, id=f"{api.name}-{kind}-v{v}")


def codec_of(key: int, kind: str) -> MessageCodec:
    return getattr(messages.API[key], kind)


ROUNDTRIP = settings(max_examples=20, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_roundtrip(codec: MessageCodec, version: int, obj) -> None:
    data = codec.encode(version, obj)
    back = codec.decode(version, data)
    assert type(back) is type(obj)
    assert plain(back) == plain(obj)
    assert back == obj  # the generated __eq__ agrees
    assert codec.encode(version, back) == data


@pytest.mark.parametrize("key,kind,version", list(_cases()))
@ROUNDTRIP
@given(data=st.data())
def test_roundtrip(key, kind, version, data):
    codec = codec_of(key, kind)
    obj = data.draw(StrategyBuilder(codec.spec, version).message(), label="message")
    check_roundtrip(codec, version, obj)


def _struct_cases():
    """Every version of every data struct (consumer protocol, __consumer_offsets, KRaft control
    records) and of every metadata record."""
    codecs = [*sorted(messages.DATA.items()),
              *sorted((c.spec.name, c) for c in messages.METADATA_RECORDS.values())]
    for name, codec in codecs:
        for v in range(codec.spec.versions.low, codec.spec.versions.high + 1):
            yield pytest.param(codec, v, id=f"{name}-v{v}")


STRUCT_CASES = list(_struct_cases())


@pytest.mark.parametrize("codec,version", STRUCT_CASES)
@ROUNDTRIP
@given(data=st.data())
def test_struct_roundtrip(codec, version, data):
    obj = data.draw(StrategyBuilder(codec.spec, version).message(), label="struct")
    check_roundtrip(codec, version, obj)


@pytest.mark.parametrize("codec,version", [
    *[pytest.param(messages.REQUEST_HEADER, v, id=f"RequestHeader-v{v}") for v in range(0, 3)],
    *[pytest.param(messages.RESPONSE_HEADER, v, id=f"ResponseHeader-v{v}") for v in range(0, 2)],
])
@ROUNDTRIP
@given(data=st.data())
def test_header_roundtrip(codec, version, data):
    obj = data.draw(StrategyBuilder(codec.spec, version).message(), label="header")
    check_roundtrip(codec, version, obj)


def test_absent_fields_decode_to_their_defaults():
    # Produce v3 has no LogStartOffset (v5+): the decoder fills in Kafka's default, -1.
    resp = messages.ProduceResponse(responses=[messages.ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[messages.ProduceResponse.PartitionProduceResponse(index=0)])])
    back = messages.API[0].response.decode(3, messages.API[0].response.encode(3, resp))
    part = back.responses[0].partition_responses[0]
    assert part.log_start_offset == -1 and part.log_append_time_ms == -1
    assert part.current_leader.leader_id == -1 and part.error_message is None


def test_records_decode_as_a_zero_copy_view():
    codec = messages.API[0].request
    req = messages.ProduceRequest(acks=1, timeout_ms=5, topic_data=[
        messages.ProduceRequest.TopicProduceData(name="t", partition_data=[
            messages.ProduceRequest.PartitionProduceData(index=0, records=b"batch")])])
    frame = bytearray(codec.encode(9, req))
    back = codec.decode(9, frame)
    rec = back.topic_data[0].partition_data[0].records
    assert isinstance(rec, memoryview) and bytes(rec) == b"batch"
    assert rec.obj is frame


# --------------------------------------------------------------------------- golden bytes
# Written by hand from https://kafka.apache.org/protocol: int16/int32/int64 big-endian;
# STRING = int16 length + UTF-8, null = -1; COMPACT_STRING = uvarint(length + 1), null = 0;
# ARRAY = int32 count, null = -1; COMPACT_ARRAY = uvarint(count + 1), null = 0; a flexible
# struct ends with its tagged fields: uvarint count, then (uvarint tag, uvarint size, data).


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def test_golden_api_versions_v3_request_with_header_v2():
    frame = h(
        "0012 0003 00000007"   # api key 18, version 3, correlation id 7
        " 0003 636c69"         # client id "cli": a classic int16-length string even in header v2
        " 00"                  # header tagged fields: none
        " 03 7377"             # ClientSoftwareName: compact string "sw"
        " 04 312e30"           # ClientSoftwareVersion: compact string "1.0"
        " 00")                 # body tagged fields: none
    header = messages.RequestHeader(request_api_key=18, request_api_version=3, correlation_id=7,
                                    client_id="cli")
    body = messages.ApiVersionsRequest(client_software_name="sw", client_software_version="1.0")
    assert messages.REQUEST_HEADER.encode(2, header) + messages.API[18].request.encode(3, body) == frame
    got_header, end = messages.REQUEST_HEADER.decode(2, frame, whole=False)
    assert got_header == header and end == 14
    assert messages.API[18].request.decode(3, frame, end) == body


def test_golden_request_header_versions():
    header = messages.RequestHeader(request_api_key=3, request_api_version=1, correlation_id=1, client_id=None)
    assert messages.REQUEST_HEADER.encode(0, header) == h("0003 0001 00000001")
    assert messages.REQUEST_HEADER.encode(1, header) == h("0003 0001 00000001 ffff")
    assert messages.REQUEST_HEADER.encode(2, header) == h("0003 0001 00000001 ffff 00")
    assert messages.RESPONSE_HEADER.encode(0, messages.ResponseHeader(correlation_id=9)) == h("00000009")
    assert messages.RESPONSE_HEADER.encode(1, messages.ResponseHeader(correlation_id=9)) == h("00000009 00")


def test_golden_metadata_topics_null_vs_empty():
    codec = messages.API[3].request
    all_topics = messages.MetadataRequest(topics=None)
    no_topics = messages.MetadataRequest(topics=[])
    # v1: null array = all topics, empty array = none.
    assert codec.encode(1, all_topics) == h("ffffffff")
    assert codec.encode(1, no_topics) == h("00000000")
    assert codec.decode(1, h("ffffffff")).topics is None
    assert codec.decode(1, h("00000000")).topics == []
    one = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="t")])
    assert codec.encode(1, one) == h("00000001 0001 74")
    # v0: the array is not nullable (empty meant "all topics" then).
    with pytest.raises(EncodeError):
        codec.encode(0, all_topics)
    with pytest.raises(DecodeError):
        codec.decode(0, h("ffffffff"))
    # v4 adds AllowAutoTopicCreation (default true).
    assert codec.encode(4, all_topics) == h("ffffffff 01")
    # v9 is flexible: compact arrays, then the three bools, then the (empty) tag section.
    assert codec.encode(9, all_topics) == h("00 01 00 00 00")
    assert codec.encode(9, no_topics) == h("01 01 00 00 00")
    # v12: topic id, then a compact nullable name, then the topic's tags.
    tid = bytes(range(16))
    by_id = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(topic_id=tid, name=None)],
                                     allow_auto_topic_creation=False)
    assert codec.encode(12, by_id) == h("02") + tid + h("00 00") + h("00 00 00")
    assert codec.decode(12, codec.encode(12, by_id)) == by_id


def test_golden_produce_v3_and_v9():
    codec = messages.API[0].request
    req = messages.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        messages.ProduceRequest.TopicProduceData(name="t", partition_data=[
            messages.ProduceRequest.PartitionProduceData(index=2, records=b"abc")])])
    assert codec.encode(3, req) == h("ffff ffff 00007530 00000001 0001 74 00000001 00000002 00000003 616263")
    assert codec.encode(9, req) == h("00 ffff 00007530 02 02 74 02 00000002 04 616263 00 00 00")


def test_golden_api_versions_v3_response_tagged_fields():
    codec = messages.API[18].response
    resp = messages.ApiVersionsResponse(error_code=0, throttle_time_ms=0, finalized_features_epoch=5,
                                        api_keys=[messages.ApiVersionsResponse.ApiVersion(
                                            api_key=18, min_version=0, max_version=4)])
    # Tag 1 (FinalizedFeaturesEpoch) is written because it differs from its default -1;
    # the empty feature arrays and ZkMigrationReady=false are at their defaults and omitted.
    expected = h("0000 02 0012 0000 0004 00 00000000 01 01 08 0000000000000005")
    assert codec.encode(3, resp) == expected
    assert codec.decode(3, expected) == resp
    # v0 has neither compact arrays nor tags nor the throttle time.
    assert codec.encode(0, resp) == h("0000 00000001 0012 0000 0004")


def test_golden_produce_v10_response_tagged_struct():
    codec = messages.API[0].response
    P = messages.ProduceResponse
    resp = P(throttle_time_ms=0, responses=[P.TopicProduceResponse(name="t", partition_responses=[
        P.PartitionProduceResponse(index=0, error_code=6, base_offset=-1, log_append_time_ms=-1,
                                   log_start_offset=-1, error_message=None,
                                   current_leader=P.LeaderIdAndEpoch(leader_id=3, leader_epoch=7))])])
    expected = h(
        "02 02 74"                         # one topic, compact name "t"
        " 02 00000000 0006"                # one partition: index 0, NOT_LEADER_OR_FOLLOWER
        " ffffffffffffffff ffffffffffffffff ffffffffffffffff"  # base offset, append time, start offset
        " 01 00"                           # no record errors, null error message
        " 01 00 09 00000003 00000007 00"   # tag 0 (CurrentLeader), 9 bytes: leader 3, epoch 7, no tags
        " 00"                              # topic tags
        " 00000000 00")                    # throttle time, top-level tags (no NodeEndpoints)
    assert codec.encode(10, resp) == expected
    assert codec.decode(10, expected) == resp


def test_golden_unknown_tags_are_kept_in_order():
    codec = messages.API[60].request
    req = messages.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1,
                                          unknown_tags={300: b"\x01", 5: b""})
    # Tags are written sorted by number; 300 is the two-byte uvarint ac 02.
    data = codec.encode(1, req)
    assert data == h("01 01 02 05 00 ac02 01 01")
    assert codec.decode(1, data).unknown_tags == {5: b"", 300: b"\x01"}


def test_int_widths_are_checked_on_encode():
    codec = messages.API[20].request
    with pytest.raises(EncodeError):
        codec.encode(5, messages.DeleteTopicsRequest(topic_names=["a"], timeout_ms=1 << 31))
    assert struct.unpack(">i", codec.encode(5, messages.DeleteTopicsRequest(timeout_ms=-1))[-5:-1]) == (-1,)


def test_strings_are_capped_at_32767_bytes_in_every_version():
    # Kafka's generated code refuses longer strings, compact or not, on both sides.
    codec = messages.API[18].request
    ok = messages.ApiVersionsRequest(client_software_name="x" * 0x7FFF, client_software_version="1")
    assert codec.decode(3, codec.encode(3, ok)) == ok
    with pytest.raises(EncodeError):
        codec.encode(3, messages.ApiVersionsRequest(client_software_name="x" * 0x8000))
    frame = uvarint_bytes(0x8000 + 1) + b"x" * 0x8000 + h("02 31 00")
    with pytest.raises(DecodeError):
        codec.decode(3, frame)


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 128, 300])
def test_compact_lengths_either_side_of_one_byte(size):
    """Flexible versions read and write a one-byte compact length (up to 126 bytes or
    elements) in line and longer ones through the helpers (codegen.py, "Short lengths
    inline"): both sides round-trip, with the length Kafka writes (N + 1 as an unsigned
    varint), counting a string's UTF-8 bytes, not its characters."""
    name = "é" * (size // 2) + "x" * (size % 2)          # é is 2 bytes of UTF-8
    av = messages.API[18].request
    msg = messages.ApiVersionsRequest(client_software_name=name, client_software_version="1")
    assert av.encode(3, msg) == uvarint_bytes(size + 1) + name.encode() + h("02 31 00")
    assert av.decode(3, av.encode(3, msg)) == msg
    dg = messages.API[15].request
    groups = messages.DescribeGroupsRequest(groups=[f"g{i}" for i in range(size)], include_authorized_operations=True)
    assert dg.encode(5, groups).startswith(uvarint_bytes(size + 1) + (b"\x03g0" if size else b"\x01"))
    assert dg.decode(5, dg.encode(5, groups)) == groups
    sasl = messages.API[36].request
    auth = messages.SaslAuthenticateRequest(auth_bytes=bytes(range(256))[:size] + b"\x00" * max(0, size - 256))
    assert sasl.encode(2, auth) == uvarint_bytes(size + 1) + auth.auth_bytes + b"\x00"
    assert sasl.decode(2, sasl.encode(2, auth)) == auth


@pytest.mark.parametrize("frame,message", [
    (h("03 ff fe 02 31 00"), "not valid UTF-8"),          # a one-byte length, bytes that are not UTF-8
    (h("0b 61 62 63"), "runs past the end"),             # claims 10 bytes, holds 3
    (h("00 02 31 00"), "null but not nullable"),         # a null client_software_name
    (uvarint_bytes(201) + b"\xff" * 200 + h("02 31 00"), "not valid UTF-8"),   # the same, 200 bytes
])
def test_bad_compact_strings_are_decode_errors_on_both_paths(frame, message):
    with pytest.raises(DecodeError, match=message):
        messages.API[18].request.decode(3, frame)


def test_a_nullable_compact_string_and_a_short_array_that_claims_too_much():
    produce = messages.API[0].request
    req = messages.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[])
    assert produce.encode(9, req) == h("00 ff ff 00 00 03 e8 01 00")
    assert produce.decode(9, produce.encode(9, req)) == req
    with pytest.raises(DecodeError):          # 100 groups claimed, 2 bytes there
        messages.API[15].request.decode(5, h("65 02 61"))
    with pytest.raises(DecodeError, match="null but not nullable"):   # groups may not be null
        messages.API[15].request.decode(5, h("00 01 00"))


# --------------------------------------------------------------------------- KRaft shapes
# The KRaft RPCs and the metadata records use shapes the client APIs barely did: arrays of
# uuids (plain and tagged), tagged int8s, nullable tagged arrays (null = "unchanged"), tagged
# structs, and fields newer than the reference specs (Vote v2).

TID = bytes(range(16))
DIR_A = bytes(range(16, 32))
DIR_B = bytes(range(32, 48))


def test_golden_partition_record_v1_uuid_array():
    codec = messages.METADATA_RECORDS[3]
    rec = messages.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1], leader=1,
                                   leader_epoch=0, partition_epoch=0, directories=[DIR_A, DIR_B])
    expected = (h("00000000") + TID
                + h("03 00000001 00000002"  # Replicas: compact array of 2 int32
                    " 02 00000001"          # Isr
                    " 01 01"                # RemovingReplicas, AddingReplicas: empty
                    " 00000001"             # Leader
                    " 00000000 00000000"    # LeaderEpoch, PartitionEpoch (LeaderRecoveryState 0: tag omitted)
                    " 03") + DIR_A + DIR_B  # Directories (v1+): compact array of 2 uuids
                + h("00"))                  # no tagged fields
    assert codec.encode(1, rec) == expected
    assert codec.decode(1, expected) == rec
    # v0 has no Directories at all.
    assert codec.encode(0, rec) == expected[:-(1 + 32 + 1)] + h("00")


def test_golden_partition_change_record_nullable_tagged_arrays():
    codec = messages.METADATA_RECORDS[5]
    C = messages.PartitionChangeRecord
    # Null arrays, Leader -2 and LeaderRecoveryState -1 mean "unchanged" and are not written.
    unchanged = C(partition_id=3, topic_id=TID)
    assert unchanged.isr is None and unchanged.leader == -2 and unchanged.leader_recovery_state == -1
    assert codec.encode(2, unchanged) == h("00000003") + TID + h("00")
    # An empty ISR is a change, unlike a null one; tags go out in ascending order.
    change = C(partition_id=3, topic_id=TID, isr=[], leader_recovery_state=1, eligible_leader_replicas=[1],
               directories=[DIR_A])
    expected = (h("00000003") + TID + h("04"
                "  00 01 01"               # tag 0 Isr: 1 byte, empty compact array
                "  05 01 01"               # tag 5 LeaderRecoveryState: int8 1
                "  06 05 02 00000001"      # tag 6 EligibleLeaderReplicas: [1]
                "  08 11 02") + DIR_A)     # tag 8 Directories: 17 bytes, [DIR_A]
    assert codec.encode(2, change) == expected
    back = codec.decode(2, expected)
    assert back == change and back.isr == [] and back.replicas is None
    # v0 knows neither Directories nor the ELR fields: they are not written.
    assert codec.encode(0, change) == h("00000003") + TID + h("02 00 01 01 05 01 01")


def test_golden_broker_registration_change_record_tagged_int8_and_uuids():
    codec = messages.METADATA_RECORDS[17]
    rec = messages.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=-1, log_dirs=[DIR_A])
    expected = h("00000001 0000000000000005 02  00 01 ff  02 11 02") + DIR_A
    assert codec.encode(2, rec) == expected
    assert codec.decode(2, expected) == rec
    # The defaults (Fenced 0, InControlledShutdown 0, no log dirs) are not written.
    assert codec.encode(2, messages.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5)) == \
        h("00000001 0000000000000005 00")


def test_golden_update_raft_voter_response_tagged_struct():
    codec = messages.API[82].response
    R = messages.UpdateRaftVoterResponse
    resp = R(throttle_time_ms=0, error_code=6,
             current_leader=R.CurrentLeader(leader_id=2, leader_epoch=4, host="h", port=9093))
    expected = h("00000000 0006 01 00 0f 00000002 00000004 02 68 00002385 00")
    assert codec.encode(0, resp) == expected
    assert codec.decode(0, expected) == resp
    assert codec.encode(0, R(error_code=6)) == h("00000000 0006 00")
    assert codec.decode(0, h("00000000 0006 00")).current_leader.leader_id == -1


def test_golden_vote_request_v2_pre_vote():
    codec = messages.API[52].request
    V = messages.VoteRequest
    req = V(cluster_id="c", voter_id=3, topics=[V.TopicData(topic_name="__cluster_metadata", partitions=[
        V.PartitionData(partition_index=0, candidate_epoch=5, candidate_id=1, candidate_directory_id=DIR_A,
                        voter_directory_id=DIR_B, last_offset_epoch=4, last_offset=100, pre_vote=True)])])
    v1 = (h("02 63 00000003 02 13") + b"__cluster_metadata"
          + h("02 00000000 00000005 00000001") + DIR_A + DIR_B + h("00000004 0000000000000064"))
    assert codec.encode(2, req) == v1 + h("01 00 00 00")  # PreVote, then partition, topic, top tags
    assert codec.encode(1, req) == v1 + h("00 00 00")     # v1 has no PreVote
    assert codec.decode(2, v1 + h("01 00 00 00")).topics[0].partitions[0].pre_vote is True
    assert codec.decode(1, v1 + h("00 00 00")).topics[0].partitions[0].pre_vote is False
