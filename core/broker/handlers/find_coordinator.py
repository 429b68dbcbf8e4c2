"""FindCoordinator (key 10), v0-6.

Names the broker that coordinates a group: the leader of the group's `__consumer_offsets`
partition, at its address on the listener the request came in on. The first lookup has the
controller create `__consumer_offsets` (as Kafka does) and answers COORDINATOR_NOT_AVAILABLE,
which clients retry, until it exists.
Key type 1 names a transactional id's coordinator: the leader of its `__transaction_state`
partition, created on first use the same way (DESCRIBE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED). v4+ batches keys (KIP-699) and reports errors per key.
Any other key type is INVALID_REQUEST.
"""
from __future__ import annotations

from core.broker.groups.storage import TOPIC
from core.broker.transactions.storage import TOPIC as TXN_TOPIC
from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError
from core.security.authorizer import Operation, ResourceType

R = m.FindCoordinatorResponse
GROUP, TRANSACTION = 0, 1


def _coordinator_node(ctx, key: str, key_type: int):
    """(node id, host, port) of the coordinator: the leader of the group's __consumer_offsets
    partition, or of the transactional id's __transaction_state partition."""
    b = ctx.broker
    image = b.kraft.image
    if key_type == TRANSACTION:
        index, topic = b.transactions.coordinator_partition(key), TXN_TOPIC
    else:
        index, topic = b.groups.coordinator_partition(key), TOPIC
    reg = image.partition(topic, index) if index is not None else None
    broker = image.brokers.get(reg.leader) if reg is not None else None
    if broker is None or broker.fenced:
        return None
    ep = next((e for e in broker.endpoints if e.name == ctx.listener.name), None)
    return None if ep is None else (broker.id, ep.host, ep.port)


async def _lookup(ctx, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == TRANSACTION:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        try:
            await ctx.broker.transactions.ensure_topic()
        except KafkaError as exc:
            return ErrorCode(exc.code), exc.message
        return ErrorCode.NONE, None
    if key_type != GROUP:
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    try:
        await ctx.broker.groups.ensure_topic()
    except KafkaError as exc:
        return ErrorCode(exc.code), exc.message
    return ErrorCode.NONE, None


async def _find(ctx, key: str, key_type: int):
    code, message = await _lookup(ctx, key, key_type)
    where = _coordinator_node(ctx, key, key_type) if code == ErrorCode.NONE else None
    if code == ErrorCode.NONE and where is None:
        code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator's partition has no leader"
    return code, message, where or (-1, "", -1)


async def handle(ctx, req):
    if ctx.api_version >= 4:
        out = []
        for key in req.coordinator_keys:
            code, message, (node, host, port) = await _find(ctx, key, req.key_type)
            out.append(R.Coordinator(key=key, node_id=node, host=host, port=port, error_code=code,
                                     error_message=message))
        return R(throttle_time_ms=0, coordinators=out)
    code, message, (node, host, port) = await _find(ctx, req.key, req.key_type)
    return R(throttle_time_ms=0, error_code=code, error_message=message, node_id=node, host=host, port=port)


HANDLES = {m.ApiKey.FIND_COORDINATOR: handle}
