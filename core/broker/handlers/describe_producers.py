"""DescribeProducers (key 61), v0.

The active producers of partitions (KIP-664), as this broker's replica of each holds them in
its producer state: per producer its id, epoch, last sequence, last timestamp, the coordinator
epoch of the last transaction marker it got (-1: none) and the first offset of its ongoing
transaction here (-1: none). `kafka-transactions describe-producers` and `find-hanging` read
it; `abort --start-offset` finds the producer to abort with it.

As Kafka's ReplicaManager.activeProducerState, any replica answers, leader or follower: the
admin client asks the leader unless it is told a broker (--broker-id). Per topic, in Kafka's
order: an illegal name is INVALID_TOPIC_EXCEPTION, no READ on the topic
TOPIC_AUTHORIZATION_FAILED, a topic the cluster does not have UNKNOWN_TOPIC_OR_PARTITION. Per
partition: one the topic does not have UNKNOWN_TOPIC_OR_PARTITION, one with no replica here
NOT_LEADER_OR_FOLLOWER, one whose log directory failed KAFKA_STORAGE_ERROR. As in Kafka, a
topic-level error carries a message (its default one), a partition-level one none.
"""
from __future__ import annotations

from core.controller.common import topic_name_error
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DescribeProducersResponse


def _topic_error(ctx, name: str) -> tuple[ErrorCode, str | None]:
    """A topic-level error with its message: Kafka's ApiError, whose message is the error's
    default one unless it says more."""
    invalid = topic_name_error(name)
    if invalid is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, invalid
    if not ctx.authorize(Operation.READ, ResourceType.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    if name not in ctx.broker.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
    return ErrorCode.NONE, None


def _partition(ctx, name: str, index: int) -> "R.PartitionResponse":
    topic = ctx.broker.topics[name]
    if not 0 <= index < len(topic.partitions):
        return _failed(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    p = topic.partitions[index]
    if p is None:
        return _failed(index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if p.offline:
        return _failed(index, ErrorCode.KAFKA_STORAGE_ERROR)
    return R.PartitionResponse(partition_index=index, error_code=ErrorCode.NONE, error_message=None, active_producers=[
        R.ProducerState(producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.current_txn_first_offset)
        for _, e in sorted(p.producers.producers.items())])


def _failed(index: int, code: ErrorCode, message: str | None = None) -> "R.PartitionResponse":
    return R.PartitionResponse(partition_index=index, error_code=code, error_message=message, active_producers=[])


async def handle(ctx, req):
    topics = []
    for t in req.topics:
        code, message = _topic_error(ctx, t.name)
        topics.append(R.TopicResponse(name=t.name, partitions=[
            _failed(i, code, message) if code else _partition(ctx, t.name, i) for i in t.partition_indexes]))
    return R(throttle_time_ms=0, topics=topics)


HANDLES = {m.ApiKey.DESCRIBE_PRODUCERS: handle}
