"""The idempotent producer's bookkeeping: producer id, epoch and per-partition sequences.

Theory of operation
-------------------
This is a pure state machine (no I/O, no asyncio, no clock): the producer tells it what
happened to each batch and asks it what may be sent; it answers with decisions and, rarely,
with batches that must be failed (`take_failures`). It follows the Java producer's
TransactionManager for a producer without a transactional id (KIP-98, KIP-360), with one
deliberate difference noted below.

Identity. InitProducerId gives a producer id and epoch. Every batch carries the id, the epoch
and the base sequence of its partition; the broker appends a batch only if its sequence follows
the last one it appended for that (id, epoch), answers a retry of one of the last five batches
with the original offset, and refuses a gap with OUT_OF_ORDER_SEQUENCE_NUMBER.

Sequences. A batch gets its sequence when it is drained for its first send (`assign`), and
keeps it (and its bytes) across retries. Sequences count records, start at 0 per partition
and epoch, and wrap from 2^31-1 to 0 on the wire; internally they are unbounded integers so
that comparisons never wrap. `in_flight` holds a partition's batches that have a sequence and
no final outcome, in sequence order (outstanding in a request, or waiting for a retry).

What may be sent (`may_send`):
- a batch without a sequence (new): once the producer id is known, if the partition has fewer
  than `max_in_flight` (5, the broker's dedup window) batches in flight, is not waiting for a
  reset, has no unresolved failure, and - if its in-flight batches belong to an older id or
  epoch - only once those are all settled (then the partition restarts at sequence 0);
- a batch with a sequence: if it was never sent (a split half, or one that did not fit in the
  last request), or if it is the oldest batch in flight. So a retry never overtakes an older
  batch, and a partition whose head needs a retry falls back to one request in flight.

Outcomes:
- success, or DUPLICATE_SEQUENCE_NUMBER (the broker has it): acknowledged.
- a retriable error: the same batch, same sequence, is sent again. A transport error or
  REQUEST_TIMED_OUT leaves the batch `maybe_written` until an answer settles it.
- OUT_OF_ORDER_SEQUENCE_NUMBER: if an older batch of ours is still unsettled, the gap may
  close when it lands: retry. If the batch is the oldest in flight, the broker really lacks
  what precedes it: bump the epoch (KIP-360) and resend under the new epoch from sequence 0.
  If a *younger* batch was already acknowledged, the batch was probably written and fell out
  of the broker's window: it is failed, never resent.
- UNKNOWN_PRODUCER_ID: the broker lost our state; bump the epoch and resend.
- INVALID_PRODUCER_EPOCH / PRODUCER_FENCED: the broker will not take this (id, epoch); get a
  new producer id (InitProducerId) and resend. (Some brokers, e.g. tansu, fence a locally
  bumped epoch with PRODUCER_FENCED; a new id always works.)
- any other failure of a batch that has a sequence: it is gone, so the partition is
  `unresolved`: nothing new is drained until its in-flight batches settle; then if every
  sequence handed out was acknowledged (the failed batch was in fact written), it carries on,
  else the epoch is bumped so that the next batch starts a fresh sequence at 0.

Epoch bump (`_perform_reset`). It waits until the partition has nothing outstanding (a
response still on its way could otherwise land after batches were renumbered). Then the
producer's epoch goes up by one (or, at epoch 32767 or after a fence, a new producer id is
fetched), and the partition's in-flight batches lose their sequence and are drained again,
in order, from sequence 0. Other partitions keep their old epoch until their own in-flight
batches settle, then restart at 0 too. The difference from Java: a batch that may already
have been written under the old identity (an attempt ended without an answer) is *failed*
with a clear error instead of being renumbered, because under a new epoch the broker could not
recognise it as a duplicate.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Hashable

from core.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["IdempotenceState", "PartitionSequences", "Decision", "Reset", "SEQUENCE_SPACE",
           "EPOCH_MAX", "MAX_IN_FLIGHT", "SEQUENCE_ERRORS", "wire_sequence"]

SEQUENCE_SPACE = 2 ** 31        # sequences are non-negative int32s; 2^31-1 is followed by 0
EPOCH_MAX = 32767               # int16: past this, a new producer id is needed
MAX_IN_FLIGHT = 5               # batches a broker remembers per producer and partition
NO_PRODUCER_ID = -1

#: Produce errors that concern the idempotent producer's identity or sequences.
SEQUENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                             ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})


def wire_sequence(seq: int) -> int:
    """The int32 written in a batch for an (unbounded) internal sequence number."""
    return seq % SEQUENCE_SPACE


class Decision(enum.Enum):
    RETRY = "retry"
    FAIL = "fail"


class Reset(enum.IntEnum):
    NONE = 0
    BUMP_EPOCH = 1
    NEW_PRODUCER_ID = 2


@dataclass(eq=False, slots=True)
class PartitionSequences:
    """One partition's sequence state under one (producer id, epoch)."""
    producer_id: int
    epoch: int
    next_seq: int = 0                 # next sequence to hand out (unbounded)
    last_acked: int = -1              # last sequence acknowledged (unbounded), -1: none yet
    in_flight: list = field(default_factory=list)  # sequenced, unsettled batches, in order
    outstanding: int = 0              # of those, how many are in a request right now
    unresolved: bool = False          # a sequenced batch failed: hold new batches
    reset: Reset = Reset.NONE         # a new epoch / producer id is due once outstanding == 0
    reset_reason: str = ""


