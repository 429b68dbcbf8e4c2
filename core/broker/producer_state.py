"""Idempotent-producer state for one partition, and the producer-id allocator.

Theory of operation
-------------------
This follows Kafka's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry (KIP-98,
KIP-360) and is pure: no asyncio and no I/O except the explicitly named snapshot and allocator
file helpers at the bottom. Everything is per batch header (`core.protocol.records.BatchInfo`);
no record is ever decoded.

Per partition the state maps producer id -> `ProducerEntry`: the producer epoch, the metadata of
the last `NUM_BATCHES_TO_RETAIN` (5) batches it appended (first/last sequence, first/last offset,
max timestamp) and the timestamp of its last append.

Produce path, per batch, as Kafka's UnifiedLog.analyzeAndValidateProducerState does:

1. `validate(batch)` - pure, before the append. In Kafka's order:
   - producer id -1: not idempotent, always OK.
   - producer id >= 0 with a negative base sequence: INVALID_RECORD (Kafka's LogValidator).
   - same epoch and (first seq, last seq) equal to one of the 5 cached batches: a duplicate.
     Kafka answers it with error NONE and the *original* base offset, so the verdict is
     `Verdict.duplicate(...)` with `code == NONE`; the broker must not append it.
   - epoch lower than the entry's: INVALID_PRODUCER_EPOCH (Kafka 2.7+ answers produce with it
     rather than PRODUCER_FENCED).
   - epoch higher: the first sequence must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
   - same epoch: the first sequence must be last seq + 1, where the successor of 2^31-1 is 0,
     else OUT_OF_ORDER_SEQUENCE_NUMBER. A retry older than the 5-batch window is therefore
     OUT_OF_ORDER_SEQUENCE_NUMBER, not a duplicate (Kafka behaves the same). Seaway's one
     departure: a producer whose id is outside the cluster's own range came from the other
     cluster of a DR pair (its state here was copied by the DR link, core/protocol/dr.py),
     and a sequence *ahead* of last seq + 1 is accepted for it. The state then ends where the
     link stopped copying before an unplanned failover, and the gap is the records stranded
     on the failed cluster, already lost and counted as the failover's RPO; refusing would
     make the producer fail (the error is fatal to it) or resend them under a new id, as
     possible duplicates of what is stranded. A sequence behind stays an error.
   - unknown producer id: accepted with any sequence. Since KIP-360 (Kafka 2.5) the broker no
     longer answers UNKNOWN_PRODUCER_ID for this; the state was lost (expiry, retention) and
     the producer is simply re-registered.
2. The broker appends, then calls `update(batch, assigned_base_offset)`.

Restart: `latest_snapshot(dir, max_offset)` gives the newest readable snapshot at or below the
recovery point; the broker then feeds the headers of the batches from that offset on to
`replay(...)` (Kafka rebuilds with origin REPLICATION: no validation, last writer wins).
Without a snapshot, `ProducerState.rebuild(headers_from_log_start)`.

Not modelled (no transactions in Seaway yet): ongoing transaction first offsets, coordinator
epochs, verification guards. Control batches only update the epoch and the timestamp, as
Kafka's appendEndTxnMarker does.

Snapshots are a Seaway format, not Kafka's (Kafka keeps only the last batch per producer; we
keep all 5 so a restart still deduplicates the whole window). Layout, big-endian:

    magic b"SWPS" | version u16 | crc32c u32 (of everything after it) | count u32
    then per producer: producer_id i64, epoch i16, last_timestamp i64, n_batches u8,
    and n_batches x (first_seq i32, last_seq i32, first_offset i64, last_offset i64,
    max_timestamp i64)

Files are named like Kafka's, `<20-digit offset>.snapshot` in the partition directory, where
the offset is the log end offset the state covers (exclusive).
"""
from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, NamedTuple

from crc32c import crc32c

from core.log.checkpoint import TMP_SUFFIX, write_durably
from core.protocol.errors import ErrorCode
from core.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchInfo

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms (1 day)


def next_sequence(seq: int, delta: int = 1) -> int:
    """`seq + delta` in Kafka's sequence space: non-negative int32, 2^31-1 wraps to 0."""
    return (seq + delta) % (INT32_MAX + 1)


