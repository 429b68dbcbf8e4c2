"""DescribeConfigs (key 32), v0-4.

Topics (resource type 2) report every topic setting with its value and where it came from:
the topic's override (DYNAMIC_TOPIC_CONFIG), the broker's properties file
(STATIC_BROKER_CONFIG) or the built-in default (DEFAULT_CONFIG). With `include_synonyms`
(v1+) each also lists the broker setting it falls back to. A broker (type 4, its id) reports
its settings with Kafka's precedence: its own dynamic config, the cluster-wide dynamic default,
its properties file, the default (synonyms list every layer that has one); the resource ""
reports the cluster-wide dynamic defaults alone, as Kafka does. Settings Kafka can change at
run time are not read-only (core/config/dynamic_broker.py). A sensitive one (a password, a
key) is reported with a null value. v3+ adds types and documentation.
"""
from __future__ import annotations

from core.config import dynamic_broker
from core.config.broker import BROKER_CONFIGS
from core.config.topic import TOPIC_CONFIGS
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

R = m.DescribeConfigsResponse

RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER = 2, 4, 8
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 2, 3, 4, 5


def _shown(definition, value):
    """What DescribeConfigs may say of a value: nothing of a password or key (Kafka sends null
    with is_sensitive set, whoever asks)."""
    return None if definition.sensitive else definition.render(value)


def _stored(definition, raw: str):
    """A dynamic value as stored (validated when it was written), or null if sensitive."""
    return None if definition.sensitive else raw


def _entry(req, name, shown, definition, source, read_only, synonyms):
    """One setting's result; `shown` is its value as described (null when sensitive)."""
    return R.DescribeConfigsResourceResult(
        name=name, value=shown, read_only=read_only,
        is_default=source == SOURCE_DEFAULT, config_source=source, is_sensitive=definition.sensitive,
        synonyms=synonyms if req.include_synonyms else [], config_type=int(definition.type),
        documentation=definition.doc if req.include_documentation else None)


def _topic_configs(ctx, req, topic, keys):
    b = ctx.broker
    out = []
    for name, value in topic.configs.items():
        if keys is not None and name not in keys:
            continue
        definition = TOPIC_CONFIGS[name]
        where = topic.configs.source(name)
        source = {"topic": SOURCE_TOPIC, "broker": SOURCE_STATIC_BROKER}.get(where, SOURCE_DEFAULT)
        synonyms = []
        if where == "topic":
            synonyms.append(R.DescribeConfigsSynonym(name=name, value=definition.render(value), source=SOURCE_TOPIC))
        if definition.synonym and definition.synonym in b.config.explicit:
            synonyms.append(R.DescribeConfigsSynonym(name=definition.synonym,
                                                     value=definition.render(b.config[definition.synonym]),
                                                     source=SOURCE_STATIC_BROKER))
        synonyms.append(R.DescribeConfigsSynonym(name=definition.synonym or name,
                                                 value=definition.render(definition.default), source=SOURCE_DEFAULT))
        out.append(_entry(req, name, _shown(definition, value), definition, source, False, synonyms))
    return out


def _broker_configs(ctx, req, keys):
    """This broker's settings, each from the first layer that has it: its own dynamic config,
    the cluster-wide dynamic default, its properties file, the built-in default (Kafka's
    precedence). A setting that may change at run time is not read-only; dynamic settings
    Seaway has no static definition for (num.io.threads, a listener's keystore) are listed
    when set."""
    b = ctx.broker
    image = b.kraft.image
    own, cluster = image.broker_config(b.node_id), image.broker_config("")
    out = []
    names = list(BROKER_CONFIGS) + sorted((set(own) | set(cluster)) - set(BROKER_CONFIGS))
    for name in names:
        if keys is not None and name not in keys:
            continue
        dynamic = dynamic_broker.definition(name)
        definition = BROKER_CONFIGS.get(name) or dynamic
        if definition is None:   # stored by an older version under a name no longer dynamic
            continue
        layers = [(own, SOURCE_DYNAMIC_BROKER), (cluster, SOURCE_DYNAMIC_DEFAULT_BROKER)]
        synonyms = [R.DescribeConfigsSynonym(name=name, value=_stored(definition, layer[name]), source=source)
                    for layer, source in layers if name in layer]
        if name in BROKER_CONFIGS:
            source = SOURCE_STATIC_BROKER if name in b.config.explicit else SOURCE_DEFAULT
            synonyms.append(R.DescribeConfigsSynonym(name=name, value=_shown(definition, b.config[name]),
                                                     source=source))
        out.append(_entry(req, name, synonyms[0].value, definition, synonyms[0].source, dynamic is None, synonyms))
    return out


def _cluster_default_configs(ctx, req, keys):
    """The cluster-wide dynamic defaults, alone, as Kafka describes the broker resource ""."""
    out = []
    for name, value in sorted(ctx.broker.kraft.image.broker_config("").items()):
        definition = BROKER_CONFIGS.get(name) or dynamic_broker.definition(name)
        if definition is None or (keys is not None and name not in keys):
            continue
        shown = _stored(definition, value)
        synonyms = [R.DescribeConfigsSynonym(name=name, value=shown, source=SOURCE_DYNAMIC_DEFAULT_BROKER)]
        out.append(_entry(req, name, shown, definition, SOURCE_DYNAMIC_DEFAULT_BROKER, False, synonyms))
    return out


async def handle(ctx, req):
    b = ctx.broker
    results = []
    for res in req.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        r = R.DescribeConfigsResult(error_code=0, resource_type=res.resource_type,
                                    resource_name=res.resource_name, configs=[])
        if res.resource_type == RESOURCE_TOPIC:
            topic = b.topics.get(res.resource_name)
            if not ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name):
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                r.error_message = f"topic {res.resource_name!r} does not exist"
            else:
                r.configs = _topic_configs(ctx, req, topic, keys)
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(b.node_id)):
                r.error_code = ErrorCode.INVALID_REQUEST
                r.error_message = f"broker {res.resource_name!r} is not this node ({b.node_id})"
            elif not ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"):
                r.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            else:
                r.configs = _broker_configs(ctx, req, keys) if res.resource_name \
                    else _cluster_default_configs(ctx, req, keys)
        else:
            r.error_code = ErrorCode.INVALID_REQUEST
            r.error_message = f"resource type {res.resource_type} is not supported"
        results.append(r)
    return R(throttle_time_ms=0, results=results)


HANDLES = {m.ApiKey.DESCRIBE_CONFIGS: handle}
