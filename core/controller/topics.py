"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37): Kafka's
ReplicationControlManager and the checks ControllerApis does before it.

Each topic of a request succeeds or fails on its own; the records of all that succeed form one
batch. A topic is checked against the image as earlier topics of the same request left it, so
two topics of one request cannot collide ('.' and '_' are the same in metric names).

CreateTopics, per topic, in Kafka's order: named twice in the request (INVALID_REQUEST), the
metadata topic (INVALID_REQUEST), an illegal name (INVALID_TOPIC_EXCEPTION), an existing topic
(TOPIC_ALREADY_EXISTS), a '.'/'_' collision (INVALID_TOPIC_EXCEPTION), configs (INVALID_CONFIG),
then either a manual assignment (counts must be -1, partitions 0..n-1 once each, registered
distinct brokers, one replica count, at least one active broker per partition:
INVALID_REQUEST / INVALID_REPLICA_ASSIGNMENT) or counts (-1 = num.partitions /
default.replication.factor; 0 or below -1: INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR)
placed by the striped placer (INVALID_REPLICATION_FACTOR when it cannot). Records: TopicRecord,
its ConfigRecords, one PartitionRecord per partition whose ISR is the replicas that are active
(unfenced, not shutting down) and whose leader is the first of those. A request that would
write more than MAX_RECORDS_PER_USER_OP records fails the topics past the limit with
POLICY_VIOLATION, checked before anything is allocated for them.
"""
from __future__ import annotations

import uuid
from collections import Counter
from typing import Callable

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .common import (CLUSTER_METADATA_TOPIC, INTERNAL_TOPICS, TOO_LARGE_MESSAGE, ControllerResult,
                     Working, answer_each, topic_name_error)
from .configs import check_topic_configs, effective_topic_configs
from .election import is_active
from .image import TOPIC_RESOURCE, MetadataImage, TopicImage
from .placement import PlacementError, StripedReplicaPlacer, usable_brokers
from .settings import ControllerConfig

ZERO_UUID = bytes(16)
# Kafka's Uuid.METADATA_TOPIC_ID, which no topic may take.
METADATA_TOPIC_ID = uuid.UUID(int=1).bytes

NewTopicId = Callable[[MetadataImage], bytes]


# --------------------------------------------------------------------------- shared checks


def _collision(image: MetadataImage, name: str) -> str | None:
    if "." not in name and "_" not in name:
        return None
    unified = name.replace(".", "_")
    return next((other for other in image.topic_ids if other.replace(".", "_") == unified), None)


def check_manual_assignment(image: MetadataImage, replicas: list[int],
                            replication_factor: int | None) -> None:
    """Kafka's validateManualPartitionAssignment."""
    if not replicas:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in image.brokers:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes broker {broker}, but no "
                           "such broker is registered.")
        if broker == previous:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes the broker {broker} more "
                           "than once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"The manual partition assignment includes a partition with "
                       f"{len(replicas)} replica(s), but this is not consistent with previous "
                       f"partitions, which have {replication_factor} replica(s).")


def _active_isr(image: MetadataImage, replicas: list[int]) -> list[int]:
    return [r for r in replicas if is_active(image, r)]


def _partition_record(topic_id: bytes, partition_id: int, replicas: list[int],
                      isr: list[int]) -> Message:
    return m.PartitionRecord(partition_id=partition_id, topic_id=topic_id, replicas=replicas,
                             isr=isr, removing_replicas=[], adding_replicas=[], leader=isr[0],
                             leader_recovery_state=0, leader_epoch=0, partition_epoch=0,
                             directories=[])


def _unplaceable(replication_factor: int) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): All brokers "
                    "are currently fenced or in controlled shutdown.")


def _manual_partitions(image: MetadataImage, assignments: list[tuple[int, list[int]]],
                       replication_factor: int | None) -> list[tuple[list[int], list[int]]]:
    out = []
    for partition_id, replicas in assignments:
        check_manual_assignment(image, replicas, replication_factor)
        replication_factor = len(replicas)
        isr = _active_isr(image, replicas)
        if not isr:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"All brokers specified in the manual partition assignment for "
                           f"partition {partition_id} are fenced or in controlled shutdown.")
        out.append((replicas, isr))
    return out


def _placed_partitions(image: MetadataImage, placer: StripedReplicaPlacer, count: int,
                       replication_factor: int,
                       wrap: bool) -> list[tuple[list[int], list[int]]]:
    try:
        placed = placer.place(count, replication_factor, usable_brokers(image))
    except PlacementError as exc:
        message = str(exc)
        if wrap:
            message = f"Unable to replicate the partition {replication_factor} time(s): {message}"
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, message) from None
    out = []
    for replicas in placed:
        isr = _active_isr(image, replicas)
        if not isr:
            raise _unplaceable(replication_factor)
        out.append((replicas, isr))
    return out


# --------------------------------------------------------------------------- CreateTopics


