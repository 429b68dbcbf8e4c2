"""AlterPartition (56): a partition leader asks the controller to change its ISR (Kafka's
ReplicationControlManager.alterPartition and validateAlterPartitionData).

Only the leader knows which followers have caught up, so it proposes the ISR; only the
controller may make it true, so the leader acts on the new ISR once the answer carries it
(KIP-497). The answer is the partition's registration after the change; the driver sends it
once the change has committed.

Top level: the requesting broker must be registered with the epoch it sends, in every version
(Kafka's checkBrokerEpoch), else STALE_BROKER_EPOCH for the whole request.

Per topic: by name (v0-1) or by id (v2+). An unknown topic fails each partition listed with
UNKNOWN_TOPIC_OR_PARTITION (v0-1) or UNKNOWN_TOPIC_ID (v2+).

Per partition, in Kafka's order, the first that applies:

1. unknown partition: UNKNOWN_TOPIC_OR_PARTITION;
2. a leader or partition epoch newer than ours: NOT_CONTROLLER (this controller is behind the
   one that wrote them; the leader goes looking for the active one);
3. an older leader epoch: FENCED_LEADER_EPOCH;
4. the requester does not lead the partition: INVALID_REQUEST;
5. an older partition epoch: INVALID_UPDATE_VERSION (the leader waits for newer metadata);
6. an ISR with a duplicate, a broker that is not a replica, or without the leader:
   INVALID_REQUEST;
7. RECOVERING with more than one ISR member, or RECOVERED -> RECOVERING: INVALID_REQUEST
   (KIP-704: only the leader of an unclean election recovers, alone). A recovery state that is
   neither makes Kafka fail the whole request with UNKNOWN_SERVER_ERROR; it is INVALID_REQUEST
   for that partition here;
8. an ISR member that is not registered, is in controlled shutdown, is fenced, or (v3) names a
   broker epoch other than -1 and other than its registration's (a restarted broker that has
   not caught up again): INELIGIBLE_REPLICA from v2 on, OPERATION_NOT_ATTEMPTED before (older
   leaders do not know the newer code). Kafka checks every member, not only added ones.

A valid request becomes one PartitionChangeRecord with the new ISR and leader recovery state
(v0 has no such field: RECOVERED). The leader stays (it is in the new ISR and, by step 8,
active), so only the partition epoch bumps, not the leader epoch (KAFKA-15021). A request
that changes nothing writes nothing and is answered with the current registration.

Reassignment (reassignment.py). The replicas a reassignment is adding are replicas, so by
step 6 the leader may add them to the ISR once they have caught up; nothing else may join it.
An ISR that completes the reassignment (election.py: every target replica in it) completes
it in the same record: the replicas become the target, the removing replicas leave the ISR,
and the leader epoch bumps. If the leader itself was being removed, a target replica of the
new ISR leads, and the requester is answered NEW_LEADER_ELECTED (v2+; FENCED_LEADER_EPOCH
before), with the record still written, as Kafka does: it learns the rest from the metadata.

Not modelled: ELR.
"""
from __future__ import annotations

import logging

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .brokers import check_broker_epoch
from .common import Working
from .election import RECOVERED, RECOVERING, is_active, partition_change
from .image import NO_LEADER_CHANGE, MetadataImage, PartitionRegistration, TopicImage, uuid_str

log = logging.getLogger(__name__)

R = m.AlterPartitionResponse
NO_EPOCH = -1   # BrokerState.BrokerEpoch: not checked
_ROUTINE = (ErrorCode.NOT_CONTROLLER, ErrorCode.FENCED_LEADER_EPOCH)


def _topic(image: MetadataImage, t: m.AlterPartitionRequest.TopicData,
           version: int) -> TopicImage | None:
    if version >= 2:
        return image.topics.get(bytes(t.topic_id))
    return image.topic(t.topic_name)


def _members(p: m.AlterPartitionRequest.PartitionData, version: int) -> list[tuple[int, int]]:
    """(broker id, broker epoch) of each proposed ISR member."""
    if version >= 3:
        return [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs]
    return [(b, NO_EPOCH) for b in p.new_isr]


def _ineligible(image: MetadataImage, broker_id: int, epoch: int) -> str | None:
    reg = image.brokers.get(broker_id)
    if reg is None:
        return "not registered"
    if reg.in_controlled_shutdown:
        return "shutting down"
    if reg.fenced:
        return "fenced"
    if epoch != NO_EPOCH and epoch != reg.epoch:
        return f"broker epoch mismatch: requested={epoch} VS expected={reg.epoch}"
    return None


