"""Per-partition record batches waiting to be sent: the producer's RecordAccumulator.

Records are appended as (key, value, headers, timestamp) tuples; a batch is encoded only
when it is drained for sending (`ProducerBatch.encode`), once, and the same bytes are sent
again on retries. Appending costs O(1) per record: the size is an estimate summed as
records arrive, so nothing is encoded twice.

Batches of one partition sit in a deque in creation order and carry an ordering key (`seq`),
so a batch that comes back for a retry is put back in its place, ahead of younger batches
(`requeue`), and partition order survives retries of batches that were not in flight together.

An idempotent producer also gives each batch a producer id, epoch and base sequence
(idempotence.py) before it is first encoded; they are written into the batch header, under the
CRC. In the rare case they change afterwards (an epoch bump renumbers unsent batches),
`set_producer_state` patches the 14 header bytes and recomputes the CRC: no record is re-encoded.
"""
from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Iterator

from crc32c import crc32c

from core.protocol.compression import Compression
from core.protocol.errors import ErrorCode, KafkaError
from core.protocol.records import CRC_START, HEADER_SIZE, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, build_batch

__all__ = ["RecordMetadata", "ProducerBatch", "Accumulator", "estimate_size", "RECORD_OVERHEAD"]

#: Upper bound of a record's framing in a v2 batch: length, attributes, timestamp and
#: offset deltas, key and value lengths, header count (varints of at most 5/10 bytes).
RECORD_OVERHEAD = 21

SEQUENCE_SPACE = 2 ** 31
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
_PRODUCER_OFFSET = 43
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int      # -1 when acks=0 (the broker does not say)
    timestamp: int   # CreateTime we set, or the broker's LogAppendTime


def estimate_size(key, value, headers) -> int:
    size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        for hk, hv in headers:
            size += len(hk) + (len(hv) if hv is not None else 0) + 10
    return size


