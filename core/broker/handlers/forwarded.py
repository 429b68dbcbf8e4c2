"""The admin requests a KRaft broker forwards to the active controller: CreateTopics (19),
DeleteTopics (20), AlterConfigs (33), CreatePartitions (37), IncrementalAlterConfigs (44),
ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46).

A standalone node handles them itself (create_topics.py and the others). In a KRaft cluster
the controller owns metadata: the broker sends it the request as it came (forwarding.py), and
relays the answer once its own image shows the change, so the client's next Metadata request
to this broker sees what it just did. If no controller answers within the request's timeout,
every topic or resource gets NOT_CONTROLLER (retriable), as from Kafka.

ElectLeaders (v0-2) lives here whole. It needs ALTER on the cluster (Kafka's check; our
forwarding carries no principal, so the broker asks before it forwards), else
CLUSTER_AUTHORIZATION_FAILED at the top (v1+) and for every partition listed. It is forwarded
at v2 whatever the client spoke, so that a NOT_CONTROLLER answer shows at the top level and
the channel looks for the new controller (v0 has no top-level error; its election type is
PREFERRED). A standalone node leads every partition it has, so every existing partition
answers ELECTION_NOT_NEEDED (left out when the request names no partitions, as the controller
does) and any other UNKNOWN_TOPIC_OR_PARTITION.

AlterPartitionReassignments (v0) needs ALTER on the cluster, ListPartitionReassignments (v0)
DESCRIBE on the cluster (Kafka's checks), else CLUSTER_AUTHORIZATION_FAILED at the top and,
for 45, for every partition listed. A KRaft broker forwards both, as Kafka's brokers do (46 is
read-only, but only the controller knows what is in progress), and after a successful
reassignment waits (bounded) until its own image shows each partition started, completed or
cancelled, so that its Metadata answers show the new replicas. A standalone node is its
own only broker: every partition is on it already, so a target of just this node changes
nothing, any other target names a broker that is not registered (INVALID_REPLICA_ASSIGNMENT),
a cancel finds NO_REASSIGNMENT_IN_PROGRESS, and nothing is ever in progress.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

from core.client.errors import KafkaError
from core.controller import elect_leaders as elections
from core.controller import reassignment
from core.controller.common import ApiError
from core.controller.topics import check_manual_assignment
from core.controller.controller import QuorumController
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

log = logging.getLogger(__name__)

# The request table wraps these standalone handlers with kraft_or.
FORWARDED = (19, 20, 33, 37, 44)
DEFAULT_TIMEOUT_MS = 30_000
SHOW_TIMEOUT_S = 5.0
CLUSTER_RESOURCE = "kafka-cluster"
ELECT_LEADERS_VERSION = 2


def kraft_or(standalone):
    """The request table entry: the standalone handler, or forwarding in a KRaft cluster."""
    async def handle(ctx, request):
        if ctx.broker.kraft is None:
            return await standalone(ctx, request)
        return await forward(ctx, request)
    return handle


async def forward(ctx, request, version: int | None = None):
    """The controller's answer to `request`, sent at `version` (default: the client's)."""
    kraft = ctx.broker.kraft
    timeout_ms = getattr(request, "timeout_ms", 0) or DEFAULT_TIMEOUT_MS
    synced_before = kraft.sync.synced_offset
    image_before = kraft.quorum.loader.image
    try:
        answer = await kraft.channel.send(ctx.api_key, request,
                                          ctx.api_version if version is None else version,
                                          timeout_ms / 1000)
    except KafkaError as exc:
        log.warning("forwarding API %d to the controller failed: %s", ctx.api_key, exc)
        return QuorumController._error_response(ctx.api_key, request, ctx.api_version,
                                                ErrorCode.NOT_CONTROLLER, str(exc))
    shown = _shown(ctx, request, answer, synced_before, image_before)
    if shown is not None and not await kraft.sync.wait_synced(shown, SHOW_TIMEOUT_S):
        log.info("API %d: the controller's change is not in this broker's image after %gs",
                 ctx.api_key, SHOW_TIMEOUT_S)
    return answer


def _shown(ctx, request, answer, synced_before: int, image_before):
    """A predicate that holds once this broker's image reflects a successful answer."""
    broker = ctx.broker
    if getattr(request, "validate_only", False):
        return None
    if ctx.api_key == 19:
        names = [t.name for t in answer.topics if t.error_code == 0]
        return (lambda: all(n in broker.topics for n in names)) if names else None
    if ctx.api_key == 20:
        names = [r.name for r in answer.responses if r.error_code == 0 and r.name]
        return (lambda: not any(n in broker.topics for n in names)) if names else None
    if ctx.api_key == 37:
        wanted = {t.name: t.count for t in request.topics}
        done = [r.name for r in answer.results if r.error_code == 0]
        return (lambda: all(n in broker.topics and len(broker.topics[n].partitions) >= wanted[n]
                            for n in done)) if done else None
    if ctx.api_key == 45:
        return _reassignment_shown(broker.kraft.quorum.loader, request, answer)
    if ctx.api_key == 46:
        return None
    if ctx.api_key == 43:
        elected = [(r.topic, p.partition_id) for r in answer.replica_election_results
                   for p in r.partition_result if p.error_code == 0]
        loader = broker.kraft.quorum.loader
        # Metadata answers from the loader's image: wait until it has the new leader epochs.
        return (lambda: all(_leader_epoch(loader.image, t, p) > _leader_epoch(image_before, t, p)
                            for t, p in elected)) if elected else None
    if any(r.error_code == 0 for r in answer.responses):
        return lambda: broker.kraft.sync.synced_offset > synced_before
    return None


