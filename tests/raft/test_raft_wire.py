"""core.raft.wire: raft values <-> Kafka wire messages, through the real codec, every version."""
from __future__ import annotations

import dataclasses
import struct

import pytest

from core.protocol import messages as m
from core.protocol.errors import DecodeError, EncodeError, ErrorCode
from core.protocol.records import ATTR_CONTROL, build_batch, iter_batch_headers, scan_batches
from core.raft import wire
from core.raft.entries import Entry, SnapshotId, leader_change_payload
from core.raft.messages import (BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                                DescribeQuorumRequest, DescribeQuorumResponse, EndQuorumEpochRequest,
                                EndQuorumEpochResponse, EpochEndOffset, FetchRequest, FetchResponse,
                                FetchSnapshotRequest, FetchSnapshotResponse, LeaderIdAndEpoch,
                                RaftMessage, ReplicaState, VoteRequest, VoteResponse)

E = ErrorCode


def _entries() -> tuple[Entry, ...]:
    return (Entry(10, 3, leader_change_payload(1, frozenset({1, 2, 3}), {1, 2}), control=True),
            Entry(11, 3, b"a"), Entry(12, 3, b""), Entry(13, 4, b"x" * 300),
            Entry(14, 4, leader_change_payload(2, frozenset({1, 2}), {2}), control=True),
            Entry(15, 5, b"five"))


# Every raft message, the versions we declare for it, and what a version that lacks a field
# gives back (`lossy`: version -> the value expected after the roundtrip).
def _lossy_voter_id(d):
    return lambda v: dataclasses.replace(d, voter_id=-1) if v < 1 else d


VOTE_REQ = VoteRequest(cluster_id="c1", candidate_epoch=7, candidate_id=2, last_offset_epoch=6,
                       last_offset=120, voter_id=3)
PRE_VOTE_REQ = dataclasses.replace(VOTE_REQ, pre_vote=True)
BEGIN_REQ = BeginQuorumEpochRequest(cluster_id=None, leader_id=1, leader_epoch=9, voter_id=4)
FETCH_REQ = FetchRequest(cluster_id="cid", replica_id=3, replica_epoch=-1, max_wait_ms=500,
                         min_bytes=1, max_bytes=8 << 20, current_leader_epoch=9, fetch_offset=42,
                         last_fetched_epoch=8, log_start_offset=5, partition_max_bytes=1 << 20)
FETCH_REQ_EPOCH = dataclasses.replace(FETCH_REQ, replica_epoch=77)
DQ_RESP = DescribeQuorumResponse(
    leader_id=1, leader_epoch=4, high_watermark=99,
    current_voters=(ReplicaState(replica_id=1, log_end_offset=100, last_fetch_timestamp=1000,
                                 last_caught_up_timestamp=999),
                    ReplicaState(replica_id=2, log_end_offset=90)),
    observers=(ReplicaState(replica_id=7, log_end_offset=50, last_fetch_timestamp=5,
                            last_caught_up_timestamp=4),))


def _dq_lossy(v):
    if v >= 1:
        return DQ_RESP
    strip = lambda rs: tuple(dataclasses.replace(r, last_fetch_timestamp=-1,  # noqa: E731
                                                 last_caught_up_timestamp=-1) for r in rs)
    return dataclasses.replace(DQ_RESP, current_voters=strip(DQ_RESP.current_voters),
                               observers=strip(DQ_RESP.observers))


