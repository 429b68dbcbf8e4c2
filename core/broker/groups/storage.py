"""The records of `__consumer_offsets`, in Kafka's own format, and which partition holds a group.

A record key is an int16 key version and a struct: versions 0 and 1 are a committed offset
(group, topic, partition), version 2 a group's metadata (group). A value is an int16 value
version and the matching struct; a null value is a tombstone, which compaction keeps only
for `delete.retention.ms`. Because the layout is Kafka's, Kafka's own tools (and a Kafka
broker reading a copied log) understand these records, and we read Kafka-written ones.

Key versions above 2 belong to the KIP-848 consumer protocol and share groups; a loader skips
them (`decode_key` returns None) rather than failing the whole partition.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Union

from core.protocol.errors import DecodeError
from core.protocol.messages import (DATA, GroupMetadataKey, GroupMetadataValue, OffsetCommitKey,
                                    OffsetCommitValue)

from .events import GroupMetadataRecord, MemberRecord

TOPIC = "__consumer_offsets"

_OFFSET_KEY = DATA["OffsetCommitKey"]
_OFFSET_VALUE = DATA["OffsetCommitValue"]
_GROUP_KEY = DATA["GroupMetadataKey"]
_GROUP_VALUE = DATA["GroupMetadataValue"]
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3
_VERSION = struct.Struct(">h")


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's placement: abs(Java String.hashCode(group)) % partitions, so a group lives in
    the same partition number here as on a Kafka cluster with the same partition count."""
    h = 0
    data = group_id.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 0x100000000
    return (0 if h == -0x80000000 else abs(h)) % num_partitions


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1    # -1: expires with the group, per offsets.retention.minutes


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


Key = Union[OffsetKey, GroupKey]


def _with_version(version: int, codec, obj) -> bytes:
    return _VERSION.pack(version) + codec.encode(version, obj)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _with_version(OFFSET_KEY_VERSION, _OFFSET_KEY,
                         OffsetCommitKey(group=group, topic=topic, partition=partition))


def offset_value(c: CommittedOffset) -> bytes:
    # As Kafka: v1 only to carry an explicit expiry (OffsetCommit v2-4 retention), else v3.
    version = 1 if c.expire_timestamp_ms >= 0 else 3
    return _with_version(version, _OFFSET_VALUE, OffsetCommitValue(
        offset=c.offset, leader_epoch=c.leader_epoch, metadata=c.metadata,
        commit_timestamp=c.commit_timestamp_ms, expire_timestamp=c.expire_timestamp_ms))


def group_key(group: str) -> bytes:
    return _with_version(GROUP_KEY_VERSION, _GROUP_KEY, GroupMetadataKey(group=group))


def group_value(r: GroupMetadataRecord) -> bytes:
    cls = GroupMetadataValue
    members = [cls.MemberMetadata(
        member_id=mr.member_id, group_instance_id=mr.group_instance_id, client_id=mr.client_id,
        client_host=mr.client_host, rebalance_timeout=mr.rebalance_timeout_ms,
        session_timeout=mr.session_timeout_ms, subscription=mr.subscription,
        assignment=mr.assignment) for mr in r.members]
    return _with_version(GROUP_VALUE_VERSION, _GROUP_VALUE, cls(
        protocol_type=r.protocol_type, generation=r.generation_id, protocol=r.protocol_name,
        leader=r.leader, current_state_timestamp=r.current_state_timestamp_ms, members=members))


def _split(blob, what: str) -> tuple[int, memoryview]:
    view = memoryview(blob)
    if len(view) < 2:
        raise DecodeError(f"{what} is {len(view)} bytes; it needs a 2-byte version")
    return _VERSION.unpack_from(view)[0], view


def decode_key(blob) -> Optional[Key]:
    version, view = _split(blob, "__consumer_offsets key")
    if version in (0, 1):
        k = _OFFSET_KEY.decode(version, view, 2)
        assert isinstance(k, OffsetCommitKey)   # the class of _OFFSET_KEY
        return OffsetKey(k.group, k.topic, k.partition)
    if version == 2:
        g = _GROUP_KEY.decode(version, view, 2)
        assert isinstance(g, GroupMetadataKey)   # the class of _GROUP_KEY
        return GroupKey(g.group)
    if version < 0:
        raise DecodeError(f"__consumer_offsets key has negative version {version}")
    return None


def _decode_value(codec, blob, what: str):
    version, view = _split(blob, what)
    if version < 0:
        raise DecodeError(f"{what} has negative version {version}")
    # a newer value is read with our newest layout: Kafka only adds tagged fields from v4
    readable = min(version, codec.spec.versions.high)
    return codec.decode(readable, view, 2, whole=version <= codec.spec.versions.high)


def decode_offset_value(blob) -> CommittedOffset:
    v = _decode_value(_OFFSET_VALUE, blob, "offset commit value")
    if isinstance(v, tuple):
        v = v[0]
    return CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                           v.expire_timestamp)


def decode_group_value(blob) -> GroupMetadataRecord:
    v = _decode_value(_GROUP_VALUE, blob, "group metadata value")
    if isinstance(v, tuple):
        v = v[0]
    has_rebalance_timeout = _VERSION.unpack_from(blob)[0] >= 1   # v0 had only the session one
    members = tuple(MemberRecord(
        mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
        mm.rebalance_timeout if has_rebalance_timeout else mm.session_timeout,
        mm.session_timeout, bytes(mm.subscription), bytes(mm.assignment)) for mm in v.members)
    return GroupMetadataRecord(v.protocol_type, v.generation, v.protocol, v.leader,
                               v.current_state_timestamp, members)