def _create_topic(w: Working, ct: m.CreateTopicsRequest.CreatableTopic, config: ControllerConfig,
                  placer: StripedReplicaPlacer,
                  new_topic_id: NewTopicId) -> tuple[bytes, int, int, dict[str, str]]:
    image = w.image
    if ct.name == CLUSTER_METADATA_TOPIC:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                       f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
    error = topic_name_error(ct.name)
    if error is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, error)
    if ct.name in image.topic_ids:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{ct.name}' already exists.")
    other = _collision(image, ct.name)
    if other is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"Topic '{ct.name}' collides with existing topic: {other}")
    # Kafka reads the configs into a map: a key given twice keeps its last value.
    configs = check_topic_configs({c.name: c.value for c in ct.configs})

    if ct.assignments:
        if ct.replication_factor != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was "
                           "specified, but replication factor was not set to -1.")
        if ct.num_partitions != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was "
                           "specified, but numPartitions was not set to -1.")
        counts = Counter(a.partition_index for a in ct.assignments)
        twice = next((p for p, n in counts.items() if n > 1), None)
        if twice is not None:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Found multiple manual partition assignments for partition {twice}")
        count = len(ct.assignments)
        if 1 + len(configs) + count > w.room():
            raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE)
        by_index = sorted((a.partition_index, list(a.broker_ids)) for a in ct.assignments)
        partitions = _manual_partitions(image, by_index, None)
        if [p for p, _ in by_index] != list(range(count)):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "partitions should be a consecutive 0-based integer sequence")
    else:
        if ct.replication_factor < -1 or ct.replication_factor == 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be "
                           "larger than 0, or -1 to use the default value.")
        if ct.num_partitions < -1 or ct.num_partitions == 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                           "Number of partitions was set to an invalid non-positive value.")
        count = config.num_partitions if ct.num_partitions == -1 else ct.num_partitions
        rf = config.default_replication_factor if ct.replication_factor == -1 \
            else ct.replication_factor
        if 1 + len(configs) + count > w.room():
            raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE)
        partitions = _placed_partitions(image, placer, count, rf, wrap=True)

    topic_id = new_topic_id(image)
    records: list[Message] = [m.TopicRecord(name=ct.name, topic_id=topic_id)]
    records += [m.ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=ct.name, name=k, value=v)
                for k, v in configs.items()]
    records += [_partition_record(topic_id, i, replicas, isr)
                for i, (replicas, isr) in enumerate(partitions)]
    w.add(records)
    return topic_id, count, len(partitions[0][0]), configs


def create_topics(request: m.CreateTopicsRequest, version: int, *, image: MetadataImage,
                  config: ControllerConfig,
                  node_id: int, placer: StripedReplicaPlacer,
                  new_topic_id: NewTopicId) -> ControllerResult:
    R = m.CreateTopicsResponse
    w = Working(image)

    def create(ct: m.CreateTopicsRequest.CreatableTopic,
               res: m.CreateTopicsResponse.CreatableTopicResult) -> None:
        topic_id, count, rf, overrides = _create_topic(w, ct, config, placer, new_topic_id)
        # A validate-only request names no id: the topic does not exist.
        res.topic_id = ZERO_UUID if request.validate_only else topic_id
        res.num_partitions, res.replication_factor = count, rf
        res.configs = [R.CreatableTopicConfigs(name=name, value=value, read_only=False,
                                               config_source=source, is_sensitive=False)
                       for name, value, source in
                       effective_topic_configs(w.image, config, node_id, overrides)]

    results = answer_each(
        request.topics, lambda ct: ct.name, "Duplicate topic name.",
        lambda ct: R.CreatableTopicResult(name=ct.name, error_code=0, error_message=None), create,
        duplicates_once=True)
    records: list[Message] = [] if request.validate_only else w.records
    return ControllerResult(records, R(throttle_time_ms=0, topics=results))


# --------------------------------------------------------------------------- DeleteTopics


def delete_topics(request: m.DeleteTopicsRequest, version: int, *, image: MetadataImage,
                  config: ControllerConfig) -> ControllerResult:
    R = m.DeleteTopicsResponse
    wanted: list[tuple[str | None, bytes]]
    if version >= 6:
        wanted = [(t.name, bytes(t.topic_id)) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    names = Counter(n for n, tid in wanted if n is not None and tid == ZERO_UUID)
    ids = Counter(tid for n, tid in wanted if n is None and tid != ZERO_UUID)
    w = Working(image)
    results: list[m.DeleteTopicsResponse.DeletableTopicResult] = []
    answered: set[tuple[str | None, bytes]] = set()
    for name, tid in wanted:
        # a duplicated name or id is answered once, as Kafka's controller does
        if ((name is not None and names[name] > 1) or ids[tid] > 1) and (name, tid) in answered:
            continue
        answered.add((name, tid))
        res = R.DeletableTopicResult(name=name, topic_id=tid, error_code=0, error_message=None)
        try:
            # Names and ids resolve against the image before the request, as Kafka resolves
            # them all before it deletes anything.
            topic = _topic_to_delete(image, config, version, name, tid, names, ids)
            w.add([m.RemoveTopicRecord(topic_id=topic.id)])
            res.name, res.topic_id = topic.name, topic.id
        except KafkaError as exc:
            res.error_code, res.error_message = exc.code, exc.message
        results.append(res)
    return ControllerResult(w.records, R(throttle_time_ms=0, responses=results))


def _topic_to_delete(image: MetadataImage, config: ControllerConfig, version: int,
                     name: str | None, tid: bytes, names: Counter[str], ids: Counter[bytes]) -> TopicImage:
    topic = _resolve_topic_to_delete(image, config, version, name, tid, names, ids)
    if topic.name in INTERNAL_TOPICS:
        # Deleting __consumer_offsets would silently lose every group's committed offsets
        # (Kafka's own tools refuse it too).
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"{topic.name} is an internal topic and cannot be deleted")
    return topic


