"""AddOffsetsToTxn (key 25), v0-4.

Adds the consumer group's `__consumer_offsets` partition to the producer's transaction, so
that the offsets it then sends with TxnOffsetCommit (to the group coordinator) commit or
abort with the transaction's marker. Needs WRITE on the transactional id and READ on the
group. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
"""
from __future__ import annotations

from core.broker.groups.storage import TOPIC as GROUPS_TOPIC, partition_for
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..transactions.events import AddPartitions, AddResult
from .txn_common import for_version

R = m.AddOffsetsToTxnResponse


async def handle(ctx, req):
    b = ctx.broker
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    groups = b.topics.get(GROUPS_TOPIC)
    count = len(groups.partitions) if groups is not None else b.config["offsets.topic.num.partitions"]
    tp = (GROUPS_TOPIC, partition_for(req.group_id, count))
    manager = b.transactions
    result = await manager.request(AddPartitions(manager.new_request_id(), b.clock(), req.transactional_id,
                                                 req.producer_id, req.producer_epoch, frozenset({tp})))
    assert isinstance(result, AddResult)
    return R(throttle_time_ms=0, error_code=for_version(result.error, ctx.api_version, 2))


HANDLES = {m.ApiKey.ADD_OFFSETS_TO_TXN: handle}
