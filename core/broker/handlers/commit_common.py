"""What OffsetCommit and TxnOffsetCommit share: the per-partition checks of the offsets a
request commits, in Kafka's order (READ on the topic, the partition exists, the metadata fits
offset.metadata.max.bytes)."""
from __future__ import annotations

from typing import Any, Callable

from core.broker.groups.storage import CommittedOffset
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

TopicPartition = tuple[str, int]


def checked_offsets(ctx, topics, committed: Callable[[Any, str], CommittedOffset]
                    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, CommittedOffset]]:
    """(refusals, offsets to commit): each partition of `topics` is refused with its error code
    or becomes `committed(partition, metadata)`."""
    b = ctx.broker
    max_metadata = b.config["offset.metadata.max.bytes"]
    codes: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, CommittedOffset] = {}
    for t in topics:
        topic = b.topics.get(t.name)
        readable = ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not readable:
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > max_metadata:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offsets[tp] = committed(p, metadata)
    return codes, offsets
