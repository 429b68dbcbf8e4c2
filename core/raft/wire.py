"""KRaft's RPCs on the wire: core.raft.messages values <-> core.protocol message objects.

Pure: no I/O, no clock. The driver encodes what `to_wire` returns with the real codec
(`m.API[key].request/response.encode(version, obj)`) and feeds what it decodes to `from_wire`.
The request/response header (correlation id, client id) is the driver's business, not ours.

    api_key, obj = to_wire(msg.data, version)        # raft value -> wire object
    data = from_wire(api_key, version, obj, is_request=True)

The quorum replicates one partition, __cluster_metadata-0, so every wire message carries
exactly one topic with exactly one partition. Fetch v13+ names the topic by id: Kafka's
Topic.CLUSTER_METADATA_TOPIC_ID, Uuid(0, 1). A wire message naming anything else raises
`NotClusterMetadata`, whose `code` is what Kafka's KafkaRaftClient answers: INVALID_REQUEST for
Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch ("until we support multi-raft"), and
UNKNOWN_TOPIC_OR_PARTITION for FetchSnapshot and DescribeQuorum. A response whose top-level
error is set may carry no topics at all (that is how Kafka answers INVALID_REQUEST or
INCONSISTENT_CLUSTER_ID); it decodes to the response with only `error_code` set.

Versions (VERSIONS): Vote 0-2, BeginQuorumEpoch 0-1, EndQuorumEpoch 0-1, Fetch 12-17 (KRaft
needs LastFetchedEpoch, DivergingEpoch, CurrentLeader and SnapshotId, all v12+), FetchSnapshot
0-1, DescribeQuorum 0-2. Fields a version lacks are dropped on the way out and come back as
their defaults (Vote/BeginQuorumEpoch voter_id before v1, Fetch replica_epoch before v15,
DescribeQuorum timestamps before v1), except a pre-vote: Vote before v2 cannot say "pre", and
sending it as a real vote would bump the voter's epoch, so `to_wire` raises `NotExpressible`.
KIP-853 directory ids are sent as the zero uuid and endpoints as empty lists; neither is
modelled by core.raft.messages, and both are ignored when decoding.

Entries travel as magic v2 record batches: one batch per run of consecutive entries sharing
epoch and control flag (a control batch may hold only control records), with
partition_leader_epoch = the epoch and base offset = the run's first offset; each entry is one
record with a null key (control: Kafka's control key, version 0 + type LEADER_CHANGE) and the
payload as its value. All records of a batch share one timestamp, as Kafka's raft reader
requires. Decoding checks each batch's CRC32C and framing and raises the protocol's
DecodeError; a trailing partial batch (a fetch cut at max bytes) is skipped, as Kafka does.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterable, Protocol, Sequence, TypeVar, overload

from core.protocol import messages as m
from core.protocol.buffers import Buffer
from core.protocol.codegen import Message
from core.protocol.errors import DecodeError, EncodeError, ErrorCode
from core.protocol.metadata_records import ControlRecordType, encode_control_key
from core.protocol.records import (ATTR_CONTROL, HEADER_SIZE, LENGTH_AT, MAGIC, MAGIC_AT, Record, build_batch,
                                   decode_batch, iter_batch_headers)
from core.raft.entries import NO_LEADER, Entry, SnapshotId
from core.raft.messages import (BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                                DescribeQuorumRequest, DescribeQuorumResponse, EndQuorumEpochRequest,
                                EndQuorumEpochResponse, EpochEndOffset, FetchRequest, FetchResponse,
                                FetchSnapshotRequest, FetchSnapshotResponse, LeaderIdAndEpoch,
                                RaftRequest, RaftResponse, ReplicaState, VoteRequest, VoteResponse)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = bytes(15) + b"\x01"  # Kafka's Topic.CLUSTER_METADATA_TOPIC_ID = Uuid(0, 1)
ZERO_UUID = bytes(16)

VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT, DESCRIBE_QUORUM = (
    m.ApiKey.VOTE, m.ApiKey.BEGIN_QUORUM_EPOCH, m.ApiKey.END_QUORUM_EPOCH, m.ApiKey.FETCH, m.ApiKey.FETCH_SNAPSHOT,
    m.ApiKey.DESCRIBE_QUORUM)

VERSIONS: dict[int, range] = {
    VOTE: range(0, 3),
    BEGIN_QUORUM_EPOCH: range(0, 2),
    END_QUORUM_EPOCH: range(0, 2),
    FETCH: range(12, 18),
    FETCH_SNAPSHOT: range(0, 2),
    DESCRIBE_QUORUM: range(0, 3),
}

# Kafka's control record key (int16 version 0 + int16 type) of the entry opening an epoch.
LEADER_CHANGE_KEY = encode_control_key(ControlRecordType.LEADER_CHANGE)


class NotExpressible(EncodeError):
    """A raft value the requested wire version cannot carry (e.g. a pre-vote below Vote v2)."""


class NotClusterMetadata(DecodeError):
    """A wire message that is not about exactly __cluster_metadata-0; `code` is Kafka's answer."""

    def __init__(self, message: str, code: ErrorCode):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- entries <-> records


