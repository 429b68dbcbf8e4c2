"""ListOffsets (key 2), v1-10.

Timestamp -2 asks for the log start offset, -1 for the end (the high watermark, which is
also the last stable offset while we have no transactions), -3 (v7+) for the batch with the
largest timestamp. A real timestamp finds the first batch whose max timestamp is at or after
it; since batches are never decoded, the answer is that batch's base offset, which is what a
consumer that seeks there would read first. No match answers offset -1.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.ListOffsetsResponse
PR = R.ListOffsetsPartitionResponse

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5


def _lookup(p, timestamp: int) -> tuple[int, int]:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return p.log_start_offset, -1
    if timestamp in (LATEST, LATEST_TIERED):
        return p.high_watermark, -1
    if timestamp == MAX_TIMESTAMP:
        ts, off = p.log.max_timestamp_and_offset()
        return off, ts
    if timestamp < 0:
        raise ValueError
    found = p.log.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return offset, ts


async def handle(ctx, req):
    b = ctx.broker
    topics = []
    for t in req.topics:
        topic = b.topics.get(t.name)
        parts = []
        for tp in t.partitions:
            pr = PR(partition_index=tp.partition_index, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
            p = topic.partitions[tp.partition_index] if topic and 0 <= tp.partition_index < len(topic.partitions) else None
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif tp.current_leader_epoch >= 0 and tp.current_leader_epoch != p.leader_epoch:
                pr.error_code = (ErrorCode.FENCED_LEADER_EPOCH if tp.current_leader_epoch < p.leader_epoch
                                 else ErrorCode.UNKNOWN_LEADER_EPOCH)
            else:
                try:
                    pr.offset, pr.timestamp = _lookup(p, tp.timestamp)
                    pr.leader_epoch = p.leader_epoch
                except ValueError:
                    pr.error_code = ErrorCode.INVALID_REQUEST
            parts.append(pr)
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


HANDLES = {2: handle}
