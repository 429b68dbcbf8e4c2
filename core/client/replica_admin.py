"""Admin operations on partitions' replicas: leader elections and reassignments, as Kafka's
Java Admin does them (electLeaders, alterPartitionReassignments, listPartitionReassignments).

`ReplicaAdmin` is a part of `Admin` (which inherits it), as GroupAdmin is; it uses Admin's
client, timeout and `_per_item` retry core.

Routing: all three go to the controller named by Metadata (in KRaft a broker, which forwards
them to the active controller), like CreateTopics.

Results follow admin.py's convention: a dict from each (topic, partition) to None (success)
or a KafkaError instance. A top-level error code raises KafkaError. Retriable errors (a
moved controller, a timeout) are retried for the partitions concerned until the admin's
timeout; the answers of an election or a reassignment are not, even where Kafka marks the
code retriable: PREFERRED_LEADER_NOT_AVAILABLE means the preferred replica is not in the ISR
now, and asking again at once will not change that (Kafka's Admin does not retry them either).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

from .admin_core import AdminCore
from .errors import UnsupportedVersionError

__all__ = ["ReplicaAdmin", "ElectionType", "PartitionReassignment"]

TopicPartition = tuple[str, int]

ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = (
    m.ApiKey.ELECT_LEADERS, m.ApiKey.ALTER_PARTITION_REASSIGNMENTS, m.ApiKey.LIST_PARTITION_REASSIGNMENTS)

# Per-partition answers that are outcomes, not hiccups: never retried.
_ELECTION_OUTCOMES = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.LEADER_NOT_AVAILABLE})
_REASSIGNMENT_OUTCOMES = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class PartitionReassignment:
    """An ongoing reassignment: `replicas` is the whole current set (adding ones included)."""
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out


def _fill_missing(out: dict, todo: Iterable[TopicPartition], what: str) -> dict:
    for tp in todo:
        out.setdefault(tp, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no {what} result for {tp[0]}-{tp[1]}"))
    return out


class ReplicaAdmin(AdminCore):
    """Mixed into Admin; uses its client, timeout and `_per_item` retry core (AdminCore)."""

    async def elect_leaders(self, election_type: ElectionType | int | str = ElectionType.PREFERRED,
                            partitions: Iterable[TopicPartition] | None = None, *,
                            timeout_ms: int | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Elect the preferred replica (PREFERRED) or, for a partition without a leader, any
        live replica even outside the ISR (UNCLEAN). `partitions` None means every partition;
        the controller then answers only for the partitions where an election happened or
        failed. A partition that already has the leader asked for maps to a KafkaError with
        code ELECTION_NOT_NEEDED (Kafka's ElectionNotNeededException)."""
        if isinstance(election_type, str):
            try:
                election_type = ElectionType[election_type.upper()]
            except KeyError:
                raise ValueError(f"unknown election type {election_type!r} (PREFERRED or UNCLEAN)") from None
        election_type = ElectionType(election_type)
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.ElectLeadersRequest

        async def send(todo: list[TopicPartition] | None) -> dict[TopicPartition, KafkaError | None]:
            conn = await self.client.connection(self.client.controller_node())
            version = conn.version_for(ELECT_LEADERS)
            if version == 0 and election_type != ElectionType.PREFERRED:
                raise UnsupportedVersionError(f"{conn} speaks ElectLeaders v0 only, which has no unclean elections")
            topics = None if todo is None else [R.TopicPartitions(topic=t, partitions=ps)
                                                for t, ps in _by_topic(todo).items()]
            resp = await conn.send(R(election_type=int(election_type), topic_partitions=topics,
                                     timeout_ms=broker_timeout),
                                   api_key=ELECT_LEADERS, version=version,
                                   timeout_ms=self._send_timeout(broker_timeout))
            if version >= 1 and resp.error_code:
                raise KafkaError(resp.error_code, f"elect leaders ({election_type.name})")
            out: dict[TopicPartition, KafkaError | None] = {}
            for r in resp.replica_election_results:
                for p in r.partition_result:
                    out[(r.topic, p.partition_id)] = KafkaError(p.error_code, p.error_message) \
                        if p.error_code else None
            return out

        if partitions is None:
            await self.client.start()
            return await self.client.call(lambda: send(None), timeout_ms=self.timeout_ms)

        async def attempt(todo: dict[TopicPartition, None]):
            out = await send(list(todo))
            return _fill_missing({tp: out[tp] for tp in todo if tp in out}, todo, "election")

        return await self._per_item(dict.fromkeys(partitions), attempt, timeout_ms, final=_ELECTION_OUTCOMES)

    async def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
            timeout_ms: int | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Give each partition a new replica set (the first one is the preferred leader), or
        cancel its ongoing reassignment with None. The controller adds the new replicas,
        waits for them to join the ISR, then removes the ones leaving; success here means the
        reassignment started. Cancelling a partition that is not being reassigned answers
        NO_REASSIGNMENT_IN_PROGRESS."""
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.AlterPartitionReassignmentsRequest

        async def attempt(todo: dict[TopicPartition, Sequence[int] | None]):
            conn = await self.client.connection(self.client.controller_node())
            topics: dict[str, list] = {}
            for (t, p), replicas in todo.items():
                topics.setdefault(t, []).append(R.ReassignablePartition(
                    partition_index=p, replicas=None if replicas is None else [int(b) for b in replicas]))
            resp = await conn.send(R(timeout_ms=broker_timeout,
                                     topics=[R.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()]),
                                   api_key=ALTER_PARTITION_REASSIGNMENTS,
                                   timeout_ms=self._send_timeout(broker_timeout))
            if resp.error_code:
                raise KafkaError(resp.error_code, resp.error_message or "alter partition reassignments")
            out: dict[TopicPartition, KafkaError | None] = {}
            for r in resp.responses:
                for p in r.partitions:
                    tp = (r.name, p.partition_index)
                    if tp in todo:
                        out[tp] = KafkaError(p.error_code, p.error_message) if p.error_code else None
            return _fill_missing(out, todo, "reassignment")

        return await self._per_item(dict(reassignments), attempt, timeout_ms, final=_REASSIGNMENT_OUTCOMES)

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None, *,
                                           timeout_ms: int | None = None
                                           ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (None: in every topic). Partitions that are not
        being reassigned, or do not exist, are left out, as Kafka does."""
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.ListPartitionReassignmentsRequest
        wanted = None if partitions is None else _by_topic(partitions)

        async def once():
            conn = await self.client.connection(self.client.controller_node())
            topics = None if wanted is None else [R.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                                                  for t, ps in wanted.items()]
            resp = await conn.send(R(timeout_ms=broker_timeout, topics=topics),
                                   api_key=LIST_PARTITION_REASSIGNMENTS,
                                   timeout_ms=self._send_timeout(broker_timeout))
            if resp.error_code:
                raise KafkaError(resp.error_code, resp.error_message or "list partition reassignments")
            return {(t.name, p.partition_index): PartitionReassignment(
                        list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                    for t in resp.topics for p in t.partitions}

        await self.client.start()
        return await self.client.call(once, timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms)
