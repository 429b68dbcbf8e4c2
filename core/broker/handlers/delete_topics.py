"""DeleteTopics (key 20), v0-6.

v0-5 name topics; v6 names them or gives their ids. Deletion removes the topic from the
catalog first (so a crash cannot resurrect it) and then its partition directories.
Internal topics are refused with INVALID_TOPIC_EXCEPTION: deleting `__consumer_offsets` would
silently lose every group's committed offsets (Kafka's own tool refuses it too).
"""
from __future__ import annotations

import logging

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..broker import BrokerError

log = logging.getLogger(__name__)

R = m.DeleteTopicsResponse
ZERO_UUID = bytes(16)


async def handle(ctx, req):
    b = ctx.broker
    wanted = ([(t.name, t.topic_id) for t in req.topics] if ctx.api_version >= 6
              else [(name, ZERO_UUID) for name in req.topic_names])
    results = []
    for name, topic_id in wanted:
        res = R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=0)
        topic = b.topics.get(name) if name is not None else b.topics_by_id.get(topic_id)
        if topic is not None and name is not None and topic_id != ZERO_UUID and topic.topic_id != topic_id:
            res.error_code = ErrorCode.INVALID_REQUEST
            res.error_message = "topic name and id do not match"
        elif topic is None:
            res.error_code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, topic.name):
            res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic.internal:
            res.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
            res.error_message = f"{topic.name} is an internal topic and cannot be deleted"
        elif not b.config["delete.topic.enable"]:
            res.error_code = ErrorCode.TOPIC_DELETION_DISABLED
        else:
            res.name, res.topic_id = topic.name, topic.topic_id
            try:
                await b.delete_topic(topic.name)
            except BrokerError as exc:  # deleted by another request meanwhile
                res.error_code = exc.code
            except OSError as exc:
                log.error("deleting topic %s failed: %s", topic.name, exc)
                res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                res.error_message = str(exc)
        results.append(res)
    return R(throttle_time_ms=0, responses=results)


HANDLES = {m.ApiKey.DELETE_TOPICS: handle}
