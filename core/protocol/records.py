"""Record batches, magic v2.

Theory of operation
-------------------
A record batch is a 61-byte header followed by records. Brokers never look past the header:
they check the framing and the CRC32C, then patch `baseOffset` (bytes 0..8, outside the CRC)
to assign offsets, and store the bytes as they came. Only clients decode records, which is
why this module has two halves: batch-level functions that cost the same whatever the record
count (`scan_batches`, `assign_offsets`), and record-level ones for producers and consumers
(`build_batch`, `decode_batch`, `iter_records`).

Header layout (big-endian):

    0  baseOffset int64          35 maxTimestamp int64
    8  batchLength int32         43 producerId int64
    12 partitionLeaderEpoch      51 producerEpoch int16
    16 magic int8                53 baseSequence int32
    17 crc uint32 (CRC32C of 21..end)
    21 attributes int16          57 recordsCount int32
    23 lastOffsetDelta int32     61 records...
    27 baseTimestamp int64
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Literal, NamedTuple, Sequence, TypeAlias, overload

from crc32c import crc32c

from .buffers import Buffer
from .compression import Compression, compress, decompress
from .errors import DecodeError, ErrorCode
from .varint import read_varint, read_varlong, write_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength, the part not counted by batchLength
MAGIC = 2

# Where each header field starts, from the batch's first byte (the layout above). Every module
# that patches or peeks at a header uses these, never the numbers.
BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43      # producerId int64, then producerEpoch int16 and baseSequence int32
BASE_SEQUENCE_AT = 53
RECORDS_COUNT_AT = 57
CRC_START = ATTRIBUTES_AT   # the CRC covers everything from the attributes on

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# The smallest record: length, attributes, timestamp delta, offset delta, key length,
# value length and header count, one byte each.
MIN_RECORD_SIZE = 7

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LENGTH_AND_MAGIC = struct.Struct(">qiib")  # baseOffset, batchLength, leaderEpoch, magic
_CRC = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


class InvalidBatch(ValueError):
    """A batch a broker must refuse; carries the Kafka error code to answer with."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class BatchInfo(NamedTuple):
    position: int            # where the batch starts in the scanned buffer
    size: int                # total bytes, LOG_OVERHEAD included
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)


def read_batch_header(buf: Buffer, pos: int = 0) -> BatchInfo:
    """Parse one header; the caller has checked that HEADER_SIZE bytes are there."""
    fields = _HEADER.unpack_from(buf, pos)
    length = fields[1]
    return BatchInfo(pos, length + LOG_OVERHEAD, fields[0], *fields[2:])


