"""CreateTopics (key 19), v0-7.

Validates name, partition count, replication factor, manual assignments and configs before
anything is written; `validate_only` (v1+) stops there. v5+ answers with the resulting
partition count, replication factor and configs; v7+ with the topic id. Each topic succeeds
or fails on its own, and a topic named twice in one request is INVALID_REQUEST for both.
"""
from __future__ import annotations

import logging
from collections import Counter

from core.config.topic import TOPIC_CONFIGS
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..broker import BrokerError
from .describe_configs import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC

log = logging.getLogger(__name__)
R = m.CreateTopicsResponse


def _check_assignments(ctx, ct) -> tuple[int, int]:
    """Manual replica assignment: partitions 0..n-1, each on existing, distinct brokers."""
    indexes = sorted(a.partition_index for a in ct.assignments)
    if ct.num_partitions != -1 or ct.replication_factor != -1:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          "both numPartitions or replicationFactor and replicasAssignments were set")
    if indexes != list(range(len(indexes))):
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1")
    sizes = {len(a.broker_ids) for a in ct.assignments}
    if len(sizes) != 1 or 0 in sizes:
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "every partition needs the same number of replicas")
    for a in ct.assignments:
        if len(set(a.broker_ids)) != len(a.broker_ids):
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {a.partition_index} repeats a broker")
        unknown = [bid for bid in a.broker_ids if bid != ctx.broker.node_id]
        if unknown:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"unknown broker ids {unknown}")
    return len(indexes), sizes.pop()


def _result_configs(topic_configs):
    out = []
    for name, value in topic_configs.items():
        source = {"topic": SOURCE_TOPIC, "broker": SOURCE_STATIC_BROKER}.get(topic_configs.source(name), SOURCE_DEFAULT)
        out.append(R.CreatableTopicConfigs(name=name, value=TOPIC_CONFIGS[name].render(value), read_only=False,
                                           config_source=source, is_sensitive=False))
    return out


async def handle(ctx, req):
    b = ctx.broker
    counts = Counter(ct.name for ct in req.topics)
    results = []
    for ct in req.topics:
        res = R.CreatableTopicResult(name=ct.name, error_code=0, num_partitions=-1, replication_factor=-1,
                                     configs=None if ctx.api_version >= 5 else [])
        try:
            if counts[ct.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"topic {ct.name!r} appears more than once")
            if not ctx.authorize(Operation.CREATE, ResourceType.TOPIC, ct.name):
                raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            partitions, rf = ct.num_partitions, ct.replication_factor
            if ct.assignments:
                partitions, rf = _check_assignments(ctx, ct)
            configs = {c.name: c.value for c in ct.configs}
            partitions, rf, _ = b.check_new_topic(ct.name, partitions, rf, configs)
            if req.validate_only:
                topic_configs = None
            else:
                topic = await b.create_topic(ct.name, partitions, rf, configs)
                res.topic_id = topic.topic_id
                topic_configs = topic.configs
            res.num_partitions, res.replication_factor = partitions, rf
            if ctx.api_version >= 5 and topic_configs is not None:
                res.configs = _result_configs(topic_configs)
        except BrokerError as exc:
            res.error_code = exc.code
            res.error_message = exc.message
        except OSError as exc:
            log.error("creating topic %s failed: %s", ct.name, exc)
            res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            res.error_message = str(exc)
        results.append(res)
    return R(throttle_time_ms=0, topics=results)


HANDLES = {m.ApiKey.CREATE_TOPICS: handle}
