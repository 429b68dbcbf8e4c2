"""SyncGroup (key 14), v0-5.

After a join, the leader sends every member's assignment and each member gets its own back;
the answer waits for the leader's. v3+ static membership, v5+ protocol type and name, which
must match the group's (INCONSISTENT_GROUP_PROTOCOL). Assignment bytes pass through
untouched: the coordinator never parses them.
"""
from __future__ import annotations

from core.broker.groups.events import SyncGroup
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.SyncGroupResponse


async def handle(ctx, req):
    v = ctx.api_version
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    manager = ctx.broker.groups
    event = SyncGroup(
        request_id=manager.new_request_id(), now_ms=ctx.broker.clock(), group_id=req.group_id,
        generation_id=req.generation_id, member_id=req.member_id,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
        group_instance_id=req.group_instance_id if v >= 3 else None,
        protocol_type=req.protocol_type if v >= 5 else None,
        protocol_name=req.protocol_name if v >= 5 else None)
    result = await manager.request(event)
    return R(throttle_time_ms=0, error_code=result.error, protocol_type=result.protocol_type,
             protocol_name=result.protocol_name, assignment=result.assignment)


HANDLES = {m.ApiKey.SYNC_GROUP: handle}