def entry_batch(run: list[Entry], timestamp_ms: int = 0) -> bytes:
    """One record batch for consecutive entries of one epoch and control flag: base offset and
    partition leader epoch from the entries, one record per entry with the payload as value."""
    first = run[0]
    key = LEADER_CHANGE_KEY if first.control else None
    return build_batch([(key, e.payload, None, timestamp_ms) for e in run],
                       base_offset=first.offset, partition_leader_epoch=first.epoch,
                       control=first.control)


def entries_to_records(entries: Iterable[Entry], *, timestamp_ms: int = 0) -> bytes:
    """Record batches for `entries`: one batch per run of consecutive offsets that share epoch
    and control flag."""
    out = bytearray()
    run: list[Entry] = []

    def flush() -> None:
        if run:
            out.extend(entry_batch(run, timestamp_ms))
            run.clear()

    for e in entries:
        if not isinstance(e.payload, (bytes, bytearray, memoryview)):
            raise EncodeError(f"entry {e.offset} payload must be bytes, not {type(e.payload).__name__}")
        if run and (e.epoch != run[-1].epoch or e.control != run[-1].control
                    or e.offset != run[-1].offset + 1):
            flush()
        run.append(e)
    flush()
    return bytes(out)


def records_to_entries(buf: Buffer | None) -> tuple[Entry, ...]:
    """Entries from record batches; raises DecodeError on anything malformed."""
    if buf is None:
        return ()
    view = memoryview(buf)
    entries: list[Entry] = []
    pos = 0
    for info in iter_batch_headers(view):
        pos = info.position + info.size
        if info.magic != MAGIC:
            raise DecodeError(f"record batch magic {info.magic} at offset {info.base_offset} is not v2")
        if info.records_count <= 0 or info.last_offset_delta + 1 != info.records_count:
            raise DecodeError(f"batch at offset {info.base_offset} has {info.records_count} records "
                              f"but an offset range of {info.last_offset_delta + 1}")
        control = info.is_control
        # decode_batch reduces control records to their type; read them as plain records (the
        # CRC covers the real attributes in the buffer, so it is still checked).
        plain = info._replace(attributes=info.attributes & ~ATTR_CONTROL) if control else info
        try:
            records = decode_batch(view, plain, verify_crc=True)
        except DecodeError:
            raise
        except (IndexError, ValueError, struct.error, OSError) as exc:
            raise DecodeError(f"batch at offset {info.base_offset} is malformed: {exc}") from None
        for i, rec in enumerate(records):
            assert isinstance(rec, Record)   # the control bit is off in `plain`
            if rec.offset != info.base_offset + i:
                raise DecodeError(f"record offsets in batch at {info.base_offset} are not consecutive")
            if rec.value is None:
                raise DecodeError(f"record at offset {rec.offset} has a null value")
            if control and (rec.key is None or len(rec.key) < 4 or struct.unpack_from(">h", rec.key)[0] < 0):
                raise DecodeError(f"control record at offset {rec.offset} has a bad key")
            if entries and rec.offset != entries[-1].offset + 1:
                raise DecodeError(f"offset {rec.offset} does not follow {entries[-1].offset}")
            entries.append(Entry(rec.offset, info.partition_leader_epoch, rec.value, control))
    rest = len(view) - pos
    if rest:
        # Only a batch cut short at max bytes may trail: a header (or its start) whose length
        # runs past the end. Anything else is garbage.
        if rest >= 17:
            length = struct.unpack_from(">i", view, pos + LENGTH_AT)[0]
            magic = view[pos + MAGIC_AT]
            if magic != MAGIC or length + 12 < HEADER_SIZE or length + 12 <= rest:
                raise DecodeError(f"{rest} trailing bytes are not a record batch")
    return tuple(entries)