def scan_batches(buf: Buffer, *, verify_crc: bool = True, max_batch_size: int | None = None,
                 from_client: bool = False) -> list[BatchInfo]:
    """Check the framing (and CRC) of every batch in `buf`; return their headers.

    Raises InvalidBatch with CORRUPT_MESSAGE for framing or CRC damage,
    MESSAGE_TOO_LARGE for a batch over `max_batch_size`, and INVALID_RECORD for a
    client batch whose count and offset range disagree. Work is per batch, not per record.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    batches: list[BatchInfo] = []
    if end == 0:
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, "empty record set")
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE,
                               f"{end - pos} trailing bytes cannot hold a batch header")
        info = read_batch_header(view, pos)
        if info.magic != MAGIC:
            raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE if info.magic > MAGIC else ErrorCode.INVALID_RECORD,
                               f"record batch magic {info.magic} is not supported (only v2)")
        if info.size < HEADER_SIZE:
            raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE,
                               f"batch length {info.size - LOG_OVERHEAD} is shorter than its header")
        if pos + info.size > end:
            raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE,
                               f"batch length {info.size - LOG_OVERHEAD} runs past the record set")
        if max_batch_size is not None and info.size > max_batch_size:
            raise InvalidBatch(ErrorCode.MESSAGE_TOO_LARGE,
                               f"batch of {info.size} bytes exceeds message.max.bytes {max_batch_size}")
        if verify_crc and crc32c(view[pos + CRC_START:pos + info.size]) != info.crc:
            raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, "record batch CRC32C mismatch")
        if from_client:
            _check_client_batch(info)
        batches.append(info)
        pos += info.size
    return batches


def _check_client_batch(info: BatchInfo) -> None:
    if info.records_count <= 0:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, f"batch has {info.records_count} records")
    if info.last_offset_delta + 1 != info.records_count:
        raise InvalidBatch(ErrorCode.INVALID_RECORD,
                           f"batch offset range of {info.last_offset_delta + 1} "
                           f"disagrees with its count of {info.records_count} records")
    if (info.compression == Compression.NONE
            and info.records_count * MIN_RECORD_SIZE > info.size - HEADER_SIZE):
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE,
                           f"{info.records_count} records cannot fit in "
                           f"{info.size - HEADER_SIZE} bytes")
    if info.compression > Compression.ZSTD:
        raise InvalidBatch(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                           f"unknown compression codec {info.compression}")


def assign_offsets(buf: bytearray | memoryview, batches: Sequence[BatchInfo], first_offset: int) -> int:
    """Patch each batch's baseOffset so the batches run on from `first_offset`.

    baseOffset lies outside the CRC, so no checksum changes. Returns the next offset.
    """
    offset = first_offset
    for info in batches:
        _BASE_OFFSET.pack_into(buf, info.position, offset)
        offset += info.last_offset_delta + 1
    return offset


def set_partition_leader_epoch(buf: bytearray | memoryview, batches: Sequence[BatchInfo], epoch: int) -> None:
    """Stamp each batch with the leader epoch it is appended in (outside the CRC, like the
    base offset)."""
    for info in batches:
        _I32.pack_into(buf, info.position + LEADER_EPOCH_AT, epoch)


def set_log_append_time(buf: bytearray | memoryview, batches: Sequence[BatchInfo], now_ms: int) -> None:
    """For topics with message.timestamp.type=LogAppendTime: stamp the batch and re-CRC it."""
    view = memoryview(buf)
    for info in batches:
        attrs = info.attributes | ATTR_LOG_APPEND_TIME
        struct.pack_into(">h", view, info.position + ATTRIBUTES_AT, attrs)
        _I64.pack_into(view, info.position + MAX_TIMESTAMP_AT, now_ms)
        crc = crc32c(view[info.position + CRC_START:info.position + info.size])
        _CRC.pack_into(view, info.position + CRC_AT, crc)


def iter_batch_headers(buf: Buffer, pos: int = 0) -> Iterator[BatchInfo]:
    """Walk headers without checking CRCs; stops at the first incomplete batch.

    Fetch responses may end in a partial batch (Kafka cuts at max bytes); clients
    must skip it, so this stops quietly instead of raising.
    """
    view = memoryview(buf)
    end = len(view)
    while end - pos >= HEADER_SIZE:
        info = read_batch_header(view, pos)
        if info.size < HEADER_SIZE or pos + info.size > end:
            return
        yield info
        pos += info.size


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime


@dataclass(slots=True)
class ControlRecord:
    offset: int
    type: int  # 0 abort, 1 commit
    producer_id: int


# What encode_records and build_batch take: (key, value, headers, timestamp_ms); header keys and
# values may be str (encoded as UTF-8) or bytes.
RecordTuple: TypeAlias = tuple[Buffer | None, Buffer | None,
                               Sequence[tuple[str | Buffer, str | Buffer | None]] | None, int]


def encode_records(records: Iterable[RecordTuple], base_timestamp: int) -> tuple[bytearray, int, int]:
    """Encode (key, value, headers, timestamp) tuples; returns (bytes, count, max_timestamp)."""
    out = bytearray()
    count = 0
    max_ts = base_timestamp
    body = bytearray()
    for key, value, headers, ts in records:
        body.clear()
        body += b"\x00"  # attributes, unused
        write_varint(body, ts - base_timestamp)
        write_varint(body, count)
        if key is None:
            body += b"\x01"
        else:
            write_varint(body, len(key))
            body += key
        if value is None:
            body += b"\x01"
        else:
            write_varint(body, len(value))
            body += value
        if headers:
            write_varint(body, len(headers))
            for hkey, hvalue in headers:
                hk = hkey.encode() if isinstance(hkey, str) else hkey
                write_varint(body, len(hk))
                body += hk
                if hvalue is None:
                    body += b"\x01"
                else:
                    hv = hvalue.encode() if isinstance(hvalue, str) else hvalue
                    write_varint(body, len(hv))
                    body += hv
        else:
            body += b"\x00"
        write_varint(out, len(body))
        out += body
        if ts > max_ts:
            max_ts = ts
        count += 1
    return out, count, max_ts


def build_batch(records: Sequence[RecordTuple], *, base_offset: int = 0,
                compression: Compression = Compression.NONE,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                transactional: bool = False, control: bool = False) -> bytes:
    """A complete batch from (key, value, headers, timestamp_ms) tuples."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = min(r[3] for r in records)
    body, count, max_ts = encode_records(records, base_ts)
    payload = compress(compression, bytes(body)) if compression else body
    attributes = int(compression) & ATTR_COMPRESSION_MASK
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    batch = bytearray(HEADER_SIZE)
    _HEADER.pack_into(batch, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
                      partition_leader_epoch, MAGIC, 0, attributes, count - 1, base_ts, max_ts,
                      producer_id, producer_epoch, base_sequence, count)
    batch += payload
    _CRC.pack_into(batch, CRC_AT, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def decode_batch(buf: Buffer, info: BatchInfo, *, verify_crc: bool = True,
                 max_decompressed: int = 1 << 30) -> list[Record | ControlRecord]:
    """Decode every record of one batch (client side)."""
    view = memoryview(buf)
    start = info.position
    if verify_crc and crc32c(view[start + CRC_START:start + info.size]) != info.crc:
        raise DecodeError(f"CRC mismatch in batch at offset {info.base_offset}")
    payload = view[start + HEADER_SIZE:start + info.size]
    if info.compression:
        payload = memoryview(decompress(info.compression, payload, max_decompressed))
    if info.records_count < 0 or info.records_count > len(payload):
        raise DecodeError(f"batch claims {info.records_count} records in {len(payload)} bytes")
    ts_type = 1 if info.attributes & ATTR_LOG_APPEND_TIME else 0
    out: list[Record | ControlRecord] = []
    pos = 0
    end = len(payload)
    base_offset = info.base_offset
    base_ts = info.base_timestamp
    for _ in range(info.records_count):
        length, pos = read_varint(payload, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise DecodeError("record length runs past its batch")
        pos += 1  # record attributes
        ts_delta, pos = read_varlong(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        klen, pos = read_varint(payload, pos)
        if klen < 0:
            key = None
        else:
            if pos + klen > rec_end:
                raise DecodeError("record key runs past its record")
            key = bytes(payload[pos:pos + klen])
            pos += klen
        vlen, pos = read_varint(payload, pos)
        if vlen < 0:
            value = None
        else:
            if pos + vlen > rec_end:
                raise DecodeError("record value runs past its record")
            value = bytes(payload[pos:pos + vlen])
            pos += vlen
        nheaders, pos = read_varint(payload, pos)
        if nheaders < 0 or nheaders > rec_end - pos:
            raise DecodeError("record header count does not fit its record")
        headers = []
        for _h in range(nheaders):
            hklen, pos = read_varint(payload, pos)
            if hklen < 0 or pos + hklen > rec_end:
                raise DecodeError("header key runs past its record")
            hkey = str(payload[pos:pos + hklen], "utf-8", "replace")
            pos += hklen
            hvlen, pos = read_varint(payload, pos)
            if hvlen < 0:
                hval = None
            else:
                if pos + hvlen > rec_end:
                    raise DecodeError("header value runs past its record")
                hval = bytes(payload[pos:pos + hvlen])
                pos += hvlen
            headers.append((hkey, hval))
        if pos != rec_end:
            raise DecodeError("record length disagrees with its fields")
        offset = base_offset + off_delta
        if info.is_control:
            ctype = struct.unpack_from(">hh", key)[1] if key and len(key) >= 4 else -1
            out.append(ControlRecord(offset, ctype, info.producer_id))
        else:
            ts = info.max_timestamp if ts_type else base_ts + ts_delta
            out.append(Record(offset, ts, key, value, headers, ts_type))
    return out


@overload
def iter_records(buf: Buffer, *, skip_control: Literal[True] = True,
                 verify_crc: bool = True) -> Iterator[Record]: ...
@overload
def iter_records(buf: Buffer, *, skip_control: bool,
                 verify_crc: bool = True) -> Iterator[Record | ControlRecord]: ...
def iter_records(buf: Buffer, *, skip_control: bool = True,
                 verify_crc: bool = True) -> Iterator[Record | ControlRecord]:
    """Every record of every complete batch in `buf`, in order."""
    for info in iter_batch_headers(buf):
        for rec in decode_batch(buf, info, verify_crc=verify_crc):
            if skip_control and isinstance(rec, ControlRecord):
                continue
            yield rec
