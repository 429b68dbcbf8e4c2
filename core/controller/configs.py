"""Dynamic configs: IncrementalAlterConfigs (44), AlterConfigs (33), and how a topic's
effective config resolves (Kafka's ConfigurationControlManager and ControllerConfigurationValidator).

Resources are topics (type 2) and brokers (type 4: a broker id, or "" for the cluster-wide
default). A topic's setting resolves, as in Kafka, from the first layer that has it:

    the topic's own config                       TOPIC_CONFIG (1)
    this controller's dynamic broker config      DYNAMIC_BROKER_CONFIG (2)     under the broker synonym
    the cluster-wide dynamic broker default      DYNAMIC_DEFAULT_BROKER_CONFIG (3)
    the node's properties file                   STATIC_BROKER_CONFIG (4)
    the built-in default                         DEFAULT_CONFIG (5)

Each resource succeeds or fails on its own; all its changes apply or none. Values are stored
as the client sent them. A change is validated as the whole config it leads to: every topic
setting must be known and parse (core.config's TOPIC_CONFIGS); a broker setting must be one
Kafka lets change at run time, by Kafka's rules (core/config/dynamic_broker.py: per listener,
per broker or cluster-wide; a broken rule is INVALID_REQUEST, as Kafka answers). Brokers read
the ones Seaway applies from the image. Errors name the key: INVALID_CONFIG for topic values,
INVALID_REQUEST for broker settings and malformed resources,
UNKNOWN_TOPIC_OR_PARTITION / BROKER_ID_NOT_REGISTERED for resources that do not exist (checked
after the values, as Kafka does). A broker resource gets a record for every key given even if
the value is unchanged (KAFKA-14136: brokers reload on it); a topic only for keys that change.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping

from core.config import ConfigDef, ConfigError, ConfigType, TopicConfigs
from core.config import dynamic_broker
from core.config.topic import TOPIC_CONFIGS, check_policy_combination
from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .common import (TOO_LARGE_MESSAGE, ControllerResult, Working, answer_each,
                     topic_name_error)
from .dr_epochs import check_dr_change
from .image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from .settings import ControllerConfig

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

# DescribeConfigs' ConfigSource ids.
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER = 1, 2, 3
SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 4, 5

# ConfigResource types Kafka knows (BROKER_LOGGER, CLIENT_METRICS, GROUP besides ours).
_KNOWN_RESOURCE_TYPES = {TOPIC_RESOURCE, BROKER_RESOURCE, 8, 16, 32}


Stored = Mapping[str, str]


# --------------------------------------------------------------------------- effective configs


def resolve_topic_config(image: MetadataImage, config: ControllerConfig, node_id: int,
                         name: str, overrides: Stored) -> tuple[str | None, int]:
    """(value, ConfigSource) of topic setting `name` for a topic whose own config is
    `overrides`."""
    if name in overrides:
        return overrides[name], SOURCE_TOPIC
    definition = TOPIC_CONFIGS[name]
    synonym = definition.synonym or name
    for layer, source in ((image.broker_config(node_id), SOURCE_DYNAMIC_BROKER),
                          (image.broker_config(""), SOURCE_DYNAMIC_DEFAULT_BROKER)):
        if synonym in layer:
            return layer[synonym], source
    if name in config.topic_defaults:
        return config.topic_defaults[name], SOURCE_STATIC_BROKER
    return definition.render(definition.default), SOURCE_DEFAULT


def effective_topic_configs(image: MetadataImage, config: ControllerConfig, node_id: int,
                            overrides: Stored) -> list[tuple[str, str | None, int]]:
    return [(name, *resolve_topic_config(image, config, node_id, name, overrides))
            for name in sorted(TOPIC_CONFIGS)]


def unclean_enabled(image: MetadataImage, config: ControllerConfig, node_id: int,
                    topic: str) -> bool:
    value, _ = resolve_topic_config(image, config, node_id, "unclean.leader.election.enable",
                                    image.topic_config(topic))
    # Stored values were validated when written; anything unreadable counts as false, which
    # is the safe side of an unclean election.
    return value is not None and value.strip().lower() == "true"


# --------------------------------------------------------------------------- validation


def check_topic_configs(values: Mapping[str, str | None]) -> dict[str, str]:
    """The whole config of a topic, as it would be stored; KafkaError(INVALID_CONFIG). Returns
    the values, which are then known not to be null."""
    nulls = [k for k, v in values.items() if v is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                       f"Null value not supported for topic configs: {','.join(nulls)}")
    try:
        check_policy_combination(TopicConfigs.validate(dict(values)))
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return {k: v for k, v in values.items() if v is not None}


def _check_broker_configs(values: Mapping[str, str | None], per_broker: bool) -> None:
    """Kafka's rules for dynamic broker settings (core/config/dynamic_broker.py); a broken one
    is INVALID_REQUEST, as Kafka answers it (KAFKA-13609)."""
    try:
        dynamic_broker.check_changes(values, per_broker)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None


def _check_resource_name(rtype: int, name: str) -> None:
    if rtype == TOPIC_RESOURCE:
        if name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        error = topic_name_error(name)
        if error is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, error)
    elif name != "":
        if not (name.lstrip("-").isdigit() and name.isascii()):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                           "Unable to parse broker name as a base 10 number.")
        if int(name) < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid negative broker ID.")


def _check_exists(image: MetadataImage, config: ControllerConfig, node_id: int, rtype: int,
                  name: str) -> None:
    if rtype == TOPIC_RESOURCE:
        if name not in image.topic_ids:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"The topic '{name}' does not exist.")
    elif name != "":
        broker = int(name)
        if broker not in image.brokers and broker not in config.controller_ids \
                and broker != node_id:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {broker} found.")


def _check_resource_type(rtype: int) -> None:
    if rtype not in _KNOWN_RESOURCE_TYPES:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Unknown resource type {rtype}.")
    if rtype not in (TOPIC_RESOURCE, BROKER_RESOURCE):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                       f"Resource type {rtype} is not supported by the controller.")


def _no_duplicate_names(names: list[str]) -> None:
    dupes = [n for n, c in Counter(names).items() if c > 1]
    if dupes:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Config {dupes[0]!r} appears more than once.")


# --------------------------------------------------------------------------- changes


def _definition(rtype: int, name: str) -> ConfigDef | None:
    if rtype == TOPIC_RESOURCE:
        return TOPIC_CONFIGS.get(name)
    return dynamic_broker.definition(name)


def _list_items(value: str | None, definition: ConfigDef) -> list[str]:
    if value is None:
        # Kafka appends to (or subtracts from) the default when nothing is set.
        value = definition.render(definition.default)
    return [part for part in (value or "").split(",") if part]


def _incremental(rtype: int, current: Stored,
                 configs: list[m.IncrementalAlterConfigsRequest.AlterableConfig]) -> dict[str, str | None]:
    """key -> new value (None: delete) for one resource's operations."""
    changes: dict[str, str | None] = {}
    for c in configs:
        op = c.config_operation
        if op == SET:
            if c.value is None:
                kind = "topic" if rtype == TOPIC_RESOURCE else "broker"
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                               f"Null value not supported for {kind} configs: {c.name}")
            changes[c.name] = c.value
        elif op == DELETE:
            changes[c.name] = None
        elif op in (APPEND, SUBTRACT):
            definition = _definition(rtype, c.name)
            if definition is None or definition.type != ConfigType.LIST:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key "
                                                         f"{c.name} because its type is not LIST.")
            items = _list_items(current.get(c.name), definition)
            given = [part for part in (c.value or "").split(",") if part]
            if op == APPEND:
                items += [part for part in given if part not in items]
            else:
                items = [part for part in items if part not in given]
            changes[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                           f"Unknown config operation {op} for key {c.name}.")
    return changes


