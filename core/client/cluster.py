"""The client's view of a cluster, built from Metadata responses.

Pure data: no I/O here. `ClusterView.apply` folds one MetadataResponse in; everything else
answers questions the producer, consumer and admin ask (who leads this partition, how many
partitions has this topic, what is its topic id).

A response to a request for *all* topics replaces the topic map (topics that disappeared are
gone); a response for some topics only updates those. A topic the broker answered with an
error is kept, with the error and no partitions, so callers can tell "unknown topic" from
"not asked yet".
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from core.protocol.errors import ErrorCode

__all__ = ["BrokerInfo", "PartitionInfo", "TopicInfo", "ClusterView", "NO_TOPIC_ID"]

NO_TOPIC_ID = bytes(16)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int               # -1 while no leader is known
    leader_epoch: int         # -1 if the broker does not say (Metadata < v7)
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes | None    # None before Metadata v10 or when the broker has none
    is_internal: bool
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error: int = 0
    # Partitions with no leader, counted once per Metadata answer: "is the topic ready" is
    # asked before every fetch of every partition, and must not walk them all each time.
    leaderless: int = 0


class ClusterView:
    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_names_by_id: dict[bytes, str] = {}
        self.updated_at: float = 0.0  # time.monotonic() of the last apply; 0 = never

    def apply(self, response, all_topics: bool) -> None:
        """Fold a MetadataResponse in. `all_topics`: the request asked for every topic."""
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack)
                        for b in response.brokers}
        topics = {} if all_topics else self.topics
        for t in response.topics:
            if t.name is None:  # v12+ lookups by id only; we always ask by name
                continue
            topic_id = t.topic_id if t.topic_id and t.topic_id != NO_TOPIC_ID else None
            info = TopicInfo(t.name, topic_id, t.is_internal, error=t.error_code)
            for p in t.partitions:
                info.partitions[p.partition_index] = PartitionInfo(
                    t.name, p.partition_index, p.leader_id, p.leader_epoch,
                    list(p.replica_nodes), list(p.isr_nodes), list(p.offline_replicas), p.error_code)
            info.leaderless = sum(1 for p in info.partitions.values() if p.leader < 0)
            topics[t.name] = info
        self.topics = topics
        self.topic_names_by_id = {t.topic_id: name for name, t in topics.items() if t.topic_id}
        self.updated_at = time.monotonic()

    # ------------------------------------------------------------------ queries

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def partitions_for(self, topic: str) -> list[int] | None:
        """Partition ids of a known topic, sorted; None if the topic is unknown."""
        info = self.topics.get(topic)
        if info is None or (info.error and not info.partitions):
            return None
        return sorted(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions that have a leader right now."""
        info = self.topics.get(topic)
        if info is None:
            return []
        return [p for p, pi in sorted(info.partitions.items()) if pi.leader >= 0]

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(partition)

    def leader_for(self, topic: str, partition: int) -> int | None:
        """The leader's node id, or None when unknown or leaderless."""
        p = self.partition(topic, partition)
        if p is None or p.leader < 0:
            return None
        return p.leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        p = self.partition(topic, partition)
        return -1 if p is None else p.leader_epoch

    def topic_id(self, topic: str) -> bytes | None:
        info = self.topics.get(topic)
        return None if info is None else info.topic_id

    def topic_error(self, topic: str) -> ErrorCode | int:
        info = self.topics.get(topic)
        return ErrorCode.NONE if info is None else info.error

    def age_ms(self) -> float:
        if not self.updated_at:
            return float("inf")
        return (time.monotonic() - self.updated_at) * 1000