CASES = [
    (VOTE_REQ, _lossy_voter_id(VOTE_REQ)),
    (PRE_VOTE_REQ, None),  # v2 only: tested separately below for v0/v1
    (VoteRequest(cluster_id=None, candidate_epoch=1, candidate_id=1, last_offset_epoch=0,
                 last_offset=0), None),
    (VoteResponse(leader_id=2, leader_epoch=7, vote_granted=True), None),
    (VoteResponse(partition_error_code=E.FENCED_LEADER_EPOCH, leader_id=-1, leader_epoch=8), None),
    (BEGIN_REQ, _lossy_voter_id(BEGIN_REQ)),
    (BeginQuorumEpochResponse(leader_id=1, leader_epoch=9), None),
    (BeginQuorumEpochResponse(error_code=E.INCONSISTENT_CLUSTER_ID), None),
    (EndQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=9,
                           preferred_successors=(3, 2)), None),
    (EndQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=9), None),
    (EndQuorumEpochResponse(partition_error_code=E.NOT_LEADER_OR_FOLLOWER, leader_id=2,
                            leader_epoch=10), None),
    (FETCH_REQ, None),
    (FetchRequest(cluster_id=None, replica_id=-1, max_wait_ms=0, max_bytes=1,
                  current_leader_epoch=0, fetch_offset=0, last_fetched_epoch=-1,
                  partition_max_bytes=1), None),
    (FETCH_REQ_EPOCH, lambda v: FETCH_REQ if v < 15 else FETCH_REQ_EPOCH),
    (FetchResponse(high_watermark=12, log_start_offset=0, current_leader=LeaderIdAndEpoch(1, 5),
                   records=_entries()), None),
    (FetchResponse(high_watermark=12, diverging_epoch=EpochEndOffset(3, 11),
                   current_leader=LeaderIdAndEpoch(1, 5)), None),
    (FetchResponse(snapshot_id=SnapshotId(100, 4), current_leader=LeaderIdAndEpoch(1, 5)), None),
    (FetchResponse(partition_error_code=E.FENCED_LEADER_EPOCH,
                   current_leader=LeaderIdAndEpoch(2, 6)), None),
    (FetchResponse(error_code=E.INCONSISTENT_CLUSTER_ID), None),
    (FetchSnapshotRequest(cluster_id="c", replica_id=3, max_bytes=1 << 20, current_leader_epoch=5,
                          snapshot_id=SnapshotId(100, 4), position=4096), None),
    (FetchSnapshotRequest(cluster_id=None, replica_id=3, max_bytes=10, current_leader_epoch=5,
                          snapshot_id=SnapshotId(100, 4), position=0), None),
    (FetchSnapshotResponse(snapshot_id=SnapshotId(100, 4), current_leader=LeaderIdAndEpoch(1, 5),
                           size=10000, position=4096, unaligned_records=b"\x00chunk\xff"), None),
    (FetchSnapshotResponse(partition_error_code=E.SNAPSHOT_NOT_FOUND,
                           snapshot_id=SnapshotId(100, 4)), None),
    (DescribeQuorumRequest(), None),
    (DQ_RESP, _dq_lossy),
    (DescribeQuorumResponse(partition_error_code=E.NOT_LEADER_OR_FOLLOWER), None),
]


def _params():
    for data, lossy in CASES:
        for v in wire.VERSIONS[type(data).api_key]:
            if data is PRE_VOTE_REQ and v < 2:
                continue
            expected = lossy(v) if lossy else data
            yield pytest.param(data, v, expected, id=f"{type(data).__name__}-v{v}-{CASES.index((data, lossy))}")


def _through_codec(data, version):
    api_key, obj = wire.to_wire(data, version)
    assert api_key == type(data).api_key
    req = isinstance(data, tuple(t for t in CASES_REQ))
    codec = m.API[api_key].request if req else m.API[api_key].response
    raw = codec.encode(version, obj)
    back = codec.decode(version, raw)
    return wire.from_wire(api_key, version, back, is_request=req), raw


CASES_REQ = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
             FetchSnapshotRequest, DescribeQuorumRequest)


@pytest.mark.parametrize("data,version,expected", list(_params()))
def test_roundtrip_every_version(data, version, expected) -> None:
    got, _raw = _through_codec(data, version)
    assert got == expected
    assert type(got) is type(data)


