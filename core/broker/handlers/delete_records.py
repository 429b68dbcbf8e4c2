"""DeleteRecords (key 21), v0-2.

Moves a partition's log start offset forward; whole segments below it are deleted. An offset
of -1 means the high watermark. An offset past the high watermark is OFFSET_OUT_OF_RANGE, and
a topic whose cleanup.policy lacks "delete" answers POLICY_VIOLATION, as Kafka does.
"""
from __future__ import annotations

from core.log import OffsetOutOfRange
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DeleteRecordsResponse


async def handle(ctx, req):
    b = ctx.broker
    topics = []
    for t in req.topics:
        parts = []
        for tp in t.partitions:
            res = R.DeleteRecordsPartitionResult(partition_index=tp.partition_index, low_watermark=-1, error_code=0)
            p, missing = b.leader_partition(b.topics.get(t.name), tp.partition_index)
            if not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, t.name):
                res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                res.error_code = missing
            elif p.offline:
                res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            elif "delete" not in b.topics[t.name].configs.get("cleanup.policy"):
                res.error_code = ErrorCode.POLICY_VIOLATION  # as Kafka: records of compacted topics stay
            else:
                target = p.high_watermark if tp.offset == -1 else tp.offset
                if target < 0 or target > p.high_watermark:
                    res.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    try:
                        res.low_watermark = await p.delete_records(target)
                    except OffsetOutOfRange:
                        res.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    except OSError as exc:
                        p.fail(exc)
                        res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(res)
        topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


HANDLES = {m.ApiKey.DELETE_RECORDS: handle}
