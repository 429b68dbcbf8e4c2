"""FindCoordinator (key 10), v0-6.

Names the node that coordinates a group. This node is the whole cluster, so it answers with
itself, at the address advertised for the listener the request came in on, and creates
`__consumer_offsets` first if it does not exist yet (as Kafka does on the first lookup).
v4+ batches keys (KIP-699) and reports errors per key. Key type 1 (transactions) is refused
with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as InitProducerId refuses transactional ids;
any other key type is INVALID_REQUEST.
"""
from __future__ import annotations

from core.broker.groups.manager import CoordinatorError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.FindCoordinatorResponse
GROUP, TRANSACTION = 0, 1


async def _lookup(ctx, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == TRANSACTION:
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported"
    if key_type != GROUP:
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    try:
        await ctx.broker.groups.ensure_topic()
    except CoordinatorError as exc:
        return exc.code, str(exc)
    return ErrorCode.NONE, None


async def handle(ctx, req):
    adv = ctx.broker.config.advertised(ctx.listener.name)
    node = ctx.broker.node_id
    if ctx.api_version >= 4:
        out = []
        for key in req.coordinator_keys:
            code, message = await _lookup(ctx, key, req.key_type)
            ok = code == ErrorCode.NONE
            out.append(R.Coordinator(key=key, node_id=node if ok else -1, host=adv.host if ok else "",
                                     port=adv.port if ok else -1, error_code=code, error_message=message))
        return R(throttle_time_ms=0, coordinators=out)
    code, message = await _lookup(ctx, req.key, req.key_type)
    if code != ErrorCode.NONE:
        return R(throttle_time_ms=0, error_code=code, error_message=message, node_id=-1, host="", port=-1)
    return R(throttle_time_ms=0, error_code=0, error_message=None, node_id=node, host=adv.host, port=adv.port)


HANDLES = {10: handle}