# --------------------------------------------------------------------------- helpers


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _check_version(api_key: int, version: int) -> None:
    versions = VERSIONS.get(api_key)
    if versions is None:
        raise NotExpressible(f"api key {api_key} is not a KRaft RPC")
    if version not in versions:
        raise NotExpressible(f"{m.API[api_key].name} v{version} is not supported for KRaft "
                             f"(versions {versions.start}-{versions.stop - 1})")


def _mismatch_code(api_key: int) -> ErrorCode:
    if api_key in (FETCH_SNAPSHOT, DESCRIBE_QUORUM):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.INVALID_REQUEST


T = TypeVar("T")
P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class _IndexedPartition(Protocol):
    @property
    def partition_index(self) -> int: ...


PI = TypeVar("PI", bound=_IndexedPartition)


class _NamedTopic(Protocol[P_co]):
    """The topic struct of Vote, BeginQuorumEpoch, EndQuorumEpoch and DescribeQuorum."""
    @property
    def topic_name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[P_co]: ...


@overload
def _single(api_key: int, topics: Sequence[T], name_of: Callable[[T], str | bytes],
            partitions_of: Callable[[T], Sequence[P]], index_of: Callable[[P], int]) -> P: ...
@overload
def _single(api_key: int, topics: Sequence[T], name_of: Callable[[T], str | bytes],
            partitions_of: Callable[[T], Sequence[P]], index_of: Callable[[P], int], *,
            top_error: int) -> P | None: ...
def _single(api_key: int, topics: Sequence[T], name_of: Callable[[T], str | bytes],
            partitions_of: Callable[[T], Sequence[P]], index_of: Callable[[P], int], *,
            top_error: int = 0) -> P | None:
    """The one partition of a single-topic, single-partition message, or None for a
    partition-less response carrying a top-level error."""
    if not topics and top_error:
        return None
    what = m.API[api_key].name
    if len(topics) != 1:
        raise NotClusterMetadata(f"{what} names {len(topics)} topics, expected {METADATA_TOPIC} only",
                                 _mismatch_code(api_key))
    topic = topics[0]
    name = name_of(topic)
    if name not in (METADATA_TOPIC, METADATA_TOPIC_ID):
        shown = name.hex() if isinstance(name, (bytes, bytearray)) else name
        raise NotClusterMetadata(f"{what} names topic {shown!r}, not {METADATA_TOPIC}",
                                 _mismatch_code(api_key))
    parts = partitions_of(topic)
    if len(parts) != 1 or index_of(parts[0]) != METADATA_PARTITION:
        raise NotClusterMetadata(f"{what} must name exactly partition {METADATA_TOPIC}-0, got "
                                 f"{[index_of(p) for p in parts]}", _mismatch_code(api_key))
    return parts[0]


@overload
def _by_name(api_key: int, topics: Sequence[_NamedTopic[PI]]) -> PI: ...
@overload
def _by_name(api_key: int, topics: Sequence[_NamedTopic[PI]], top_error: int) -> PI | None: ...
def _by_name(api_key: int, topics: Sequence[_NamedTopic[PI]], top_error: int = 0) -> PI | None:
    return _single(api_key, topics, lambda t: t.topic_name, lambda t: t.partitions,
                   lambda p: p.partition_index, top_error=top_error)


# --------------------------------------------------------------------------- to the wire


def to_wire(data: RaftRequest | RaftResponse, version: int) -> tuple[int, Message]:
    """(api_key, wire object) for a core.raft.messages request or response at `version`."""
    api_key = type(data).api_key
    _check_version(api_key, version)
    encoder = _ENCODERS.get(type(data))
    if encoder is None:
        raise NotExpressible(f"{type(data).__name__} has no wire form")
    return api_key, encoder(data, version)


def _vote_request(d: VoteRequest, v: int) -> m.VoteRequest:
    if d.pre_vote and v < 2:
        raise NotExpressible(f"a pre-vote needs Vote v2 (KIP-996); v{v} would send a real vote")
    R = m.VoteRequest
    return R(cluster_id=d.cluster_id, voter_id=d.voter_id, topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, candidate_epoch=d.candidate_epoch,
            candidate_id=d.candidate_id, candidate_directory_id=ZERO_UUID,
            voter_directory_id=ZERO_UUID, last_offset_epoch=d.last_offset_epoch,
            last_offset=d.last_offset, pre_vote=d.pre_vote)])])


