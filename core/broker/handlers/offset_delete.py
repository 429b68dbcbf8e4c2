"""OffsetDelete (key 47), v0.

Removes committed offsets of some partitions (KIP-496). Allowed for an Empty group, and for a
live "consumer" group only on topics no member subscribes to (else GROUP_SUBSCRIBED_TO_TOPIC
per partition); another live group is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
Tombstones are written before the answer.
"""
from __future__ import annotations

from core.broker.groups.state import GroupState
from core.protocol import messages as m
from core.protocol.consumer_protocol import PROTOCOL_TYPE
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.OffsetDeleteResponse


def _response(code, topics=()):
    return R(error_code=code, throttle_time_ms=0, topics=[
        R.OffsetDeleteResponseTopic(name=t, partitions=[
            R.OffsetDeleteResponsePartition(partition_index=p, error_code=c) for p, c in rows])
        for t, rows in topics])


async def handle(ctx, req):
    b = ctx.broker
    manager = b.groups
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, req.group_id):
        return _response(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not manager.is_coordinator(req.group_id):
        return _response(ErrorCode.NOT_COORDINATOR)
    group = manager.coordinator.groups.get(req.group_id)
    if group is None or group.state is GroupState.DEAD:
        return _response(ErrorCode.GROUP_ID_NOT_FOUND)
    subscribed = None
    if group.state is not GroupState.EMPTY:
        if group.protocol_type != PROTOCOL_TYPE:
            return _response(ErrorCode.NON_EMPTY_GROUP)
        subscribed = manager.coordinator.subscribed_topics(req.group_id)
    topics, doomed = [], []
    for t in req.topics:
        topic = b.topics.get(t.name)
        rows = []
        for p in t.partitions:
            i = p.partition_index
            if not ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= i < len(topic.partitions):
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif group.state is not GroupState.EMPTY and (subscribed is None or t.name in subscribed):
                code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                code = ErrorCode.NONE
                doomed.append((t.name, i))
            rows.append((i, code))
        topics.append((t.name, rows))
    if doomed:
        await manager.delete_offsets(req.group_id, doomed)
    return _response(ErrorCode.NONE, topics)


HANDLES = {m.ApiKey.OFFSET_DELETE: handle}
