"""What the Log's calls return and raise."""
from __future__ import annotations

from dataclasses import dataclass


class OffsetOutOfRange(Exception):
    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(f"offset {offset} is outside the log's range "
                         f"[{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class OffsetsOutOfOrder(ValueError):
    """Batches appended with their own offsets do not run forward from the log end."""


@dataclass
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int     # -1 unless message.timestamp.type=LogAppendTime
    max_timestamp: int
    batches: int
    records: int


@dataclass
class ReadResult:
    data: memoryview | bytes  # whole batches, b"" when nothing is readable
    first_offset: int         # base offset of the first batch (may precede the requested offset)
    next_offset: int          # offset after the last batch returned
