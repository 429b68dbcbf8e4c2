"""The admin requests a broker forwards to the active controller: CreateTopics (19),
DeleteTopics (20), AlterConfigs (33), CreatePartitions (37), IncrementalAlterConfigs (44),
ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46).

The controller owns metadata, and validates every change once, for every kind of cluster (a
one-node cluster's controller runs in the same process). The broker sends it the request as it
came (controller_channel.py), and relays the answer once its own image shows the change, so the
client's next Metadata request to this broker sees what it just did. If no controller answers
within the request's timeout, every topic or resource gets NOT_CONTROLLER (retriable), as from
Kafka.

ElectLeaders (v0-2) needs ALTER on the cluster (Kafka's check; our forwarding carries no
principal, so the broker asks before it forwards), else CLUSTER_AUTHORIZATION_FAILED at the top
(v1+) and for every partition listed. It is forwarded at v2 whatever the client spoke, so that
a NOT_CONTROLLER answer shows at the top level and the channel looks for the new controller
(v0 has no top-level error; its election type is PREFERRED).

AlterPartitionReassignments (v0) needs ALTER on the cluster, ListPartitionReassignments (v0)
DESCRIBE on the cluster (Kafka's checks), else CLUSTER_AUTHORIZATION_FAILED at the top and,
for 45, for every partition listed. The broker forwards both, as Kafka's brokers do (46 is
read-only, but only the controller knows what is in progress), and after a successful
reassignment waits (bounded) until its own image shows each partition started, completed or
cancelled, so that its Metadata answers show the new replicas.
"""
from __future__ import annotations

import logging

from core.broker import admin_authorization
from core.client.errors import KafkaError
from core.controller import elect_leaders as elections
from core.controller import acls as acl_control
from core.controller import reassignment
from core.controller import scram as scram_control
from core.controller.configs import effective_topic_configs
from core.controller.controller import QuorumController
from core.controller.settings import ControllerConfig
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger(__name__)

# Forwarded with only what the client may do (core/broker/admin_authorization.py).
FORWARDED = admin_authorization.CHECKED_APIS
DEFAULT_TIMEOUT_MS = 30_000
SHOW_TIMEOUT_S = 5.0
CLUSTER_RESOURCE = CLUSTER_NAME
# The controller is asked at one version whatever the client spoke: v1+ carries the pattern
# type, and the request is decoded with every field it has either way.
ACLS_VERSION = 3
ELECT_LEADERS_VERSION = 2


async def forward(ctx, request, version: int | None = None):
    """The controller's answer to `request`, sent at `version` (default: the client's)."""
    kraft = ctx.broker.kraft
    timeout_ms = getattr(request, "timeout_ms", 0) or DEFAULT_TIMEOUT_MS
    synced_before = kraft.sync.synced_offset
    loader = kraft.quorum.loader
    image_before, offset_before = loader.image, loader.next_offset
    try:
        answer, resent = await kraft.channel.send_tracked(ctx.api_key, request,
                                                          ctx.api_version if version is None else version,
                                                          timeout_ms / 1000)
    except KafkaError as exc:
        log.warning("forwarding API %d to the controller failed: %s", ctx.api_key, exc)
        return QuorumController._error_response(ctx.api_key, request, ctx.api_version,
                                                ErrorCode.NOT_CONTROLLER, str(exc))
    if resent and not getattr(request, "validate_only", False):
        await reconcile_resend(ctx, request, answer, image_before, offset_before)
    shown = _shown(ctx, request, answer, synced_before, image_before)
    if shown is not None and not await kraft.sync.wait_synced(shown, SHOW_TIMEOUT_S):
        log.info("API %d: the controller's change is not in this broker's image after %gs",
                 ctx.api_key, SHOW_TIMEOUT_S)
    return answer


async def forward_authorized(ctx, request):
    """CreateTopics, DeleteTopics, AlterConfigs, CreatePartitions, IncrementalAlterConfigs:
    what the client may not do is answered here, the rest forwarded."""
    narrowed = admin_authorization.narrow(ctx, request, ctx.broker.kraft.quorum.loader.image)
    if narrowed.anything_allowed:
        answer = await forward(ctx, narrowed.request)
    else:
        answer = QuorumController._error_response(ctx.api_key, narrowed.request, ctx.api_version,
                                                  ErrorCode.NONE, None)
    return narrowed.merge(answer)


