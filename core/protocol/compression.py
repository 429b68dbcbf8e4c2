"""Record batch compression codecs: gzip, snappy, lz4 and zstd.

The codec id lives in the low three bits of a batch's attributes. Snappy is written with
the xerial framing the Java client uses (every client can read it) and read in both framed
and raw form, because librdkafka writes raw snappy.

Decompression is bounded: `max_size` caps the output, and no codec is allowed to allocate
more than that, so that a small hostile batch cannot expand into a huge allocation.
"""
from __future__ import annotations

import enum
import struct
from typing import Callable

import cramjam

from .buffers import Buffer
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


def compress(codec: int, data: Buffer) -> bytes:
    """Compress with the codec a Compression (or a batch's attributes) names."""
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
        # Independent blocks: Kafka's Java client rejects linked-block frames ("Dependent block
        # stream is unsupported"), and linked is what cramjam.lz4.compress writes.
        lz4 = cramjam.lz4.Compressor(block_linked=False)
        lz4.compress(bytes(data))  # the streaming API takes bytes only; no copy when it is bytes
        return bytes(lz4.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unsupported compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int = 1 << 30) -> bytes | bytearray:
    """Decompress into a buffer never larger than max_size + 1 bytes.

    Codecs write into a preallocated buffer: sized from the size the format declares when it
    declares one (snappy always, zstd and lz4 frames often, gzip's trailer), else from a guess
    that grows fourfold. A batch that claims or needs more than `max_size` fails with
    DecodeError before more than that is allocated.
    """
    out: bytes | bytearray
    try:
        if codec == Compression.NONE:
            out = bytes(data)
        elif codec == Compression.GZIP:
            out = _bounded(cramjam.gzip.decompress_into, data, max_size, _gzip_size_hint(data))
        elif codec == Compression.SNAPPY:
            out = _snappy_decompress(data, max_size)
        elif codec == Compression.LZ4:
            out = _bounded(cramjam.lz4.decompress_into, data, max_size, _lz4_size_hint(data))
        elif codec == Compression.ZSTD:
            out = _bounded(cramjam.zstd.decompress_into, data, max_size, _zstd_size_hint(data))
        else:
            raise DecodeError(f"unknown compression codec {codec}")
    except DecodeError:
        raise
    except Exception as exc:  # cramjam raises its own error types per codec
        raise DecodeError(f"cannot decompress {Compression(codec).name} data: {exc}") from None
    if len(out) > max_size:
        raise DecodeError(f"decompressed size {len(out)} exceeds limit {max_size}")
    return out


_OUTPUT_TOO_SMALL = ("failed to write whole buffer", "smaller than required")
_MIN_GUESS = 64 * 1024


def _bounded(decompress_into: Callable[[Buffer, bytearray], int], data: Buffer, max_size: int,
             hint: int | None) -> bytearray:
    if hint is not None and hint > max_size:
        raise DecodeError(f"declared decompressed size {hint} exceeds the limit of {max_size}")
    size = min(hint + 1 if hint is not None else max(4 * len(data), _MIN_GUESS), max_size + 1)
    while True:
        out = bytearray(size)
        try:
            n = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if not any(s in str(exc) for s in _OUTPUT_TOO_SMALL):
                raise DecodeError(f"corrupt compressed data: {exc}") from None
            if size > max_size:
                raise DecodeError(f"decompressed size exceeds the limit of {max_size}") from None
            size = min(size * 4, max_size + 1)
            continue
        if n > max_size:
            raise DecodeError(f"decompressed size exceeds the limit of {max_size}")
        del out[n:]
        return out


def _gzip_size_hint(data: Buffer) -> int | None:
    # ISIZE, the last member's size mod 2**32: right for the single-member gzip Kafka writes.
    if len(data) < 18:
        return None
    return int.from_bytes(bytes(data[-4:]), "little")


def _lz4_size_hint(data: Buffer) -> int | None:
    view = memoryview(data)
    if len(view) < 15 or bytes(view[:4]) != b"\x04\x22\x4d\x18" or not view[4] & 0x08:
        return None
    return int.from_bytes(view[6:14], "little")


def _zstd_size_hint(data: Buffer) -> int | None:
    """Frame_Content_Size from the first frame header, when present (RFC 8878 3.1.1.1)."""
    view = memoryview(data)
    if len(view) < 6 or bytes(view[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    fhd = view[4]
    fcs_flag, single_segment, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or pos + width > len(view):
        return None
    value = int.from_bytes(view[pos:pos + width], "little")
    return value + 256 if width == 2 else value


def _snappy_decompress(data: Buffer, max_size: int) -> bytearray:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return _bounded(cramjam.snappy.decompress_raw_into, data, max_size,
                        cramjam.snappy.decompress_raw_len(data))
    pos = 16
    out = bytearray()
    while pos < len(view):
        if pos + 4 > len(view):
            raise DecodeError("truncated xerial snappy block header")
        (size,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise DecodeError("xerial snappy block runs past the end")
        block = view[pos:pos + size]
        out += _bounded(cramjam.snappy.decompress_raw_into, block, max_size - len(out),
                        cramjam.snappy.decompress_raw_len(block))
        pos += size
    return out
