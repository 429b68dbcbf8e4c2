"""Splitting a byte stream into Kafka frames (a 4-byte big-endian size, then the frame).

Sans-IO: `feed()` takes whatever the socket produced and returns the frames it completed.
Each received byte is copied exactly once, into the bytearray of the frame it belongs to, and
a frame grows only as its bytes arrive, so a size prefix alone never makes us allocate: a
peer that claims 100 MB and sends nothing costs nothing. The frames are writable, so a broker
can patch record batch offsets in place.
"""
from __future__ import annotations

from .buffers import Buffer


class FrameTooLarge(ValueError):
    def __init__(self, size: int, limit: int):
        super().__init__(f"frame size {size} is outside 0..{limit}")
        self.size = size
        self.limit = limit


class FrameReader:
    def __init__(self, max_frame_size: int):
        self.max_frame_size = max_frame_size
        self._head = bytearray()
        self._frame: bytearray | None = None
        self._expected = 0

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame (or size prefix) held back."""
        return len(self._head) + (len(self._frame) if self._frame is not None else 0)

    def feed(self, data: Buffer) -> list[bytearray]:
        frames: list[bytearray] = []
        view = memoryview(data)
        i, n = 0, len(view)
        while i < n:
            if self._frame is None:
                take = min(4 - len(self._head), n - i)
                self._head += view[i:i + take]
                i += take
                if len(self._head) < 4:
                    break
                size = int.from_bytes(self._head, "big", signed=True)
                self._head.clear()
                if size < 0 or size > self.max_frame_size:
                    raise FrameTooLarge(size, self.max_frame_size)
                self._frame = bytearray()
                self._expected = size
            take = min(self._expected - len(self._frame), n - i)
            self._frame += view[i:i + take]
            i += take
            if len(self._frame) == self._expected:
                frames.append(self._frame)
                self._frame = None
        return frames