def _resolve_topic_to_delete(image: MetadataImage, config: ControllerConfig, version: int,
                             name: str | None, tid: bytes, names: Counter[str],
                             ids: Counter[bytes]) -> TopicImage:
    if not config.delete_topic_enable:
        if version < 3:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Topic deletion is disabled.")
        raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
    if name is None and tid == ZERO_UUID:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
    if name is not None and tid != ZERO_UUID:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                       "You may not specify both topic name and topic id.")
    if name is None:
        if ids[tid] > 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
        topic = image.topics.get(tid)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
        return topic
    if names[name] > 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    topic = image.topic(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    if topic.id in ids:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                       "The provided topic name maps to an ID that was already supplied.")
    return topic


# --------------------------------------------------------------------------- CreatePartitions


def _create_partitions(w: Working, t: m.CreatePartitionsRequest.CreatePartitionsTopic,
                       placer: StripedReplicaPlacer) -> None:
    image = w.image
    topic = image.topic(t.name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{t.name}' does not exist.")
    current = len(topic.partitions)
    if t.count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if t.count < current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                       f"The topic {t.name} currently has {current} partition(s); {t.count} would "
                       "not be an increase.")
    additional = t.count - current
    if t.assignments is not None and len(t.assignments) != additional:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Attempted to add {additional} additional partition(s), but only "
                       f"{len(t.assignments)} assignment(s) were specified.")
    if additional > w.room():
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE)
    if not topic.partitions:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                       f"Invalid state: topic {t.name} appears to have no partitions.")
    rf = len(topic.partitions[min(topic.partitions)].replicas)
    if t.assignments is not None:
        partitions = _manual_partitions(
            image, [(current + i, list(a.broker_ids)) for i, a in enumerate(t.assignments)], rf)
    else:
        partitions = _placed_partitions(image, placer, additional, rf, wrap=False)
    w.add([_partition_record(topic.id, current + i, replicas, isr)
           for i, (replicas, isr) in enumerate(partitions)])


def create_partitions(request: m.CreatePartitionsRequest, version: int, *, image: MetadataImage,
                      placer: StripedReplicaPlacer) -> ControllerResult:
    R = m.CreatePartitionsResponse
    w = Working(image)
    results = answer_each(
        request.topics, lambda t: t.name, "Duplicate topic name.",
        lambda t: R.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None),
        lambda t, res: _create_partitions(w, t, placer), duplicates_once=True)
    records: list[Message] = [] if request.validate_only else w.records
    return ControllerResult(records, R(throttle_time_ms=0, results=results))


# --------------------------------------------------------------------------- blanket errors


def error_response(api_key: int,
                   request: m.CreateTopicsRequest | m.DeleteTopicsRequest | m.CreatePartitionsRequest,
                   version: int, code: ErrorCode, message: str | None) -> Message:
    """Every item of the request failed with `code` (e.g. NOT_CONTROLLER)."""
    if api_key == m.ApiKey.CREATE_TOPICS:
        assert isinstance(request, m.CreateTopicsRequest)   # the request of that key
        CR = m.CreateTopicsResponse
        return CR(throttle_time_ms=0, topics=[
            CR.CreatableTopicResult(name=ct.name, error_code=code, error_message=message)
            for ct in request.topics])
    if api_key == m.ApiKey.DELETE_TOPICS:
        assert isinstance(request, m.DeleteTopicsRequest)
        DR = m.DeleteTopicsResponse
        wanted: list[tuple[str | None, bytes]] = (
            [(t.name, bytes(t.topic_id)) for t in request.topics] if version >= 6
            else [(name, ZERO_UUID) for name in request.topic_names])
        return DR(throttle_time_ms=0, responses=[
            DR.DeletableTopicResult(name=n, topic_id=tid, error_code=code, error_message=message)
            for n, tid in wanted])
    assert isinstance(request, m.CreatePartitionsRequest)
    PR = m.CreatePartitionsResponse
    return PR(throttle_time_ms=0, results=[
        PR.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
        for t in request.topics])