def _vote_response(d: VoteResponse, v: int) -> m.VoteResponse:
    R = m.VoteResponse
    return R(error_code=int(d.error_code), topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, error_code=int(d.partition_error_code),
            leader_id=d.leader_id, leader_epoch=d.leader_epoch, vote_granted=d.vote_granted)])],
        node_endpoints=[])


def _begin_request(d: BeginQuorumEpochRequest, v: int) -> m.BeginQuorumEpochRequest:
    R = m.BeginQuorumEpochRequest
    return R(cluster_id=d.cluster_id, voter_id=d.voter_id, topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, voter_directory_id=ZERO_UUID,
            leader_id=d.leader_id, leader_epoch=d.leader_epoch)])], leader_endpoints=[])


def _begin_response(d: BeginQuorumEpochResponse, v: int) -> m.BeginQuorumEpochResponse:
    R = m.BeginQuorumEpochResponse
    return R(error_code=int(d.error_code), topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, error_code=int(d.partition_error_code),
            leader_id=d.leader_id, leader_epoch=d.leader_epoch)])], node_endpoints=[])


def _end_response(d: EndQuorumEpochResponse, v: int) -> m.EndQuorumEpochResponse:
    R = m.EndQuorumEpochResponse
    return R(error_code=int(d.error_code), topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, error_code=int(d.partition_error_code),
            leader_id=d.leader_id, leader_epoch=d.leader_epoch)])], node_endpoints=[])


def _end_request(d: EndQuorumEpochRequest, v: int) -> m.EndQuorumEpochRequest:
    R = m.EndQuorumEpochRequest
    return R(cluster_id=d.cluster_id, topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, leader_id=d.leader_id, leader_epoch=d.leader_epoch,
            preferred_successors=list(d.preferred_successors) if v == 0 else [],
            preferred_candidates=[] if v == 0 else [
                R.ReplicaInfo(candidate_id=c, candidate_directory_id=ZERO_UUID)
                for c in d.preferred_successors])])], leader_endpoints=[])


def _fetch_request(d: FetchRequest, v: int) -> m.FetchRequest:
    R = m.FetchRequest
    return R(cluster_id=d.cluster_id,
             replica_id=d.replica_id if v < 15 else -1,
             replica_state=R.ReplicaState(replica_id=d.replica_id if v >= 15 else -1,
                                          replica_epoch=d.replica_epoch if v >= 15 else -1),
             max_wait_ms=d.max_wait_ms, min_bytes=d.min_bytes, max_bytes=d.max_bytes,
             isolation_level=0, session_id=0, session_epoch=-1,
             topics=[R.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[
                 R.FetchPartition(partition=METADATA_PARTITION,
                                  current_leader_epoch=d.current_leader_epoch,
                                  fetch_offset=d.fetch_offset,
                                  last_fetched_epoch=d.last_fetched_epoch,
                                  log_start_offset=d.log_start_offset,
                                  partition_max_bytes=d.partition_max_bytes,
                                  replica_directory_id=ZERO_UUID)])],
             forgotten_topics_data=[], rack_id="")


def _fetch_response(d: FetchResponse, v: int) -> m.FetchResponse:
    R = m.FetchResponse
    div = d.diverging_epoch
    snap = d.snapshot_id
    return R(throttle_time_ms=0, error_code=int(d.error_code), session_id=0, responses=[
        R.FetchableTopicResponse(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[
            R.PartitionData(
                partition_index=METADATA_PARTITION, error_code=int(d.partition_error_code),
                high_watermark=d.high_watermark, last_stable_offset=-1,
                log_start_offset=d.log_start_offset,
                diverging_epoch=R.EpochEndOffset(epoch=div.epoch if div else -1,
                                                 end_offset=div.end_offset if div else -1),
                current_leader=R.LeaderIdAndEpoch(leader_id=d.current_leader.leader_id,
                                                  leader_epoch=d.current_leader.leader_epoch),
                snapshot_id=R.SnapshotId(end_offset=snap.end_offset if snap else -1,
                                         epoch=snap.epoch if snap else -1),
                aborted_transactions=None, preferred_read_replica=-1,
                records=entries_to_records(d.records))])],
        node_endpoints=[])


