"""Reading and rewriting record batches for the cleaner (cleaner.py): the batches of a segment
file read in chunks with their CRCs checked, the records of a batch parsed only as far as the
cleaner needs (offset, timestamp delta, key, tombstone, byte range), and a batch packed again
with some of its records or with its delete horizon set. Record bytes are copied as they are;
a compressed batch is decompressed to be read and compressed again with its own codec."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator, Literal, overload

from crc32c import crc32c

from core.protocol.compression import compress, decompress
from core.protocol.records import (ATTR_COMPRESSION_MASK, ATTR_DELETE_HORIZON, ATTR_LOG_APPEND_TIME,
                                   CRC_AT, CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchInfo,
                                   read_batch_header)
from core.protocol.varint import read_varint, read_varlong, write_varint

READ_CHUNK = 1 << 20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")


@overload
def iter_batches(fd: int, size: int, with_data: Literal[True] = True
                 ) -> Iterator[tuple[int, BatchInfo, memoryview]]: ...
@overload
def iter_batches(fd: int, size: int, with_data: bool
                 ) -> Iterator[tuple[int, BatchInfo, memoryview | None]]: ...
def iter_batches(fd: int, size: int, with_data: bool = True
                 ) -> Iterator[tuple[int, BatchInfo, memoryview | None]]:
    """(position, header, whole batch bytes) of each well-framed batch up to `size`."""
    pos = 0
    buf = b""
    buf_pos = 0
    while size - pos >= HEADER_SIZE:
        off = pos - buf_pos
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(READ_CHUNK, size - pos), pos)
            buf_pos, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        info = read_batch_header(buf, off)
        if info.magic != MAGIC or info.size < HEADER_SIZE or info.size > size - pos:
            return
        data = None
        if with_data:
            if off + info.size > len(buf):
                buf = os.pread(fd, min(max(READ_CHUNK, info.size), size - pos), pos)
                buf_pos, off = pos, 0
                if len(buf) < info.size:
                    return
            data = memoryview(buf)[off:off + info.size]
            if crc32c(data[CRC_START:]) != info.crc:
                raise OSError(f"CRC mismatch in batch at offset {info.base_offset}")
        yield pos, info._replace(position=0), data
        pos += info.size


@dataclass(slots=True)
class Rec:
    offset: int
    ts_delta: int
    key: bytes | None
    tombstone: bool
    start: int   # the record's bytes within the (decompressed) payload
    end: int


def records(data: memoryview, info: BatchInfo) -> list[Rec]:
    return parse_records(data, info)[0]


def parse_records(data: memoryview, info: BatchInfo) -> tuple[list[Rec], memoryview]:
    payload = data[HEADER_SIZE:]
    if info.compression:
        payload = memoryview(decompress(info.compression, payload))
    out: list[Rec] = []
    pos = 0
    end = len(payload)
    for _ in range(info.records_count):
        start = pos
        length, pos = read_varint(payload, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise OSError(f"record runs past its batch at offset {info.base_offset}")
        pos += 1
        ts_delta, pos = read_varlong(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        klen, pos = read_varint(payload, pos)
        key = None if klen < 0 else bytes(payload[pos:pos + klen])
        pos += max(klen, 0)
        vlen, pos = read_varint(payload, pos)
        out.append(Rec(info.base_offset + off_delta, ts_delta, key, vlen < 0, start, rec_end))
        pos = rec_end
    return out, payload


def rebuild(info: BatchInfo, keep: list[Rec], payload: memoryview) -> bytes:
    """The batch with only `keep`, each record's bytes unchanged (offset deltas stay)."""
    body = b"".join(payload[r.start:r.end] for r in keep)
    if info.attributes & ATTR_LOG_APPEND_TIME or not keep:
        max_ts = info.max_timestamp
    else:
        max_ts = info.base_timestamp + max(r.ts_delta for r in keep)
    attributes = info.attributes if keep else info.attributes & ~ATTR_COMPRESSION_MASK
    return _pack(info, body, len(keep), attributes, info.base_timestamp, max_ts)


def stamp(info: BatchInfo, recs: list[Rec], payload: memoryview, horizon: int) -> bytes:
    """The batch with its delete horizon set (KIP-534): attribute 0x40, the base timestamp
    holding the horizon, and each record's timestamp delta re-encoded against it so every
    record keeps its timestamp (as Kafka's MemoryRecordsBuilder does)."""
    body = bytearray()
    rec = bytearray()
    for r in recs:
        _length, pos = read_varint(payload, r.start)
        _delta, rest = read_varlong(payload, pos + 1)   # after the attributes byte
        rec.clear()
        rec.append(payload[pos])
        write_varint(rec, info.base_timestamp + r.ts_delta - horizon)
        rec += payload[rest:r.end]
        write_varint(body, len(rec))
        body += rec
    return _pack(info, bytes(body), len(recs), info.attributes | ATTR_DELETE_HORIZON, horizon,
                 info.max_timestamp)


def _pack(info: BatchInfo, body: bytes, count: int, attributes: int, base_timestamp: int,
          max_timestamp: int) -> bytes:
    """A batch of `count` records (`body`, compressed here with the batch's codec if it has
    any) with the header fields of `info`, except those given."""
    if attributes & ATTR_COMPRESSION_MASK and count:
        body = compress(attributes & ATTR_COMPRESSION_MASK, body)
    batch = bytearray(HEADER_SIZE)
    _HEADER.pack_into(batch, 0, info.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body),
                      info.partition_leader_epoch, MAGIC, 0, attributes, info.last_offset_delta,
                      base_timestamp, max_timestamp, info.producer_id, info.producer_epoch,
                      info.base_sequence, count)
    batch += body
    _CRC.pack_into(batch, CRC_AT, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)
