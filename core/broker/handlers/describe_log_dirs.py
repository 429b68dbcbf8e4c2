"""DescribeLogDirs (key 35), v0-4.

This broker's log directories (`log.dirs`), each with the partitions it holds here: their size
on disk, the offset lag (the high watermark less the log end, at least 0, as Kafka reports a
current log) and is_future_key false (Seaway moves no replica between directories while it is
served). v4 adds the volume's total and usable bytes. Null
topics describe every partition; named ones only those, and a partition not held here is left
out, as Kafka does. A directory that holds a partition whose disk failed answers
KAFKA_STORAGE_ERROR and no partitions. Needs DESCRIBE on the cluster: without it the answer
lists nothing, with CLUSTER_AUTHORIZATION_FAILED at the top from v3, as Kafka answers.
"""
from __future__ import annotations

import os
from pathlib import Path

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DescribeLogDirsResponse
CLUSTER = "kafka-cluster"


def _volume(directory: Path) -> tuple[int, int]:
    """(total, usable) bytes of the volume, or (-1, -1) if it cannot be read."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _hosted(broker, wanted):
    """(log dir, topic name, partition) for the partitions asked for that this broker holds."""
    names = broker.topics.keys() if wanted is None else [t for t in wanted if t in broker.topics]
    for name in names:
        topic = broker.topics[name]
        indexes = range(len(topic.partitions)) if wanted is None else wanted[name]
        for index in indexes:
            partition = topic.partition(index)
            if partition is not None:
                yield partition.log.directory.parent, name, partition


async def handle(ctx, req):
    b = ctx.broker
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted: dict[str, list[int]] | None = None
    if req.topics is not None:
        wanted = {}
        for t in req.topics:
            wanted.setdefault(t.topic, []).extend(t.partitions)
    by_dir: dict[Path, dict[str, list]] = {Path(d).resolve(): {} for d in b.config.log_dirs}
    failed: set[Path] = set()
    for directory, name, partition in _hosted(b, wanted):
        directory = directory.resolve()
        if partition.offline:
            failed.add(directory)
            continue
        lag = max(partition.high_watermark - partition.log.log_end_offset, 0)
        by_dir.setdefault(directory, {}).setdefault(name, []).append(R.DescribeLogDirsPartition(
            partition_index=partition.index, partition_size=partition.log.size_bytes, offset_lag=lag,
            is_future_key=False))
    results = []
    for directory, topics in by_dir.items():
        total, usable = _volume(directory)
        if directory in failed:
            results.append(R.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=str(directory),
                                                   topics=[], total_bytes=total, usable_bytes=usable))
            continue
        results.append(R.DescribeLogDirsResult(
            error_code=0, log_dir=str(directory), total_bytes=total, usable_bytes=usable,
            topics=[R.DescribeLogDirsTopic(name=name, partitions=parts) for name, parts in sorted(topics.items())]))
    return R(throttle_time_ms=0, error_code=0, results=results)


HANDLES = {m.ApiKey.DESCRIBE_LOG_DIRS: handle}