def _fetch_snapshot_request(d: FetchSnapshotRequest, v: int) -> m.FetchSnapshotRequest:
    R = m.FetchSnapshotRequest
    return R(cluster_id=d.cluster_id, replica_id=d.replica_id, max_bytes=d.max_bytes, topics=[
        R.TopicSnapshot(name=METADATA_TOPIC, partitions=[R.PartitionSnapshot(
            partition=METADATA_PARTITION, current_leader_epoch=d.current_leader_epoch,
            snapshot_id=R.SnapshotId(end_offset=d.snapshot_id.end_offset, epoch=d.snapshot_id.epoch),
            position=d.position, replica_directory_id=ZERO_UUID)])])


def _fetch_snapshot_response(d: FetchSnapshotResponse, v: int) -> m.FetchSnapshotResponse:
    R = m.FetchSnapshotResponse
    return R(throttle_time_ms=0, error_code=int(d.error_code), topics=[
        R.TopicSnapshot(name=METADATA_TOPIC, partitions=[R.PartitionSnapshot(
            index=METADATA_PARTITION, error_code=int(d.partition_error_code),
            snapshot_id=R.SnapshotId(end_offset=d.snapshot_id.end_offset, epoch=d.snapshot_id.epoch),
            current_leader=R.LeaderIdAndEpoch(leader_id=d.current_leader.leader_id,
                                              leader_epoch=d.current_leader.leader_epoch),
            size=d.size, position=d.position, unaligned_records=bytes(d.unaligned_records))])],
        node_endpoints=[])


def _describe_request(d: DescribeQuorumRequest, v: int) -> m.DescribeQuorumRequest:
    R = m.DescribeQuorumRequest
    return R(topics=[R.TopicData(topic_name=METADATA_TOPIC,
                                 partitions=[R.PartitionData(partition_index=METADATA_PARTITION)])])


def _describe_response(d: DescribeQuorumResponse, v: int) -> m.DescribeQuorumResponse:
    R = m.DescribeQuorumResponse

    def replicas(rs: Iterable[ReplicaState]) -> list[m.DescribeQuorumResponse.ReplicaState]:
        return [R.ReplicaState(replica_id=r.replica_id, replica_directory_id=ZERO_UUID,
                               log_end_offset=r.log_end_offset,
                               last_fetch_timestamp=r.last_fetch_timestamp,
                               last_caught_up_timestamp=r.last_caught_up_timestamp) for r in rs]

    return R(error_code=int(d.error_code), error_message=None, topics=[R.TopicData(
        topic_name=METADATA_TOPIC, partitions=[R.PartitionData(
            partition_index=METADATA_PARTITION, error_code=int(d.partition_error_code),
            error_message=None, leader_id=d.leader_id, leader_epoch=d.leader_epoch,
            high_watermark=d.high_watermark, current_voters=replicas(d.current_voters),
            observers=replicas(d.observers))])], nodes=[])


# By the class of the raft value, the function for that class (whose argument type the table
# cannot say, hence Any).
_ENCODERS: dict[type, Callable[[Any, int], Message]] = {
    VoteRequest: _vote_request,
    VoteResponse: _vote_response,
    BeginQuorumEpochRequest: _begin_request,
    BeginQuorumEpochResponse: _begin_response,
    EndQuorumEpochRequest: _end_request,
    EndQuorumEpochResponse: _end_response,
    FetchRequest: _fetch_request,
    FetchResponse: _fetch_response,
    FetchSnapshotRequest: _fetch_snapshot_request,
    FetchSnapshotResponse: _fetch_snapshot_response,
    DescribeQuorumRequest: _describe_request,
    DescribeQuorumResponse: _describe_response,
}


# --------------------------------------------------------------------------- from the wire


def from_wire(api_key: int, version: int, obj: Message, *,
              is_request: bool) -> RaftRequest | RaftResponse:
    """The core.raft.messages value for a decoded wire request or response.

    Raises NotClusterMetadata (with Kafka's error code) for a message about another partition,
    DecodeError for malformed records, NotExpressible for an API or version KRaft does not use.
    """
    _check_version(api_key, version)
    return _DECODERS[(api_key, is_request)](obj, version)


