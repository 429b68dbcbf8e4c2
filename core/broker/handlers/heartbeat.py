"""Heartbeat (key 12), v0-4.

Keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin. v3+ static
membership. Never parked and never written: answered as soon as it is checked.
"""
from __future__ import annotations

from core.broker.groups.events import Heartbeat
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.HeartbeatResponse


async def handle(ctx, req):
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    manager = ctx.broker.groups
    result = await manager.request(Heartbeat(
        request_id=manager.new_request_id(), now_ms=ctx.broker.clock(), group_id=req.group_id,
        generation_id=req.generation_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if ctx.api_version >= 3 else None))
    return R(throttle_time_ms=0, error_code=result.error)


HANDLES = {m.ApiKey.HEARTBEAT: handle}
