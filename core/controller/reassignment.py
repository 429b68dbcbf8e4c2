"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): moving partitions
between brokers (KIP-455; Kafka's ReplicationControlManager.alterPartitionReassignments and
listPartitionReassignments, PartitionReassignmentReplicas, PartitionReassignmentRevert).

A reassignment goes through three stages, all of them PartitionChangeRecords:

1. Start. The replicas become the target followed by the current replicas the target drops
   (Kafka's order: `target + sorted(current - target)`), `adding_replicas` =
   sorted(target - current), `removing_replicas` = sorted(current - target). The brokers
   see the new replicas in the metadata, open the partition and fetch from the leader.
2. Catch-up. The leader adds the new replicas to the ISR with AlterPartition once they have
   caught up (alter_partition.py); removing replicas keep replicating meanwhile.
3. Completion, in the same record as the ISR change that allows it (election.py, Kafka's
   completeReassignmentIfNeeded): once the ISR holds every target replica, the replicas
   become the target, the removing replicas leave the ISR, adding/removing are cleared, the
   leader epoch bumps, and a leader that was being removed is replaced by the first target
   replica of the ISR. Brokers no longer listed stop and delete their replica
   (core/broker/metadata_sync.py).

Any partition change can complete a reassignment (AlterPartition, fencing, unfencing,
controlled shutdown, elections), and so can stage 1 itself: a target the ISR already covers
(the same brokers in another order, a replica dropped) completes at once. Nothing else moves
replicas: placement happens only when a topic or partition is created, so a broker that joins
an existing cluster hosts nothing until a reassignment gives it partitions.

AlterPartitionReassignments, per partition, in request order, each succeeding or failing on
its own (the records of all that succeed form one batch):

* unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
* target replicas given: the list must be non-empty, of registered brokers (fenced ones
  count: they may come back), each once, else INVALID_REPLICA_ASSIGNMENT with Kafka's
  message. A target equal to the current replica list of a partition not being reassigned
  changes nothing and writes nothing. A partition already being reassigned is reassigned
  again from its current (full) replica list: cancelling afterwards goes back to that list,
  not to the one before the first reassignment (Kafka does the same). The adding and
  removing lists are always the new reassignment's (Kafka keeps the previous ones when a new
  list comes out empty, which can list a replica as both adding and removing, or remove
  replicas the new target keeps);
* null (cancel): a partition not being reassigned fails with NO_REASSIGNMENT_IN_PROGRESS.
  Otherwise the replicas go back to the original ones (replicas - adding, in the order they
  have now: a replica the target kept comes first, as in Kafka), the ISR loses the adding
  replicas, and the leader is re-elected if it was one of them. If only adding replicas
  were in the ISR, the first original replica becomes the ISR: that is an unclean election,
  refused with INVALID_REPLICA_ASSIGNMENT unless the topic allows unclean elections;
* more records than MAX_RECORDS_PER_USER_OP in one request: POLICY_VIOLATION for the
  partitions past the limit.

A partition named twice is changed twice, the second time from the state the first left.

ListPartitionReassignments lists the partitions being reassigned, with their replicas, adding
and removing replicas: all of them when topics is null (by topic name, then partition), else
the partitions named, in request order, leaving out unknown topics and partitions and those
not being reassigned, and topics with nothing left. An empty topic list lists nothing.
"""
from __future__ import annotations

import logging
from typing import Callable

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .common import TOO_LARGE_MESSAGE, Working
from .election import Election, is_active, partition_change
from .image import MetadataImage, PartitionRegistration
from .topics import check_manual_assignment

log = logging.getLogger(__name__)

RA = m.AlterPartitionReassignmentsResponse
RL = m.ListPartitionReassignmentsResponse


def in_progress(part: PartitionRegistration) -> bool:
    return bool(part.adding_replicas or part.removing_replicas)


def reassignment_replicas(current: list[int], target: list[int]
                          ) -> tuple[list[int], list[int], list[int]]:
    """(replicas, adding, removing) of a reassignment from `current` to `target`."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return list(target) + removing, adding, removing


def revert(part: PartitionRegistration) -> tuple[list[int], list[int], bool]:
    """(replicas, ISR, unclean) of a partition whose reassignment is cancelled."""
    adding = set(part.adding_replicas)
    replicas = [r for r in part.replicas if r not in adding]
    isr = [r for r in part.isr if r not in adding]
    if isr:
        return replicas, isr, False
    if not replicas:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "Invalid replica assignment: addingReplicas contains all replicas.")
    return replicas, [replicas[0]], True


