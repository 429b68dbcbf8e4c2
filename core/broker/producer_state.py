"""Idempotent and transactional producer state for one partition.

Theory of operation
-------------------
This follows Kafka's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry (KIP-98,
KIP-360, KIP-890 part 1) and is pure: no asyncio and no I/O (the snapshot files are
producer_snapshots.py's, the producer id allocator is producer_ids.py). Everything is per batch
header
(`core.protocol.records.BatchInfo`); no record is ever decoded. (`read_end_txn_marker` is a
helper for the caller: it reads the single record of a control batch, see "Replay" below.)

Per partition the state maps producer id -> `ProducerEntry`: the producer epoch, the metadata of
the last `NUM_BATCHES_TO_RETAIN` (5) batches it appended (first/last sequence, first/last offset,
max timestamp), the timestamp of its last append, the coordinator epoch of the last transaction
marker it saw (-1: none) and the first offset of its ongoing transaction here (-1: none).

Produce path, per batch, as Kafka's UnifiedLog.analyzeAndValidateProducerState does:

1. `validate(batch, own_ids, verification_guard=..., require_verification=...)` - pure, before
   the append. In Kafka's order:
   - producer id -1: not idempotent, always OK.
   - producer id >= 0 with a negative base sequence: INVALID_RECORD (Kafka's LogValidator).
   - same epoch and (first seq, last seq) equal to one of the 5 cached batches: a duplicate.
     Kafka answers it with error NONE and the *original* base offset, so the verdict is
     `Verdict.duplicate(...)` with `code == NONE`; the broker must not append it.
   - epoch lower than the entry's: INVALID_PRODUCER_EPOCH (Kafka 2.7+ answers produce with it
     rather than PRODUCER_FENCED). Seaway checks this before the verification guard (Kafka
     after it), so that a fenced producer is always told so.
   - KIP-890 part 1, only with `require_verification` (Kafka's
     transaction.partition.verification.enable, default true): a transactional data batch of a
     producer without an ongoing transaction on this partition must present the verification
     guard that `start_verification` handed out and that is still recorded, else
     INVALID_TXN_STATE ("Record was not part of an ongoing transaction").
   - a verification under way for the producer (KIP-890): a first sequence above the lowest one
     seen while verifying is OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's VerificationStateEntry keeps
     it so that a retried lower sequence is not overtaken).
   - epoch higher: the first sequence must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
   - same epoch: the first sequence must be last seq + 1, where the successor of 2^31-1 is 0,
     else OUT_OF_ORDER_SEQUENCE_NUMBER. A retry older than the 5-batch window is therefore
     OUT_OF_ORDER_SEQUENCE_NUMBER, not a duplicate (Kafka behaves the same). Seaway's one
     departure: a producer whose id is outside the cluster's own range came from the other
     cluster of a DR pair (its state here was copied by the DR link, core/protocol/dr.py),
     and where the caller passes `own_ids` a sequence *ahead* of last seq + 1 is accepted
     for it. The partition passes them in a DR link's copy (the link skips aborted
     transactions and what retention removed upstream) and on a topic an unplanned failover
     promoted: there the state ends where the link stopped copying, and the gap is the
     records stranded on the failed cluster, already lost and counted as the failover's
     RPO; refusing would make the producer fail (the error is fatal to it) or resend them
     under a new id, as possible duplicates of what is stranded. Anywhere else (after a
     planned failover, say) a gap is requests of the producer that were lost on the way and
     that it will retry; accepting the later one would let the client count the earlier ones
     acknowledged. A sequence behind stays an error, except in a
     DR link's copy (`dr_copy`, the mirror writing a replica of its source): a batch whose
     sequences all lie behind the producer's last is one the link copied before (a restarted
     link sends again what it had not recorded), older than the five batches kept, and is
     answered DUPLICATE_SEQUENCE_NUMBER and not appended, where OUT_OF_ORDER would have the
     link write it again under its own producer id.
   - unknown producer id: accepted with any sequence. Since KIP-360 (Kafka 2.5) the broker no
     longer answers UNKNOWN_PRODUCER_ID for this; the state was lost (expiry, retention) and
     the producer is simply re-registered.
   - a non-transactional batch from a producer whose transaction is ongoing here:
     INVALID_TXN_STATE (Kafka's ProducerAppendInfo.appendDataBatch).
2. The broker appends, then calls `update(batch, assigned_base_offset)`. A transactional data
   batch starts the producer's transaction at its base offset when none is ongoing; any
   transactional batch clears the producer's verification guard (Kafka's updateProducers).

Several batches in one request are checked each against the state the ones before it leave:
`stage(producer_ids)` copies what those producers need (entries, ongoing transactions,
verification guards) into a scratch state to `validate` + `update` on.

Restart: `producer_snapshots.latest_snapshot(dir, max_offset)` gives the newest readable snapshot at or below the
recovery point; the broker then feeds the headers of the batches from that offset on to
`replay(...)` (Kafka rebuilds with origin REPLICATION: no validation, last writer wins).
Without a snapshot, `ProducerState.rebuild(headers_from_log_start)`.

Transactions
------------
Ongoing transactions are `producer id -> first offset` (`ProducerEntry.current_txn_first_offset`,
indexed by a heap with lazy deletion, so the smallest is O(log n) amortised). A completed
transaction stays *unstable* until the high watermark passes its marker (Kafka's
unreplicatedTxns): a read_committed consumer must never read past a marker the ISR may still
lose. Hence

    first_unstable_offset() = smallest first offset over the ongoing transactions and the
                              completed ones whose marker offset >= the high watermark (None: none)
    last_stable_offset(hw, log_start) = min(max(first_unstable_offset, log_start), hw), or hw
                              when nothing is unstable (Kafka's UnifiedLog.lastStableOffset)

A transaction marker (a control batch: one record, key = version int16 + type int16 with
ABORT 0 / COMMIT 1, value = version int16 + coordinator epoch int32) is checked by
`validate_marker(pid, epoch, coordinator_epoch)` as Kafka's appendEndTxnMarker does (origin
COORDINATOR): an epoch below the producer's is INVALID_PRODUCER_EPOCH (what Kafka's leader
answers WriteTxnMarkers with since 2.7, and what the coordinator's marker handler expects), a
coordinator epoch below the one the entry saw is TRANSACTION_COORDINATOR_FENCED.
`complete_txn(...)` then sets the entry's epoch and coordinator epoch and ends its ongoing
transaction, if any, as `CompletedTxn(producer_id, first_offset, last_offset=marker offset,
is_aborted, last_stable_offset)`. A marker without an ongoing transaction is valid and yields
None (the coordinator writes markers to every partition added to the transaction, written to or
not). `last_stable_offset` is Kafka's ProducerStateManager.lastStableOffset(completedTxn): the
first offset of the earliest *other* ongoing transaction, else the marker offset + 1 (completed
but unreplicated transactions do not count). For an aborted transaction,
`CompletedTxn.aborted_entry()` is the `AbortedTxnEntry` the partition writes to the log's
aborted-transaction index (Kafka's LogSegment.updateTxnIndex).

What the partition calls, and when. Every method is synchronous; the mutating ones run on the
event loop under the partition's append lock (`Partition.lock`), so that the log and this state
change together; the read-only ones (`first_unstable_offset`, `last_stable_offset`,
`in_transaction`) may run on the event loop without it (no await inside, but the lazy heaps
tidy themselves on reads, so never from a worker thread).

  Produce (leader), for each partition of the request:
    a. for a transactional batch, `needs_verification(batch)`; if true (and verification is
       enabled), `guard = start_verification(pid, epoch, base_sequence, now_ms)` (None: a
       transaction is already ongoing, nothing to verify). Then, without the lock, ask the
       transaction coordinator (AddPartitionsToTxn v4+, verify only). If it says the partition
       is not in the transaction, answer INVALID_TXN_STATE and append nothing (the guard simply
       expires). Kafka answers a coordinator that cannot tell (NOT_COORDINATOR,
       COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, ...) with NOT_ENOUGH_REPLICAS for
       produce below v12, which clients retry.
    b. with the lock: `validate(batch, own_ids, verification_guard=guard,
       require_verification=True)` (several batches: on `stage(...)`); an error is answered as is.
    c. append, then `update(batch, base_offset, now_ms)` for each batch.
  WriteTxnMarkers (leader), for each (producer, partition), with the lock:
    `validate_marker(pid, epoch, coordinator_epoch)`; if not ok answer its code and append
    nothing. Else append the control batch, then `complete_txn(pid, epoch, coordinator_epoch,
    marker_offset, is_commit, now_ms)`; if the result is aborted, write `aborted_entry()` to the
    transaction index before releasing the lock.
  High watermark moved (leader or follower): `on_high_watermark(hw)`. Log start moved
  (retention, DeleteRecords): `on_log_start_offset(offset)`.
  read_committed fetch: `last_stable_offset(hw, log_start)`; ListOffsets / the fetch response's
  last_stable_offset the same.
  Follower append: `replay_batches(batches, markers)` (see Replay), then write the returned
  aborted entries to the transaction index, then `on_high_watermark` with the leader's.
  Restart or truncation: snapshot + `replay_batches` as above, then `on_high_watermark(hw)`.
  The returned entries are those of the replayed range; the index already holds the ones it had
  written before, so only those above its last entry are written again.
  Expiry: `expire(now_ms, producer.id.expiration.ms)` never removes a producer whose
  transaction is ongoing (Kafka's isProducerExpired) and drops verification guards older than
  the expiration (Kafka's removeExpiredProducers).

Verification guards (KIP-890 part 1, Kafka's VerificationStateEntry / VerificationGuard): one
per producer, created by `start_verification` (a second call before the append returns the same
guard and lowers the recorded sequence, or raises the epoch, as Kafka does), and removed when
any transactional batch of that producer is appended (the first write starts the transaction;
a marker ends it), when the producer's epoch moves above the guard's (Seaway: a guard is for
one epoch), or by `expire`. A guard that was removed and recreated is a new token: the stale
one is refused, which is what closes the race with a marker written while the coordinator was
being asked. Guards are transient: not in snapshots, not compared by `==`.

Replay: a control batch's header does not say COMMIT or ABORT, nor the coordinator epoch. Pass
`markers`, a callable from a control batch's header to its `EndTxnMarker` (type and coordinator
epoch), for example `lambda b: read_end_txn_marker(data, b)` over the bytes the headers were
scanned from. What it needs is the first record of the control batch (never compressed by
Kafka): key bytes 2..3 = type int16 (0 ABORT, 1 COMMIT), value bytes 2..5 = coordinator epoch
int32. In a Kafka-written marker (one record, zero deltas, 4-byte key, 6-byte value) those are
at fixed positions from the batch start: type at 68..69, coordinator epoch at 73..76 (the record
starts at 61 with a 1-byte length, attributes, timestamp delta, offset delta, key length 0x08,
key at 66..69, value length 0x0c, value at 71..76); `read_end_txn_marker` parses the varints
rather than trust that. Without `markers` (or when it returns None) a control batch still ends
the producer's transaction (the state is right) but its outcome is unknown: no aborted entry is
produced and the coordinator epoch is left as it was.

Snapshots are a Seaway format, not Kafka's (Kafka keeps only the last batch per producer; we
keep all 5 so a restart still deduplicates the whole window). Layout, big-endian:

    magic b"SWPS" | version u16 | crc32c u32 (of everything after it) | count u32
    version 2, per producer: producer_id i64, epoch i16, last_timestamp i64,
    coordinator_epoch i32, current_txn_first_offset i64 (-1: none), n_batches u8,
    and n_batches x (first_seq i32, last_seq i32, first_offset i64, last_offset i64,
    max_timestamp i64); then unreplicated count u32 and per completed transaction whose marker
    the high watermark had not passed, by first offset: producer_id i64, first_offset i64,
    marker_offset i64 (Kafka forgets those on restart; keeping them means the LSO cannot pass
    such a marker after a restart either).
    version 1 (still read): per producer producer_id i64, epoch i16, last_timestamp i64,
    n_batches u8 and the batches; nothing after. Its producers have no ongoing transaction and
    coordinator epoch -1.

Files are named like Kafka's, `<20-digit offset>.snapshot` in the partition directory, where
the offset is the log end offset the state covers (exclusive).
"""
from __future__ import annotations

