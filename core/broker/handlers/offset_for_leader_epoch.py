"""OffsetForLeaderEpoch (key 23), v0-4.

Where the records of a leader epoch end in the leader's log (KIP-101, KIP-279): a consumer
that saw a new leader epoch asks it to check that the offset it holds was not truncated away
(KIP-320), a follower to find where its log parts from the leader's. The answer is the largest
epoch at or below the one asked for, with the start offset of the next epoch (or the log end
for the current one); UNDEFINED (-1, -1) when the log holds no such epoch.

Only the leader answers, after the KIP-320 check of CurrentLeaderEpoch (v2+). Needs DESCRIBE on
the topic, or CLUSTER_ACTION on the cluster (which followers have), else TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

R = m.OffsetForLeaderEpochResponse
EP = R.EpochEndOffset


def _answer(p, index: int, leader_epoch: int, current_leader_epoch: int) -> EP:
    if p.replica is None:   # stopped meanwhile
        return EP(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, partition=index, leader_epoch=-1, end_offset=-1)
    found = p.replica.offset_for_leader_epoch(leader_epoch, current_leader_epoch)
    return EP(error_code=found.error, partition=index, leader_epoch=found.leader_epoch,
              end_offset=found.end_offset)


async def handle(ctx, req):
    b = ctx.broker
    # Kafka: CLUSTER_ACTION (a follower) may ask about every topic, anyone else about the
    # topics it may DESCRIBE, whatever replica id the request carries.
    cluster_ok = ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
    topics = []
    for t in req.topics:
        topic = b.topics.get(t.topic)
        allowed = cluster_ok or ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.topic)
        parts = []
        for tp in t.partitions:
            p, missing = b.leader_partition(topic, tp.partition)
            if not allowed:
                parts.append(EP(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=tp.partition,
                                leader_epoch=-1, end_offset=-1))
            elif p is None:
                parts.append(EP(error_code=missing, partition=tp.partition, leader_epoch=-1, end_offset=-1))
            elif p.offline:
                parts.append(EP(error_code=ErrorCode.KAFKA_STORAGE_ERROR, partition=tp.partition,
                                leader_epoch=-1, end_offset=-1))
            else:
                parts.append(_answer(p, tp.partition, tp.leader_epoch, tp.current_leader_epoch))
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


HANDLES = {m.ApiKey.OFFSET_FOR_LEADER_EPOCH: handle}
