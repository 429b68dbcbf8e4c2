"""AddPartitionsToTxn (key 24), v0-4.

v0-3, from a transactional producer: the partitions it is about to write join its ongoing
transaction (the coordinator writes them to __transaction_state before answering). Needs WRITE
on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and WRITE
on each topic. As Kafka: if any partition is refused here (TOPIC_AUTHORIZATION_FAILED, or
UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not have), nothing is added and
the others answer OPERATION_NOT_ATTEMPTED.

v4+, from a partition leader (CLUSTER_ACTION): a batch of transactions, each with VerifyOnly
(KIP-890 part 1: is this partition in the producer's ongoing transaction? nothing is written) or
not. We advertise up to v4: v5 only adds TRANSACTION_ABORTABLE, which belongs to transaction
version 2 (KIP-890 part 2), which we do not implement.

PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from ..transactions.events import AddPartitions, AddResult
from .txn_common import for_version, side_by_side

R = m.AddPartitionsToTxnResponse
VERSIONS = (0, 4)


def _topic_results(codes: dict[tuple[str, int], ErrorCode]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(
            R.AddPartitionsToTxnPartitionResult(partition_index=index, partition_error_code=code))
    return [R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]


def _partitions(topics) -> list[tuple[str, int]]:
    return [(t.name, i) for t in topics for i in t.partitions]


async def _add(ctx, tid: str, pid: int, epoch: int, tps: list[tuple[str, int]], verify_only: bool,
               check_topics: bool) -> dict[tuple[str, int], ErrorCode]:
    b = ctx.broker
    if check_topics:
        refused: dict[tuple[str, int], ErrorCode] = {}
        for topic, index in tps:
            if not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, topic):
                refused[(topic, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif (t := b.topics.get(topic)) is None or not 0 <= index < len(t.partitions):
                refused[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if refused:
            return {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in tps}
    manager = b.transactions
    result = await manager.request(AddPartitions(manager.new_request_id(), b.clock(), tid, pid, epoch,
                                                 frozenset(tps), verify_only))
    assert isinstance(result, AddResult)
    return {tp: for_version(result.error_for(tp), ctx.api_version, 2) for tp in tps}


async def handle(ctx, req):
    if ctx.api_version <= 3:
        tps = _partitions(req.v3_and_below_topics)
        tid = req.v3_and_below_transactional_id
        if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            codes = dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            codes = await _add(ctx, tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, tps,
                               False, True)
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes))
    if not ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    async def add(txn) -> "R.AddPartitionsToTxnResult":
        tps = _partitions(txn.topics)
        codes = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, tps, txn.verify_only,
                           not txn.verify_only)
        return R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=_topic_results(codes))

    return R(throttle_time_ms=0, error_code=0, results_by_transaction=await side_by_side(req.transactions, add))


handle.VERSIONS = VERSIONS  # type: ignore[attr-defined]
HANDLES = {m.ApiKey.ADD_PARTITIONS_TO_TXN: handle}