def _validate(image: MetadataImage, requester: int, part: PartitionRegistration | None,
              p: m.AlterPartitionRequest.PartitionData, version: int) -> list[int]:
    """The new ISR, or KafkaError with the partition's error."""
    if part is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
    epochs = (f"leader/partition epochs {p.leader_epoch}/{p.partition_epoch}, ours "
              f"{part.leader_epoch}/{part.partition_epoch}")
    if p.leader_epoch > part.leader_epoch or p.partition_epoch > part.partition_epoch:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, epochs)
    if p.leader_epoch < part.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, epochs)
    if requester != part.leader:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"the leader is {part.leader}")
    if p.partition_epoch < part.partition_epoch:
        raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, epochs)
    members = _members(p, version)
    isr = [b for b, _ in members]
    if len(set(isr)) != len(isr) or not set(isr) <= set(part.replicas):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid ISR {isr}")
    if part.leader not in isr:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"ISR {isr} does not include the leader")
    state = p.leader_recovery_state
    if state not in (RECOVERED, RECOVERING):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown leader recovery state {state}")
    if state == RECOVERING and len(isr) > 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a recovering leader must be alone in the ISR")
    if part.leader_recovery_state == RECOVERED and state == RECOVERING:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "RECOVERED cannot become RECOVERING")
    ineligible = [(b, why) for b, epoch in members
                  if (why := _ineligible(image, b, epoch)) is not None]
    if ineligible:
        raise KafkaError(ErrorCode.INELIGIBLE_REPLICA if version >= 2
                       else ErrorCode.OPERATION_NOT_ATTEMPTED, f"ineligible replicas {ineligible}")
    return isr


def alter_partition(w: Working, request: m.AlterPartitionRequest,
                    version: int) -> m.AlterPartitionResponse:
    """Answer an AlterPartition; adds its PartitionChangeRecords to `w`."""
    check_broker_epoch(w, request.broker_id, request.broker_epoch)
    image = w.image
    # Brokers do not change here; partitions are read from the image before the request unless
    # an earlier entry of the same request changed them (one image rebuild per request, not
    # per partition: a leader may send thousands after a follower dies).
    changed: dict[tuple[bytes, int], PartitionRegistration] = {}
    records: list[Message] = []
    topics: list[m.AlterPartitionResponse.TopicData] = []
    for t in request.topics:
        out = R.TopicData(topic_name=t.topic_name, topic_id=t.topic_id, partitions=[])
        topics.append(out)
        topic = _topic(image, t, version)
        if topic is None:
            code = (ErrorCode.UNKNOWN_TOPIC_ID if version >= 2
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            log.info("AlterPartition from broker %d: unknown topic %s", request.broker_id,
                     t.topic_name if version < 2 else uuid_str(t.topic_id))
            out.partitions = [R.PartitionData(partition_index=p.partition_index, error_code=code)
                              for p in t.partitions]
            continue
        for p in t.partitions:
            key = (topic.id, p.partition_index)
            part = changed.get(key) or topic.partitions.get(p.partition_index)
            try:
                isr = _validate(image, request.broker_id, part, p, version)
            except KafkaError as exc:
                # A leader a step behind (or ahead) of this controller is routine; Kafka logs
                # those at debug too.
                level = logging.DEBUG if exc.code in _ROUTINE else logging.INFO
                log.log(level, "AlterPartition from broker %d for %s-%d refused: %s (%s)",
                        request.broker_id, topic.name, p.partition_index, ErrorCode(exc.code).name,
                        exc.message)
                out.partitions.append(R.PartitionData(partition_index=p.partition_index,
                                                      error_code=exc.code))
                continue
            assert part is not None   # _validate refuses a partition that is not there
            record = partition_change(topic.id, p.partition_index, part,
                                      lambda r: is_active(image, r), target_isr=isr,
                                      target_recovery_state=p.leader_recovery_state)
            if record is not None:
                records.append(record)
                part = changed[key] = part.merge(record)
                if record.leader not in (NO_LEADER_CHANGE, request.broker_id):
                    # The ISR completed a reassignment that moved leadership away.
                    code = (ErrorCode.NEW_LEADER_ELECTED if version >= 2
                            else ErrorCode.FENCED_LEADER_EPOCH)
                    log.info("AlterPartition from broker %d for %s-%d completed its "
                             "reassignment and moved leadership to %d; answering %s",
                             request.broker_id, topic.name, p.partition_index, part.leader,
                             code.name)
                    out.partitions.append(R.PartitionData(partition_index=p.partition_index,
                                                          error_code=code))
                    continue
                if record.adding_replicas is not None or record.removing_replicas is not None:
                    log.info("AlterPartition from broker %d completed the reassignment of "
                             "%s-%d: replicas %s", request.broker_id, topic.name,
                             p.partition_index, list(part.replicas))
            out.partitions.append(R.PartitionData(
                partition_index=p.partition_index, error_code=0, leader_id=part.leader,
                leader_epoch=part.leader_epoch, isr=list(part.isr),
                leader_recovery_state=part.leader_recovery_state,
                partition_epoch=part.partition_epoch))
    w.add(records)
    return R(throttle_time_ms=0, error_code=0, topics=topics)


def error_response(code: ErrorCode) -> m.AlterPartitionResponse:
    """The whole request failed (Kafka's AlterPartitionRequest.getErrorResponse: no topics)."""
    return R(throttle_time_ms=0, error_code=code, topics=[])
