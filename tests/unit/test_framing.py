"""FrameReader: any split of the byte stream yields the same frames; sizes are bounded."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from core.protocol.framing import FrameReader, FrameTooLarge


def framed(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


CASES = [
    # (stream, chunk sizes, expected frames, pending after)
    (framed(b"abc"), [7], [b"abc"], 0),
    (framed(b"abc"), [1] * 7, [b"abc"], 0),
    (framed(b"", b"x"), [9], [b"", b"x"], 0),
    (framed(b"abc", b"defg"), [3, 4, 8], [b"abc", b"defg"], 0),
    (framed(b"abcdef")[:6], [6], [], 2),
    (framed(b"abc") + b"\x00\x00", [9], [b"abc"], 2),
]


@pytest.mark.parametrize("stream, chunks, expected, pending", CASES)
def test_table(stream, chunks, expected, pending):
    reader = FrameReader(1000)
    got, i = [], 0
    for n in chunks:
        got += reader.feed(stream[i:i + n])
        i += n
    assert [bytes(f) for f in got] == expected
    assert reader.pending == pending
    assert all(isinstance(f, bytearray) for f in got), "frames must be writable"


@pytest.mark.parametrize("size", [-1, -(2**31), 1001, 2**31 - 1])
def test_size_outside_limit_is_refused_before_any_allocation(size):
    reader = FrameReader(1000)
    with pytest.raises(FrameTooLarge) as err:
        reader.feed(struct.pack(">i", size))
    assert err.value.size == size


def test_claimed_size_is_not_allocated_up_front():
    reader = FrameReader(100 << 20)
    reader.feed(struct.pack(">i", 100 << 20) + b"x")
    assert reader.pending == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=50), max_size=8), st.data())
def test_any_split_gives_the_same_frames(payloads, data):
    stream = framed(*payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = FrameReader(1000)
    got, prev = [], 0
    for cut in cuts + [len(stream)]:
        got += reader.feed(stream[prev:cut])
        prev = cut
    assert [bytes(f) for f in got] == payloads
    assert reader.pending == 0