class IdempotenceState:
    """Producer-wide identity plus `PartitionSequences` per partition key (any hashable,
    the producer uses (topic, partition)).

    Batches are duck-typed: they have `records` (a sized list), `producer_id`,
    `producer_epoch`, `base_seq` (None until assigned), `sent`, `outstanding`,
    `maybe_written`, and `set_producer_state(producer_id, epoch, base_seq)`, which also
    rewrites the batch's bytes if it has been encoded.
    """

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT):
        self.max_in_flight = max_in_flight
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self.ever_had_producer_id = False
        self.partitions: dict[Hashable, PartitionSequences] = {}
        self._failures: list[tuple[Any, KafkaError]] = []

    # ------------------------------------------------------------------ identity

    @property
    def needs_producer_id(self) -> bool:
        return self.producer_id < 0

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """InitProducerId answered. Partitions restart at 0 under it as they drain."""
        if producer_id < 0 or not 0 <= epoch <= EPOCH_MAX:
            raise ValueError(f"invalid producer id/epoch {producer_id}/{epoch}")
        self.producer_id, self.epoch = producer_id, epoch
        self.ever_had_producer_id = True

    def _current(self, e: PartitionSequences) -> bool:
        return (e.producer_id, e.epoch) == (self.producer_id, self.epoch) and self.producer_id >= 0

    # ------------------------------------------------------------------ sending

    def may_send(self, tp: Hashable, batch) -> bool:
        e = self.partitions.get(tp)
        if batch.base_seq is not None:
            if e is None:
                return True
            if e.reset:
                return False
            return not batch.sent or (bool(e.in_flight) and e.in_flight[0] is batch)
        if self.producer_id < 0:
            return False
        if e is None:
            return True
        if e.reset or e.unresolved or len(e.in_flight) >= self.max_in_flight:
            return False
        return self._current(e) or not e.in_flight

    def assign(self, tp: Hashable, batch) -> None:
        """Give a new batch its producer id, epoch and base sequence (call just before its
        first send, after `may_send`)."""
        if self.producer_id < 0:
            raise RuntimeError("no producer id yet")
        if batch.base_seq is not None:
            raise RuntimeError("batch already has a sequence")
        e = self.partitions.get(tp)
        if e is None:
            e = self.partitions[tp] = PartitionSequences(self.producer_id, self.epoch)
        elif not self._current(e):
            if e.in_flight:
                raise RuntimeError("partition still has batches of an older epoch in flight")
            e.producer_id, e.epoch = self.producer_id, self.epoch
            e.next_seq, e.last_acked, e.unresolved = 0, -1, False
        batch.set_producer_state(self.producer_id, self.epoch, e.next_seq)
        batch.sent = False
        batch.maybe_written = False
        e.next_seq += len(batch.records)
        e.in_flight.append(batch)

    def on_send(self, tp: Hashable, batch) -> None:
        """The batch went into a request."""
        e = self.partitions[tp]
        batch.sent = True
        if not batch.outstanding:
            batch.outstanding = True
            e.outstanding += 1

    # ------------------------------------------------------------------ outcomes

    def on_acknowledged(self, tp: Hashable, batch) -> None:
        """Success, or DUPLICATE_SEQUENCE_NUMBER (the broker already has the batch)."""
        e = self.partitions.get(tp)
        if e is None:
            return
        self._returned(e, batch)
        batch.maybe_written = False
        if self._remove(e, batch):
            last = batch.base_seq + len(batch.records) - 1
            if last > e.last_acked:
                e.last_acked = last
        self._after_change(tp, e)

    def on_retriable(self, tp: Hashable, batch, maybe_written: bool) -> None:
        """The batch will be retried as it is (same id, epoch, sequence). `maybe_written`:
        this attempt ended without an answer that says it was not appended."""
        e = self.partitions.get(tp)
        if e is None:
            return
        self._returned(e, batch)
        batch.maybe_written = batch.maybe_written or maybe_written
        self._after_change(tp, e)

    def on_sequence_error(self, tp: Hashable, batch, code: int) -> tuple[Decision, str]:
        """OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH or
        PRODUCER_FENCED for `batch`: retry it (maybe after a reset) or fail it."""
        e = self.partitions.get(tp)
        if e is None or batch not in e.in_flight:
            return Decision.FAIL, "batch is no longer tracked by the idempotent producer"
        self._returned(e, batch)
        where = (f"{len(batch.records)} record(s) at sequence {wire_sequence(batch.base_seq)} "
                 f"(producer {batch.producer_id}, epoch {batch.producer_epoch})")
        decision, message = Decision.RETRY, ""
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            if batch.base_seq <= e.last_acked:
                decision = Decision.FAIL
                message = (f"{where} lies before sequence {wire_sequence(e.last_acked)}, which the broker "
                           "has acknowledged; the batch may already be in the log, so it is not resent")
            elif e.in_flight[0] is batch:
                # Nothing older of ours is unsettled, so what the broker lacks is lost for good.
                # The broker's refusal also proves this batch is not in the log.
                batch.maybe_written = False
                self._request_reset(e, Reset.BUMP_EPOCH, f"out of order sequence for {where}")
            # else: an older batch is still on its way; the gap may close once it lands.
        elif code == ErrorCode.UNKNOWN_PRODUCER_ID:
            batch.maybe_written = False
            self._request_reset(e, Reset.BUMP_EPOCH, f"broker lost the producer state ({where})")
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._request_reset(e, Reset.NEW_PRODUCER_ID,
                                f"{ErrorCode(code).name} for {where}")
        else:
            raise ValueError(f"not a sequence error: {code}")
        self._after_change(tp, e)
        return decision, message

    def on_split(self, tp: Hashable, batch, parts) -> bool:
        """MESSAGE_TOO_LARGE: the parts take over the batch's sequence range. Returns False
        (and nothing changes) if the batch may already have been written: splitting it would
        change its sequences, so a retry could not be recognised as a duplicate."""
        e = self.partitions.get(tp)
        if batch.maybe_written:
            return False
        if e is None or batch not in e.in_flight:
            return True
        self._returned(e, batch)
        seq = batch.base_seq
        for part in parts:
            part.set_producer_state(batch.producer_id, batch.producer_epoch, seq)
            part.sent = part.outstanding = part.maybe_written = False
            seq += len(part.records)
        i = e.in_flight.index(batch)
        e.in_flight[i:i + 1] = list(parts)
        self._after_change(tp, e)
        return True

    def on_failed(self, tp: Hashable, batch) -> None:
        """The batch's records were failed to the caller (fatal error, delivery timeout...)."""
        e = self.partitions.get(tp)
        if e is None:
            return
        self._returned(e, batch)
        if self._remove(e, batch):
            e.unresolved = True
        self._after_change(tp, e)

    def take_failures(self) -> list[tuple[Any, KafkaError]]:
        """Batches this state machine decided to fail, with their errors (the caller fails
        their records and drops them from its queues)."""
        out, self._failures = self._failures, []
        return out

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _returned(e: PartitionSequences, batch) -> None:
        if batch.outstanding:
            batch.outstanding = False
            e.outstanding -= 1

    @staticmethod
    def _remove(e: PartitionSequences, batch) -> bool:
        for i, b in enumerate(e.in_flight):
            if b is batch:
                del e.in_flight[i]
                return True
        return False

    @staticmethod
    def _request_reset(e: PartitionSequences, kind: Reset, reason: str) -> None:
        if kind > e.reset:
            e.reset, e.reset_reason = kind, reason

    def _after_change(self, tp: Hashable, e: PartitionSequences) -> None:
        if e.outstanding:
            return
        if not e.reset and e.unresolved and not e.in_flight:
            if not self._current(e) or e.last_acked + 1 == e.next_seq:
                e.unresolved = False   # restarts at 0 anyway / every sequence was acknowledged
                return
            self._request_reset(e, Reset.BUMP_EPOCH, "a batch failed after it got a sequence")
        if e.reset:
            self._perform_reset(tp, e)

    def _perform_reset(self, tp: Hashable, e: PartitionSequences) -> None:
        kind, reason = e.reset, e.reset_reason
        if self._current(e):
            if kind == Reset.NEW_PRODUCER_ID or self.epoch >= EPOCH_MAX:
                log.info("idempotent producer %d: getting a new producer id (%s)", self.producer_id, reason)
                self.producer_id, self.epoch = NO_PRODUCER_ID, -1
            else:
                self.epoch += 1
                log.info("idempotent producer %d: epoch bumped to %d (%s)", self.producer_id, self.epoch, reason)
        # else: the partition's identity is already stale; it restarts under the current one.
        for b in e.in_flight:
            if b.maybe_written:
                self._failures.append((b, KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"{len(b.records)} record(s) for {_name(tp)} may already have been written (an earlier "
                    f"attempt got no answer) and cannot be resent under a new producer epoch without "
                    f"risking a duplicate; reset because: {reason}")))
            else:
                b.set_producer_state(NO_PRODUCER_ID, -1, None)
                b.sent = False
        e.in_flight.clear()
        e.producer_id, e.epoch = NO_PRODUCER_ID, -1   # stale: the next assign starts at 0
        e.next_seq, e.last_acked = 0, -1
        e.unresolved, e.reset, e.reset_reason = False, Reset.NONE, ""


def _name(tp) -> str:
    if isinstance(tp, tuple) and len(tp) == 2:
        return f"{tp[0]}-{tp[1]}"
    return str(tp)
