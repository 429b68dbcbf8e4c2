"""The ACL checks of the admin requests the controller carries out: CreateTopics (19),
DeleteTopics (20), AlterConfigs (33), CreatePartitions (37), IncrementalAlterConfigs (44).

Kafka's brokers forward these inside an Envelope that names the client's principal, and the
controller (ControllerApis) decides them. Seaway's brokers forward the request itself over
their own authenticated connection, so the decision is made where the client's principal is
known, before anything leaves: by the broker for a forwarded request, and by the controller
listener for a client that talks to a controller directly. The rules, each as Kafka's
ControllerApis states them:

    CreateTopics             CREATE on the cluster, or CREATE on the topic, else
                             TOPIC_AUTHORIZATION_FAILED ("Authorization failed."). A created
                             topic's configs come back only with DESCRIBE_CONFIGS on it, else
                             its TopicConfigErrorCode is TOPIC_AUTHORIZATION_FAILED.
    DeleteTopics             DELETE on the cluster, or on the topic; a topic the principal may
                             not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether or not it
                             exists, and one named by id comes back without its name, so that
                             neither existence nor an id's name leaks. A describable topic
                             that does not exist goes on to the controller, which says
                             UNKNOWN_TOPIC_OR_PARTITION.
    CreatePartitions         ALTER on the topic, else TOPIC_AUTHORIZATION_FAILED.
    AlterConfigs and         ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), on the
    IncrementalAlterConfigs  group (GROUP_AUTHORIZATION_FAILED), or on the cluster for broker,
                             broker logger and client metrics resources
                             (CLUSTER_AUTHORIZATION_FAILED).

`narrow` splits a request into what may go on and the answers for what may not; `Narrowed.merge` puts the controller's answer and those answers together.
Clients match results by name, never by position, as Kafka's own responses are unordered.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

ZERO_UUID = bytes(16)
# ConfigResource types (Kafka's ConfigResource.Type ids)
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_CLIENT_METRICS, CONFIG_GROUP = 2, 4, 8, 16, 32
# Kafka's default messages for these errors (ApiError(error) carries error.message()).
MESSAGES = {ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
            ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed."}

CHECKED_APIS = (m.ApiKey.CREATE_TOPICS, m.ApiKey.DELETE_TOPICS, m.ApiKey.ALTER_CONFIGS,
                m.ApiKey.CREATE_PARTITIONS, m.ApiKey.INCREMENTAL_ALTER_CONFIGS)


@dataclass
class Narrowed:
    request: Message                   # the request with only what may go on
    anything_allowed: bool
    denied: list = field(default_factory=list)   # response entries for the rest
    list_field: str = ""               # the response's list of results
    on_result: Callable[[Any], None] | None = None   # adjusts each result of the controller's answer

    def merge(self, answer: Message) -> Message:
        results = getattr(answer, self.list_field)
        if self.on_result is not None:
            for result in results:
                self.on_result(result)
        results.extend(self.denied)
        return answer


def narrow(ctx, request: Message, image) -> Narrowed:
    """`ctx` is the request's context (principal, host, version); `image` the metadata image
    that resolves topic ids to names."""
    return _NARROW[ctx.api_key](ctx, request, image)


def _copy(request: Message, **changes) -> Message:
    fields = {f: getattr(request, f) for f in request._fields}
    fields.update(changes)
    return type(request)(**fields)


def _create_topics(ctx, request: m.CreateTopicsRequest, image) -> Narrowed:
    R = m.CreateTopicsResponse.CreatableTopicResult
    cluster = ctx.authorize(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
    allowed, denied, hidden = [], [], set()
    for topic in request.topics:
        if cluster or ctx.authorize(Operation.CREATE, ResourceType.TOPIC, topic.name):
            allowed.append(topic)
            if not ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name, log_denied=False):
                hidden.add(topic.name)
        else:
            denied.append(R(name=topic.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            error_message="Authorization failed."))

    def hide_configs(result) -> None:
        if result.name in hidden and not result.error_code:
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.configs = []

    return Narrowed(_copy(request, topics=allowed), bool(allowed), denied, "topics",
                    hide_configs if hidden else None)


def _delete_topics(ctx, request: m.DeleteTopicsRequest, image) -> Narrowed:
    R = m.DeleteTopicsResponse.DeletableTopicResult
    TAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    cluster = ctx.authorize(Operation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)
    by_id = ctx.api_version >= 6

    def verdict(name: str, exists: bool) -> tuple[bool, bool]:
        """(may describe, may go on)"""
        if cluster:
            return True, True
        describable = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=False)
        if not describable:
            return False, False
        return True, not exists or ctx.authorize(Operation.DELETE, ResourceType.TOPIC, name)

    allowed: list = []
    denied: list = []
    if not by_id:
        for name in request.topic_names:
            describable, ok = verdict(name, name in image.topic_ids)
            if ok:
                allowed.append(name)
            else:
                denied.append(R(name=name, error_code=TAF, error_message=MESSAGES[TAF]))
        return Narrowed(_copy(request, topic_names=allowed), bool(allowed), denied, "responses")
    for topic in request.topics:
        tid = bytes(topic.topic_id)
        if topic.name is not None or tid == ZERO_UUID:
            if topic.name is None or tid != ZERO_UUID:
                allowed.append(topic)   # malformed: the controller answers INVALID_REQUEST
                continue
            describable, ok = verdict(topic.name, topic.name in image.topic_ids)
            if ok:
                allowed.append(topic)
            else:
                denied.append(R(name=topic.name, topic_id=ZERO_UUID, error_code=TAF, error_message=MESSAGES[TAF]))
            continue
        known = image.topics.get(tid)
        if known is None:
            allowed.append(topic)       # the controller answers UNKNOWN_TOPIC_ID; nothing to leak
            continue
        describable, ok = verdict(known.name, True)
        if ok:
            allowed.append(topic)
        else:
            denied.append(R(name=known.name if describable else None, topic_id=tid, error_code=TAF,
                            error_message=MESSAGES[TAF]))
    return Narrowed(_copy(request, topics=allowed), bool(allowed), denied, "responses")


def _create_partitions(ctx, request: m.CreatePartitionsRequest, image) -> Narrowed:
    R = m.CreatePartitionsResponse.CreatePartitionsTopicResult
    TAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    allowed, denied = [], []
    for topic in request.topics:
        if ctx.authorize(Operation.ALTER, ResourceType.TOPIC, topic.name):
            allowed.append(topic)
        else:
            denied.append(R(name=topic.name, error_code=TAF, error_message=MESSAGES[TAF]))
    return Narrowed(_copy(request, topics=allowed), bool(allowed), denied, "results")


def config_alter_error(ctx, resource_type: int, name: str) -> ErrorCode:
    """What altering a config resource needs (Kafka's authorizeAlterResource); NONE when
    allowed, and for types Kafka does not know (the controller refuses those itself)."""
    if resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_CLIENT_METRICS):
        ok = ctx.authorize(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
        return ErrorCode.NONE if ok else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if resource_type == CONFIG_TOPIC:
        ok = ctx.authorize(Operation.ALTER_CONFIGS, ResourceType.TOPIC, name)
        return ErrorCode.NONE if ok else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == CONFIG_GROUP:
        ok = ctx.authorize(Operation.ALTER_CONFIGS, ResourceType.GROUP, name)
        return ErrorCode.NONE if ok else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return ErrorCode.NONE


def _alter_configs(ctx, request, image) -> Narrowed:
    R = (m.IncrementalAlterConfigsResponse if ctx.api_key == m.ApiKey.INCREMENTAL_ALTER_CONFIGS
         else m.AlterConfigsResponse).AlterConfigsResourceResponse
    allowed, denied = [], []
    for resource in request.resources:
        error = config_alter_error(ctx, resource.resource_type, resource.resource_name)
        if error:
            denied.append(R(error_code=error, error_message=MESSAGES[error], resource_type=resource.resource_type,
                            resource_name=resource.resource_name))
        else:
            allowed.append(resource)
    return Narrowed(_copy(request, resources=allowed), bool(allowed), denied, "responses")


# Each takes its API's request class, which the table cannot say.
_NARROW: dict[int, Callable[[Any, Any, Any], Narrowed]] = {m.ApiKey.CREATE_TOPICS: _create_topics, m.ApiKey.DELETE_TOPICS: _delete_topics,
           m.ApiKey.CREATE_PARTITIONS: _create_partitions, m.ApiKey.ALTER_CONFIGS: _alter_configs,
           m.ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs}
