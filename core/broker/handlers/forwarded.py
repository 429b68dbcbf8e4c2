"""The admin requests a KRaft broker forwards to the active controller: CreateTopics (19),
DeleteTopics (20), AlterConfigs (33), CreatePartitions (37), IncrementalAlterConfigs (44),
ElectLeaders (43).

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
"""
from __future__ import annotations

import logging

from core.client.errors import KafkaError
from core.controller import elect_leaders as elections
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


HANDLES = {43: elect_leaders}
