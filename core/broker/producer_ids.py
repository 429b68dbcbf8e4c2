"""Producer ids for idempotent producers: blocks from the KRaft controller, handed out one by
one (`ProducerIdAllocator`), and InitProducerId for a producer without a transactional id.
Transactional ids are the transaction coordinator's (core/broker/transactions/)."""
from __future__ import annotations

from typing import NamedTuple

from core.protocol.errors import ErrorCode
from core.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


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