import heapq
import itertools
import struct
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, NamedTuple

from crc32c import crc32c

from core.protocol.buffers import Buffer
from core.protocol.errors import ErrorCode
from core.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchInfo
from core.protocol.txn_markers import read_marker

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms (1 day)
NO_TXN = -1                  # ProducerEntry.current_txn_first_offset: no ongoing transaction
NO_COORDINATOR_EPOCH = -1
ABORT, COMMIT = 0, 1         # ControlRecordType of a transaction marker (the control record's key)


def next_sequence(seq: int, delta: int = 1) -> int:
    """`seq + delta` in Kafka's sequence space: non-negative int32, 2^31-1 wraps to 0."""
    return (seq + delta) % (INT32_MAX + 1)


def _forward_gap(last_seq: int, first_seq: int) -> bool:
    """`first_seq` lies ahead of the successor of `last_seq` (within half the sequence space,
    as a wrapped sequence can be told from an old one), not behind it."""
    if last_seq < 0:
        return True
    return 0 < (first_seq - next_sequence(last_seq)) % (INT32_MAX + 1) < (INT32_MAX + 1) // 2


def _behind(last_seq: int, seq: int) -> bool:
    """`seq` is `last_seq` or lies behind it (within half the sequence space)."""
    return 0 < (next_sequence(last_seq) - seq) % (INT32_MAX + 1) < (INT32_MAX + 1) // 2


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