def _forward_gap(last_seq: int, first_seq: int) -> bool:
    """`first_seq` lies ahead of the successor of `last_seq` (within half the sequence space,
    as a wrapped sequence can be told from an old one), not behind it."""
    if last_seq < 0:
        return True
    return 0 < (first_seq - next_sequence(last_seq)) % (INT32_MAX + 1) < (INT32_MAX + 1) // 2


def batch_last_sequence(batch: BatchInfo) -> int:
    """RecordBatch.lastSequence(): base sequence plus the last offset delta, wrapping."""
    if batch.base_sequence < 0:
        return NO_SEQUENCE
    return next_sequence(batch.base_sequence, batch.last_offset_delta)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# --------------------------------------------------------------------------- verdicts


class Verdict(NamedTuple):
    """What to answer for one batch. `ok` means append it; a duplicate is not appended but
    is answered with `code` NONE and the original `base_offset` (and `log_append_time` is
    the original batch's max timestamp, like Kafka's duplicate path)."""
    code: ErrorCode
    message: str = ""
    is_duplicate: bool = False
    base_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = -1

    @property
    def ok(self) -> bool:
        return self.code == ErrorCode.NONE and not self.is_duplicate

    @classmethod
    def accept(cls) -> "Verdict":
        return _ACCEPT

    @classmethod
    def duplicate(cls, base_offset: int, last_offset: int = -1, max_timestamp: int = -1) -> "Verdict":
        return cls(ErrorCode.NONE, "duplicate of a cached batch", True, base_offset,
                   last_offset if last_offset >= 0 else base_offset, max_timestamp)

    @classmethod
    def error(cls, code: ErrorCode, message: str) -> "Verdict":
        return cls(code, message)


_ACCEPT = Verdict(ErrorCode.NONE)


# --------------------------------------------------------------------------- entries