def _vote_request_from(o: m.VoteRequest, v: int) -> VoteRequest:
    p = _by_name(VOTE, o.topics)
    return VoteRequest(cluster_id=o.cluster_id, candidate_epoch=p.candidate_epoch,
                       candidate_id=p.candidate_id, last_offset_epoch=p.last_offset_epoch,
                       last_offset=p.last_offset, pre_vote=bool(p.pre_vote) if v >= 2 else False,
                       voter_id=o.voter_id if v >= 1 else NO_LEADER)


def _vote_response_from(o: m.VoteResponse, v: int) -> VoteResponse:
    p = _by_name(VOTE, o.topics, o.error_code)
    if p is None:
        return VoteResponse(error_code=_code(o.error_code))
    return VoteResponse(error_code=_code(o.error_code), partition_error_code=_code(p.error_code),
                        leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                        vote_granted=bool(p.vote_granted))


def _begin_request_from(o: m.BeginQuorumEpochRequest, v: int) -> BeginQuorumEpochRequest:
    p = _by_name(BEGIN_QUORUM_EPOCH, o.topics)
    return BeginQuorumEpochRequest(cluster_id=o.cluster_id, leader_id=p.leader_id,
                                   leader_epoch=p.leader_epoch,
                                   voter_id=o.voter_id if v >= 1 else NO_LEADER)


def _begin_response_from(o: m.BeginQuorumEpochResponse, v: int) -> BeginQuorumEpochResponse:
    p = _by_name(BEGIN_QUORUM_EPOCH, o.topics, o.error_code)
    if p is None:
        return BeginQuorumEpochResponse(error_code=_code(o.error_code))
    return BeginQuorumEpochResponse(
        error_code=_code(o.error_code), partition_error_code=_code(p.error_code),
        leader_id=p.leader_id, leader_epoch=p.leader_epoch)


def _end_response_from(o: m.EndQuorumEpochResponse, v: int) -> EndQuorumEpochResponse:
    p = _by_name(END_QUORUM_EPOCH, o.topics, o.error_code)
    if p is None:
        return EndQuorumEpochResponse(error_code=_code(o.error_code))
    return EndQuorumEpochResponse(
        error_code=_code(o.error_code), partition_error_code=_code(p.error_code),
        leader_id=p.leader_id, leader_epoch=p.leader_epoch)


def _end_request_from(o: m.EndQuorumEpochRequest, v: int) -> EndQuorumEpochRequest:
    p = _by_name(END_QUORUM_EPOCH, o.topics)
    successors = (tuple(p.preferred_successors) if v == 0
                  else tuple(c.candidate_id for c in p.preferred_candidates))
    return EndQuorumEpochRequest(cluster_id=o.cluster_id, leader_id=p.leader_id,
                                 leader_epoch=p.leader_epoch, preferred_successors=successors)


def _fetch_topic(t: m.FetchRequest.FetchTopic | m.FetchResponse.FetchableTopicResponse,
                 v: int) -> str | bytes:
    return t.topic_id if v >= 13 else t.topic


def _fetch_request_from(o: m.FetchRequest, v: int) -> FetchRequest:
    p = _single(FETCH, o.topics, lambda t: _fetch_topic(t, v), lambda t: t.partitions,
                lambda p: p.partition)
    if v >= 15:
        replica_id, replica_epoch = o.replica_state.replica_id, o.replica_state.replica_epoch
    else:
        replica_id, replica_epoch = o.replica_id, -1
    return FetchRequest(cluster_id=o.cluster_id, replica_id=replica_id, replica_epoch=replica_epoch,
                        max_wait_ms=o.max_wait_ms, min_bytes=o.min_bytes, max_bytes=o.max_bytes,
                        current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
                        last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
                        partition_max_bytes=p.partition_max_bytes)


def _fetch_response_from(o: m.FetchResponse, v: int) -> FetchResponse:
    p = _single(FETCH, o.responses, lambda t: _fetch_topic(t, v), lambda t: t.partitions,
                lambda p: p.partition_index, top_error=o.error_code)
    if p is None:
        return FetchResponse(error_code=_code(o.error_code))
    div, snap = p.diverging_epoch, p.snapshot_id
    return FetchResponse(
        error_code=_code(o.error_code), partition_error_code=_code(p.error_code),
        high_watermark=p.high_watermark, log_start_offset=p.log_start_offset,
        diverging_epoch=(EpochEndOffset(div.epoch, div.end_offset)
                         if div.epoch != -1 or div.end_offset != -1 else None),
        current_leader=LeaderIdAndEpoch(p.current_leader.leader_id, p.current_leader.leader_epoch),
        snapshot_id=(SnapshotId(snap.end_offset, snap.epoch)
                     if snap.end_offset != -1 or snap.epoch != -1 else None),
        records=records_to_entries(_one_buffer(p.records)))


