"""DescribeGroups (key 15), v0-5.

State, protocol and members of each group; member metadata and assignments only while the
group is Stable, as Kafka. A group this node does not know is reported Dead with no error
(v6's GROUP_ID_NOT_FOUND is beyond the versions we speak). v3+ can ask for the operations
the caller may perform on each group (KIP-430).
"""
from __future__ import annotations

from core.broker.groups.events import DescribeGroups
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DescribeGroupsResponse
UNKNOWN_OPS = -(2**31)


async def handle(ctx, req):
    manager = ctx.broker.groups
    allowed = [g for g in req.groups if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g)]
    result = await manager.request(DescribeGroups(manager.new_request_id(), ctx.broker.clock(),
                                                  tuple(allowed)))
    by_id = {d.group_id: d for d in result.groups}
    out = []
    for gid in req.groups:
        d = by_id.get(gid)
        if d is None:
            out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid,
                                        group_state="", protocol_type="", protocol_data="", members=[],
                                        authorized_operations=UNKNOWN_OPS))
            continue
        ops = UNKNOWN_OPS
        if ctx.api_version >= 3 and req.include_authorized_operations:
            ops = ctx.authorizer.authorized_operations(ctx.principal, ResourceType.GROUP, gid, ctx.host)
        out.append(R.DescribedGroup(
            error_code=d.error, group_id=gid, group_state=d.state, protocol_type=d.protocol_type,
            protocol_data=d.protocol_name, authorized_operations=ops,
            members=[R.DescribedGroupMember(member_id=mm.member_id, group_instance_id=mm.group_instance_id,
                                            client_id=mm.client_id, client_host=mm.client_host,
                                            member_metadata=mm.metadata, member_assignment=mm.assignment)
                     for mm in d.members]))
    return R(throttle_time_ms=0, groups=out)


HANDLES = {m.ApiKey.DESCRIBE_GROUPS: handle}
