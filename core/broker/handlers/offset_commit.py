"""OffsetCommit (key 8), v0-9.

Stores a group's positions in `__consumer_offsets`; the answer follows the write. A member of
a managed group commits with its generation and member id (v1+) and is checked like a
heartbeat (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS),
and the commit also counts as one. Generation -1 with no member id commits for a consumer
that assigns partitions itself; it is refused while the group has members. v1 carries a
commit time per partition (-1: now), v2-4 a retention (-1: offsets.retention.minutes, counted
from when the group empties), v6+ the leader epoch, v7+ static members.

Per partition: an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION, metadata longer
than offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE; the rest are committed together.
"""
from __future__ import annotations

from core.broker.groups.storage import CommittedOffset
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from .commit_common import checked_offsets

R = m.OffsetCommitResponse


def _response(req, codes):
    return R(throttle_time_ms=0, topics=[
        R.OffsetCommitResponseTopic(name=t.name, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                            error_code=codes[(t.name, p.partition_index)])
            for p in t.partitions]) for t in req.topics])


async def handle(ctx, req):
    v = ctx.api_version
    b = ctx.broker
    tps = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return _response(req, {tp: ErrorCode.GROUP_AUTHORIZATION_FAILED for tp in tps})
    now = b.clock()
    retention = req.retention_time_ms if 2 <= v <= 4 else -1

    def committed(p, metadata: str) -> CommittedOffset:
        commit_ts = p.commit_timestamp if v == 1 and p.commit_timestamp >= 0 else now
        return CommittedOffset(p.committed_offset, p.committed_leader_epoch if v >= 6 else -1, metadata,
                               commit_ts, commit_ts + retention if retention >= 0 else -1)

    codes, offsets = checked_offsets(ctx, req.topics, committed)
    generation = req.generation_id_or_member_epoch if v >= 1 else -1
    member_id = req.member_id if v >= 1 else ""
    instance_id = req.group_instance_id if v >= 7 else None
    code = await b.groups.commit_offsets(req.group_id, generation, member_id, instance_id, offsets)
    for tp in offsets:
        codes[tp] = code
    return _response(req, codes)


HANDLES = {m.ApiKey.OFFSET_COMMIT: handle}
