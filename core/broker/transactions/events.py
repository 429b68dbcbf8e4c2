"""Inputs and outputs of the transaction coordinator (sans-IO).

Requests carry a `request_id` the driver routes answers by and `now_ms`, the driver's clock.
The coordinator answers with actions, executed in order:

- `WriteTxnLog`: append the record (`records`: sometimes two, in one batch) to the
  transactional id's `__transaction_state` partition; report the outcome with `LogWritten`
  (same `token`). Nothing it decided is applied, and no `Respond` that depends on it is
  emitted, until then.
- `SendMarkers`: write the commit or abort marker to every partition of the transaction, on
  their leaders, retrying until each is written or gone; then `MarkersWritten`.
- `NeedProducerId`: the request needs a fresh producer id; allocate one and submit the event
  again with `fresh_producer_id` set.
- `Respond`: answer a request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Optional, Union

from core.protocol.errors import ErrorCode

from .state import TopicPartition, TxnMetadata


# ----------------------------------------------------------------------------- requests

@dataclass(frozen=True)
class InitProducerId:
    request_id: Hashable
    now_ms: int
    transactional_id: str
    timeout_ms: int
    producer_id: int = -1            # v3+ (KIP-360): the id and epoch the producer holds
    producer_epoch: int = -1
    fresh_producer_id: Optional[int] = None   # filled in by the driver after NeedProducerId


@dataclass(frozen=True)
class AddPartitions:
    """AddPartitionsToTxn from a client (AddOffsetsToTxn is the group's __consumer_offsets
    partition added the same way), or with `verify_only` a partition leader's KIP-890 check
    that a write belongs to an ongoing transaction."""
    request_id: Hashable
    now_ms: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]
    verify_only: bool = False


@dataclass(frozen=True)
class EndTxn:
    request_id: Hashable
    now_ms: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True)
class LogWritten:
    """The driver's report on a `WriteTxnLog`: `error` NONE, or the code the coordinator maps
    a failed append to (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR)."""
    transactional_id: str
    token: int
    now_ms: int
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class Unpark:
    """A parked AddPartitionsToTxn waited as long as the driver allows: answer it with
    CONCURRENT_TRANSACTIONS (the client retries) unless it was answered meanwhile."""
    transactional_id: str
    request_id: Hashable


@dataclass(frozen=True)
class MarkersWritten:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    now_ms: int


Request = Union[InitProducerId, AddPartitions, EndTxn]


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class AddResult:
    """One error for the whole request, or (verify_only) per partition."""
    error: ErrorCode
    per_partition: tuple[tuple[TopicPartition, ErrorCode], ...] = ()

    def error_for(self, tp: TopicPartition) -> ErrorCode:
        return dict(self.per_partition).get(tp, self.error)


@dataclass(frozen=True)
class EndResult:
    error: ErrorCode


Result = Union[InitResult, AddResult, EndResult]


# ----------------------------------------------------------------------------- actions

@dataclass(frozen=True)
class WriteTxnLog:
    transactional_id: str
    partition: int                    # of __transaction_state
    coordinator_epoch: int
    metadata: Optional[TxnMetadata]   # None: a tombstone (the id expired)
    token: int
    # Records of the same id written before `metadata`, in the same batch: all of them land,
    # or none does (a completed transaction and the next one's Ongoing, coordinator.py).
    preceding: tuple[TxnMetadata, ...] = ()

    @property
    def records(self) -> tuple[Optional[TxnMetadata], ...]:
        return (*self.preceding, self.metadata)


@dataclass(frozen=True)
class SendMarkers:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    start_ms: int = -1      # the transaction's, named in its markers (core/protocol/txn_markers.py)


@dataclass(frozen=True)
class NeedProducerId:
    event: InitProducerId


@dataclass(frozen=True)
class Respond:
    request_id: Hashable
    result: Result


Action = Union[WriteTxnLog, SendMarkers, NeedProducerId, Respond]