def test_declared_versions_are_within_the_schema() -> None:
    for key, versions in wire.VERSIONS.items():
        api = m.API[key]
        assert api.min_version <= versions.start and versions.stop - 1 <= api.max_version


def test_raft_message_data_is_what_travels() -> None:
    msg = RaftMessage(1, 2, 77, VOTE_REQ)
    assert _through_codec(msg.data, 2)[0] == VOTE_REQ


@pytest.mark.parametrize("version", [0, 1])
def test_pre_vote_cannot_go_below_v2(version) -> None:
    with pytest.raises(wire.NotExpressible, match="pre-vote"):
        wire.to_wire(PRE_VOTE_REQ, version)
    assert isinstance(wire.NotExpressible("x"), EncodeError)


def test_pre_vote_flag_is_on_the_wire_at_v2() -> None:
    _, obj = wire.to_wire(PRE_VOTE_REQ, 2)
    assert obj.topics[0].partitions[0].pre_vote is True
    _, obj = wire.to_wire(VOTE_REQ, 2)
    assert obj.topics[0].partitions[0].pre_vote is False


@pytest.mark.parametrize("data,version", [(VOTE_REQ, 3), (FETCH_REQ, 11), (FETCH_REQ, 18),
                                          (BEGIN_REQ, 2), (DescribeQuorumRequest(), 3)])
def test_undeclared_versions_are_refused(data, version) -> None:
    with pytest.raises(wire.NotExpressible):
        wire.to_wire(data, version)
    with pytest.raises(wire.NotExpressible):
        wire.from_wire(type(data).api_key, version, object(), is_request=True)


# --------------------------------------------------------------------------- topic / partition


def test_fetch_names_the_topic_by_id_from_v13() -> None:
    assert wire.METADATA_TOPIC_ID == bytes.fromhex("00000000000000000000000000000001")
    for v in wire.VERSIONS[1]:
        _, obj = wire.to_wire(FETCH_REQ, v)
        raw = m.API[1].request.encode(v, obj)
        back = m.API[1].request.decode(v, raw)
        if v >= 13:
            assert back.topics[0].topic_id == wire.METADATA_TOPIC_ID
        else:
            assert back.topics[0].topic == "__cluster_metadata"
        if v >= 15:
            assert back.replica_state.replica_id == 3
        else:
            assert back.replica_id == 3


def _mangled(data, version, mutate):
    api_key, obj = wire.to_wire(data, version)
    mutate(obj)
    return api_key, obj


@pytest.mark.parametrize("data,version,mutate,code", [
    (VOTE_REQ, 1, lambda o: setattr(o.topics[0], "topic_name", "other"), E.INVALID_REQUEST),
    (VOTE_REQ, 2, lambda o: setattr(o.topics[0].partitions[0], "partition_index", 1), E.INVALID_REQUEST),
    (BEGIN_REQ, 0, lambda o: o.topics.append(o.topics[0]), E.INVALID_REQUEST),
    (EndQuorumEpochRequest(cluster_id=None, leader_id=1, leader_epoch=1), 1,
     lambda o: o.topics[0].partitions.clear(), E.INVALID_REQUEST),
    (FETCH_REQ, 12, lambda o: setattr(o.topics[0], "topic", "t"), E.INVALID_REQUEST),
    (FETCH_REQ, 13, lambda o: setattr(o.topics[0], "topic_id", bytes(16)), E.INVALID_REQUEST),
    (FETCH_REQ, 17, lambda o: o.topics.clear(), E.INVALID_REQUEST),
    (FetchSnapshotRequest(cluster_id=None, replica_id=1, max_bytes=1, current_leader_epoch=1,
                          snapshot_id=SnapshotId(1, 1), position=0), 1,
     lambda o: setattr(o.topics[0], "name", "t"), E.UNKNOWN_TOPIC_OR_PARTITION),
    (DescribeQuorumRequest(), 2, lambda o: setattr(o.topics[0].partitions[0], "partition_index", 3),
     E.UNKNOWN_TOPIC_OR_PARTITION),
    (VoteResponse(vote_granted=True), 0, lambda o: setattr(o.topics[0], "topic_name", "x"),
     E.INVALID_REQUEST),
    (FetchResponse(), 16, lambda o: o.responses.clear(), E.INVALID_REQUEST),
])
def test_other_partitions_are_refused(data, version, mutate, code) -> None:
    api_key, obj = _mangled(data, version, mutate)
    is_request = isinstance(data, CASES_REQ)
    codec = m.API[api_key].request if is_request else m.API[api_key].response
    obj = codec.decode(version, codec.encode(version, obj))
    with pytest.raises(wire.NotClusterMetadata) as info:
        wire.from_wire(api_key, version, obj, is_request=is_request)
    assert info.value.code == code
    assert isinstance(info.value, DecodeError)


