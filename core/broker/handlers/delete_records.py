"""DeleteRecords (key 21), v0-2.

Moves a partition's log start offset forward; whole segments below it are deleted. An offset
of -1 means the high watermark. An offset past the high watermark is OFFSET_OUT_OF_RANGE, and
a topic whose cleanup.policy lacks "delete" answers POLICY_VIOLATION, as Kafka does.

As Kafka's DelayedDeleteRecords, the answer waits until every live replica has moved its log
start too (the partition's low watermark, leader.low_watermark, reaches the offset): a
follower learns the new log start from its next fetch answer and reports its own in the fetch
after, so a leader that fails right after the answer cannot bring the records back. Past the
request's timeout_ms the partition answers REQUEST_TIMED_OUT with the low watermark reached.
The wait polls (DeleteRecords is rare; the follower fetch path stays free of it).
"""
from __future__ import annotations

import asyncio
import time

from core.log import OffsetOutOfRange
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DeleteRecordsResponse


async def handle(ctx, req):
    b = ctx.broker
    topics = []
    waiting = []   # (result, partition, offset): done when the partition's low watermark is there
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
                        await p.delete_records(target)
                        waiting.append((res, p, target))
                    except OffsetOutOfRange:
                        res.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    except OSError as exc:
                        p.fail(exc)
                        res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(res)
        topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    await _wait_for_replicas(waiting, req.timeout_ms)
    return R(throttle_time_ms=0, topics=topics)


POLL_S = 0.05


def _low_watermark(partition) -> int:
    replica = partition.replica
    return replica.low_watermark if replica is not None else partition.log_start_offset


async def _wait_for_replicas(waiting, timeout_ms: int) -> None:
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while True:
        pending = []
        for res, partition, target in waiting:
            res.low_watermark = _low_watermark(partition)
            if res.low_watermark < target:
                pending.append((res, partition, target))
        if not pending:
            return
        if time.monotonic() >= deadline:
            for res, _, _ in pending:
                res.error_code = ErrorCode.REQUEST_TIMED_OUT
            return
        waiting = pending
        await asyncio.sleep(min(POLL_S, max(deadline - time.monotonic(), 0)))


HANDLES = {m.ApiKey.DELETE_RECORDS: handle}
