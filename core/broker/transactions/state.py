"""A transactional id's metadata and the transitions between its states (Kafka's
TransactionMetadata and TransactionState, TV1: the producer epoch is bumped by InitProducerId
and by fencing, never by each transaction).

    Empty ──AddPartitions──> Ongoing ──EndTxn(commit)──> PrepareCommit ──markers──> CompleteCommit
      ^                        │  │                                                      │
      │                        │  └──EndTxn(abort), timeout, fence──> PrepareAbort ──markers──> CompleteAbort
      └─────────InitProducerId (epoch + 1)─────────────────────────────────────────────┴──────┘

A `TxnMetadata` is what one `__transaction_state` record says; it is immutable, and a
transition is a function from one to the next (`prepare_*`), checked against `VALID_PREVIOUS`.
The coordinator applies a new metadata only once its record is in the log, so the
metadata it answers with is always what a new coordinator would load.

Epoch fencing (PrepareEpochFence) is never written: when a transaction must be aborted on a
producer's behalf (it timed out, or a new producer with the same id called InitProducerId
while it was ongoing), the epoch is bumped and PrepareAbort is written with the bumped epoch,
so the abort markers fence the old producer on every partition it wrote.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767   # Java's Short.MAX_VALUE


class TxnState(IntEnum):
    """The `TransactionStatus` byte of a __transaction_state value, Kafka's numbering."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """As DescribeTransactions and kafka-transactions name it."""
        return _KAFKA_NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> "TxnState | None":
        return _BY_KAFKA_NAME.get(name)

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_KAFKA_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME = {name: state for state, name in _KAFKA_NAMES.items()}

S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

TopicPartition = tuple[str, int]


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not have: a coordinator bug, never a client's."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps one epoch in reserve, so that fencing an exhausted producer still has one
    to bump to."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    # When the ongoing (or last) transaction began; strictly increasing per id within an
    # epoch, so that (producer id, epoch, start_ms) names one transaction (its markers carry
    # it: core/protocol/txn_markers.py).
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID     # the id before a rotation (KIP-360)
    # The epoch before the last bump: a retried InitProducerId that names it gets the same
    # answer again. Kept in memory only (as Kafka): a new coordinator does not know it.
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def _to(self, state: TxnState, **changes) -> "TxnMetadata":
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        return dataclasses.replace(self, state=state, **changes)

    # -------------------------------------------------------------- transitions

    def prepare_add_partitions(self, partitions: frozenset[TopicPartition], now_ms: int) -> "TxnMetadata":
        start = max(now_ms, self.start_ms + 1) if self.state.completed else self.start_ms
        return self._to(S.ONGOING, partitions=self.partitions | partitions, start_ms=start,
                        last_update_ms=now_ms)

    def prepare_end(self, commit: bool, now_ms: int) -> "TxnMetadata":
        return self._to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_ms=now_ms)

    def prepare_fenced_abort(self, now_ms: int) -> "TxnMetadata":
        """Abort on the producer's behalf with its epoch bumped (PrepareEpochFence, then
        PrepareAbort, as one record). Unlike Kafka, the bump is not applied in memory before
        the record is written: if the write fails, nothing changed, and the next attempt
        bumps from the same epoch to the same value (Kafka needs `hasFailedEpochFence` to
        avoid spending a second epoch)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        fenced = self._to(S.PREPARE_EPOCH_FENCE, producer_epoch=self.producer_epoch + 1,
                          last_producer_epoch=NO_PRODUCER_EPOCH)
        return fenced._to(S.PREPARE_ABORT, last_update_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> "TxnMetadata":
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._to(state, partitions=frozenset(), last_update_ms=now_ms)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                now_ms: int) -> "TxnMetadata | None":
        """InitProducerId on a completed transaction. None: the expected epoch is neither the
        current one nor the one before it, so the caller is a fenced producer."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None or self.producer_epoch == NO_PRODUCER_EPOCH \
                or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # a retry of a bump whose answer was lost: the same answer again, no second bump
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._to(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                        partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)

    def prepare_rotate_producer_id(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                   record_last_epoch: bool) -> "TxnMetadata":
        """The epoch is exhausted: a new producer id, epoch 0."""
        return self._to(S.EMPTY, producer_id=new_producer_id, last_producer_id=self.producer_id,
                        producer_epoch=0,
                        last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                        timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> "TxnMetadata":
        return self._to(S.DEAD, partitions=frozenset(), last_update_ms=now_ms)
