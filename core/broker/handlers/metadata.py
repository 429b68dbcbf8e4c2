"""Metadata (key 3), v0-12.

Brokers, controller and the requested topics (all topics when the list is null; v0 uses an
empty list for "all"). Topics that do not exist are auto-created when the request allows it
(v4+, always before v4) and auto.create.topics.enable is on: the broker asks the controller,
and describes the new topic if its image shows it by the time the controller answers, else
answers LEADER_NOT_AVAILABLE (retriable), as Kafka does. The answer comes from the image this
broker last reconciled (KRaftLink.image), so a topic is named only once this broker has opened
its partitions here: unfenced brokers with an endpoint on the request's listener, and each
partition's leader, replicas and ISR. A broker names itself as the controller, since it
forwards what clients send the controller.
v10+ carries topic ids, and v10+ requests may name topics by id (v12 with a null name).

ACLs, as Kafka's KafkaApis: a topic needs DESCRIBE. Asked for all topics, the answer leaves
out what the principal may not describe (and the audit log does not record those checks);
a topic asked for by name gets TOPIC_AUTHORIZATION_FAILED with a zero id whether or not it
exists, and one asked for by id gets it without its name (ids are not secret). Auto-creation
needs CREATE on the cluster or the topic, else TOPIC_AUTHORIZATION_FAILED. The cluster's
authorized operations (v8-10) are 0 without DESCRIBE on the cluster.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from ..broker import INTERNAL_TOPICS

R = m.MetadataResponse
ZERO_UUID = bytes(16)
UNKNOWN_OPS = -(2**31)


def error_topic(code: ErrorCode, name: str | None, topic_id: bytes = ZERO_UUID):
    return R.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id, partitions=[])


def image_brokers(image, listener_name: str) -> list:
    """Unfenced brokers with an endpoint on this listener, as Kafka's KRaft brokers list them."""
    out = []
    for reg in sorted(image.brokers.values(), key=lambda r: r.id):
        if reg.fenced:
            continue
        ep = next((e for e in reg.endpoints if e.name == listener_name), None)
        if ep is not None:
            out.append(R.MetadataResponseBroker(node_id=reg.id, host=ep.host, port=ep.port, rack=reg.rack))
    return out


def image_topic_entry(ctx, image, timg, live: set[int], include_ops: bool):
    parts = []
    for index, reg in sorted(timg.partitions.items()):
        # A leader that is not reachable on this listener is no leader for the client.
        leader = reg.leader if reg.leader in live else -1
        offline = [r for r in reg.replicas if r not in live]
        parts.append(R.MetadataResponsePartition(
            error_code=0 if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
            leader_id=leader, leader_epoch=reg.leader_epoch, replica_nodes=list(reg.replicas),
            isr_nodes=list(reg.isr), offline_replicas=offline))
    ops = (ctx.authorizer.authorized_operations(ctx.principal, ResourceType.TOPIC, timg.name, ctx.host)
           if include_ops else UNKNOWN_OPS)
    return R.MetadataResponseTopic(error_code=0, name=timg.name, topic_id=timg.id,
                                   is_internal=timg.name in INTERNAL_TOPICS, partitions=parts,
                                   topic_authorized_operations=ops)


async def handle(ctx, req):
    b = ctx.broker
    v = ctx.api_version
    kraft = b.kraft
    include_ops = bool(req.include_topic_authorized_operations)
    image = kraft.image
    brokers = image_brokers(image, ctx.listener.name)
    live = {e.node_id for e in brokers}
    topics = []
    TAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if req.topics is None or (v == 0 and not req.topics):
        for name in sorted(image.topic_ids):
            if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=False):
                topics.append(image_topic_entry(ctx, image, image.topic(name), live, include_ops))
    else:
        allow_create = req.allow_auto_topic_creation if v >= 4 else True
        may_create_any: bool | None = None
        missing = []
        for rt in req.topics:
            if rt.name is None:
                timg = image.topics.get(bytes(rt.topic_id))
                if timg is None:
                    topics.append(error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, rt.topic_id))
                elif not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, timg.name):
                    topics.append(error_topic(TAF, None, timg.id))
                else:
                    topics.append(image_topic_entry(ctx, image, timg, live, include_ops))
            elif not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, rt.name):
                topics.append(error_topic(TAF, rt.name))   # existing or not: nothing said
            elif image.topic(rt.name) is not None:
                topics.append(image_topic_entry(ctx, image, image.topic(rt.name), live, include_ops))
            elif allow_create and b.auto_create_allowed(rt.name):
                if may_create_any is None:
                    may_create_any = ctx.authorize(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME,
                                                   log_denied=False)
                if may_create_any or ctx.authorize(Operation.CREATE, ResourceType.TOPIC, rt.name):
                    missing.append(rt.name)
                    topics.append(None)
                else:
                    topics.append(error_topic(TAF, rt.name))
            else:
                topics.append(error_topic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, rt.name))
        if missing:
            # Auto-creation uses this broker's defaults, as Kafka's AutoTopicCreationManager.
            codes = await kraft.create_topics(missing, b.config["num.partitions"],
                                              b.config["default.replication.factor"])
            image = kraft.image
            created = iter(missing)
            for i, entry in enumerate(topics):
                if entry is None:
                    name = next(created)
                    timg = image.topic(name)
                    if timg is not None:
                        topics[i] = image_topic_entry(ctx, image, timg, live, include_ops)
                    else:
                        code = codes.get(name, ErrorCode.LEADER_NOT_AVAILABLE)
                        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.NOT_CONTROLLER):
                            code = ErrorCode.LEADER_NOT_AVAILABLE   # retriable: ask again soon
                        elif code != ErrorCode.INVALID_TOPIC_EXCEPTION:
                            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        topics[i] = error_topic(code, name)
    cluster_ops = UNKNOWN_OPS
    if 8 <= v <= 10 and req.include_cluster_authorized_operations:
        cluster_ops = (ctx.authorizer.authorized_operations(ctx.principal, ResourceType.CLUSTER, CLUSTER_NAME, ctx.host)
                       if ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)
    return R(throttle_time_ms=0, brokers=brokers, cluster_id=b.cluster_id, controller_id=b.node_id,
             topics=topics, cluster_authorized_operations=cluster_ops)


HANDLES = {m.ApiKey.METADATA: handle}
