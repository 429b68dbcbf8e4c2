"""CreatePartitions (key 37), v0-3.

Grows a topic to `count` partitions; shrinking or keeping the count is INVALID_PARTITIONS.
Manual assignments must name existing brokers, one list per new partition.
"""
from __future__ import annotations

from collections import Counter

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..broker import BrokerError

R = m.CreatePartitionsResponse


async def handle(ctx, req):
    b = ctx.broker
    counts = Counter(t.name for t in req.topics)
    results = []
    for t in req.topics:
        res = R.CreatePartitionsTopicResult(name=t.name, error_code=0)
        try:
            if counts[t.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"topic {t.name!r} appears more than once")
            if not ctx.authorize(Operation.ALTER, ResourceType.TOPIC, t.name):
                raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            topic = b.topics.get(t.name)
            if topic is not None and t.assignments is not None:
                new = t.count - len(topic.partitions)
                if len(t.assignments) != new:
                    raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"{len(t.assignments)} assignments given for {new} new partitions")
                for a in t.assignments:
                    if any(bid != b.node_id for bid in a.broker_ids) or len(a.broker_ids) != 1:
                        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                          f"assignment {a.broker_ids} names unknown brokers or the wrong replica count")
            await b.create_partitions(t.name, t.count, validate_only=req.validate_only)
        except BrokerError as exc:
            res.error_code = exc.code
            res.error_message = exc.message
        except OSError as exc:
            res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            res.error_message = str(exc)
        results.append(res)
    return R(throttle_time_ms=0, results=results)


HANDLES = {m.ApiKey.CREATE_PARTITIONS: handle}
