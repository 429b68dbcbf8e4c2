"""JoinGroup (key 11), v0-9.

A member joins (or rejoins) a classic group; the answer waits until the rebalance completes,
up to the group's rebalance timeout. v0 has no rebalance timeout (the session timeout serves
for both), v4+ hands a new member its id with MEMBER_ID_REQUIRED and expects it back (KIP-394),
v5+ static membership (KIP-345), v7+ echoes the protocol type, v8+ a reason, v9+ lets a
restarted static leader skip an assignment a Stable group would never use. The member list
goes to the leader only. A version that cannot carry FENCED_INSTANCE_ID or
MEMBER_ID_REQUIRED never sees them: both need the versions that introduced them.
"""
from __future__ import annotations

from core.broker.groups.events import JoinGroup
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.JoinGroupResponse


def error_response(code, member_id="", version=9):
    return R(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None,
             protocol_name=None if version >= 7 else "", leader="", skip_assignment=False,
             member_id=member_id, members=[])


async def handle(ctx, req):
    v = ctx.api_version
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return error_response(ErrorCode.GROUP_AUTHORIZATION_FAILED, version=v)
    if v >= 5 and req.group_instance_id == "":
        return error_response(ErrorCode.INVALID_REQUEST, version=v)
    manager = ctx.broker.groups
    rebalance_timeout = req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms
    event = JoinGroup(
        request_id=manager.new_request_id(), now_ms=ctx.broker.clock(), group_id=req.group_id,
        member_id=req.member_id, protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        session_timeout_ms=req.session_timeout_ms, rebalance_timeout_ms=rebalance_timeout,
        group_instance_id=req.group_instance_id if v >= 5 else None,
        client_id=ctx.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0],
        require_known_member_id=v >= 4, supports_skip_assignment=v >= 9,
        reason=req.reason if v >= 8 else None)
    result = await manager.request(event)
    return R(throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
             protocol_type=result.protocol_type,
             # before v7 the name is not nullable: Kafka sends "" while no protocol is chosen
             protocol_name=result.protocol_name if v >= 7 else result.protocol_name or "",
             leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
             members=[R.JoinGroupResponseMember(member_id=jm.member_id, group_instance_id=jm.group_instance_id,
                                                metadata=jm.metadata) for jm in result.members])


HANDLES = {m.ApiKey.JOIN_GROUP: handle}
