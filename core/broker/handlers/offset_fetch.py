"""OffsetFetch (key 9), v0-9.

A group's committed offsets. A partition with none gets offset -1 and no error. v2+ may ask
for every partition the group has offsets for (topics = null) and has a top-level error,
v5+ leader epochs, v7+ require_stable (KIP-447: a partition whose offset an undecided
transaction holds answers UNSTABLE_OFFSET_COMMIT, which the consumer retries), v8+ several groups in one request (KIP-709), v9+ a member id and epoch, which
only the KIP-848 protocol checks.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.OffsetFetchResponse


def _fetch(ctx, group_id, topics, require_stable: bool = False):
    """[(topic, [(partition, offset, epoch, metadata, error)])], group error."""
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return [], ErrorCode.GROUP_AUTHORIZATION_FAILED
    manager = ctx.broker.groups
    if not manager.is_coordinator(group_id):
        return [], ErrorCode.NOT_COORDINATOR
    if topics is None:
        found = manager.fetch_offsets(group_id, None)
        by_topic: dict[str, list] = {}
        for (t, p), c in sorted(found.items()):
            if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t, log_denied=False):   # filtered, as Kafka
                by_topic.setdefault(t, []).append((p, c.offset, c.leader_epoch, c.metadata, ErrorCode.NONE))
        return list(by_topic.items()), ErrorCode.NONE
    out = []
    for t in topics:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
            out.append((t.name, [(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                 for p in t.partition_indexes]))
            continue
        found = manager.fetch_offsets(group_id, [(t.name, p) for p in t.partition_indexes])
        rows = []
        for p in t.partition_indexes:
            c = found[(t.name, p)]
            if require_stable and manager.has_pending_txn_offset(group_id, (t.name, p)):
                rows.append((p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                rows.append((p, -1, -1, "", ErrorCode.NONE) if c is None
                            else (p, c.offset, c.leader_epoch, c.metadata, ErrorCode.NONE))
        out.append((t.name, rows))
    return out, ErrorCode.NONE


async def handle(ctx, req):
    v = ctx.api_version
    if v >= 8:
        groups = []
        for g in req.groups:
            topics, code = _fetch(ctx, g.group_id, g.topics, req.require_stable)
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code, topics=[
                R.OffsetFetchResponseTopics(name=t, partitions=[
                    R.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o,
                                                    committed_leader_epoch=e, metadata=md, error_code=err)
                    for p, o, e, md, err in rows]) for t, rows in topics]))
        return R(throttle_time_ms=0, groups=groups)
    if req.topics is None and v < 2:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, topics=[])
    topics, code = _fetch(ctx, req.group_id, req.topics, v >= 7 and req.require_stable)
    if code != ErrorCode.NONE and v < 2:
        # no top-level error before v2: every partition carries it
        topics = [(t.name, [(p, -1, -1, "", code) for p in t.partition_indexes]) for t in req.topics]
    return R(throttle_time_ms=0, error_code=code, topics=[
        R.OffsetFetchResponseTopic(name=t, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                           metadata=md, error_code=err)
            for p, o, e, md, err in rows]) for t, rows in topics])


HANDLES = {m.ApiKey.OFFSET_FETCH: handle}