def _apply_resource(w: Working, config: ControllerConfig, node_id: int, rtype: int,
                    name: str, changes: Mapping[str, str | None], replace: bool) -> None:
    image = w.image
    current = image.configs.get((rtype, name), {})
    new = {} if replace else dict(current)
    for key, value in changes.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    if rtype == TOPIC_RESOURCE:
        check_topic_configs(new)
    else:
        _check_broker_configs({k: v for k, v in changes.items() if v is not None}, per_broker=name != "")
    _check_exists(image, config, node_id, rtype, name)
    if rtype == TOPIC_RESOURCE:
        check_dr_change(image, name, current, changes, new)
    records = [m.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=value)
               for key, value in changes.items()
               if rtype == BROKER_RESOURCE or current.get(key) != value]
    if replace:
        records += [m.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=None)
                    for key in current if key not in changes]
    if len(records) > w.room():
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE)
    w.add(records)


# IncrementalAlterConfigs and AlterConfigs share their checks; each has its own classes.
_IncrementalResource = m.IncrementalAlterConfigsRequest.AlterConfigsResource
_Resource = m.AlterConfigsRequest.AlterConfigsResource


def _check_resource(res: _IncrementalResource | _Resource) -> None:
    """The checks of a resource before its changes are worked out."""
    _check_resource_type(res.resource_type)
    _check_resource_name(res.resource_type, res.resource_name)
    _no_duplicate_names([c.name for c in res.configs])


