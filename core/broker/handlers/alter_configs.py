"""AlterConfigs (key 33, v0-2) and IncrementalAlterConfigs (key 44, v0-1), for topics.

AlterConfigs replaces a topic's whole set of overrides with the one given (settings left out
return to their defaults); IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT
to single settings, APPEND and SUBTRACT only to list settings. Every value is validated
before anything changes, and `validate_only` stops there. Broker resources are refused until
dynamic broker configs exist.
"""
from __future__ import annotations

from collections import Counter

from core.config import ConfigError, TopicConfigs
from core.config.defs import ConfigType
from core.config.topic import TOPIC_CONFIGS, check_policy_combination
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..broker import BrokerError
from .describe_configs import RESOURCE_BROKER, RESOURCE_TOPIC

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _target_topic(ctx, res):
    if res.resource_type == RESOURCE_BROKER:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "dynamic broker configs are not supported yet")
    if res.resource_type != RESOURCE_TOPIC:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"resource type {res.resource_type} is not supported")
    if not ctx.authorize(Operation.ALTER_CONFIGS, ResourceType.TOPIC, res.resource_name):
        raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    topic = ctx.broker.topics.get(res.resource_name)
    if topic is None:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {res.resource_name!r} does not exist")
    dupes = [n for n, c in Counter(c.name for c in res.configs).items() if c > 1]
    if dupes:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"config {dupes[0]!r} appears more than once")
    return topic


def _validated(values: dict) -> dict:
    try:
        parsed = TopicConfigs.validate(values)
        check_policy_combination(parsed)
        return parsed
    except ConfigError as exc:
        raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _incremental(topic, configs) -> dict:
    overrides = dict(topic.configs.overrides)
    for c in configs:
        definition = TOPIC_CONFIGS.get(c.name)
        if definition is None:
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"{c.name}: unknown topic config")
        if c.config_operation == SET:
            overrides[c.name] = _validated({c.name: c.value})[c.name]
        elif c.config_operation == DELETE:
            overrides.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if definition.type != ConfigType.LIST:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"{c.name}: APPEND and SUBTRACT apply only to lists")
            current = list(topic.configs.get(c.name))
            items = _validated({c.name: c.value or ""})[c.name]
            if c.config_operation == APPEND:
                current += [i for i in items if i not in current]
            else:
                current = [i for i in current if i not in items]
            overrides[c.name] = current
        else:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"{c.name}: unknown operation {c.config_operation}")
    check = {k: TOPIC_CONFIGS[k].render(v) for k, v in overrides.items()}
    return _validated(check)


async def _handle(ctx, req, incremental: bool):
    R = m.IncrementalAlterConfigsResponse if incremental else m.AlterConfigsResponse
    responses = []
    for res in req.resources:
        out = R.AlterConfigsResourceResponse(error_code=0, resource_type=res.resource_type,
                                             resource_name=res.resource_name)
        try:
            topic = _target_topic(ctx, res)
            if incremental:
                overrides = _incremental(topic, res.configs)
            else:
                overrides = _validated({c.name: c.value for c in res.configs})
            if not req.validate_only:
                await ctx.broker.set_topic_configs(topic.name, overrides)
        except BrokerError as exc:
            out.error_code = exc.code
            out.error_message = exc.message
        except OSError as exc:
            out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            out.error_message = str(exc)
        responses.append(out)
    return R(throttle_time_ms=0, responses=responses)


async def handle_alter(ctx, req):
    return await _handle(ctx, req, incremental=False)


async def handle_incremental(ctx, req):
    return await _handle(ctx, req, incremental=True)


HANDLES = {m.ApiKey.ALTER_CONFIGS: handle_alter, m.ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental}
