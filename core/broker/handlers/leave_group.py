"""LeaveGroup (key 13), v0-5.

Members leave at once instead of waiting out their session. v0-2 name one member; v3+ a batch
of members, each by member id or group instance id (KIP-345, an admin removing static
members), with an error per member; v5+ a reason per member (logged by Kafka, unused here).
"""
from __future__ import annotations

from core.broker.groups.events import LeaveGroup, LeavingMember
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.LeaveGroupResponse


async def handle(ctx, req):
    v = ctx.api_version
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if v >= 3:
        members = tuple(LeavingMember(mi.member_id, mi.group_instance_id) for mi in req.members)
    else:
        members = (LeavingMember(req.member_id),)
    manager = ctx.broker.groups
    result = await manager.request(LeaveGroup(manager.new_request_id(), ctx.broker.clock(),
                                              req.group_id, members))
    if v < 3:
        # one member: its own error is the answer's error
        code = result.error or (result.members[0].error if result.members else ErrorCode.NONE)
        return R(throttle_time_ms=0, error_code=code)
    return R(throttle_time_ms=0, error_code=result.error, members=[
        R.MemberResponse(member_id=r.member_id, group_instance_id=r.group_instance_id, error_code=r.error)
        for r in result.members])


HANDLES = {m.ApiKey.LEAVE_GROUP: handle}
