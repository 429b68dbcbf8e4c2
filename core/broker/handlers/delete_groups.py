"""DeleteGroups (key 42), v0-2.

Deletes Empty groups and their committed offsets; a group with members is NON_EMPTY_GROUP, an
unknown one GROUP_ID_NOT_FOUND. Tombstones for the group and each offset are in
`__consumer_offsets` before the answer, so a deleted group stays deleted after a restart.
"""
from __future__ import annotations

from core.broker.groups.events import DeleteGroups
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DeleteGroupsResponse


async def handle(ctx, req):
    manager = ctx.broker.groups
    names = list(dict.fromkeys(req.groups_names))
    allowed = [g for g in names if ctx.authorize(Operation.DELETE, ResourceType.GROUP, g)]
    result = await manager.request(DeleteGroups(manager.new_request_id(), ctx.broker.clock(),
                                                tuple(allowed)))
    codes = dict(result.results)
    return R(throttle_time_ms=0, results=[
        R.DeletableGroupResult(group_id=g, error_code=codes.get(g, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        for g in names])


HANDLES = {m.ApiKey.DELETE_GROUPS: handle}
