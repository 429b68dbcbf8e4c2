"""InitProducerId (key 22), v0-5.

Gives an idempotent producer its producer id, with epoch 0. As in Kafka, a producer without a
transactional id always gets a new id, whatever id and epoch it passes (v3+, KIP-360): it
bumps its epoch locally when it must, and partitions accept a new epoch that starts at
sequence 0. ACLs, as Kafka 3.0+ (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any
topic, else CLUSTER_AUTHORIZATION_FAILED.

With a transactional id the request goes to its transaction coordinator (this broker must lead
the id's __transaction_state partition, else NOT_COORDINATOR): the id keeps its producer id and
the epoch is bumped, which fences any older producer with the same id; an ongoing transaction
is aborted first (CONCURRENT_TRANSACTIONS, retried by the client). An empty id is
INVALID_REQUEST, a transaction.timeout.ms above transaction.max.timeout.ms
INVALID_TRANSACTION_TIMEOUT. Needs WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v4.

The ids come in blocks of 1000 from the active controller
(AllocateProducerIds), so brokers never hand out the same id; while no block can be had (the
broker is not registered yet, or no controller answers) the answer is
COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from ..transactions.events import InitProducerId, InitResult
from .txn_common import for_version

R = m.InitProducerIdResponse


async def _transactional(ctx, req):
    b = ctx.broker
    tid = req.transactional_id
    if tid == "":
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return R(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                 producer_epoch=-1)
    manager = b.transactions
    pid, epoch = (req.producer_id, req.producer_epoch) if ctx.api_version >= 3 else (-1, -1)
    result = await manager.request(InitProducerId(manager.new_request_id(), b.clock(), tid,
                                                  req.transaction_timeout_ms, pid, epoch))
    assert isinstance(result, InitResult)
    return R(throttle_time_ms=0, error_code=for_version(result.error, ctx.api_version, 4),
             producer_id=result.producer_id, producer_epoch=result.producer_epoch)


async def handle(ctx, req):
    if req.transactional_id is not None:
        return await _transactional(ctx, req)
    # KIP-679: WRITE on any topic is enough to be idempotent; IDEMPOTENT_WRITE still works.
    if not ctx.authorize(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False) \
            and not ctx.authorize_by_resource_type(Operation.WRITE, ResourceType.TOPIC):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                 producer_epoch=-1)
    try:
        producer_id = await ctx.broker.allocate_producer_id()
    except KafkaError as exc:   # KRaft: no producer id block from the controller yet
        return R(throttle_time_ms=0, error_code=exc.code, producer_id=-1, producer_epoch=-1)
    return R(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)


HANDLES = {m.ApiKey.INIT_PRODUCER_ID: handle}
