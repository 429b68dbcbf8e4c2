"""Partition leader election: the PartitionChangeRecord that moves a partition to its next
leader, ISR and replica set (Kafka's PartitionChangeBuilder, without ELR and directories).

Election rules (PartitionChangeBuilder.electLeader):

* ONLINE (the normal case): the current leader stays if it is still in the target ISR and an
  acceptable leader; otherwise the first replica, in replica order, that is in the target ISR
  and acceptable. Replica order puts the preferred replica first, so a partition that must
  change leader goes to its preferred replica whenever that one can take it.
* PREFERRED (leader balancing): the first replica if it can lead, else the current leader if
  it still can, else the next replica that can.
* UNCLEAN (the topic's unclean.leader.election.enable): as ONLINE, but when no ISR member can
  lead, the first acceptable replica outside the ISR leads; the ISR becomes just that replica
  and the leader recovery state RECOVERING (KIP-704), since its log may lack acknowledged
  records.
* Nobody can lead: leader -1.

A target ISR that would be empty is not written: the ISR keeps its last member, as Kafka
does without ELR, so that the one replica known to hold every acknowledged record is the one
that becomes leader again when it returns. Since metadata.version 3.6 an ISR shrink does not
bump the leader epoch (KAFKA-15021); only a leader change does (the image does that when it
replays a Leader field). A change that changes nothing yields no record.

"Acceptable" is the caller's predicate; normally an active broker: registered, unfenced and not
in controlled shutdown.

Reassignment (KIP-455, reassignment.py). A partition being reassigned lists the target
replicas first and the replicas it is removing last (Kafka's order), with `adding_replicas`
(target - original) and `removing_replicas` (original - target). Every change, whatever asked
for it (AlterPartition, fencing, unfencing, controlled shutdown, elections, the reassignment
request itself), first completes the reassignment when it can, as Kafka's
completeReassignmentIfNeeded does: once the target ISR without the removing replicas is not
empty and holds *every* replica of the target, the replicas become the target, the ISR drops
the removing replicas, and adding/removing are cleared. The election then runs on that state,
so a leader that was being removed is replaced by the first target replica in the new ISR.
Elections try the replicas outside `removing_replicas` first (Kafka gets the same from the
replica order), so a partition that must change leader never goes to a replica being removed
while a target replica in the ISR can lead; a current leader that still may lead keeps leading
even if it is being removed (as in Kafka: the reassignment moves it when it completes).
Whenever the new replica set lacks a replica of the old one, the leader epoch bumps even if the
leader stays (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded), so that the
removed replicas' fetches are fenced.
"""
from __future__ import annotations

import enum
from typing import Callable, Iterator

from core.protocol import messages as m
from core.protocol.codegen import Message

from .image import NO_LEADER, NO_LEADER_CHANGE, MetadataImage, PartitionRegistration, TopicImage

RECOVERED, RECOVERING = 0, 1

TopicPartition = tuple[TopicImage, int, PartitionRegistration]


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


def is_active(image: MetadataImage, broker_id: int) -> bool:
    reg = image.brokers.get(broker_id)
    return reg is not None and not reg.fenced and not reg.in_controlled_shutdown


def _candidates(replicas: list[int], removing: list[int]) -> list[int]:
    """Replicas in election order: those staying first, those being removed last."""
    if not removing:
        return replicas
    gone = set(removing)
    return [r for r in replicas if r not in gone] + [r for r in replicas if r in gone]


def _elect(part: PartitionRegistration, replicas: list[int], removing: list[int],
           isr: list[int], acceptable: Callable[[int], bool],
           election: Election) -> tuple[int, bool]:
    def can_lead(replica: int) -> bool:
        return replica in isr and acceptable(replica)

    order = _candidates(replicas, removing)
    if election is Election.PREFERRED:
        if order and can_lead(order[0]):
            return order[0], False
        if can_lead(part.leader):
            return part.leader, False
        return next((r for r in order[1:] if can_lead(r)), NO_LEADER), False
    if can_lead(part.leader):
        return part.leader, False
    clean = next((r for r in order if can_lead(r)), None)
    if clean is not None:
        return clean, False
    if election is Election.UNCLEAN:
        unclean = next((r for r in order if acceptable(r)), None)
        if unclean is not None:
            return unclean, True
    return NO_LEADER, False


