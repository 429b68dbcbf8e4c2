"""A node's data plane: its topics, their partitions, and the jobs that keep logs tidy.

The metadata image decides which topics exist and where their partitions live; MetadataSync
(metadata_sync.py) opens, updates and removes them here to match it, and ReplicaManager makes
each replica lead or follow. Request handlers reach everything through `Broker`.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from core.config import BrokerConfig, TopicConfigs
from core.config.topic import TOPIC_CONFIGS
from core.controller.common import INTERNAL_TOPICS
from core.log import Log, LogConfig, cleaner
from core.protocol.errors import ErrorCode
from core.protocol.dr import producer_id_range
from core.raft.storage import METADATA_PARTITION_DIR

from .fetch_session import FetchSessionCache
from .groups.manager import GroupManager
from .transactions.manager import TxnManager
from .metrics import BrokerMetrics
from .open_connections import OpenConnections
from .partition import Partition
from .producer_ids import ProducerIdAllocator
from .producer_snapshots import delete_snapshots, write_snapshot

if TYPE_CHECKING:
    from .controller_channel import KRaftLink

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^[a-zA-Z0-9._-]+-\d+$")
DELETE_SUFFIX = "-delete"  # Kafka's: <topic>-<partition>.<id>-delete, removed after the rename


@dataclass
class Topic:
    name: str
    topic_id: bytes
    # Indexed by partition; None where another broker hosts it.
    partitions: list[Partition | None]
    configs: TopicConfigs

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def partition(self, index: int) -> Partition | None:
        return self.partitions[index] if 0 <= index < len(self.partitions) else None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: BrokerConfig, *, clock=now_ms, metrics: BrokerMetrics | None = None):
        self.config = config
        self.node_id = config.node_id
        self.clock = clock
        self.cluster_id = ""
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[bytes, Topic] = {}
        self.started_at = 0
        self.connections = OpenConnections()   # open client connections
        self.draining = False           # set at shutdown: finish current requests, take no more
        self.metrics = metrics or BrokerMetrics()
        self.metrics.watch_broker(self)
        # Metadata reconciles and producer-id block requests take turns: each checks, then
        # awaits I/O, and must not interleave with another.
        self.admin_lock = anyio.Lock()
        self.groups = GroupManager(self)
        self.transactions = TxnManager(self)
        # Partitions written since the flush scheduler / producer snapshots last looked at them
        # (Partition.written): those jobs visit these, not every partition.
        self._flush_candidates: set[Partition] = set()
        self._snapshot_candidates: set[Partition] = set()
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                config["min.incremental.fetch.session.eviction.ms"])
        self.producer_ids = ProducerIdAllocator()   # blocks come from the controller
        # The quorum, the controller channel, the sync: set by the node before it serves.
        self.kraft: KRaftLink | None = None

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Before the node serves. Topics come from the metadata log (metadata_sync.py), once it
        has been read; this only marks the start."""
        self.started_at = self.clock()

    def close(self) -> None:
        """Snapshot producer state, flush and close every log; one failure does not keep the
        others from closing. Each log costs a few fsyncs, so with thousands of partitions the
        shutdown is mostly waiting on the disk: num.recovery.threads.per.data.dir threads per
        log dir (Kafka's setting for this) let those waits overlap."""
        partitions = [p for topic in list(self.topics.values()) for p in topic.partitions if p is not None]
        threads = self.config["num.recovery.threads.per.data.dir"] * len(self.config.log_dirs)
        if threads <= 1 or len(partitions) <= 1:
            for p in partitions:
                self._close_partition(p)
            return
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="close-logs") as pool:
            list(pool.map(self._close_partition, partitions))

    @staticmethod
    def _close_partition(p: Partition) -> None:
        try:
            if not p.offline and p.log.log_end_offset != p.snapshot_offset:
                write_snapshot(p.producers, p.log.directory, p.log.log_end_offset)
                if p.snapshot_offset >= 0:
                    delete_snapshots(p.log.directory, below=p.snapshot_offset)
            p.log.close()
        except Exception as exc:  # noqa: BLE001 — keep closing the rest
            log.error("%r: close failed: %s", p, exc)

    # ------------------------------------------------------------------ topics

    def _log_config(self, configs: TopicConfigs) -> LogConfig:
        props = {name: TOPIC_CONFIGS[name].render(value) for name, value in configs.items()}
        return LogConfig.from_properties(props)

    def _partition_dir(self, topic: str, index: int, counts: dict[Path, int] | None = None) -> Path:
        """An existing directory for the partition, else one in the log dir holding the fewest
        partitions, as Kafka places them. `counts` carries those tallies across one batch of
        new partitions so that each placement does not rescan the directories."""
        name = f"{topic}-{index}"
        dirs = self.config.log_dirs
        for d in dirs:
            if (d / name).exists():
                return d / name
        if len(dirs) == 1:
            return dirs[0] / name
        if counts is None:
            counts = {}
        for d in dirs:
            if d not in counts:
                counts[d] = sum(1 for e in os.scandir(d) if e.is_dir() and e.name != METADATA_PARTITION_DIR) \
                    if d.exists() else 0
        chosen = min(dirs, key=lambda d: counts[d])
        counts[chosen] += 1
        return chosen / name

    def _open_partition(self, topic: str, index: int, log_config: LogConfig,
                        counts: dict[Path, int] | None = None) -> Partition:
        plog = Log.open(self._partition_dir(topic, index, counts), log_config, clock=self.clock)
        if getattr(plog, "recovered_truncated_bytes", 0):
            log.warning("%s-%d: recovery truncated %d bytes of torn or corrupt tail",
                        topic, index, plog.recovered_truncated_bytes)
        try:
            producers, snapshot_offset = Partition.load_producer_state(plog)
        except BaseException:
            plog.close()
            raise
        partition = Partition(topic, index, plog, producers)
        partition.own_producer_ids = producer_id_range(self.cluster_id) if self.cluster_id else None
        partition.snapshot_offset = snapshot_offset
        partition.written = self._partition_written
        self._partition_written(partition)   # a first look at each, after opening
        return partition

    def _partition_written(self, partition: Partition) -> None:
        self._flush_candidates.add(partition)
        self._snapshot_candidates.add(partition)

    def _open_partitions(self, topic: str, indexes: range, lc: LogConfig) -> list[Partition]:
        """Open (creating if needed) the given partitions; all or none (worker thread)."""
        opened: list[Partition] = []
        counts: dict[Path, int] = {}
        try:
            for i in indexes:
                opened.append(self._open_partition(topic, i, lc, counts))
        except BaseException:
            for p in opened:
                p.log.close()
            raise
        return opened

    def leader_partition(self, topic: Topic | None, index: int) -> tuple[Partition | None, ErrorCode]:
        """This node's leader replica of a partition, or the error a client gets for it:
        NOT_LEADER_OR_FOLLOWER when the partition exists but another broker leads it (the
        client refreshes its metadata and goes there), else UNKNOWN_TOPIC_OR_PARTITION."""
        p = topic.partition(index) if topic is not None else None
        if p is not None and p.is_leader:
            return p, ErrorCode.NONE
        if topic is not None and 0 <= index < len(topic.partitions):
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        return t.partition(index) if t is not None else None

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts: the controller hands
        out the blocks (AllocateProducerIds), so no two brokers share an id."""
        async with self.admin_lock:
            if self.producer_ids.needs_block():
                assert self.kraft is not None   # the node links the broker before it serves
                start, length = await self.kraft.allocate_producer_ids()
                self.producer_ids.use_block(start, length)
            return self.producer_ids.allocate()

    def auto_create_allowed(self, name: str) -> bool:
        return self.config["auto.create.topics.enable"] and name not in INTERNAL_TOPICS

    # ------------------------------------------------------------------ background jobs

    def all_partitions(self):
        """Every partition with a replica on this node."""
        for topic in list(self.topics.values()):
            for p in topic.partitions:
                if p is not None:
                    yield p

    async def run_flush_scheduler(self) -> None:
        """Every log.flush.scheduler.interval.ms, fsync what is due: flush.ms ages and
        segments that have rolled (Kafka flushes a rolled segment whatever the policy)."""
        interval = self.config["log.flush.scheduler.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            for p in list(self._flush_candidates):
                try:
                    if not p.offline and p.log.flush_pending():
                        await p.flush()
                except Exception as exc:  # noqa: BLE001 — one partition must not stop the node
                    p.fail(exc)
                if p.offline or not p.log.has_flush_work():
                    self._flush_candidates.discard(p)   # back with its next write

    async def run_retention(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            await self.apply_retention()

    async def run_cleaner(self) -> None:
        """Compact partitions of compacted topics when their dirty share calls for it, one at a
        time, every log.cleaner.backoff.ms, as Kafka's cleaner threads do."""
        if not self.config["log.cleaner.enable"]:
            return
        interval = self.config["log.cleaner.backoff.ms"] / 1000
        buffer = self.config["log.cleaner.dedupe.buffer.size"]
        while True:
            await anyio.sleep(interval)
            compacted = [p for t in list(self.topics.values()) if t.configs.get("cleanup.policy") and
                         "compact" in t.configs.get("cleanup.policy") for p in t.partitions if p is not None]
            for p in compacted:
                if p.offline or not p.log.config.compact_enabled or self.draining:
                    continue
                try:
                    if cleaner.needs_cleaning(p.log, self.clock()):
                        result = await p.compact(self.clock(), buffer)
                        if result.cleaned:
                            log.info("%r: compacted %d segments, %d -> %d bytes, %d records removed",
                                     p, result.segments_cleaned, result.bytes_before, result.bytes_after,
                                     result.records_removed)
                except Exception as exc:  # noqa: BLE001 — a cleaner failure must not stop the node
                    log.error("%r: cleaning failed: %s", p, exc)

    async def run_producer_snapshots(self) -> None:
        """Expire idle producers (producer.id.expiration.ms) and snapshot producer state, so
        that a restart after a crash replays at most this interval of batch headers."""
        interval = self.config["producer.snapshot.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            now = self.clock()
            for p in list(self._snapshot_candidates):
                try:
                    p.producers.expire(now, self.config["producer.id.expiration.ms"])
                    # Even an empty state is worth a (tiny) snapshot: it spares the next start
                    # after a crash from scanning the whole log for producers.
                    await p.write_producer_snapshot()
                except Exception as exc:  # noqa: BLE001 — one partition must not stop the node
                    p.fail(exc)
                if p.offline or p.log.closed or (not len(p.producers)
                                                  and p.snapshot_offset == p.log.log_end_offset):
                    # Nothing left to expire or snapshot until the next write.
                    self._snapshot_candidates.discard(p)

    async def apply_retention(self) -> int:
        deleted = 0
        for p in list(self.all_partitions()):
            if p.offline:
                continue
            try:
                deleted += await p.apply_retention()
            except Exception as exc:  # noqa: BLE001 — one partition must not stop the node
                p.fail(exc)
        return deleted