def _fetch_snapshot_request_from(o: m.FetchSnapshotRequest, v: int) -> FetchSnapshotRequest:
    p = _single(FETCH_SNAPSHOT, o.topics, lambda t: t.name, lambda t: t.partitions,
                lambda p: p.partition)
    return FetchSnapshotRequest(cluster_id=o.cluster_id, replica_id=o.replica_id,
                                max_bytes=o.max_bytes, current_leader_epoch=p.current_leader_epoch,
                                snapshot_id=SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                position=p.position)


def _fetch_snapshot_response_from(o: m.FetchSnapshotResponse, v: int) -> FetchSnapshotResponse:
    p = _single(FETCH_SNAPSHOT, o.topics, lambda t: t.name, lambda t: t.partitions,
                lambda p: p.index, top_error=o.error_code)
    if p is None:
        return FetchSnapshotResponse(error_code=_code(o.error_code))
    return FetchSnapshotResponse(
        error_code=_code(o.error_code), partition_error_code=_code(p.error_code),
        snapshot_id=SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
        current_leader=LeaderIdAndEpoch(p.current_leader.leader_id, p.current_leader.leader_epoch),
        size=p.size, position=p.position,
        unaligned_records=bytes(p.unaligned_records) if p.unaligned_records is not None else b"")


def _one_buffer(records: Buffer | Sequence[Buffer] | None) -> Buffer | None:
    """Decoded records are one buffer; only a message built for encoding has a list of them."""
    assert records is None or isinstance(records, (bytes, bytearray, memoryview)), type(records)
    return records


def _describe_request_from(o: m.DescribeQuorumRequest, v: int) -> DescribeQuorumRequest:
    _by_name(DESCRIBE_QUORUM, o.topics)
    return DescribeQuorumRequest()


def _describe_response_from(o: m.DescribeQuorumResponse, v: int) -> DescribeQuorumResponse:
    p = _by_name(DESCRIBE_QUORUM, o.topics, o.error_code)
    if p is None:
        return DescribeQuorumResponse(error_code=_code(o.error_code))

    def replicas(rs: Iterable[m.DescribeQuorumResponse.ReplicaState]) -> tuple[ReplicaState, ...]:
        return tuple(ReplicaState(replica_id=r.replica_id, log_end_offset=r.log_end_offset,
                                  last_fetch_timestamp=r.last_fetch_timestamp if v >= 1 else -1,
                                  last_caught_up_timestamp=r.last_caught_up_timestamp if v >= 1 else -1)
                     for r in rs)

    return DescribeQuorumResponse(
        error_code=_code(o.error_code), partition_error_code=_code(p.error_code),
        leader_id=p.leader_id, leader_epoch=p.leader_epoch, high_watermark=p.high_watermark,
        current_voters=replicas(p.current_voters), observers=replicas(p.observers))


# By (api key, is request), the function for the wire class of that key (whose argument type the
# table cannot say, hence Any).
_DECODERS: dict[tuple[int, bool], Callable[[Any, int], RaftRequest | RaftResponse]] = {
    (VOTE, True): _vote_request_from,
    (VOTE, False): _vote_response_from,
    (BEGIN_QUORUM_EPOCH, True): _begin_request_from,
    (BEGIN_QUORUM_EPOCH, False): _begin_response_from,
    (END_QUORUM_EPOCH, True): _end_request_from,
    (END_QUORUM_EPOCH, False): _end_response_from,
    (FETCH, True): _fetch_request_from,
    (FETCH, False): _fetch_response_from,
    (FETCH_SNAPSHOT, True): _fetch_snapshot_request_from,
    (FETCH_SNAPSHOT, False): _fetch_snapshot_response_from,
    (DESCRIBE_QUORUM, True): _describe_request_from,
    (DESCRIBE_QUORUM, False): _describe_response_from,
}

__all__ = ["METADATA_TOPIC", "METADATA_TOPIC_ID", "METADATA_PARTITION", "VERSIONS",
           "NotClusterMetadata", "NotExpressible", "entries_to_records", "from_wire",
           "records_to_entries", "to_wire"]