class BatchMeta(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMeta | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:          # a new epoch starts a new sequence space
            self.batches.clear()
            self.epoch = epoch


class CorruptSnapshot(ValueError):
    """A snapshot that must be ignored: bad magic, version, CRC or length."""


_SNAP_MAGIC = b"SWPS"
_SNAP_VERSION = 1
_SNAP_HEAD = struct.Struct(">4sHI")      # magic, version, crc
_SNAP_COUNT = struct.Struct(">I")
_SNAP_ENTRY = struct.Struct(">qhqB")     # producer_id, epoch, last_timestamp, n_batches
_SNAP_BATCH = struct.Struct(">iiqqq")    # first_seq, last_seq, first_offset, last_offset, max_ts


# --------------------------------------------------------------------------- partition state


class ProducerState:
    """Idempotent-producer state of one partition (Kafka's ProducerStateManager, minus I/O)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerState):
            return NotImplemented
        return self.producers == other.producers

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    # ------------------------------------------------------------------ produce path

    def validate(self, batch: BatchInfo, own_ids: range | None = None) -> Verdict:
        """The verdict for a client batch before it is appended. Never mutates.

        `own_ids` is the cluster's own producer id range (core/protocol/dr.py): a producer
        from outside it came from the other cluster of a DR pair, and a forward gap in its
        sequence is accepted (see the module's notes)."""
        pid = batch.producer_id
        if pid == NO_PRODUCER_ID or pid < 0:
            return _ACCEPT
        first_seq = batch.base_sequence
        if first_seq < 0:
            return Verdict.error(ErrorCode.INVALID_RECORD,
                                 f"invalid sequence number {first_seq} in batch with producer id {pid}")
        epoch = batch.producer_epoch
        entry = self.producers.get(pid)
        if entry is None:
            # KIP-360: no state (new, expired or retention removed it) -> accept any sequence.
            return _ACCEPT
        last_seq = batch_last_sequence(batch)
        dup = entry.find_duplicate(epoch, first_seq, last_seq)
        if dup is not None:
            return Verdict.duplicate(dup.first_offset, dup.last_offset, dup.max_timestamp)
        if epoch < entry.epoch:
            return Verdict.error(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"epoch {epoch} of producer {pid} is older than {entry.epoch}")
        if entry.epoch == NO_PRODUCER_EPOCH:
            return _ACCEPT                    # epoch unknown (loaded without one): any sequence
        if epoch != entry.epoch:
            if first_seq != 0:
                return Verdict.error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"new epoch {epoch} of producer {pid} must start at sequence 0, "
                                     f"got {first_seq}")
            return _ACCEPT
        expected_after = entry.last_seq       # NO_SEQUENCE (-1) when no batch is cached: needs 0
        if not in_sequence(expected_after, first_seq) \
                and not (own_ids is not None and pid not in own_ids and _forward_gap(expected_after, first_seq)):
            return Verdict.error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"out of order sequence for producer {pid}: got {first_seq}, "
                                 f"expected {next_sequence(expected_after) if expected_after >= 0 else 0}")
        return _ACCEPT

    def update(self, batch: BatchInfo, base_offset: int, timestamp_ms: int | None = None) -> None:
        """Record a batch the log has accepted at `base_offset`.

        The entry's last timestamp is the batch's max timestamp, as in Kafka (which is what
        `expire` compares with); pass `timestamp_ms` to use another clock (e.g. the broker's
        append time for LogAppendTime topics or batches without timestamps).
        """
        pid = batch.producer_id
        if pid < 0:
            return
        ts = batch.max_timestamp if timestamp_ms is None else timestamp_ms
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, batch.producer_epoch)
        entry._set_epoch(batch.producer_epoch)
        entry.last_timestamp = ts
        if batch.is_control or batch.base_sequence < 0:
            return
        entry.batches.append(BatchMeta(batch.base_sequence, batch_last_sequence(batch), base_offset,
                                       base_offset + batch.last_offset_delta, batch.max_timestamp))

    def replay(self, batches: Iterable[BatchInfo]) -> "ProducerState":
        """Apply headers read back from the log (their base offsets are already assigned),
        without validation, as Kafka's recovery does. Returns self."""
        for b in batches:
            if b.producer_id >= 0:
                self.update(b, b.base_offset)
        return self

    @classmethod
    def rebuild(cls, batches: Iterable[BatchInfo]) -> "ProducerState":
        """State rebuilt by scanning batch headers from the log start (no snapshot)."""
        return cls().replay(batches)

    def expire(self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> list[int]:
        """Drop producers idle for at least `expiration_ms` (producer.id.expiration.ms).
        Returns the removed producer ids."""
        gone = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def clear(self) -> None:
        self.producers.clear()

    # ------------------------------------------------------------------ snapshots

    def snapshot_bytes(self) -> bytes:
        parts = [_SNAP_COUNT.pack(len(self.producers))]
        for pid in sorted(self.producers):
            e = self.producers[pid]
            parts.append(_SNAP_ENTRY.pack(pid, e.epoch, e.last_timestamp, len(e.batches)))
            parts.extend(_SNAP_BATCH.pack(*m) for m in e.batches)
        body = b"".join(parts)
        return _SNAP_HEAD.pack(_SNAP_MAGIC, _SNAP_VERSION, crc32c(body)) + body

    @classmethod
    def load_snapshot(cls, data: bytes) -> "ProducerState":
        """Parse `snapshot_bytes()` output; raises CorruptSnapshot on any damage."""
        view = memoryview(data)
        if len(view) < _SNAP_HEAD.size + _SNAP_COUNT.size:
            raise CorruptSnapshot(f"snapshot too short ({len(view)} bytes)")
        magic, version, crc = _SNAP_HEAD.unpack_from(view, 0)
        if magic != _SNAP_MAGIC:
            raise CorruptSnapshot("not a producer snapshot")
        if version != _SNAP_VERSION:
            raise CorruptSnapshot(f"unknown snapshot version {version}")
        body = view[_SNAP_HEAD.size:]
        if crc32c(body) != crc:
            raise CorruptSnapshot("snapshot CRC mismatch")
        state = cls()
        try:
            (count,) = _SNAP_COUNT.unpack_from(body, 0)
            pos = _SNAP_COUNT.size
            for _ in range(count):
                pid, epoch, last_ts, n = _SNAP_ENTRY.unpack_from(body, pos)
                pos += _SNAP_ENTRY.size
                if n > NUM_BATCHES_TO_RETAIN or pid < 0:
                    raise CorruptSnapshot(f"bad entry for producer {pid}")
                entry = ProducerEntry(pid, epoch, last_timestamp=last_ts)
                for _ in range(n):
                    entry.batches.append(BatchMeta(*_SNAP_BATCH.unpack_from(body, pos)))
                    pos += _SNAP_BATCH.size
                state.producers[pid] = entry
        except struct.error as exc:
            raise CorruptSnapshot(f"truncated snapshot: {exc}") from None
        if pos != len(body):
            raise CorruptSnapshot(f"{len(body) - pos} trailing bytes in snapshot")
        return state

    def write_snapshot(self, directory: str | os.PathLike, offset: int) -> Path:
        """Durably write `<offset>.snapshot` (temp file, fsync, rename, fsync dir)."""
        path = snapshot_path(directory, offset)
        write_durably(path, self.snapshot_bytes())
        return path


# --------------------------------------------------------------------------- snapshot files


def snapshot_path(directory: str | os.PathLike, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in the directory, oldest first."""
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(SNAPSHOT_SUFFIX) or name.endswith(TMP_SUFFIX):
            continue
        stem = name[:-len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            out.append((int(stem), Path(directory) / name))
    out.sort()
    return out


def latest_snapshot(directory: str | os.PathLike,
                    max_offset: int | None = None) -> tuple[int, ProducerState] | None:
    """The newest readable snapshot at or below `max_offset` (the recovery point), as
    (offset, state); unreadable or corrupt ones are skipped (Kafka deletes them; this reader
    leaves files alone - call `delete_snapshots` for that). None means rebuild from the log."""
    for offset, path in reversed(list_snapshots(directory)):
        if max_offset is not None and offset > max_offset:
            continue
        try:
            return offset, ProducerState.load_snapshot(path.read_bytes())
        except (CorruptSnapshot, OSError):
            continue
    return None


def delete_snapshots(directory: str | os.PathLike, *, below: int | None = None,
                     above: int | None = None) -> list[int]:
    """Delete snapshots with offset < below and/or offset > above (truncation, retention).
    Returns the deleted offsets."""
    gone = []
    for offset, path in list_snapshots(directory):
        if (below is not None and offset < below) or (above is not None and offset > above):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            gone.append(offset)
    return gone


# --------------------------------------------------------------------------- producer ids


class InitProducerIdResult(NamedTuple):
    code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class ProducerIdsExhausted(RuntimeError):
    """No id of the current block is left: ask the controller for the next block first."""


class ProducerIdAllocator:
    """Hands out producer ids from blocks the KRaft controller allocated (AllocateProducerIds).

    A block is durable in the metadata log before the controller answers, and the controller
    never hands out a block twice, so ids never repeat across restarts or brokers. When
    `needs_block()` is true, the broker asks for a block and gives it to `use_block()`.
    """

    def __init__(self) -> None:
        self._next = 0     # next id to hand out
        self._end = 0      # end of the current block

    def needs_block(self) -> bool:
        return self._next >= self._end

    def use_block(self, start: int, length: int) -> None:
        """Blocks only go up: one below an id already handed out is refused."""
        if start < self._next or length <= 0:
            raise ValueError(f"producer id block [{start}, {start + length}) does not follow {self._next}")
        self._next, self._end = start, start + length

    def allocate(self) -> int:
        if self.needs_block():
            raise ProducerIdsExhausted("no producer id block from the controller")
        pid = self._next
        self._next += 1
        return pid

    def init_producer_id(self, transactional_id: str | None = None,
                         producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH) -> InitProducerIdResult:
        """InitProducerId for a producer without a transactional id.

        Kafka's TransactionCoordinator.handleInitProducerId "blindly accepts" such requests:
        whatever producer id/epoch the client passes (KIP-360, v3+), it answers a *new*
        producer id with epoch 0. (Idempotent clients bump their epoch locally instead; the
        partition state accepts a higher epoch starting at sequence 0.) An empty transactional
        id is INVALID_REQUEST. Transactional ids are not supported here: the caller decides.
        Raises ProducerIdsExhausted when the controller must hand out a block first.
        """
        if transactional_id is not None:
            if transactional_id == "":
                return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
            raise NotImplementedError("transactional InitProducerId is not implemented")
        return InitProducerIdResult(ErrorCode.NONE, self.allocate(), 0)