def test_top_level_error_without_topics_decodes() -> None:
    obj = m.VoteResponse(error_code=int(E.INVALID_REQUEST), topics=[])
    assert wire.from_wire(52, 1, obj, is_request=False) == VoteResponse(error_code=E.INVALID_REQUEST)
    obj = m.FetchResponse(error_code=int(E.INCONSISTENT_CLUSTER_ID), responses=[])
    got = wire.from_wire(1, 17, obj, is_request=False)
    assert got == FetchResponse(error_code=E.INCONSISTENT_CLUSTER_ID)


def test_unknown_error_code_maps_to_unknown_server_error() -> None:
    _, obj = wire.to_wire(VoteResponse(), 2)
    obj.topics[0].partitions[0].error_code = 32000
    assert wire.from_wire(52, 2, obj, is_request=False).partition_error_code == E.UNKNOWN_SERVER_ERROR


# --------------------------------------------------------------------------- entries <-> batches


def test_entries_batch_per_epoch_run_with_golden_leader_epoch() -> None:
    entries = [Entry(0, 1, b"a"), Entry(1, 1, b"b"), Entry(2, 2, b"c"), Entry(3, 2, b"d"),
               Entry(4, 2, b"e"), Entry(5, 5, b"f")]
    buf = wire.entries_to_records(entries)
    batches = scan_batches(buf, verify_crc=True)
    assert [(b.base_offset, b.partition_leader_epoch, b.records_count) for b in batches] == \
        [(0, 1, 2), (2, 2, 3), (5, 5, 1)]
    # golden: partitionLeaderEpoch sits at bytes 12..16 of each batch header
    for b in batches:
        assert struct.unpack_from(">i", buf, b.position + 12)[0] == b.partition_leader_epoch
    assert wire.records_to_entries(buf) == tuple(entries)


def test_control_entries_get_their_own_control_batch() -> None:
    entries = _entries()
    buf = wire.entries_to_records(entries)
    batches = list(iter_batch_headers(buf))
    assert [(b.base_offset, b.partition_leader_epoch, b.is_control, b.records_count)
            for b in batches] == [(10, 3, True, 1), (11, 3, False, 2), (13, 4, False, 1),
                                  (14, 4, True, 1), (15, 5, False, 1)]
    assert wire.records_to_entries(buf) == entries


def test_offset_gap_starts_a_new_batch_but_decoding_requires_contiguity() -> None:
    buf = wire.entries_to_records([Entry(0, 1, b"a"), Entry(2, 1, b"b")])
    assert len(list(iter_batch_headers(buf))) == 2
    with pytest.raises(DecodeError, match="does not follow"):
        wire.records_to_entries(buf)


def test_empty_records() -> None:
    assert wire.entries_to_records([]) == b""
    assert wire.records_to_entries(b"") == ()
    assert wire.records_to_entries(None) == ()