# --------------------------------------------------------------------------- transactions


class AbortedTxnEntry(NamedTuple):
    """One entry of the log's aborted-transaction index (Kafka's AbortedTxn):
    `last_stable_offset` is the LSO right after the abort marker (see CompletedTxn)."""
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn): `last_offset` is the marker's
    offset; `last_stable_offset` is Kafka's lastStableOffset(completedTxn), the first offset of
    the earliest other ongoing transaction when the marker was applied, else marker + 1."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int

    def aborted_entry(self) -> AbortedTxnEntry | None:
        """What the transaction index gets: an entry for an abort, nothing for a commit."""
        if not self.is_aborted:
            return None
        return AbortedTxnEntry(self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class EndTxnMarker(NamedTuple):
    """A COMMIT/ABORT control record: its key's type and its value's coordinator epoch."""
    control_type: int
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type == COMMIT


_MARKER_EPOCH = struct.Struct(">hi")     # the value's version, coordinator epoch


def read_end_txn_marker(buf: Buffer, info: BatchInfo) -> EndTxnMarker | None:
    """The transaction marker in control batch `info` of `buf`: its type and coordinator
    epoch (core/protocol/txn_markers.py `read_marker`; None where that finds no marker).
    Raises DecodeError for a record that runs past its batch."""
    found = read_marker(buf, info)
    if found is None:
        return None
    control_type, value = found
    return EndTxnMarker(control_type, _MARKER_EPOCH.unpack_from(value, 0)[1])


MarkerLookup = Callable[[BatchInfo], EndTxnMarker | None]

_GUARD_IDS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class VerificationGuard:
    """The token `start_verification` hands out (Kafka's VerificationGuard): unique for the
    process's life, so a guard removed and recreated never matches the old token."""
    value: int


@dataclass(slots=True)
class _Verification:
    timestamp: int
    guard: VerificationGuard
    lowest_sequence: int
    epoch: int


class _MinMap:
    """key -> value with the smallest value in O(log n) amortised: a heap with lazy deletion,
    rebuilt when stale entries outnumber the live ones."""
    __slots__ = ("values", "_heap")

    def __init__(self) -> None:
        self.values: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.values)

    def set(self, key: int, value: int) -> None:
        self.values[key] = value
        heapq.heappush(self._heap, (value, key))
        self._tidy()

    def discard(self, key: int) -> None:
        if self.values.pop(key, None) is not None:
            self._tidy()

    def min(self) -> tuple[int, int] | None:
        """(value, key) with the smallest value, or None."""
        heap, values = self._heap, self.values
        while heap:
            value, key = heap[0]
            if values.get(key) == value:
                return value, key
            heapq.heappop(heap)
        return None

    def clear(self) -> None:
        self.values.clear()
        self._heap.clear()

    def _tidy(self) -> None:
        if len(self._heap) > 2 * len(self.values) + 16:
            self._heap = [(v, k) for k, v in self.values.items()]
            heapq.heapify(self._heap)


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
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_TXN     # first offset of its ongoing transaction here

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

    def copy(self) -> "ProducerEntry":
        return replace(self, batches=deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN))

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:          # a new epoch starts a new sequence space
            self.batches.clear()
            self.epoch = epoch