class _Reassignments:
    """Reassignments against one image; partitions already changed by this request are read
    from `changed`, so the image is not rebuilt per partition."""

    def __init__(self, image: MetadataImage, unclean: Callable[[str], bool], room: int):
        self.image = image
        self.unclean = unclean
        self.room = room
        self.records: list[Message] = []
        self.changed: dict[tuple[bytes, int], PartitionRegistration] = {}

    def alter(self, name: str, partition_id: int, target: list[int] | None) -> None:
        image = self.image
        topic = image.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"Unable to find a topic named {name}.")
        key = (topic.id, partition_id)
        part = self.changed.get(key) or topic.partitions.get(partition_id)
        if part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"Unable to find partition {name}:{partition_id}.")

        def acceptable(replica: int) -> bool:
            return is_active(image, replica)

        if target is None:
            if not in_progress(part):
                # Kafka leaves out a message that only repeats the error's own.
                raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            replicas, isr, unclean = revert(part)
            allowed = self.unclean(name)
            if unclean and not allowed:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Unable to revert partition assignment for {name}:{partition_id} "
                               "because it would require an unclean leader election.")
            record = partition_change(
                topic.id, partition_id, part, acceptable, target_isr=isr,
                target_replicas=replicas, target_adding=[], target_removing=[],
                election=Election.UNCLEAN if allowed else Election.ONLINE)
        else:
            check_manual_assignment(image, list(target), None)
            replicas, adding, removing = reassignment_replicas(list(part.replicas), list(target))
            record = partition_change(topic.id, partition_id, part, acceptable,
                                      target_replicas=replicas, target_adding=adding,
                                      target_removing=removing)
        if record is None:
            return
        if len(self.records) >= self.room:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE)
        self.records.append(record)
        after = self.changed[key] = part.merge(record)
        log.info("%s reassignment of %s-%d: replicas %s -> %s, adding %s, removing %s, "
                 "ISR %s, leader %d", "cancelled" if target is None else "altered", name,
                 partition_id, list(part.replicas), list(after.replicas),
                 list(after.adding_replicas), list(after.removing_replicas), list(after.isr),
                 after.leader)


def alter_partition_reassignments(w: Working, request: m.AlterPartitionReassignmentsRequest,
                                  version: int, *,
                                  unclean: Callable[[str], bool]) -> m.AlterPartitionReassignmentsResponse:
    """Answer an AlterPartitionReassignments; adds its PartitionChangeRecords to `w`.
    `unclean(topic name)` says whether the topic allows unclean leader elections."""
    work = _Reassignments(w.image, unclean, w.room())
    responses: list[m.AlterPartitionReassignmentsResponse.ReassignableTopicResponse] = []
    for t in request.topics:
        out = RA.ReassignableTopicResponse(name=t.name, partitions=[])
        responses.append(out)
        for p in t.partitions:
            res = RA.ReassignablePartitionResponse(partition_index=p.partition_index,
                                                   error_code=0, error_message=None)
            try:
                work.alter(t.name, p.partition_index,
                           None if p.replicas is None else list(p.replicas))
            except KafkaError as exc:
                log.info("Unable to alter the reassignment of %s-%d: %s (%s)", t.name,
                         p.partition_index, ErrorCode(exc.code).name, exc.message)
                res.error_code, res.error_message = exc.code, exc.message
            out.partitions.append(res)
    w.add(work.records)
    return RA(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)


def _ongoing(partition_id: int,
             part: PartitionRegistration) -> m.ListPartitionReassignmentsResponse.OngoingPartitionReassignment:
    return RL.OngoingPartitionReassignment(
        partition_index=partition_id, replicas=list(part.replicas),
        adding_replicas=list(part.adding_replicas),
        removing_replicas=list(part.removing_replicas))


def list_partition_reassignments(image: MetadataImage, request: m.ListPartitionReassignmentsRequest,
                                 version: int) -> m.ListPartitionReassignmentsResponse:
    """Answer a ListPartitionReassignments from `image`."""
    topics: list[m.ListPartitionReassignmentsResponse.OngoingTopicReassignment] = []
    if request.topics is None:
        for name, topic_id in sorted(image.topic_ids.items()):
            parts = [_ongoing(pid, part)
                     for pid, part in sorted(image.topics[topic_id].partitions.items())
                     if in_progress(part)]
            if parts:
                topics.append(RL.OngoingTopicReassignment(name=name, partitions=parts))
    else:
        for t in request.topics:
            topic = image.topic(t.name)
            if topic is None:
                continue
            parts = []
            for pid in t.partition_indexes:
                part = topic.partitions.get(pid)
                if part is not None and in_progress(part):
                    parts.append(_ongoing(pid, part))
            if parts:
                topics.append(RL.OngoingTopicReassignment(name=t.name, partitions=parts))
    return RL(throttle_time_ms=0, error_code=0, error_message=None, topics=topics)


def error_response(api_key: int,
                   request: m.AlterPartitionReassignmentsRequest | m.ListPartitionReassignmentsRequest,
                   code: ErrorCode, message: str | None) -> Message:
    """The whole request failed (Kafka's AlterPartitionReassignmentsRequest /
    ListPartitionReassignmentsRequest.getErrorResponse): the top-level error, and for 45
    every partition listed with it, for 46 every partition listed with empty lists."""
    if api_key == m.ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        assert isinstance(request, m.AlterPartitionReassignmentsRequest)   # the request of 45
        return RA(throttle_time_ms=0, error_code=code, error_message=message, responses=[
            RA.ReassignableTopicResponse(name=t.name, partitions=[
                RA.ReassignablePartitionResponse(partition_index=p.partition_index,
                                                 error_code=code, error_message=message)
                for p in t.partitions])
            for t in request.topics])
    assert isinstance(request, m.ListPartitionReassignmentsRequest)   # the request of 46
    return RL(throttle_time_ms=0, error_code=code, error_message=message, topics=[
        RL.OngoingTopicReassignment(name=t.name, partitions=[
            RL.OngoingPartitionReassignment(partition_index=i, replicas=[], adding_replicas=[],
                                            removing_replicas=[])
            for i in t.partition_indexes])
        for t in request.topics or ()])