class ProducerBatch:
    __slots__ = ("topic", "partition", "seq", "records", "futures", "size", "created",
                 "deadline", "full", "attempts", "retry_at", "encoded", "done",
                 "producer_id", "producer_epoch", "base_seq", "sent", "outstanding", "maybe_written")

    def __init__(self, topic: str, partition: int, seq: tuple[int, ...], delivery_timeout_s: float):
        self.topic = topic
        self.partition = partition
        self.seq = seq
        self.records: list[tuple] = []
        self.futures: list[asyncio.Future] = []
        self.size = HEADER_SIZE
        self.created = time.monotonic()
        self.deadline = self.created + delivery_timeout_s
        self.full = False
        self.attempts = 0
        self.retry_at = 0.0
        self.encoded: bytes | None = None
        self.done = asyncio.get_running_loop().create_future()  # set when every record is settled
        # Idempotence (see idempotence.py): base_seq is an unbounded counter, None until assigned;
        # the batch carries base_seq mod 2^31.
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_seq: int | None = None
        self.sent = False            # sent under its current sequence
        self.outstanding = False     # in a request whose answer has not come back
        self.maybe_written = False   # an attempt ended without an answer saying "not appended"

    def encode(self, compression: Compression) -> bytes:
        if self.encoded is None:
            if self.base_seq is None:
                self.encoded = build_batch(self.records, compression=compression)
            else:
                self.encoded = build_batch(self.records, compression=compression,
                                           producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                           base_sequence=self.base_seq % SEQUENCE_SPACE)
        return self.encoded

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_seq: int | None) -> None:
        """Set the idempotence fields; if the batch is already encoded, patch its header and CRC."""
        self.producer_id, self.producer_epoch, self.base_seq = producer_id, producer_epoch, base_seq
        if self.encoded is not None:
            buf = bytearray(self.encoded)
            _PRODUCER_FIELDS.pack_into(buf, _PRODUCER_OFFSET, producer_id, producer_epoch,
                                       NO_SEQUENCE if base_seq is None else base_seq % SEQUENCE_SPACE)
            _CRC.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[CRC_START:]))
            self.encoded = bytes(buf)

    def complete(self, base_offset: int, log_append_time: int) -> None:
        for i, (fut, rec) in enumerate(zip(self.futures, self.records)):
            if not fut.done():
                ts = log_append_time if log_append_time >= 0 else rec[3]
                offset = base_offset + i if base_offset >= 0 else -1
                fut.set_result(RecordMetadata(self.topic, self.partition, offset, ts))
        self._settle()

    def fail(self, error: BaseException) -> None:
        for fut in self.futures:
            if not fut.done():
                fut.set_exception(error)
                # Keep asyncio quiet about futures the caller never awaited; the error is
                # still raised to whoever awaits them.
                fut.add_done_callback(_retrieve)
        self._settle()

    def _settle(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def split(self, delivery_timeout_s: float) -> tuple["ProducerBatch", "ProducerBatch"]:
        """Two halves of this batch (after MESSAGE_TOO_LARGE), keeping deadlines and futures.

        Sequence numbers are tuples: the halves of (5,) are (5, 0) and (5, 1), which sort
        between (4,) and (6,), so the halves keep the original's place in the partition."""
        half = len(self.records) // 2
        parts = []
        for seq, sl in ((self.seq + (0,), slice(0, half)), (self.seq + (1,), slice(half, None))):
            b = ProducerBatch(self.topic, self.partition, seq, delivery_timeout_s)
            b.records = self.records[sl]
            b.futures = self.futures[sl]
            b.size = HEADER_SIZE + sum(estimate_size(r[0], r[1], r[2]) for r in b.records)
            b.created, b.deadline, b.full = self.created, self.deadline, True
            parts.append(b)
        self._settle()
        return parts[0], parts[1]


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


class Accumulator:
    def __init__(self, batch_size: int, delivery_timeout_ms: int, on_release=None):
        self.batch_size = batch_size
        self.on_release = on_release  # called when a settled batch frees buffer memory
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.buffered_bytes = 0
        self._seq = 0

    def next_seq(self) -> tuple[int, ...]:
        self._seq += 1
        return (self._seq,)

    def append(self, topic: str, partition: int, record: tuple, size: int,
               fut: asyncio.Future) -> tuple[ProducerBatch, bool]:
        """Add a record; returns (its batch, whether the sender should look now)."""
        tp = (topic, partition)
        q = self.queues.get(tp)
        if q is None:
            q = self.queues[tp] = deque()
        batch = q[-1] if q else None
        wake = False
        if batch is None or batch.full or batch.encoded is not None \
                or (batch.size + size > self.batch_size and batch.records):
            if batch is not None and not batch.full:
                batch.full = True  # the head is now ready: a younger batch exists
            batch = ProducerBatch(topic, partition, self.next_seq(), self.delivery_timeout_s)
            q.append(batch)
            self.incomplete.add(batch)
            batch.done.add_done_callback(partial(self._batch_done, batch))
            wake = True
        batch.records.append(record)
        batch.futures.append(fut)
        batch.size += size
        self.buffered_bytes += size
        if batch.size >= self.batch_size:
            batch.full = True
            wake = True
        return batch, wake

    def _batch_done(self, batch: ProducerBatch, _done: object) -> None:
        """`batch.done` resolved (the callback of its future)."""
        self._on_done(batch)

    def _on_done(self, batch: ProducerBatch) -> None:
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.buffered_bytes -= batch.size - HEADER_SIZE
            if self.on_release is not None:
                self.on_release()

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch back (for a retry) ahead of every younger batch of its partition."""
        q = self.queues.setdefault((batch.topic, batch.partition), deque())
        i = 0
        while i < len(q) and q[i].seq < batch.seq:
            i += 1
        q.insert(i, batch)

    def add_split(self, parts: tuple[ProducerBatch, ...]) -> None:
        for b in parts:
            self.incomplete.add(b)
            self.buffered_bytes += b.size - HEADER_SIZE
            b.done.add_done_callback(partial(self._batch_done, b))
            self.requeue(b)

    def nonempty(self) -> Iterator[tuple[tuple[str, int], deque[ProducerBatch]]]:
        for tp, q in self.queues.items():
            if q:
                yield tp, q

    def fail_all(self, error: BaseException) -> None:
        for q in self.queues.values():
            while q:
                q.popleft().fail(error)


def expired_error(batch: ProducerBatch) -> KafkaError:
    age = (time.monotonic() - batch.created) * 1000
    return KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                      f"{len(batch.records)} record(s) for {batch.topic}-{batch.partition} expired "
                      f"after {age:.0f} ms (delivery_timeout_ms)")