def _leader_epoch(image, topic: str, partition: int) -> int:
    part = image.partition(topic, partition)
    return -1 if part is None else part.leader_epoch


# --------------------------------------------------------------------------- ElectLeaders


async def elect_leaders(ctx, request):
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return elections.error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if ctx.api_version == 0:
        request.election_type = elections.PREFERRED
    if ctx.broker.kraft is not None:
        return await forward(ctx, request, ELECT_LEADERS_VERSION)
    if request.election_type not in (elections.PREFERRED, elections.UNCLEAN):
        return elections.error_response(request, ErrorCode.INVALID_REQUEST,
                                        f"Unknown election type {request.election_type}")
    return _standalone_elections(ctx.broker, request)


def _standalone_elections(broker, request):
    R = m.ElectLeadersResponse

    def result(name: str, index: int):
        topic = broker.topics.get(name)
        if topic is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"
        elif not 0 <= index < len(topic.partitions):
            code, message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"No such partition as {name}-{index}")
        else:
            code, message = ErrorCode.ELECTION_NOT_NEEDED, elections.NOT_NEEDED_MESSAGE
        return R.PartitionResult(partition_id=index, error_code=code, error_message=message)

    if request.topic_partitions is None:
        results = [R.ReplicaElectionResult(topic=name, partition_result=[])
                   for name in sorted(broker.topics)]
    else:
        results = [R.ReplicaElectionResult(
            topic=t.topic, partition_result=[result(t.topic, p) for p in t.partitions])
            for t in request.topic_partitions]
    return R(throttle_time_ms=0, error_code=0, replica_election_results=results)


# --------------------------------------------------------------------------- reassignments


def _reassignment_shown(loader, request, answer):
    """Holds once the loader's image (Metadata answers from it) shows every partition that
    succeeded started or done (its replicas begin with the target) or cancelled (no
    reassignment in progress)."""
    targets = {(t.name, p.partition_index): p.replicas for t in request.topics
               for p in t.partitions}
    done = [(t.name, r.partition_index) for t in answer.responses for r in t.partitions
            if r.error_code == 0]

    def shown(name: str, index: int) -> bool:
        part = loader.image.partition(name, index)
        if part is None:
            return True          # deleted meanwhile: nothing more to wait for
        target = targets.get((name, index))
        if target is None:
            return not reassignment.in_progress(part)
        return list(part.replicas[:len(target)]) == list(target)
    return (lambda: all(shown(n, i) for n, i in done)) if done else None


async def alter_partition_reassignments(ctx, request):
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return reassignment.error_response(45, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                           None)
    if ctx.broker.kraft is not None:
        return await forward(ctx, request)
    return _standalone_reassignments(ctx.broker, request)


async def list_partition_reassignments(ctx, request):
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_RESOURCE):
        return reassignment.error_response(46, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                           None)
    if ctx.broker.kraft is not None:
        return await forward(ctx, request)
    R = m.ListPartitionReassignmentsResponse
    return R(throttle_time_ms=0, error_code=0, error_message=None, topics=[])


def _standalone_reassignments(broker, request):
    R = m.AlterPartitionReassignmentsResponse
    # The controller's assignment checks, against a cluster of this one broker.
    alone = SimpleNamespace(brokers={broker.node_id: None})

    def result(name: str, p):
        res = R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=0,
                                              error_message=None)
        topic = broker.topics.get(name)
        try:
            if topic is None:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"Unable to find a topic named {name}.")
            if not 0 <= p.partition_index < len(topic.partitions):
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"Unable to find partition {name}:{p.partition_index}.")
            if p.replicas is None:
                raise ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            check_manual_assignment(alone, list(p.replicas), None)
        except ApiError as exc:
            res.error_code, res.error_message = exc.code, exc.message
        return res

    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        R.ReassignableTopicResponse(name=t.name, partitions=[result(t.name, p)
                                                             for p in t.partitions])
        for t in request.topics])


HANDLES = {43: elect_leaders, 45: alter_partition_reassignments,
           46: list_partition_reassignments}
