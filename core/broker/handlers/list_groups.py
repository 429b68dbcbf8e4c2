"""ListGroups (key 16), v0-5.

Every group this node coordinates, including the Empty groups that only hold offsets committed
outside group management. v4+ filters by state (case-insensitive, as Kafka), v5+ by group
type: every group here is "classic", so a type filter without it lists nothing.
"""
from __future__ import annotations

from core.broker.groups.events import ListGroups
from core.protocol import messages as m
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

R = m.ListGroupsResponse
GROUP_TYPE = "classic"


async def handle(ctx, req):
    v = ctx.api_version
    manager = ctx.broker.groups
    states = tuple(req.states_filter) if v >= 4 else ()
    result = await manager.request(ListGroups(manager.new_request_id(), ctx.broker.clock(), states))
    groups = result.groups
    if v >= 5 and req.types_filter and GROUP_TYPE not in {t.lower() for t in req.types_filter}:
        groups = ()
    # Kafka: DESCRIBE on the cluster shows every group; else only those the principal may
    # describe, the others left out without a trace (nor an audit line).
    every = ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
    return R(throttle_time_ms=0, error_code=result.error, groups=[
        R.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                      group_type=GROUP_TYPE)
        for g in groups
        if every or ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denied=False)])


HANDLES = {m.ApiKey.LIST_GROUPS: handle}
