"""How records are framed in the `__cluster_metadata` log: metadata records and KRaft control
records.

Theory of operation
-------------------
The metadata log is a Kafka log of ordinary v2 record batches (records.py). Its batches hold
either data records or control records, never both:

* A **data record** has a null key, no headers, and a value framed as Kafka's
  `MetadataRecordSerde` (`AbstractApiMessageSerde`) frames it:

      uvarint frame version   always 1 (0 was KRaft's 2.8 preview and is refused, as Kafka does)
      uvarint record type     Kafka's "apiKey" of a "type": "metadata" spec (schema/metadata/)
      uvarint record version  the version the struct below is written in
      struct                  the record at that version (every record is flexible)

  Each uvarint must fit an int16, and the struct must end exactly at the end of the value.

* A **control record** sits in a batch with the control attribute set. Its key is the
  control record key, `int16 version (0) + int16 type`, and its value is the struct of that
  type written at schema version 0, which is what Kafka writes and reads
  (`ControlRecordUtils.*_CURRENT_VERSION`); the struct's own first field, `Version`, is the
  application-level version Kafka reports. The KRaft types are LEADER_CHANGE (2),
  SNAPSHOT_HEADER (3), SNAPSHOT_FOOTER (4), KRAFT_VERSION (5) and KRAFT_VOTERS (6); 0 and 1
  are the transaction markers of data partitions and never appear here. Like Kafka, a key of a
  newer key version is read as version 0 (later versions may only append), and a negative one
  is corrupt.

Kafka's raft reader also insists that every record of a metadata batch has timestamp delta 0
and no headers: give all records of one batch the batch's timestamp.

Everything malformed raises `DecodeError` (or `UnknownRecordType`, a `DecodeError` that names
the type); sizes are checked by the generated codec before anything is allocated.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from typing import TypeAlias

from .buffers import Buffer
from .codegen import Message, MessageCodec
from .errors import DecodeError, EncodeError
from .messages import (DATA, METADATA_RECORDS, KRaftVersionRecord, LeaderChangeMessage,
                       SnapshotFooterRecord, SnapshotHeaderRecord, VotersRecord)
from .varint import read_uvarint, uvarint_bytes

FRAME_VERSION = 1
_INT16_MAX = 0x7FFF


class UnknownRecordType(DecodeError):
    """A metadata or control record of a type we do not declare."""

    def __init__(self, message: str, record_type: int):
        super().__init__(message)
        self.record_type = record_type


# --------------------------------------------------------------------------- metadata records

_TYPE_OF_CLASS: dict[type, int] = {codec.cls: rtype for rtype, codec in METADATA_RECORDS.items()}


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One decoded metadata record and the version it was written in (Kafka's
    ApiMessageAndVersion)."""
    message: Message
    version: int

    @property
    def record_type(self) -> int:
        return _TYPE_OF_CLASS[type(self.message)]

    @property
    def name(self) -> str:
        return type(self.message).__name__


def record_type_of(message: Message) -> int:
    """The record type of a metadata record object; EncodeError for anything else."""
    rtype = _TYPE_OF_CLASS.get(type(message))
    if rtype is None:
        raise EncodeError(f"{type(message).__name__} is not a metadata record")
    return rtype


def encode_record(record: Message | MetadataRecord, version: int | None = None) -> bytes:
    """The framed value of a metadata record. `version` defaults to a MetadataRecord's own
    version, else to the newest version we declare for the record."""
    if isinstance(record, MetadataRecord):
        message = record.message
        version = record.version if version is None else version
    else:
        message = record
    rtype = record_type_of(message)
    codec = METADATA_RECORDS[rtype]
    if version is None:
        version = codec.spec.max_version
    if version not in codec.spec.versions:
        raise EncodeError(f"{codec.spec.name} has no version {version} "
                          f"(we declare {codec.spec.versions})")
    return uvarint_bytes(FRAME_VERSION) + uvarint_bytes(rtype) + uvarint_bytes(version) \
        + codec.encode(version, message)


def _read_int16_uvarint(view: memoryview, pos: int, what: str) -> tuple[int, int]:
    try:
        value, pos = read_uvarint(view, pos)
    except DecodeError as exc:
        raise DecodeError(f"metadata record {what}: {exc}") from None
    if value > _INT16_MAX:
        raise DecodeError(f"metadata record {what} {value} is too large")
    return value, pos