# --------------------------------------------------------------------------- resends

async def reconcile_resend(ctx, request, answer, image_before, offset_before: int) -> None:
    """The answer came to a resend, and an earlier attempt may have been applied: where the
    answer says the change was already there, and the log shows it happened after we first
    sent the request, exactly as asked, answer as if this request did it (which it did). So a
    client never sees TOPIC_ALREADY_EXISTS for its own creation, UNKNOWN_TOPIC_OR_PARTITION for
    its own deletion, or INVALID_PARTITIONS for its own partition increase. Config changes need
    nothing: setting, deleting, appending or subtracting twice ends as once.

    A concurrent identical request from another client in that window is taken for ours; Kafka
    would tell one of the two that the topic exists. That is the price of exactly-once here."""
    loader = ctx.broker.kraft.quorum.loader
    if ctx.api_key == m.ApiKey.CREATE_TOPICS:
        await _reconcile_creates(ctx, loader, request, answer, offset_before)
    elif ctx.api_key == m.ApiKey.DELETE_TOPICS:
        await _reconcile_deletes(loader, request, answer, image_before)
    elif ctx.api_key == m.ApiKey.CREATE_PARTITIONS:
        await _reconcile_partitions(loader, request, answer, image_before)


async def _reconcile_creates(ctx, loader, request, answer, offset_before: int) -> None:
    suspects = [t for t in answer.topics if t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS]
    if not suspects:
        return
    await loader.wait_for(lambda: all(t.name in loader.image.topic_ids for t in suspects), SHOW_TIMEOUT_S)
    image = loader.image
    asked = {ct.name: ct for ct in request.topics}
    config = ControllerConfig.from_broker_config(ctx.broker.config)
    R = m.CreateTopicsResponse
    for res in suspects:
        topic_id = image.topic_ids.get(res.name)
        created = loader.topic_created_at.get(topic_id)
        ct = asked.get(res.name)
        if topic_id is None or created is None or created < offset_before or ct is None:
            continue
        topic = image.topics[topic_id]
        overrides = dict(image.topic_config(res.name))
        if not _created_as_asked(ct, topic, overrides, config):
            continue
        log.info("CreateTopics %s: a resend found the topic our first attempt created (offset %d)",
                 res.name, created)
        res.error_code, res.error_message, res.topic_id = 0, None, topic_id
        res.num_partitions = len(topic.partitions)
        res.replication_factor = len(topic.partitions[0].replicas) if topic.partitions else -1
        res.configs = [R.CreatableTopicConfigs(name=name, value=value, read_only=False, config_source=source,
                                               is_sensitive=False)
                       for name, value, source in effective_topic_configs(image, config, ctx.broker.node_id,
                                                                          overrides)]


def _created_as_asked(ct, topic, overrides: dict, config) -> bool:
    if {c.name: c.value for c in ct.configs} != overrides:
        return False
    partitions = topic.partitions
    if ct.assignments:
        by_index = {a.partition_index: list(a.broker_ids) for a in ct.assignments}
        return by_index.keys() == partitions.keys() and \
            all(list(partitions[i].replicas) == by_index[i] for i in by_index)
    count = config.num_partitions if ct.num_partitions == -1 else ct.num_partitions
    rf = config.default_replication_factor if ct.replication_factor == -1 else ct.replication_factor
    return len(partitions) == count and all(len(p.replicas) == rf for p in partitions.values())


async def _reconcile_deletes(loader, request, answer, image_before) -> None:
    gone = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID)
    suspects = [r for r in answer.responses if r.error_code in gone]
    if not suspects:
        return

    def before_id(r):
        if r.name:
            return image_before.topic_ids.get(r.name)
        topic_id = getattr(r, "topic_id", None)
        return topic_id if topic_id in image_before.topics else None

    await loader.wait_for(lambda: all(before_id(r) not in loader.image.topics for r in suspects), SHOW_TIMEOUT_S)
    for r in suspects:
        topic_id = before_id(r)
        if topic_id is None or topic_id in loader.image.topics:
            continue
        log.info("DeleteTopics %s: a resend found the topic our first attempt deleted",
                 r.name or image_before.topics[topic_id].name)
        r.error_code, r.error_message = 0, None
        r.name = r.name or image_before.topics[topic_id].name
        if hasattr(r, "topic_id"):
            r.topic_id = topic_id


