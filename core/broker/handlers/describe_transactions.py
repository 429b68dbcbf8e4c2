"""DescribeTransactions (key 65), v0.

The state of transactional ids (KIP-664), from their transaction coordinator
(`kafka-transactions describe`): the state by Kafka's name (Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort), the transaction timeout, the start time of the
current or last transaction (-1: none yet), the producer id and epoch, and the partitions of the
transaction (those still waiting for their markers while PrepareCommit/PrepareAbort).

Per id, as Kafka: DESCRIBE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
an empty id INVALID_REQUEST; NOT_COORDINATOR where this broker does not lead the id's
__transaction_state partition, COORDINATOR_LOAD_IN_PROGRESS while it loads it;
TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know (or only knows from an
InitProducerId whose record is not written yet, or one being expired). The topics the caller
may not DESCRIBE are left out of the answer, as Kafka's KafkaApis does.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..transactions.state import TxnState

R = m.DescribeTransactionsResponse


def _failed(tid: str, code: ErrorCode) -> "R.TransactionState":
    """An error answer, with the other fields at their schema defaults (zero), as Kafka's."""
    return R.TransactionState(error_code=code, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                              transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[])


def _describe(ctx, tid: str) -> "R.TransactionState":
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
        return _failed(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if tid == "":
        return _failed(tid, ErrorCode.INVALID_REQUEST)
    found = ctx.broker.transactions.coordinator.describe(tid)
    if isinstance(found, ErrorCode):
        return _failed(tid, found)
    meta = found.meta
    if meta.state is TxnState.DEAD:     # being expired
        return _failed(tid, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(index)
    return R.TransactionState(
        error_code=ErrorCode.NONE, transactional_id=tid, transaction_state=meta.state.kafka_name,
        transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
        topics=[R.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()
                if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t)])


async def handle(ctx, req):
    return R(throttle_time_ms=0, transaction_states=[_describe(ctx, tid) for tid in req.transactional_ids])


HANDLES = {m.ApiKey.DESCRIBE_TRANSACTIONS: handle}
