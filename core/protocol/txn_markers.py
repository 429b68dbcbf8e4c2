"""Transaction markers' control records, and what Seaway's coordinator adds to them.

Kafka's marker (EndTransactionMarker) is a control batch with one record:

    key    version int16 (0), type int16 (ABORT 0, COMMIT 1)
    value  version int16 (0), coordinator epoch int32

Kafka's readers take those six bytes of the value and ignore anything after them
(EndTransactionMarker.deserializeValue reads the version and the epoch; consumers read only the
key), so Seaway's coordinator appends to the value what names the transaction:

    start_ms       int64   when the transaction began; strictly increasing per transactional
                           id (core/broker/transactions/state.py), so (producer id, producer
                           epoch, start_ms) names one transaction
    topic_count    int16   -1 when the list below was left out (see MAX_EXTENSION)
    per topic      name (int16 length, UTF-8), partition count int32: how many partitions of
                   each topic the transaction wrote

Every partition of a transaction gets a marker with the same extension. That is what a DR link
needs to copy a source transaction whole (a marker tells it which transaction ended there, and
how many partitions of each topic it copies must end it before any may be committed), and it
asks nothing of the source but its logs: no read of `__transaction_state`, no second protocol.

The coordinator sends the extension to the partition leaders in WriteTxnMarkers' Seaway tagged
fields (core/protocol/schema/write_txn_markers.ks); a marker written on behalf of a Kafka
coordinator, or by `kafka-transactions abort`, has none.

Size. The list grows with the number of topics a transaction wrote, and it is written once per
partition, so beyond MAX_EXTENSION bytes it is left out (topic_count -1): such a marker still
names its transaction, and a reader that needs the counts treats them as unknown.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

from .compression import decompress
from .buffers import Buffer
from .errors import DecodeError
from .records import HEADER_SIZE, BatchInfo
from .varint import read_varint, read_varlong

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")         # version, type
_VALUE = struct.Struct(">hi")       # version, coordinator epoch
_START = struct.Struct(">qh")       # start_ms, topic_count
_NAME = struct.Struct(">h")
_COUNT = struct.Struct(">i")
MAX_EXTENSION = 4096


@dataclass(frozen=True)
class TxnShape:
    """Which transaction a marker ends: its start, and its partition count per topic (None
    when the list was too long to write)."""
    start_ms: int
    topics: tuple[tuple[str, int], ...] | None

    @classmethod
    def of(cls, start_ms: int, partitions: Iterable[tuple[str, int]]) -> "TxnShape":
        """From a transaction's start and its (topic, partition) pairs."""
        counts: dict[str, int] = {}
        for topic, _ in partitions:
            counts[topic] = counts.get(topic, 0) + 1
        return cls(start_ms, tuple(sorted(counts.items())))


@dataclass(frozen=True)
class MarkerValue:
    coordinator_epoch: int
    shape: TxnShape | None      # None: a Kafka marker, without Seaway's extension


def read_marker(buf: Buffer, info: BatchInfo) -> tuple[int, memoryview] | None:
    """The type (ABORT/COMMIT) and the raw value of the transaction marker in control batch
    `info` of `buf` (`info.position` is where the batch starts), as Kafka's
    EndTransactionMarker.deserialize finds them: the first record's key (version int16, type
    int16) and value. None for a data batch, an empty control batch (the cleaner emptied it),
    a control record that is not COMMIT/ABORT, or a value shorter than Kafka's. Raises
    DecodeError for a record that runs past its batch. The value is decoded apart
    (`decode_marker_value`): a reader that needs only the epoch never fails on Seaway's part."""
    if not info.is_control or info.records_count <= 0:
        return None
    view = memoryview(buf)[info.position + HEADER_SIZE:info.position + info.size]
    if info.compression:
        view = memoryview(decompress(info.compression, view, 1 << 20))
    try:
        _length, pos = read_varint(view, 0)
        pos += 1                                   # record attributes
        _ts_delta, pos = read_varlong(view, pos)
        _offset_delta, pos = read_varint(view, pos)
        key_len, pos = read_varint(view, pos)
        if key_len < _KEY.size:
            return None
        _key_version, control_type = _KEY.unpack_from(view, pos)
        pos += key_len
        value_len, pos = read_varint(view, pos)
    except struct.error as exc:
        raise DecodeError(f"control record of batch at offset {info.base_offset} runs past it: {exc}") from None
    if control_type not in (ABORT, COMMIT) or value_len < _VALUE.size:
        return None
    if pos + value_len > len(view):
        raise DecodeError(f"control record of batch at offset {info.base_offset} runs past it")
    return control_type, view[pos:pos + value_len]


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(0, COMMIT if commit else ABORT)


def encode_marker_value(coordinator_epoch: int, shape: TxnShape | None = None) -> bytes:
    value = _VALUE.pack(0, coordinator_epoch)
    if shape is None or shape.start_ms < 0:
        return value
    topics = b"".join(_NAME.pack(len(raw)) + raw + _COUNT.pack(count)
                      for raw, count in ((name.encode(), count) for name, count in shape.topics or ()))
    if shape.topics is None or _START.size + len(topics) > MAX_EXTENSION:
        return value + _START.pack(shape.start_ms, -1)
    return value + _START.pack(shape.start_ms, len(shape.topics)) + topics


def decode_marker_value(value: bytes | bytearray | memoryview) -> MarkerValue:
    """Kafka's six bytes, then Seaway's extension if there is one. DecodeError for a value
    shorter than Kafka's or an extension that runs past it."""
    view = memoryview(value)
    if len(view) < _VALUE.size:
        raise DecodeError(f"transaction marker value of {len(view)} bytes (Kafka's has {_VALUE.size})")
    _version, epoch = _VALUE.unpack_from(view, 0)
    if len(view) == _VALUE.size:
        return MarkerValue(epoch, None)
    try:
        start_ms, count = _START.unpack_from(view, _VALUE.size)
        if count < 0:
            return MarkerValue(epoch, TxnShape(start_ms, None))
        pos = _VALUE.size + _START.size
        topics = []
        for _ in range(count):
            (length,) = _NAME.unpack_from(view, pos)
            pos += _NAME.size
            if length < 0 or pos + length > len(view):
                raise DecodeError(f"topic name of {length} bytes runs past the marker's value")
            name = bytes(view[pos:pos + length]).decode()
            pos += length
            (partitions,) = _COUNT.unpack_from(view, pos)
            pos += _COUNT.size
            topics.append((name, partitions))
    except (struct.error, UnicodeDecodeError) as exc:
        raise DecodeError(f"Seaway's transaction marker extension is cut short or garbled: {exc}") from None
    return MarkerValue(epoch, TxnShape(start_ms, tuple(topics)))
