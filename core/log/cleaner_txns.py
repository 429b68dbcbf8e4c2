"""What the cleaner (cleaner.py) needs to know of transactions: the aborted-transaction entries
of the segments it cleans, read from their index files, and per pass over the log which
producers' next marker still has batches of its transaction behind it (Kafka's
CleanedTransactionMetadata)."""
from __future__ import annotations

import bisect
import os

from core.protocol.records import HEADER_SIZE, BatchInfo

from .segment import Segment
from .txn_index import ENTRY_SIZE, AbortedTxn, _valid_prefix


def aborted_txns(segs: list[Segment]) -> list[AbortedTxn]:
    """Every entry of the aborted-transaction indexes of `segs`, read from their files.

    The worker thread must not load a TransactionIndex (its in-memory lists belong to the
    owner's thread). An entry reaches the file before the Segment's list, and the caller's
    upper bound was computed after the entries of every transaction below it were appended,
    so the files hold all the entries this clean needs; a torn tail (an entry being appended
    to the active segment's index right now) ends the read, as `load` would cut it."""
    out: list[AbortedTxn] = []
    for seg in segs:
        index = seg.txn_index
        if not index.may_have_entries:
            continue
        try:
            fd = os.open(index.path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            limit = max(0, seg.size // HEADER_SIZE) * ENTRY_SIZE   # as TransactionIndex.load
            data = os.pread(fd, limit, 0) if limit else b""
        finally:
            os.close(fd)
        out += _valid_prefix(data, seg.base_offset)
    return out


class CleanerTxns:
    """The transactions one clean meets (Kafka's CleanedTransactionMetadata).

    `aborted` answers from the aborted-transaction entries alone. The rest is the state of
    one pass over the log from its first segment (`begin` starts one): which producers had
    a transactional batch since their previous marker, i.e. whose next marker still has
    batches of its transaction in the log."""

    def __init__(self, entries: list[AbortedTxn]):
        spans: dict[int, list[tuple[int, int]]] = {}
        for t in entries:
            spans.setdefault(t.producer_id, []).append((t.last_offset, t.first_offset))
        for lst in spans.values():
            lst.sort()
        self._spans = spans
        self._indexed = {(t.producer_id, t.last_offset) for t in entries}
        self._open: set[int] = set()

    def begin(self) -> None:
        self._open.clear()

    def aborted(self, info: BatchInfo) -> bool:
        """Whether the data batch lies in an aborted transaction of its producer."""
        if not info.is_transactional or info.is_control:
            return False
        spans = self._spans.get(info.producer_id)
        if not spans:
            return False
        i = bisect.bisect_left(spans, info.base_offset, key=lambda t: t[0])
        return i < len(spans) and spans[i][1] <= info.base_offset

    def on_data(self, info: BatchInfo) -> None:
        if info.is_transactional:
            self._open.add(info.producer_id)

    def on_marker(self, info: BatchInfo) -> bool:
        """Whether the transaction the marker ends had a batch in this pass."""
        had = info.producer_id in self._open
        self._open.discard(info.producer_id)
        return had

    def indexed(self, info: BatchInfo) -> bool:
        """Whether an aborted-transaction entry names this marker."""
        return (info.producer_id, info.base_offset) in self._indexed