async def _reconcile_partitions(loader, request, answer, image_before) -> None:
    suspects = [r for r in answer.results if r.error_code == ErrorCode.INVALID_PARTITIONS]
    if not suspects:
        return
    asked = {t.name: t.count for t in request.topics}

    def count(image, name):
        topic_id = image.topic_ids.get(name)
        return -1 if topic_id is None else len(image.topics[topic_id].partitions)

    await loader.wait_for(lambda: all(count(loader.image, r.name) >= asked.get(r.name, 0) for r in suspects),
                          SHOW_TIMEOUT_S)
    for r in suspects:
        want = asked.get(r.name)
        if want is None or not (0 <= count(image_before, r.name) < want == count(loader.image, r.name)):
            continue
        if image_before.topic_ids.get(r.name) != loader.image.topic_ids.get(r.name):
            continue
        log.info("CreatePartitions %s: a resend found the %d partitions our first attempt made", r.name, want)
        r.error_code, r.error_message = 0, None


def _shown(ctx, request, answer, synced_before: int, image_before):
    """A predicate that holds once this broker's image reflects a successful answer."""
    broker = ctx.broker
    if getattr(request, "validate_only", False):
        return None
    # Topic changes are shown once a reconcile has finished with them: the partitions opened,
    # and their replicas leading or following, so a produce that follows finds its leader.
    sync = broker.kraft.sync
    if ctx.api_key == m.ApiKey.CREATE_TOPICS:
        names = [t.name for t in answer.topics if t.error_code == 0]
        return (lambda: all(n in sync.reconciled.topic_ids for n in names)) if names else None
    if ctx.api_key == m.ApiKey.DELETE_TOPICS:
        names = [r.name for r in answer.responses if r.error_code == 0 and r.name]
        return (lambda: not any(n in sync.reconciled.topic_ids for n in names)) if names else None
    if ctx.api_key == m.ApiKey.CREATE_PARTITIONS:
        wanted = {t.name: t.count for t in request.topics}
        done = [r.name for r in answer.results if r.error_code == 0]

        def grown(name: str) -> bool:
            timg = sync.reconciled.topic(name)
            return timg is not None and len(timg.partitions) >= wanted[name]
        return (lambda: all(grown(n) for n in done)) if done else None
    if ctx.api_key == m.ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        return _reassignment_shown(broker.kraft, request, answer)
    if ctx.api_key == m.ApiKey.LIST_PARTITION_REASSIGNMENTS:
        return None
    if ctx.api_key == m.ApiKey.ELECT_LEADERS:
        elected = [(r.topic, p.partition_id) for r in answer.replica_election_results
                   for p in r.partition_result if p.error_code == 0]
        kraft = broker.kraft
        # Metadata answers from the reconciled image: wait until it has the new leader epochs.
        return (lambda: all(_leader_epoch(kraft.image, t, p) > _leader_epoch(image_before, t, p)
                            for t, p in elected)) if elected else None
    if ctx.api_key == m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        changed = any(r.error_code == 0 for r in answer.results)
        return (lambda: broker.kraft.sync.synced_offset > synced_before) if changed else None
    if ctx.api_key == m.ApiKey.CREATE_ACLS:
        changed = any(r.error_code == 0 for r in answer.results)
        return (lambda: broker.kraft.sync.synced_offset > synced_before) if changed else None
    if ctx.api_key == m.ApiKey.DELETE_ACLS:
        changed = any(r.matching_acls for r in answer.filter_results)
        return (lambda: broker.kraft.sync.synced_offset > synced_before) if changed else None
    if ctx.api_key in (m.ApiKey.INCREMENTAL_ALTER_CONFIGS, m.ApiKey.ALTER_CONFIGS):
        return _configs_shown(sync, request, answer, synced_before)
    if any(r.error_code == 0 for r in answer.responses):
        return lambda: broker.kraft.sync.synced_offset > synced_before
    return None


_SET, _DELETE = 0, 1
_TOPIC = 2