def completed_reassignment(replicas: list[int], adding: list[int], removing: list[int],
                           isr: list[int]) -> tuple[list[int], list[int]] | None:
    """(replicas, ISR) once a reassignment in progress can complete under `isr`, else None
    (Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment)."""
    if not adding and not removing:
        return None
    new_isr, new_replicas = list(isr), list(replicas)
    if removing:
        gone = set(removing)
        new_isr = [r for r in isr if r not in gone]
        new_replicas = [r for r in replicas if r not in gone]
        if not new_isr or not new_replicas:
            return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def partition_change(topic_id: bytes, partition_id: int, part: PartitionRegistration,
                     acceptable: Callable[[int], bool], *, target_isr: list[int] | None = None,
                     election: Election = Election.ONLINE,
                     target_recovery_state: int | None = None,
                     target_replicas: list[int] | None = None,
                     target_adding: list[int] | None = None,
                     target_removing: list[int] | None = None) -> m.PartitionChangeRecord | None:
    """The PartitionChangeRecord that takes `part` to `target_isr`, `target_replicas`,
    `target_adding`, `target_removing` (each default: unchanged), completes a reassignment in
    progress if that state allows it, elects a leader, and sets `target_recovery_state`
    (default: unchanged, or RECOVERING after an unclean election); None when nothing changes."""
    isr = list(part.isr) if target_isr is None else list(target_isr)
    replicas = list(part.replicas) if target_replicas is None else list(target_replicas)
    adding = list(part.adding_replicas) if target_adding is None else list(target_adding)
    removing = list(part.removing_replicas) if target_removing is None else list(target_removing)
    completed = completed_reassignment(replicas, adding, removing, isr)
    if completed is not None:
        replicas, isr = completed
        adding, removing = [], []
    record = m.PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    leader, unclean = _elect(part, replicas, removing, isr, acceptable, election)
    if leader != part.leader:
        record.leader = leader
        if unclean:
            record.isr = [leader]
            if part.leader_recovery_state != RECOVERING:
                record.leader_recovery_state = RECOVERING
    elif not set(part.replicas) <= set(replicas):
        # Replicas leave: bump the leader epoch so that they are fenced.
        record.leader = part.leader
    if record.isr is None and isr and isr != list(part.isr):
        record.isr = isr
    if replicas and replicas != list(part.replicas):
        record.replicas = replicas
    if removing != list(part.removing_replicas):
        record.removing_replicas = removing
    if adding != list(part.adding_replicas):
        record.adding_replicas = adding
    if target_recovery_state is not None and target_recovery_state != part.leader_recovery_state:
        record.leader_recovery_state = target_recovery_state
    if (record.isr is None and record.leader == NO_LEADER_CHANGE
            and record.leader_recovery_state == -1 and record.replicas is None
            and record.removing_replicas is None and record.adding_replicas is None):
        return None
    return record


def leader_and_isr_updates(image: MetadataImage, partitions: Iterator[TopicPartition], *,
                           remove: int = NO_LEADER, add: int = NO_LEADER,
                           unclean: Callable[[str], bool]) -> list[Message]:
    """Kafka's generateLeaderAndIsrUpdates: take `remove` out of each partition's ISR and
    leadership, count `add` as an acceptable leader even if the image does not say so yet,
    and re-elect where needed. `unclean(topic name)` says whether the topic allows unclean
    elections."""
    def acceptable(replica: int) -> bool:
        return replica != remove and (replica == add or is_active(image, replica))

    records: list[Message] = []
    allowed: dict[str, bool] = {}
    for topic, partition_id, part in partitions:
        if topic.name not in allowed:
            allowed[topic.name] = unclean(topic.name)
        election = Election.UNCLEAN if allowed[topic.name] else Election.ONLINE
        target = [r for r in part.isr if r != remove]
        record = partition_change(topic.id, partition_id, part, acceptable, target_isr=target,
                                  election=election)
        if record is not None:
            records.append(record)
    return records


def all_partitions(image: MetadataImage) -> Iterator[TopicPartition]:
    for topic in image.topics.values():
        for partition_id, part in topic.partitions.items():
            yield topic, partition_id, part


def leaderless(image: MetadataImage) -> Iterator[TopicPartition]:
    return ((t, p, part) for t, p, part in all_partitions(image) if part.leader == NO_LEADER)


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(part.leader == broker_id for _, _, part in all_partitions(image))


def preferred_leader_changes(image: MetadataImage, limit: int) -> list[Message]:
    """Up to `limit` elections that hand partitions back to their preferred replica (Kafka's
    maybeBalancePartitionLeaders)."""
    records: list[Message] = []
    for topic, partition_id, part in all_partitions(image):
        if len(records) >= limit:
            break
        if part.replicas and part.leader != part.replicas[0]:
            record = partition_change(topic.id, partition_id, part,
                                      lambda r: is_active(image, r), election=Election.PREFERRED)
            if record is not None:
                records.append(record)
    return records


def unclean_elections(image: MetadataImage, limit: int,
                      unclean: Callable[[str], bool]) -> list[Message]:
    """Up to `limit` unclean elections for leaderless partitions of topics that allow them
    (Kafka's maybeElectUncleanLeaders)."""
    records: list[Message] = []
    allowed: dict[str, bool] = {}
    for topic, partition_id, part in leaderless(image):
        if len(records) >= limit:
            break
        if topic.name not in allowed:
            allowed[topic.name] = unclean(topic.name)
        if allowed[topic.name]:
            record = partition_change(topic.id, partition_id, part,
                                      lambda r: is_active(image, r), election=Election.UNCLEAN)
            if record is not None:
                records.append(record)
    return records