class CorruptSnapshot(ValueError):
    """A snapshot that must be ignored: bad magic, version, CRC or length."""


_SNAP_MAGIC = b"SWPS"
_SNAP_VERSION = 2
_SNAP_HEAD = struct.Struct(">4sHI")      # magic, version, crc
_SNAP_COUNT = struct.Struct(">I")
_SNAP_ENTRY_V1 = struct.Struct(">qhqB")  # producer_id, epoch, last_timestamp, n_batches
# producer_id, epoch, last_timestamp, coordinator_epoch, current_txn_first_offset, n_batches
_SNAP_ENTRY = struct.Struct(">qhqiqB")
_SNAP_BATCH = struct.Struct(">iiqqq")    # first_seq, last_seq, first_offset, last_offset, max_ts
_SNAP_TXN = struct.Struct(">qqq")        # producer_id, first_offset, marker_offset


# --------------------------------------------------------------------------- partition state


class ProducerState:
    """Producer state of one partition (Kafka's ProducerStateManager, minus I/O)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing = _MinMap()                         # producer id -> first offset
        self._unreplicated: dict[int, tuple[int, int]] = {}   # first offset -> (producer id, marker offset)
        self._unreplicated_first = _MinMap()              # first offset -> first offset
        self._unreplicated_marker = _MinMap()             # first offset -> marker offset
        self._verifying: dict[int, _Verification] = {}    # producer id -> its verification

    def __len__(self) -> int:
        return len(self.producers)

    def __eq__(self, other: object) -> bool:
        """Same producers, ongoing and unreplicated transactions (verification guards are
        transient and not compared)."""
        if not isinstance(other, ProducerState):
            return NotImplemented
        return (self.producers == other.producers and self._ongoing.values == other._ongoing.values
                and self._unreplicated == other._unreplicated)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    # ------------------------------------------------------------------ produce path

    def validate(self, batch: BatchInfo, own_ids: range | None = None, *,
                 verification_guard: VerificationGuard | None = None,
                 require_verification: bool = False, dr_copy: bool = False) -> Verdict:
        """The verdict for a client batch before it is appended. Never mutates.

        `own_ids` is the cluster's own producer id range (core/protocol/dr.py), given where a
        forward gap may be accepted: a producer from outside it came from the other cluster
        of a DR pair, and a forward gap in its sequence is accepted (see the module's notes). With `require_verification`, a
        transactional batch that starts a transaction here needs `verification_guard` to be the
        producer's current guard (KIP-890), else INVALID_TXN_STATE."""
        pid = batch.producer_id
        if pid == NO_PRODUCER_ID or pid < 0:
            return _ACCEPT
        first_seq = batch.base_sequence
        if first_seq < 0:
            return Verdict.error(ErrorCode.INVALID_RECORD,
                                 f"invalid sequence number {first_seq} in batch with producer id {pid}")
        entry = self.producers.get(pid)
        if entry is not None:
            dup = entry.find_duplicate(batch.producer_epoch, first_seq, batch_last_sequence(batch))
            if dup is not None:
                return Verdict.duplicate(dup.first_offset, dup.last_offset, dup.max_timestamp)
        ongoing = entry is not None and entry.current_txn_first_offset != NO_TXN
        if entry is not None and batch.producer_epoch < entry.epoch:
            # Before the verification check (Kafka checks the guard first): a fenced producer
            # is told it is fenced, not that its transaction must be aborted, even when a
            # marker landed while its write was being verified.
            return Verdict.error(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"epoch {batch.producer_epoch} of producer {pid} is older than {entry.epoch}")
        if require_verification and batch.is_transactional and not batch.is_control and not ongoing \
                and not self.verification_guard_valid(pid, verification_guard):
            return Verdict.error(ErrorCode.INVALID_TXN_STATE,
                                 f"record of producer {pid} was not part of an ongoing transaction "
                                 f"(no valid verification)")
        verdict = self._check_sequence(entry, batch, own_ids, dr_copy)
        if not verdict.ok:
            return verdict
        if ongoing and not batch.is_transactional:
            return Verdict.error(ErrorCode.INVALID_TXN_STATE,
                                 f"expected a transactional write from producer {pid}: its transaction is ongoing")
        return _ACCEPT

    def _check_sequence(self, entry: ProducerEntry | None, batch: BatchInfo, own_ids: range | None,
                        dr_copy: bool = False) -> Verdict:
        """Kafka's checkProducerEpoch then checkSequence (origin CLIENT)."""
        pid, epoch, first_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
        if entry is not None and epoch < entry.epoch:
            return Verdict.error(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"epoch {epoch} of producer {pid} is older than {entry.epoch}")
        verifying = self._verifying.get(pid)
        if verifying is not None and first_seq > verifying.lowest_sequence:
            return Verdict.error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"out of order sequence for producer {pid}: got {first_seq}, "
                                 f"{verifying.lowest_sequence} is still being verified")
        if entry is None:
            # KIP-360: no state (new, expired or retention removed it) -> accept any sequence.
            return _ACCEPT
        if entry.epoch == NO_PRODUCER_EPOCH:
            return _ACCEPT                    # epoch unknown (loaded without one): any sequence
        if epoch != entry.epoch:
            if first_seq != 0:
                return Verdict.error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"new epoch {epoch} of producer {pid} must start at sequence 0, "
                                     f"got {first_seq}")
            return _ACCEPT
        expected_after = entry.last_seq       # NO_SEQUENCE (-1) when no batch is cached: needs 0
        if dr_copy and expected_after >= 0 and _behind(expected_after, first_seq) \
                and _behind(expected_after, batch_last_sequence(batch)):
            return Verdict.error(ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                                 f"sequences {first_seq}..{batch_last_sequence(batch)} of producer {pid} were "
                                 f"copied here before (its last is {expected_after})")
        if not in_sequence(expected_after, first_seq) \
                and not (own_ids is not None and pid not in own_ids and _forward_gap(expected_after, first_seq)):
            return Verdict.error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"out of order sequence for producer {pid}: got {first_seq}, "
                                 f"expected {next_sequence(expected_after) if expected_after >= 0 else 0}")
        return _ACCEPT

    def update(self, batch: BatchInfo, base_offset: int, timestamp_ms: int | None = None, *,
               marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Record a batch the log has accepted at `base_offset`.

        The entry's last timestamp is the batch's max timestamp, as in Kafka (which is what
        `expire` compares with); pass `timestamp_ms` to use another clock (e.g. the broker's
        append time for LogAppendTime topics or batches without timestamps).

        A transactional data batch starts the producer's transaction here if none is ongoing.
        A control batch is a transaction marker: with `marker` it is `complete_txn` (no checks,
        as for replication) and returns what that returns; without, it ends the transaction
        with an unknown outcome (see the module's notes on replay) and returns None. An empty
        control batch (its record cleaned away) changes nothing, as in Kafka.
        """
        pid = batch.producer_id
        if pid < 0:
            return None
        ts = batch.max_timestamp if timestamp_ms is None else timestamp_ms
        if batch.is_control:
            if batch.records_count <= 0:
                return None
            if marker is None:
                return self._end_txn(pid, batch.producer_epoch, None, base_offset, None, ts)
            return self._end_txn(pid, batch.producer_epoch, marker.coordinator_epoch, base_offset,
                                 not marker.is_commit, ts)
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, batch.producer_epoch)
        entry._set_epoch(batch.producer_epoch)
        entry.last_timestamp = ts
        if batch.base_sequence >= 0:
            entry.batches.append(BatchMeta(batch.base_sequence, batch_last_sequence(batch), base_offset,
                                           base_offset + batch.last_offset_delta, batch.max_timestamp))
        if batch.is_transactional:
            self._verifying.pop(pid, None)          # the transaction has its first offset now
            if entry.current_txn_first_offset == NO_TXN:
                entry.current_txn_first_offset = base_offset
                self._ongoing.set(pid, base_offset)
        else:
            self._drop_older_verification(pid, entry.epoch)
        return None

    def replay_batches(self, batches: Iterable[BatchInfo], markers: MarkerLookup | None = None) -> list[AbortedTxnEntry]:
        """Apply headers read back from the log or fetched from the leader (their base offsets
        are assigned), without validation, as Kafka's recovery and followers do. `markers` gives
        each control batch's COMMIT/ABORT and coordinator epoch (see the module's notes).
        Returns the aborted-transaction index entries of the transactions ended, in order."""
        aborted = []
        for b in batches:
            if b.producer_id < 0:
                continue
            marker = markers(b) if markers is not None and b.is_control else None
            completed = self.update(b, b.base_offset, marker=marker)
            if completed is not None and completed.is_aborted:
                aborted.append(AbortedTxnEntry(completed.producer_id, completed.first_offset,
                                               completed.last_offset, completed.last_stable_offset))
        return aborted

    def replay(self, batches: Iterable[BatchInfo], markers: MarkerLookup | None = None) -> "ProducerState":
        """`replay_batches`, returning self (the aborted entries are dropped)."""
        self.replay_batches(batches, markers)
        return self

    @classmethod
    def rebuild(cls, batches: Iterable[BatchInfo], markers: MarkerLookup | None = None) -> "ProducerState":
        """State rebuilt by scanning batch headers from the log start (no snapshot)."""
        return cls().replay(batches, markers)

    def stage(self, producer_ids: Iterable[int]) -> "ProducerState":
        """A scratch copy of what `validate` and `update` need for these producers (entries,
        ongoing transactions, verification guards), to check several batches of one request
        each against the state the ones before it leave. Never merged back."""
        staged = ProducerState()
        for pid in producer_ids:
            entry = self.producers.get(pid)
            if entry is not None:
                staged.producers[pid] = entry.copy()
                if entry.current_txn_first_offset != NO_TXN:
                    staged._ongoing.set(pid, entry.current_txn_first_offset)
            verifying = self._verifying.get(pid)
            if verifying is not None:
                staged._verifying[pid] = replace(verifying)
        return staged

    # ------------------------------------------------------------------ transactions

    def in_transaction(self, producer_id: int) -> bool:
        """Has this producer an ongoing transaction here (Kafka's hasOngoingTransaction)?"""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset != NO_TXN

    def validate_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Verdict:
        """The verdict for a WriteTxnMarkers marker before it is appended (Kafka's
        appendEndTxnMarker, origin COORDINATOR). Never mutates."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return _ACCEPT
        if producer_epoch < entry.epoch:
            return Verdict.error(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"marker epoch {producer_epoch} of producer {producer_id} is older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return Verdict.error(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                 f"coordinator epoch {coordinator_epoch} for producer {producer_id} is older "
                                 f"than {entry.coordinator_epoch}")
        return _ACCEPT

    def complete_txn(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, marker_offset: int,
                     is_commit: bool, timestamp_ms: int) -> CompletedTxn | None:
        """Record a marker the log has accepted at `marker_offset` (after `validate_marker`):
        the entry takes the marker's epochs and timestamp, its verification guard goes, and its
        ongoing transaction, if any, ends: returned, and unstable until `on_high_watermark`
        passes the marker. None when the producer had no ongoing transaction here."""
        return self._end_txn(producer_id, producer_epoch, coordinator_epoch, marker_offset, not is_commit,
                             timestamp_ms)

    def _end_txn(self, pid: int, epoch: int, coordinator_epoch: int | None, offset: int,
                 aborted: bool | None, ts: int) -> CompletedTxn | None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, epoch)
        entry._set_epoch(epoch)
        if coordinator_epoch is not None:
            entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = ts
        self._verifying.pop(pid, None)
        first = entry.current_txn_first_offset
        if first == NO_TXN:
            return None
        entry.current_txn_first_offset = NO_TXN
        self._ongoing.discard(pid)
        other = self._ongoing.min()           # the earliest *other* ongoing transaction
        last_stable = other[0] if other is not None else offset + 1
        self._unreplicated[first] = (pid, offset)
        self._unreplicated_first.set(first, first)
        self._unreplicated_marker.set(first, offset)
        if aborted is None:
            return None
        return CompletedTxn(pid, first, offset, aborted, last_stable)

    def on_high_watermark(self, high_watermark: int) -> None:
        """The high watermark moved: completed transactions whose marker is below it are
        stable now (Kafka's onHighWatermarkUpdated)."""
        self._drop_unreplicated_below(high_watermark)

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """The log start moved (Kafka's onLogStartOffsetIncremented)."""
        self._drop_unreplicated_below(log_start_offset)

    def _drop_unreplicated_below(self, offset: int) -> None:
        while (m := self._unreplicated_marker.min()) is not None and m[0] < offset:
            first = m[1]
            del self._unreplicated[first]
            self._unreplicated_first.discard(first)
            self._unreplicated_marker.discard(first)

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset over the ongoing transactions and the completed ones whose
        marker the high watermark has not passed; None when there is none."""
        ongoing = self._ongoing.min()
        unreplicated = self._unreplicated_first.min()
        if ongoing is None:
            return unreplicated[0] if unreplicated is not None else None
        if unreplicated is None:
            return ongoing[0]
        return min(ongoing[0], unreplicated[0])

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """The LSO a read_committed fetch stops at: the first unstable offset (not below the
        log start) if it is below the high watermark, else the high watermark."""
        first = self.first_unstable_offset()
        if first is None:
            return high_watermark
        return min(max(first, log_start_offset), high_watermark)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of each ongoing transaction (a copy)."""
        return dict(self._ongoing.values)

    def unreplicated_transactions(self) -> list[tuple[int, int, int]]:
        """(producer id, first offset, marker offset) of the completed transactions whose
        marker the high watermark has not passed, by first offset."""
        return [(pid, first, last) for first, (pid, last) in sorted(self._unreplicated.items())]

    # ------------------------------------------------------------------ KIP-890 verification

    def needs_verification(self, batch: BatchInfo) -> bool:
        """A transactional data batch of a producer without an ongoing transaction here: the
        coordinator must confirm the partition is in its transaction before the append."""
        return (batch.producer_id >= 0 and batch.is_transactional and not batch.is_control
                and not self.in_transaction(batch.producer_id))

    def start_verification(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           now_ms: int) -> VerificationGuard | None:
        """The guard the append must present after the coordinator verified the partition
        (Kafka's maybeStartTransactionVerification). None when the producer's transaction is
        already ongoing here: nothing to verify. A verification under way keeps its guard;
        its lowest sequence goes down to `base_sequence` for the same epoch, and a higher epoch
        replaces epoch and sequence (Kafka's maybeUpdateLowestSequenceAndEpoch)."""
        if self.in_transaction(producer_id):
            return None
        verifying = self._verifying.get(producer_id)
        if verifying is None:
            verifying = self._verifying[producer_id] = _Verification(
                now_ms, VerificationGuard(next(_GUARD_IDS)), base_sequence, producer_epoch)
        elif producer_epoch == verifying.epoch and base_sequence < verifying.lowest_sequence:
            verifying.lowest_sequence = base_sequence
        elif producer_epoch > verifying.epoch:
            verifying.epoch, verifying.lowest_sequence = producer_epoch, base_sequence
        return verifying.guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        """The producer's current guard, if a verification is under way."""
        verifying = self._verifying.get(producer_id)
        return verifying.guard if verifying is not None else None

    def verification_guard_valid(self, producer_id: int, guard: VerificationGuard | None) -> bool:
        """Is `guard` the producer's current guard (Kafka's VerificationGuard.verify)? None
        (Kafka's SENTINEL) never is."""
        verifying = self._verifying.get(producer_id)
        return guard is not None and verifying is not None and verifying.guard == guard

    def _drop_older_verification(self, producer_id: int, epoch: int) -> None:
        verifying = self._verifying.get(producer_id)
        if verifying is not None and verifying.epoch < epoch:
            del self._verifying[producer_id]

    # ------------------------------------------------------------------ expiry

    def expire(self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> list[int]:
        """Drop producers idle for at least `expiration_ms` (producer.id.expiration.ms), except
        those with an ongoing transaction, and verification guards that old. Returns the removed
        producer ids."""
        gone = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset == NO_TXN and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        stale = [pid for pid, v in self._verifying.items() if now_ms - v.timestamp >= expiration_ms]
        for pid in stale:
            del self._verifying[pid]
        return gone

    def clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._unreplicated_first.clear()
        self._unreplicated_marker.clear()
        self._verifying.clear()

    # ------------------------------------------------------------------ snapshots

    def snapshot_bytes(self) -> bytes:
        parts = [_SNAP_COUNT.pack(len(self.producers))]
        for pid in sorted(self.producers):
            e = self.producers[pid]
            parts.append(_SNAP_ENTRY.pack(pid, e.epoch, e.last_timestamp, e.coordinator_epoch,
                                          e.current_txn_first_offset, len(e.batches)))
            parts.extend(_SNAP_BATCH.pack(*m) for m in e.batches)
        parts.append(_SNAP_COUNT.pack(len(self._unreplicated)))
        parts.extend(_SNAP_TXN.pack(pid, first, last) for pid, first, last in self.unreplicated_transactions())
        body = b"".join(parts)
        return _SNAP_HEAD.pack(_SNAP_MAGIC, _SNAP_VERSION, crc32c(body)) + body

    @classmethod
    def load_snapshot(cls, data: bytes) -> "ProducerState":
        """Parse `snapshot_bytes()` output (version 2, or 1 from before transactions); raises
        CorruptSnapshot on any damage."""
        view = memoryview(data)
        if len(view) < _SNAP_HEAD.size + _SNAP_COUNT.size:
            raise CorruptSnapshot(f"snapshot too short ({len(view)} bytes)")
        magic, version, crc = _SNAP_HEAD.unpack_from(view, 0)
        if magic != _SNAP_MAGIC:
            raise CorruptSnapshot("not a producer snapshot")
        if version not in (1, 2):
            raise CorruptSnapshot(f"unknown snapshot version {version}")
        body = view[_SNAP_HEAD.size:]
        if crc32c(body) != crc:
            raise CorruptSnapshot("snapshot CRC mismatch")
        state = cls()
        try:
            (count,) = _SNAP_COUNT.unpack_from(body, 0)
            pos = _SNAP_COUNT.size
            for _ in range(count):
                if version == 1:
                    pid, epoch, last_ts, n = _SNAP_ENTRY_V1.unpack_from(body, pos)
                    coordinator_epoch, txn_first = NO_COORDINATOR_EPOCH, NO_TXN
                    pos += _SNAP_ENTRY_V1.size
                else:
                    pid, epoch, last_ts, coordinator_epoch, txn_first, n = _SNAP_ENTRY.unpack_from(body, pos)
                    pos += _SNAP_ENTRY.size
                if n > NUM_BATCHES_TO_RETAIN or pid < 0 or txn_first < NO_TXN or pid in state.producers:
                    raise CorruptSnapshot(f"bad entry for producer {pid}")
                entry = ProducerEntry(pid, epoch, last_timestamp=last_ts, coordinator_epoch=coordinator_epoch,
                                      current_txn_first_offset=txn_first)
                for _ in range(n):
                    entry.batches.append(BatchMeta(*_SNAP_BATCH.unpack_from(body, pos)))
                    pos += _SNAP_BATCH.size
                state.producers[pid] = entry
                if txn_first != NO_TXN:
                    state._ongoing.set(pid, txn_first)
            if version >= 2:
                (count,) = _SNAP_COUNT.unpack_from(body, pos)
                pos += _SNAP_COUNT.size
                for _ in range(count):
                    pid, first, last = _SNAP_TXN.unpack_from(body, pos)
                    pos += _SNAP_TXN.size
                    if pid < 0 or first < 0 or last < first or first in state._unreplicated:
                        raise CorruptSnapshot(f"bad completed transaction of producer {pid}")
                    state._unreplicated[first] = (pid, last)
                    state._unreplicated_first.set(first, first)
                    state._unreplicated_marker.set(first, last)
        except struct.error as exc:
            raise CorruptSnapshot(f"truncated snapshot: {exc}") from None
        if pos != len(body):
            raise CorruptSnapshot(f"{len(body) - pos} trailing bytes in snapshot")
        return state
