"""Prometheus metrics of a node, served over HTTP on `metrics.port`.

Counters are bumped once per request or per partition of a request, never per record: the
record count comes from batch headers. Partition gauges (offsets, sizes) are read only when
Prometheus scrapes, by a collector, so the hot path pays nothing for them.
"""
from __future__ import annotations

import logging
import os

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from core.metrics_http import serve_http

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("seaway_requests", "Requests handled, by API (Kafka: RequestMetrics "
                                "RequestsPerSec)", ["api"], registry=r)
        self.request_seconds = Histogram("seaway_request_duration_seconds", "Time from a request's arrival "
                                         "to its response being queued, by API (Kafka: RequestMetrics "
                                         "TotalTimeMs)", ["api"],
                                         buckets=_LATENCY_BUCKETS, registry=r)
        self.partition_errors = Counter("seaway_partition_errors", "Partition-level error codes answered, "
                                        "by API and error", ["api", "error"], registry=r)
        self.bad_requests = Counter("seaway_bad_requests", "Connections closed for bad input, by reason",
                                    ["reason"], registry=r)
        self.authentications = Counter("seaway_authentications", "SASL authentications and "
                                       "re-authentications (KIP-368), by listener and result (Kafka: "
                                       "successful-authentication-total and its kin)", ["listener", "result"],
                                       registry=r)
        self.bytes_in = Counter("seaway_bytes_in", "Record batch bytes appended, by topic (Kafka: "
                                "BytesInPerSec)", ["topic"], registry=r)
        self.records_in = Counter("seaway_records_in", "Records appended, by topic", ["topic"], registry=r)
        self.bytes_out = Counter("seaway_bytes_out", "Record batch bytes served by Fetch, by topic "
                                 "(Kafka: BytesOutPerSec)", ["topic"],
                                 registry=r)
        self.connections = Gauge("seaway_connections", "Open client connections", registry=r)
        self.isr_shrinks = Counter("seaway_isr_shrinks", "ISR shrinks committed for partitions this broker "
                                   "leads (Kafka: IsrShrinksPerSec)", registry=r)
        self.unclean_leaderships = Counter("seaway_unclean_leaderships", "Leaderships this broker took "
                                           "after an unclean election", registry=r)
        self.records_lost = Counter("seaway_records_lost", "Offsets below the high watermark a replica "
                                    "dropped after an unclean election", registry=r)
        self.isr_expands = Counter("seaway_isr_expands", "ISR expansions committed for partitions this "
                                   "broker leads (Kafka: IsrExpandsPerSec)", registry=r)
        self._request_children: dict[str, tuple] = {}

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go with it (Kafka removes a topic's metrics on deletion):
        topics created and deleted for months must not grow every scrape and the heap."""
        for family in (self.bytes_in, self.records_in, self.bytes_out):
            try:
                family.remove(name)
            except KeyError:   # never written to or read from here
                pass

    def for_api(self, api: str):
        """(requests counter, latency histogram) children, cached: labels() is not free."""
        children = self._request_children.get(api)
        if children is None:
            children = self._request_children[api] = (self.requests.labels(api), self.request_seconds.labels(api))
        return children

    def watch_broker(self, broker) -> None:
        self.registry.register(_PartitionCollector(broker))
        self.registry.register(_GroupCollector(broker))
        self.registry.register(_ReplicationCollector(broker))
        self.registry.register(_FetchSessionCollector(broker))

    def watch_quorum(self, quorum, controller=None) -> None:
        """KRaft gauges of a node in the metadata quorum; `controller` is the QuorumController
        of a node with the controller role (None on a broker-only node)."""
        self.registry.register(_QuorumCollector(quorum, controller))

    def serve(self, port: int, host: str = "0.0.0.0", health: Callable[[], tuple[bool, str]] | None = None) -> int:
        """Start the /metrics HTTP endpoint in a daemon thread; returns the bound port. With
        `health`, GET /health answers 200 or 503 with its one-line reason: what a container
        healthcheck asks (a probe that costs no Python start)."""
        return serve_http(self.registry, port, host, health)


class _PartitionCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        leo = GaugeMetricFamily("seaway_partition_log_end_offset", "Next offset to be written",
                                labels=["topic", "partition"])
        start = GaugeMetricFamily("seaway_partition_log_start_offset", "First offset still stored",
                                  labels=["topic", "partition"])
        hw = GaugeMetricFamily("seaway_partition_high_watermark", "Offset up to which records are committed",
                               labels=["topic", "partition"])
        size = GaugeMetricFamily("seaway_partition_size_bytes", "Bytes of segment files (Kafka: Log Size)",
                                 labels=["topic", "partition"])
        for topic in list(self.broker.topics.values()):
            for p in [p for p in topic.partitions if p is not None]:
                labels = [topic.name, str(p.index)]
                leo.add_metric(labels, p.log.log_end_offset)
                start.add_metric(labels, p.log_start_offset)
                hw.add_metric(labels, p.high_watermark)
                size.add_metric(labels, p.log.size_bytes)
        yield from (leo, start, hw, size)
        # The file systems under log.dirs: what capacity planning divides the growth into.
        free = GaugeMetricFamily("seaway_log_dir_free_bytes", "Bytes free to this node on the file system "
                                 "of each log directory", labels=["dir"])
        total = GaugeMetricFamily("seaway_log_dir_total_bytes", "Size of the file system of each log "
                                  "directory", labels=["dir"])
        for path in self.broker.config.log_dirs:
            try:
                st = os.statvfs(path)
            except OSError:
                continue
            free.add_metric([str(path)], st.f_bavail * st.f_frsize)
            total.add_metric([str(path)], st.f_blocks * st.f_frsize)
        yield from (free, total)


class _FetchSessionCollector:
    """Kafka's FetchSessionCache metrics (NumIncrementalFetchSessions,
    NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictionsPerSec)."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        cache = self.broker.fetch_sessions
        yield GaugeMetricFamily("seaway_fetch_sessions", "Incremental fetch sessions (KIP-227) this broker "
                                "holds", value=len(cache))
        yield GaugeMetricFamily("seaway_fetch_session_partitions", "Partitions held by all fetch sessions",
                                value=cache.partitions)
        yield CounterMetricFamily("seaway_fetch_session_evictions", "Fetch sessions evicted to make room "
                                  "for new ones", value=cache.evictions)


