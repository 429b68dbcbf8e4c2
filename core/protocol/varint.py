"""Varints as Kafka writes them.

Unsigned varints (LEB128) carry lengths and tag numbers in flexible messages; zig-zag
varints carry the fields inside a record. Both are bounded to 5 bytes (int32) or 10 bytes
(int64) so that a hostile run of continuation bits is rejected instead of looped over.
"""
from __future__ import annotations

from .buffers import Buffer
from .errors import DecodeError


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned int32 varint; returns (value, new position)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise DecodeError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint longer than 5 bytes")


def read_uvarlong(buf: Buffer, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise DecodeError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varlong longer than 10 bytes")


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zig-zag signed int32 varint."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    v, pos = read_uvarlong(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def uvarint_bytes(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_bytes(value: int) -> bytes:
    """Zig-zag encode a signed value (int32 or int64)."""
    return uvarint_bytes((value << 1) ^ (value >> 63))


# Single-byte encodings are by far the most common; precompute them.
_SMALL = [bytes((i,)) for i in range(0x80)]


def write_uvarint(out: bytearray, value: int) -> None:
    if 0 <= value < 0x80:
        out += _SMALL[value]
    else:
        out += uvarint_bytes(value)


def write_varint(out: bytearray, value: int) -> None:
    z = (value << 1) ^ (value >> 63)
    if z < 0x80:
        out += _SMALL[z]
    else:
        out += uvarint_bytes(z)