def decode_record(buf: Buffer) -> MetadataRecord:
    """Decode one framed metadata record value (the whole of `buf`)."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if len(view) == 0:
        raise DecodeError("metadata record value is empty")
    frame, pos = _read_int16_uvarint(view, 0, "frame version")
    if frame != FRAME_VERSION:
        detail = " (KRaft's 2.8 preview format)" if frame == 0 else ""
        raise DecodeError(f"metadata record has frame version {frame}{detail}; "
                          f"only frame version {FRAME_VERSION} is supported")
    rtype, pos = _read_int16_uvarint(view, pos, "type")
    version, pos = _read_int16_uvarint(view, pos, "version")
    codec = METADATA_RECORDS.get(rtype)
    if codec is None:
        raise UnknownRecordType(f"unknown metadata record type {rtype}", rtype)
    if version not in codec.spec.versions:
        raise DecodeError(f"{codec.spec.name} (type {rtype}) version {version} is not supported "
                          f"(we read {codec.spec.versions})")
    return MetadataRecord(codec.decode(version, view, pos), version)


# --------------------------------------------------------------------------- control records


class ControlRecordType(enum.IntEnum):
    ABORT = 0            # transaction markers: data partitions only
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


CONTROL_KEY_VERSION = 0
CONTROL_KEY_SIZE = 4
CONTROL_RECORD_VERSION = 0  # the schema version of every KRaft control record value
_CONTROL_KEY = struct.Struct(">hh")

CONTROL_RECORDS: dict[int, MessageCodec] = {   # by ControlRecordType
    ControlRecordType.LEADER_CHANGE: DATA["LeaderChangeMessage"],
    ControlRecordType.SNAPSHOT_HEADER: DATA["SnapshotHeaderRecord"],
    ControlRecordType.SNAPSHOT_FOOTER: DATA["SnapshotFooterRecord"],
    ControlRecordType.KRAFT_VERSION: DATA["KRaftVersionRecord"],
    ControlRecordType.KRAFT_VOTERS: DATA["VotersRecord"],
}
_CONTROL_TYPE_OF_CLASS = {codec.cls: ctype for ctype, codec in CONTROL_RECORDS.items()}
# The classes of CONTROL_RECORDS, each with its application-level `version`.
ControlMessage: TypeAlias = (LeaderChangeMessage | SnapshotHeaderRecord | SnapshotFooterRecord
                             | KRaftVersionRecord | VotersRecord)
_CONTROL_MESSAGE_TYPES = (LeaderChangeMessage, SnapshotHeaderRecord, SnapshotFooterRecord,
                          KRaftVersionRecord, VotersRecord)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """One decoded KRaft control record."""
    type: ControlRecordType
    message: ControlMessage

    @property
    def version(self) -> int:
        """The application-level version the record carries in its `Version` field."""
        return self.message.version


def encode_control_key(ctype: int) -> bytes:
    return _CONTROL_KEY.pack(CONTROL_KEY_VERSION, int(ctype))


def decode_control_key(key: Buffer | None) -> int:
    """The type a control record key names (any int16; unknown types are the caller's call)."""
    if key is None or len(key) < CONTROL_KEY_SIZE:
        size = "null" if key is None else f"{len(key)} bytes"
        raise DecodeError(f"control record key is {size}; it needs {CONTROL_KEY_SIZE}")
    version: int
    ctype: int
    version, ctype = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise DecodeError(f"control record key has negative version {version}")
    return ctype


def encode_control_record(message: Message) -> tuple[bytes, bytes]:
    """(key, value) of a KRaft control record."""
    ctype = _CONTROL_TYPE_OF_CLASS.get(type(message))
    if ctype is None:
        raise EncodeError(f"{type(message).__name__} is not a KRaft control record")
    value = CONTROL_RECORDS[ctype].encode(CONTROL_RECORD_VERSION, message)
    return encode_control_key(ctype), value


def decode_control_record(key: Buffer | None, value: Buffer | None) -> ControlRecord:
    ctype = decode_control_key(key)
    codec = CONTROL_RECORDS.get(ctype)
    if codec is None:
        if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise UnknownRecordType(f"control record type {ctype} is a transaction marker, "
                                    "not a KRaft control record", ctype)
        raise UnknownRecordType(f"unknown control record type {ctype}", ctype)
    if value is None or len(value) == 0:
        raise DecodeError(f"{ControlRecordType(ctype).name} control record has no value")
    message = codec.decode(CONTROL_RECORD_VERSION, value)
    assert isinstance(message, _CONTROL_MESSAGE_TYPES), message   # the classes of CONTROL_RECORDS
    return ControlRecord(ControlRecordType(ctype), message)