class _ReplicationCollector:
    """Kafka's ReplicaManager gauges (UnderReplicatedPartitions, UnderMinIsrPartitionCount,
    LeaderCount) and each follower's lag behind the leader (leader log end minus the
    follower's fetch offset). OfflinePartitionsCount comes from the metadata image, so
    _QuorumCollector reports it, on controllers as well as brokers."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        under = GaugeMetricFamily("seaway_under_replicated_partitions",
                                  "Partitions this broker leads whose ISR lacks some replica "
                                  "(Kafka: UnderReplicatedPartitions)")
        under_min = GaugeMetricFamily("seaway_under_min_isr_partitions",
                                      "Partitions this broker leads whose ISR is below "
                                      "min.insync.replicas (Kafka: UnderMinIsrPartitionCount)")
        at_min = GaugeMetricFamily("seaway_at_min_isr_partitions",
                                   "Partitions this broker leads whose ISR is exactly min.insync.replicas: "
                                   "one more failure refuses acks=all (Kafka: AtMinIsrPartitionCount)")
        leaders = GaugeMetricFamily("seaway_leader_partitions", "Partitions this broker leads "
                                    "(Kafka: LeaderCount)")
        replicas = GaugeMetricFamily("seaway_replica_partitions", "Partitions with a replica on this broker, "
                                     "leader or follower (Kafka: PartitionCount)")
        lag = GaugeMetricFamily("seaway_follower_lag", "Offsets a follower is behind this leader (Kafka "
                                "reports it on the follower: FetcherLagMetrics ConsumerLag)",
                                labels=["topic", "partition", "follower"])
        counts = [0, 0, 0, 0, 0]
        for p in list(self.broker.all_partitions()):
            replica = p.replica
            if replica is None:
                continue
            counts[4] += 1
            if replica.leader is None:
                continue
            counts[0] += 1
            counts[1] += replica.under_replicated
            counts[2] += replica.under_min_isr
            counts[3] += replica.at_min_isr
            end = replica.log_end_offset
            for progress in replica.leader.remotes.values():
                if progress.log_end_offset >= 0:
                    lag.add_metric([p.topic, str(p.index), str(progress.replica_id)],
                                   max(end - progress.log_end_offset, 0))
        leaders.add_metric([], counts[0])
        under.add_metric([], counts[1])
        under_min.add_metric([], counts[2])
        at_min.add_metric([], counts[3])
        replicas.add_metric([], counts[4])
        yield from (leaders, replicas, under, under_min, at_min, lag)


class _QuorumCollector:
    """What a KRaft node knows of the quorum and the metadata image, read at scrape time.

    Every KRaft node (voter or observer) reports the epoch and leader of the metadata quorum
    (Kafka's raft-metrics current-epoch and current-leader) and OfflinePartitionsCount from
    its committed image. A node with the controller role also reports ActiveControllerCount
    (1 only once its controller has taken over, not merely when Raft elected it) and, as
    Kafka's controllers do, the broker counts as its committed image has them. Images are
    replaced whole, never changed in place, so reading one from the HTTP thread is safe.
    """

    def __init__(self, quorum, controller=None):
        self.quorum = quorum
        self.controller = controller

    def collect(self):
        leader = self.quorum.driver.leader
        epoch = GaugeMetricFamily("seaway_controller_epoch", "Epoch of the metadata quorum as this node "
                                  "knows it: the active controller's KRaft leader epoch (Kafka: "
                                  "raft-metrics current-epoch)")
        epoch.add_metric([], leader.leader_epoch)
        current = GaugeMetricFamily("seaway_controller_leader", "Node id of the quorum leader as this node "
                                    "knows it, -1 while unknown (Kafka: raft-metrics current-leader)")
        current.add_metric([], leader.leader_id)
        config = self.quorum.config
        info = GaugeMetricFamily("seaway_node_info", "1, labelled with this node's id, roles and rack: what "
                                 "a console joins the node's other series on", labels=["node_id", "roles", "rack"])
        info.add_metric([str(config.node_id), ",".join(sorted(config.roles)), config["broker.rack"] or ""], 1)
        applied = GaugeMetricFamily("seaway_metadata_applied_offset", "Offset after the last metadata record "
                                    "this node applied; behind its quorum's highest, it lags (Kafka: "
                                    "last-applied-record-offset)")
        applied.add_metric([], self.quorum.loader.next_offset)
        yield from (info, applied)
        image = self.quorum.loader.image
        offline = GaugeMetricFamily("seaway_offline_partitions", "Partitions without a leader in the "
                                    "committed metadata image (Kafka: KafkaController OfflinePartitionsCount)")
        offline.add_metric([], sum(1 for t in image.topics.values()
                                   for reg in t.partitions.values() if reg.leader < 0))
        yield from (epoch, current, offline)
        if self.controller is None:
            return
        active = GaugeMetricFamily("seaway_active_controller", "1 on the active controller, 0 on the "
                                   "other controllers (Kafka: KafkaController ActiveControllerCount)")
        active.add_metric([], 1 if self.controller.is_active else 0)
        brokers = list(image.brokers.values())
        fenced = GaugeMetricFamily("seaway_fenced_brokers", "Registered brokers that are fenced, as this "
                                   "controller's committed image has them (Kafka: KafkaController "
                                   "FencedBrokerCount)")
        fenced.add_metric([], sum(1 for b in brokers if b.fenced))
        unfenced = GaugeMetricFamily("seaway_active_brokers", "Registered brokers that are not fenced, as "
                                     "this controller's committed image has them (Kafka: KafkaController "
                                     "ActiveBrokerCount)")
        unfenced.add_metric([], sum(1 for b in brokers if not b.fenced))
        yield from (active, fenced, unfenced)


class _GroupCollector:
    """Groups by state, members per group, and each committed offset with its lag (log end
    minus committed offset), read at scrape time like the partition gauges."""

    STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable")

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        by_state = GaugeMetricFamily("seaway_groups", "Consumer groups, by state", labels=["state"])
        members = GaugeMetricFamily("seaway_group_members", "Members of each group", labels=["group"])
        committed = GaugeMetricFamily("seaway_group_committed_offset", "Committed offset",
                                      labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("seaway_group_lag", "Records between the committed offset and the log end",
                                labels=["group", "topic", "partition"])
        manager = getattr(self.broker, "groups", None)
        if manager is not None:
            counts = dict.fromkeys(self.STATES, 0)
            for gid, group in list(manager.coordinator.groups.items()):
                counts[group.state.value] = counts.get(group.state.value, 0) + 1
                members.add_metric([gid], len(group.members))
            for state, n in counts.items():
                by_state.add_metric([state], n)
            for gid in manager.offsets.groups():
                for (topic, index), c in manager.offsets.all(gid).items():
                    labels = [gid, topic, str(index)]
                    committed.add_metric(labels, c.offset)
                    partition = self.broker.partition(topic, index)
                    if partition is not None:
                        lag.add_metric(labels, max(partition.high_watermark - c.offset, 0))
        yield from (by_state, members, committed, lag)