def _configs_shown(sync, request, answer, synced_before: int):
    """Config changes: a topic's shows once the reconciled image holds the values asked for,
    which it may already (a change to what is there writes no record, and no later offset
    would come to wait for); anything else (broker resources, which always write records;
    APPEND and SUBTRACT, whose result depends on what was there) once the image moves on, so
    an APPEND or SUBTRACT that changes nothing still waits out SHOW_TIMEOUT_S."""
    done = {(r.resource_type, r.resource_name) for r in answer.responses if r.error_code == 0}
    wanted: dict[str, dict[str, str | None]] = {}
    replaced: dict[str, dict[str, str]] = {}
    moves_on = False
    incremental = isinstance(request, m.IncrementalAlterConfigsRequest)
    for res in request.resources:
        if (res.resource_type, res.resource_name) not in done:
            continue
        if res.resource_type != _TOPIC:
            moves_on = True
            continue
        if incremental:
            if any(c.config_operation not in (_SET, _DELETE) for c in res.configs):
                moves_on = True
                continue
            wanted[res.resource_name] = {c.name: c.value if c.config_operation == _SET else None
                                         for c in res.configs}
        else:       # a replacement: the topic's config becomes exactly what was given
            replaced[res.resource_name] = {c.name: c.value for c in res.configs}
    if not wanted and not replaced and not moves_on:
        return None

    def shown() -> bool:
        if moves_on and sync.synced_offset <= synced_before:
            return False
        for topic, values in wanted.items():
            current = sync.reconciled.topic_config(topic)
            if any(current.get(k) != v for k, v in values.items()):
                return False
        return all(dict(sync.reconciled.topic_config(t)) == v for t, v in replaced.items())
    return shown


def _leader_epoch(image, topic: str, partition: int) -> int:
    part = image.partition(topic, partition)
    return -1 if part is None else part.leader_epoch


# --------------------------------------------------------------------------- SCRAM credentials


async def alter_user_scram_credentials(ctx, request):
    """AlterUserScramCredentials (51, v0): ALTER on the cluster, then the controller decides."""
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return scram_control.error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    return await forward(ctx, request, 0)


# --------------------------------------------------------------------------- ACLs


async def create_or_delete_acls(ctx, request):
    """CreateAcls (30) and DeleteAcls (31), v0-3: ALTER on the cluster, then the controller; a
    broker without an authorizer keeps no ACLs and answers SECURITY_DISABLED, as Kafka does."""
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return acl_control.error_response(ctx.api_key, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if not ctx.broker.config["authorizer.class.name"]:
        return acl_control.error_response(ctx.api_key, request, ErrorCode.SECURITY_DISABLED,
                                          acl_control.NO_AUTHORIZER)
    return await forward(ctx, request, ACLS_VERSION)


# --------------------------------------------------------------------------- ElectLeaders


async def elect_leaders(ctx, request):
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return elections.error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if ctx.api_version == 0:
        request.election_type = elections.PREFERRED
    return await forward(ctx, request, ELECT_LEADERS_VERSION)


# --------------------------------------------------------------------------- reassignments


def _reassignment_shown(kraft, request, answer):
    """Holds once the reconciled image (Metadata answers from it) shows every partition that
    succeeded started or done (its replicas begin with the target) or cancelled (no
    reassignment in progress)."""
    targets = {(t.name, p.partition_index): p.replicas for t in request.topics
               for p in t.partitions}
    done = [(t.name, r.partition_index) for t in answer.responses for r in t.partitions
            if r.error_code == 0]

    def shown(name: str, index: int) -> bool:
        part = kraft.image.partition(name, index)
        if part is None:
            return True          # deleted meanwhile: nothing more to wait for
        target = targets.get((name, index))
        if target is None:
            return not reassignment.in_progress(part)
        return list(part.replicas[:len(target)]) == list(target)
    return (lambda: all(shown(n, i) for n, i in done)) if done else None


async def alter_partition_reassignments(ctx, request):
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return reassignment.error_response(m.ApiKey.ALTER_PARTITION_REASSIGNMENTS, request,
                                           ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                           None)
    return await forward(ctx, request)


async def list_partition_reassignments(ctx, request):
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return reassignment.error_response(m.ApiKey.LIST_PARTITION_REASSIGNMENTS, request,
                                           ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                           None)
    return await forward(ctx, request)


HANDLES = {m.ApiKey.ELECT_LEADERS: elect_leaders,
           m.ApiKey.CREATE_ACLS: create_or_delete_acls, m.ApiKey.DELETE_ACLS: create_or_delete_acls,
           m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
           m.ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
           m.ApiKey.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments,
           **{key: forward_authorized for key in FORWARDED}}
