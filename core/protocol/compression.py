"""Record batch compression codecs: gzip, snappy, lz4 and zstd.

The codec id lives in the low three bits of a batch's attributes. Snappy is written with
the xerial framing the Java client uses (every client can read it) and read in both framed
and raw form, because librdkafka writes raw snappy.

Decompression is bounded: `max_size` caps the output so that a small hostile batch cannot
expand into an unbounded allocation.
"""
from __future__ import annotations

import enum
import struct

import cramjam

from .errors import DecodeError


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | None) -> "Compression":
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        key = name.strip().upper()
        if key in ("", "NONE", "UNCOMPRESSED", "PRODUCER"):
            return cls.NONE
        try:
            return cls[key]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block))
            out += block
        return bytes(out)
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unsupported compression codec {codec}")


def decompress(codec: int, data: bytes, max_size: int = 1 << 30) -> bytes:
    try:
        if codec == Compression.NONE:
            out = bytes(data)
        elif codec == Compression.GZIP:
            out = bytes(cramjam.gzip.decompress(data))
        elif codec == Compression.SNAPPY:
            out = _snappy_decompress(data, max_size)
        elif codec == Compression.LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        elif codec == Compression.ZSTD:
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise DecodeError(f"unknown compression codec {codec}")
    except DecodeError:
        raise
    except Exception as exc:  # cramjam raises its own error types per codec
        raise DecodeError(f"cannot decompress {Compression(codec).name} data: {exc}") from None
    if len(out) > max_size:
        raise DecodeError(f"decompressed size {len(out)} exceeds limit {max_size}")
    return out


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = 16
    out = bytearray()
    while pos < len(view):
        if pos + 4 > len(view):
            raise DecodeError("truncated xerial snappy block header")
        (size,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise DecodeError("xerial snappy block runs past the end")
        out += cramjam.snappy.decompress_raw(view[pos:pos + size])
        pos += size
        if len(out) > max_size:
            raise DecodeError("decompressed size exceeds limit")
    return bytes(out)
