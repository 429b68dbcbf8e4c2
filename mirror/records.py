"""MirrorMaker 2's internal record formats: offset syncs, checkpoints and heartbeats.

Theory of operation
-------------------
MM2 writes three kinds of bookkeeping records, and its tooling (`MirrorClient`,
`RemoteClusterUtils.translateOffsets`, the checkpoint connector) reads them back. Seaway writes
the same bytes to the same topics so that tooling keeps working against a Seaway mirror.

Each key and value is a Kafka `protocol.types.Schema` written with `Schema.write`: the fields
back to back in declaration order, no tags, no framing. The types used are big-endian INT16,
INT32 and INT64, and STRING = int16 byte length N (0..32767) followed by N bytes of UTF-8.
Checkpoint and Heartbeat values start with a "header" struct, a single INT16 `version`; keys
and the OffsetSync value have no version at all. The layouts, from the Java sources of Apache
Kafka (trunk, Oct 2024; unchanged since the formats appeared in 2.4):

    OffsetSync   connect/mirror/src/main/java/org/apache/kafka/connect/mirror/OffsetSync.java
      topic  mm2-offset-syncs.<target alias>.internal (MM2 reads partition 0 only)
      key    topic STRING, partition INT32
      value  upstreamOffset INT64, offset INT64                       (no version header)
      Seaway's addition: a record header `seaway.extent` (ASCII decimal) with the number of
      upstream offsets after the sync that keep their distance downstream (the batch's run,
      mirror/translation.py). MM2 never reads headers; a sync without one has extent 0.

    Checkpoint   connect/mirror-client/src/main/java/org/apache/kafka/connect/mirror/Checkpoint.java
      topic  <source alias>.checkpoints.internal (MirrorClient reads partition 0 only)
      key    group STRING, topic STRING, partition INT32
      value  version INT16 = 0, upstreamOffset INT64, offset INT64, metadata STRING

    Heartbeat    connect/mirror-client/src/main/java/org/apache/kafka/connect/mirror/Heartbeat.java
      topic  heartbeats
      key    sourceClusterAlias STRING, targetClusterAlias STRING
      value  version INT16 = 0, timestamp INT64 (milliseconds since the epoch)

The codec is driven by those schema tables (`_Schema` below), not written per record type.

Where we are stricter than Java's reader, on purpose (every bad input gets an answer):
* trailing bytes after the last field are refused (Java ignores them);
* a value version other than 0 is refused (Java asserts, and with assertions off reads any
  version as version 0);
* a string that is not valid UTF-8 is refused (Java substitutes U+FFFD).
Nothing a real MM2 writes trips any of these. Every malformed input raises
`core.protocol.errors.DecodeError` (a ValueError) that names the record, the field and what is
wrong; lengths are checked against the bytes present before anything is sliced. Objects that
cannot be written (a string over 32767 UTF-8 bytes, an int out of its field's range) raise
`EncodeError` (also a ValueError), as Java's `SchemaException` would.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from core.protocol.errors import DecodeError, EncodeError

VERSION: Final = 0  # the only value version of Checkpoint and Heartbeat that Kafka defines

_STRING_MAX: Final = 0x7FFF  # Java writes the length as a signed short


class _Int:
    def __init__(self, name: str, fmt: str, bits: int):
        self.name = name
        self.codec = struct.Struct(fmt)
        self.lo, self.hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1


class _String:
    name = "string"


INT16: Final = _Int("int16", ">h", 16)
INT32: Final = _Int("int32", ">i", 32)
INT64: Final = _Int("int64", ">q", 64)
STRING: Final = _String()
_LENGTH = INT16.codec

_Type = _Int | _String


@dataclass(frozen=True, slots=True)
class _Schema:
    """A Kafka `protocol.types.Schema`: named, typed fields written back to back."""
    what: str                                 # for messages: "Checkpoint key"
    fields: tuple[tuple[str, _Type], ...]     # Java's field names, so messages match its docs

    def write(self, values: tuple[Any, ...]) -> bytes:
        out = bytearray()
        for (name, ftype), value in zip(self.fields, values, strict=True):
            if isinstance(ftype, _Int):
                # bool is an int in Python but never a meaningful offset or partition
                if not isinstance(value, int) or isinstance(value, bool):
                    raise EncodeError(f"{self.what}: field {name!r} must be an int, "
                                      f"got {type(value).__name__}")
                if not ftype.lo <= value <= ftype.hi:
                    raise EncodeError(f"{self.what}: field {name!r} = {value} does not fit "
                                      f"an {ftype.name}")
                out += ftype.codec.pack(value)
            else:
                if not isinstance(value, str):
                    raise EncodeError(f"{self.what}: field {name!r} must be a str, "
                                      f"got {type(value).__name__}")
                try:
                    data = value.encode("utf-8")
                except UnicodeEncodeError as e:  # lone surrogates
                    raise EncodeError(f"{self.what}: field {name!r} is not encodable as "
                                      f"UTF-8: {e.reason}") from None
                if len(data) > _STRING_MAX:
                    raise EncodeError(f"{self.what}: field {name!r} is {len(data)} bytes of "
                                      f"UTF-8, more than the {_STRING_MAX} a STRING can hold")
                out += _LENGTH.pack(len(data))
                out += data
        return bytes(out)

    def read(self, buf: memoryview, pos: int) -> tuple[tuple[Any, ...], int]:
        """Decode the fields at `pos`; returns the values and the position after them."""
        values: list[Any] = []
        for name, ftype in self.fields:
            remaining = len(buf) - pos
            if isinstance(ftype, _Int):
                size = ftype.codec.size
                if remaining < size:
                    raise DecodeError(f"{self.what}: too short: field {name!r} ({ftype.name}) "
                                      f"needs {size} bytes at byte {pos}, {remaining} left")
                values.append(ftype.codec.unpack_from(buf, pos)[0])
                pos += size
                continue
            if remaining < _LENGTH.size:
                raise DecodeError(f"{self.what}: too short: the length of string field "
                                  f"{name!r} needs 2 bytes at byte {pos}, {remaining} left")
            (length,) = _LENGTH.unpack_from(buf, pos)
            pos += _LENGTH.size
            if length < 0:
                raise DecodeError(f"{self.what}: bad string length {length} for field "
                                  f"{name!r} at byte {pos - 2} (negative)")
            if length > len(buf) - pos:
                raise DecodeError(f"{self.what}: bad string length {length} for field "
                                  f"{name!r} at byte {pos - 2}: only {len(buf) - pos} bytes "
                                  f"left")
            try:
                values.append(str(buf[pos:pos + length], "utf-8"))
            except UnicodeDecodeError as e:
                raise DecodeError(f"{self.what}: string field {name!r} is not valid UTF-8 "
                                  f"({e.reason} at byte {pos + e.start})") from None
            pos += length
        return tuple(values), pos


def _view(data: bytes | bytearray | memoryview | None, what: str) -> memoryview:
    if data is None:
        raise DecodeError(f"{what}: missing (null)")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(f"{what}: expected bytes, got {type(data).__name__}")
    return memoryview(data).cast("B")


def _decode(schema: _Schema, data: bytes | bytearray | memoryview | None) -> tuple[Any, ...]:
    buf = _view(data, schema.what)
    values, end = schema.read(buf, 0)
    if end != len(buf):
        raise DecodeError(f"{schema.what}: {len(buf) - end} unexpected trailing bytes after "
                          f"byte {end}")
    return values


class _Versioned:
    """A value that starts with Kafka's HEADER_SCHEMA (INT16 version), then the body schema
    of that version."""

    def __init__(self, what: str, versions: dict[int, _Schema]):
        self.what = what
        self.header = _Schema(what, (("version", INT16),))
        self.versions = versions

    def write(self, version: int, values: tuple[Any, ...]) -> bytes:
        if version not in self.versions:
            raise EncodeError(f"{self.what}: unknown version {version} "
                              f"(known: {sorted(self.versions)})")
        return self.header.write((version,)) + self.versions[version].write(values)

    def decode(self, data: bytes | bytearray | memoryview | None) -> tuple[Any, ...]:
        buf = _view(data, self.what)
        (version,), pos = self.header.read(buf, 0)
        body = self.versions.get(version)
        if body is None:
            raise DecodeError(f"{self.what}: unknown version {version} "
                              f"(known: {sorted(self.versions)})")
        values, end = body.read(buf, pos)
        if end != len(buf):
            raise DecodeError(f"{self.what}: {len(buf) - end} unexpected trailing bytes "
                              f"after byte {end}")
        return values


# The schema tables, in the Java files' field order (see the module docstring for paths).
_OFFSET_SYNC_KEY = _Schema("OffsetSync key", (("topic", STRING), ("partition", INT32)))
_OFFSET_SYNC_VALUE = _Schema("OffsetSync value", (("upstreamOffset", INT64), ("offset", INT64)))
_CHECKPOINT_KEY = _Schema("Checkpoint key",
                          (("group", STRING), ("topic", STRING), ("partition", INT32)))
_CHECKPOINT_VALUE = _Versioned("Checkpoint value", {0: _Schema("Checkpoint value", (
    ("upstreamOffset", INT64), ("offset", INT64), ("metadata", STRING)))})
_HEARTBEAT_KEY = _Schema("Heartbeat key",
                         (("sourceClusterAlias", STRING), ("targetClusterAlias", STRING)))
_HEARTBEAT_VALUE = _Versioned("Heartbeat value",
                              {0: _Schema("Heartbeat value", (("timestamp", INT64),))})


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """Upstream offset `upstream_offset` of source partition (topic, partition) is at
    `downstream_offset` in the mirrored partition (see mirror/translation.py for what Seaway
    means by that)."""
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    extent: int = 0       # Seaway's: the run after the sync (a header, not in MM2's value)


EXTENT_HEADER: Final = "seaway.extent"
_EXTENT_MAX: Final = 2**63 - 1      # offsets are INT64


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Consumer group `group` committed `upstream_offset` on the source partition (topic,
    partition); `downstream_offset` is where it resumes on the target cluster. `topic` is
    the target-side (remote) name: MM2 renames the partition before writing
    (MirrorCheckpointTask.checkpoint, renameTopicPartition). `metadata` is the group's commit metadata."""
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A liveness beacon from a source cluster through one replication flow; `timestamp` in
    milliseconds since the epoch."""
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int


Bytes = bytes | bytearray | memoryview


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """(key, value) of an offset-sync record."""
    return (_OFFSET_SYNC_KEY.write((sync.topic, sync.partition)),
            _OFFSET_SYNC_VALUE.write((sync.upstream_offset, sync.downstream_offset)))


def offset_sync_headers(sync: OffsetSync) -> list[tuple[str, bytes]]:
    """The record headers of an offset-sync record: its extent, when it has one."""
    return [(EXTENT_HEADER, b"%d" % sync.extent)] if sync.extent else []


def decode_offset_sync(key: Bytes | None, value: Bytes | None,
                       headers: list[tuple[str, Bytes | None]] | None = None) -> OffsetSync:
    topic, partition = _decode(_OFFSET_SYNC_KEY, key)
    upstream, downstream = _decode(_OFFSET_SYNC_VALUE, value)
    extent = 0
    for name, raw in headers or ():
        if name != EXTENT_HEADER:
            continue
        text = bytes(raw or b"")
        if not text.isdigit() or len(text) > 19 or int(text) > _EXTENT_MAX:
            raise DecodeError(f"OffsetSync header {EXTENT_HEADER}: {text[:20]!r} is not an extent "
                              f"(0..{_EXTENT_MAX} in ASCII digits)")
        extent = int(text)
    return OffsetSync(topic, partition, upstream, downstream, extent)


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """(key, value) of a checkpoint record, value at VERSION."""
    c = checkpoint
    return (_CHECKPOINT_KEY.write((c.group, c.topic, c.partition)),
            _CHECKPOINT_VALUE.write(VERSION, (c.upstream_offset, c.downstream_offset,
                                              c.metadata)))


def decode_checkpoint(key: Bytes | None, value: Bytes | None) -> Checkpoint:
    group, topic, partition = _decode(_CHECKPOINT_KEY, key)
    upstream, downstream, metadata = _CHECKPOINT_VALUE.decode(value)
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def encode_heartbeat(heartbeat: Heartbeat) -> tuple[bytes, bytes]:
    """(key, value) of a heartbeat record, value at VERSION."""
    h = heartbeat
    return (_HEARTBEAT_KEY.write((h.source_cluster_alias, h.target_cluster_alias)),
            _HEARTBEAT_VALUE.write(VERSION, (h.timestamp,)))


def decode_heartbeat(key: Bytes | None, value: Bytes | None) -> Heartbeat:
    source, target = _decode(_HEARTBEAT_KEY, key)
    (timestamp,) = _HEARTBEAT_VALUE.decode(value)
    return Heartbeat(source, target, timestamp)