def _resource_key(res: _IncrementalResource | _Resource) -> tuple[int, str]:
    return res.resource_type, res.resource_name


def incremental_alter_configs(request: m.IncrementalAlterConfigsRequest, version: int, *,
                              image: MetadataImage, config: ControllerConfig,
                              node_id: int) -> ControllerResult:
    w = Working(image)
    R = m.IncrementalAlterConfigsResponse

    def alter(res: _IncrementalResource,
              _: m.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse) -> None:
        _check_resource(res)
        current = w.image.configs.get((res.resource_type, res.resource_name), {})
        changes = _incremental(res.resource_type, current, res.configs)
        _apply_resource(w, config, node_id, res.resource_type, res.resource_name, changes,
                        replace=False)

    results = answer_each(
        request.resources, _resource_key, "Duplicate resource.",
        lambda r: R.AlterConfigsResourceResponse(
            error_code=0, error_message=None, resource_type=r.resource_type,
            resource_name=r.resource_name),
        alter)
    records: list[Message] = [] if request.validate_only else w.records
    return ControllerResult(records, R(throttle_time_ms=0, responses=results))


def alter_configs(request: m.AlterConfigsRequest, version: int, *, image: MetadataImage,
                  config: ControllerConfig, node_id: int) -> ControllerResult:
    w = Working(image)
    R = m.AlterConfigsResponse

    def alter(res: _Resource, _: m.AlterConfigsResponse.AlterConfigsResourceResponse) -> None:
        _check_resource(res)
        changes = {c.name: c.value for c in res.configs}
        nulls = [k for k, v in changes.items() if v is None]
        if nulls:
            kind = "topic" if res.resource_type == TOPIC_RESOURCE else "broker"
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                           f"Null value not supported for {kind} configs: {','.join(nulls)}")
        _apply_resource(w, config, node_id, res.resource_type, res.resource_name, changes,
                        replace=True)

    results = answer_each(
        request.resources, _resource_key, "Duplicate resource.",
        lambda r: R.AlterConfigsResourceResponse(
            error_code=0, error_message=None, resource_type=r.resource_type,
            resource_name=r.resource_name),
        alter)
    records: list[Message] = [] if request.validate_only else w.records
    return ControllerResult(records, R(throttle_time_ms=0, responses=results))


def error_response(api_key: int, request: m.IncrementalAlterConfigsRequest | m.AlterConfigsRequest,
                   code: ErrorCode, message: str | None) -> Message:
    if api_key == m.ApiKey.INCREMENTAL_ALTER_CONFIGS:
        IR = m.IncrementalAlterConfigsResponse
        return IR(throttle_time_ms=0, responses=[
            IR.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name) for r in request.resources])
    R = m.AlterConfigsResponse
    return R(throttle_time_ms=0, responses=[
        R.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type,
            resource_name=r.resource_name) for r in request.resources])