def test_trailing_partial_batch_is_skipped() -> None:
    buf = wire.entries_to_records([Entry(0, 1, b"a"), Entry(1, 2, b"b" * 100)])
    first = next(iter_batch_headers(buf))
    for cut in (first.size + 5, first.size + 30, len(buf) - 1):
        assert wire.records_to_entries(buf[:cut]) == (Entry(0, 1, b"a"),)


def test_bad_crc_is_refused() -> None:
    buf = bytearray(wire.entries_to_records([Entry(0, 1, b"payload")]))
    buf[-1] ^= 0xFF
    with pytest.raises(DecodeError, match="CRC"):
        wire.records_to_entries(bytes(buf))


def test_bad_crc_in_control_batch_is_refused() -> None:
    buf = bytearray(wire.entries_to_records([Entry(0, 1, b"lc", control=True)]))
    buf[-1] ^= 0xFF
    with pytest.raises(DecodeError, match="CRC"):
        wire.records_to_entries(bytes(buf))


def test_garbage_and_bad_magic_are_refused() -> None:
    good = wire.entries_to_records([Entry(0, 1, b"a")])
    with pytest.raises(DecodeError):
        wire.records_to_entries(good + b"\x00" * 20)  # a "batch" shorter than its header
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(DecodeError, match="magic"):
        wire.records_to_entries(bytes(bad_magic))


def test_count_and_offset_range_must_agree() -> None:
    buf = bytearray(wire.entries_to_records([Entry(0, 1, b"a"), Entry(1, 1, b"b")]))
    struct.pack_into(">i", buf, 57, 3)  # recordsCount (inside the CRC, but checked first)
    with pytest.raises(DecodeError):
        wire.records_to_entries(bytes(buf))


def test_null_value_and_bad_control_key_are_refused() -> None:
    with pytest.raises(DecodeError, match="null value"):
        wire.records_to_entries(build_batch([(None, None, None, 0)], partition_leader_epoch=1))
    with pytest.raises(DecodeError, match="control record"):
        wire.records_to_entries(build_batch([(None, b"x", None, 0)], control=True))


def test_fetch_response_with_corrupt_records_is_a_decode_error() -> None:
    _, obj = wire.to_wire(FetchResponse(records=(Entry(0, 1, b"a"),)), 17)
    raw = bytearray(obj.responses[0].partitions[0].records)
    raw[-1] ^= 1
    obj.responses[0].partitions[0].records = bytes(raw)
    with pytest.raises(DecodeError):
        wire.from_wire(1, 17, obj, is_request=False)


def test_entries_are_records_a_kafka_client_can_read() -> None:
    from core.protocol.records import iter_records
    buf = wire.entries_to_records([Entry(0, 1, b"v0"), Entry(1, 1, b"v1")], timestamp_ms=1234)
    recs = list(iter_records(buf))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == \
        [(0, None, b"v0", 1234), (1, None, b"v1", 1234)]
    assert not (next(iter_batch_headers(buf)).attributes & ATTR_CONTROL)


def test_the_entry_that_opens_an_epoch_is_kafkas_leader_change_message():
    # Kafka's tools (and Kafka's raft reader) decode this control record; it must be the real
    # LeaderChangeMessage, written at schema version 0, under a LEADER_CHANGE control key.
    from core.protocol.metadata_records import ControlRecordType, decode_control_record
    payload = leader_change_payload(3, frozenset({1, 2, 3}), {3, 1})
    batch = wire.entries_to_records([Entry(7, 4, payload, control=True)])
    (entry,) = wire.records_to_entries(batch)
    assert entry.control and entry.epoch == 4
    record = decode_control_record(wire.LEADER_CHANGE_KEY, entry.payload)
    assert record.type is ControlRecordType.LEADER_CHANGE
    assert record.message.leader_id == 3 and record.message.version == 0
    assert [v.voter_id for v in record.message.voters] == [1, 2, 3]
    assert [v.voter_id for v in record.message.granting_voters] == [1, 3]
