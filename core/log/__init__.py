"""The partition log: segments, indexes, recovery, retention (Kafka's on-disk layout)."""
from .config import LogConfig, now_ms
from .index import IndexCorrupt
from .log import Log
from .results import AppendResult, OffsetOutOfRange, OffsetsOutOfOrder, ReadResult
from .segment import LogCorrupted, SegmentInfo
from .txn_index import AbortedTxn

__all__ = [
    "AbortedTxn", "AppendResult", "IndexCorrupt", "Log", "LogConfig", "LogCorrupted",
    "OffsetOutOfRange", "OffsetsOutOfOrder", "ReadResult", "SegmentInfo", "now_ms",
]
