"""A node's data plane: its topics, their partitions, and the jobs that keep logs tidy.

For now a node is a whole single-node cluster: it owns every partition, leads it, and keeps
its topic catalog locally (catalog.py). Request handlers reach everything through `Broker`.
"""
from __future__ import annotations

import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from core.config import BrokerConfig, ConfigError, TopicConfigs
from core.config.topic import TOPIC_CONFIGS
from core.log import Log, LogConfig
from core.protocol.errors import ErrorCode

from .catalog import Catalog, TopicRecord, ensure_meta
from .metrics import BrokerMetrics
from .partition import Partition

log = logging.getLogger(__name__)

MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_PARTITIONS = 100_000


class BrokerError(Exception):
    """A request-level failure with the Kafka error code to answer with."""

    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def validate_topic_name(name: str) -> None:
    if not name:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'")


@dataclass
class Topic:
    name: str
    topic_id: bytes
    partitions: list[Partition]
    configs: TopicConfigs

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")

    def partition(self, index: int) -> Partition | None:
        return self.partitions[index] if 0 <= index < len(self.partitions) else None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: BrokerConfig, *, clock=now_ms):
        self.config = config
        self.node_id = config.node_id
        self.clock = clock
        self.cluster_id = ""
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[bytes, Topic] = {}
        self.catalog: Catalog | None = None
        self.started_at = 0
        self.connections: set = set()   # open client connections (connection.Connection)
        self.draining = False           # set at shutdown: finish current requests, take no more
        self.metrics = BrokerMetrics()
        self.metrics.watch_broker(self)

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Check storage identity, then open (and recover) every partition log."""
        dirs = self.config.log_dirs
        self.cluster_id = ensure_meta(dirs, self.node_id, self.config["cluster.id"])
        self.catalog = Catalog(dirs[0])
        t0 = time.monotonic()
        for rec in self.catalog.topics.values():
            self._open_topic(rec)
        self.started_at = self.clock()
        log.info("opened %d topics in %.2fs", len(self.topics), time.monotonic() - t0)

    def close(self) -> None:
        for topic in self.topics.values():
            for p in topic.partitions:
                p.log.close()

    # ------------------------------------------------------------------ topics

    def _log_config(self, configs: TopicConfigs) -> LogConfig:
        props = {name: TOPIC_CONFIGS[name].render(value) for name, value in configs.items()}
        return LogConfig.from_properties(props)

    def _partition_dir(self, topic: str, index: int) -> Path:
        name = f"{topic}-{index}"
        for d in self.config.log_dirs:
            if (d / name).exists():
                return d / name
        # New partitions go to the directory holding the fewest, as Kafka places them.
        counts = {d: sum(1 for e in os.scandir(d) if e.is_dir()) if d.exists() else 0
                  for d in self.config.log_dirs}
        return min(self.config.log_dirs, key=lambda d: counts[d]) / name

    def _open_partition(self, topic: str, index: int, log_config: LogConfig) -> Partition:
        plog = Log.open(self._partition_dir(topic, index), log_config, clock=self.clock)
        if getattr(plog, "recovered_truncated_bytes", 0):
            log.warning("%s-%d: recovery truncated %d bytes of torn or corrupt tail",
                        topic, index, plog.recovered_truncated_bytes)
        return Partition(topic, index, plog)

    def _open_topic(self, rec: TopicRecord) -> Topic:
        configs = TopicConfigs(TopicConfigs.validate(rec.configs), self.config.topic_defaults())
        lc = self._log_config(configs)
        parts = [self._open_partition(rec.name, i, lc) for i in range(rec.partitions)]
        topic = Topic(rec.name, rec.topic_id, parts, configs)
        self.topics[rec.name] = topic
        self.topics_by_id[rec.topic_id] = topic
        return topic

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        return t.partition(index) if t is not None else None

    def check_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                        configs: dict[str, str | None]) -> tuple[int, int, dict[str, Any]]:
        """Validate a topic creation; returns the resolved (partitions, rf, overrides)."""
        validate_topic_name(name)
        if name in self.topics:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        collides = name.replace(".", "_")
        for other in self.topics:
            if other.replace(".", "_") == collides:
                raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                  f"topic {name!r} collides with existing topic {other!r} ('.' and '_' collide)")
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be 1..{MAX_PARTITIONS}")
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if replication_factor <= 0:
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0")
        if replication_factor > 1:
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"replication factor {replication_factor} is larger than the 1 available broker")
        try:
            overrides = TopicConfigs.validate(configs)
        except ConfigError as exc:
            raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return num_partitions, replication_factor, overrides

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str | None] | None = None) -> Topic:
        num_partitions, _, overrides = self.check_new_topic(name, num_partitions, replication_factor,
                                                            configs or {})
        rendered = {k: TOPIC_CONFIGS[k].render(v) for k, v in overrides.items()}
        rec = TopicRecord(name, uuid.uuid4().bytes, num_partitions, rendered)
        self.catalog.topics[name] = rec
        self.catalog.save()
        topic = self._open_topic(rec)
        log.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    async def delete_topic(self, name: str) -> None:
        """Forget the topic first (a crash cannot bring it back), then remove its files in a
        worker thread: gigabytes of segments must not stall the event loop."""
        topic = self.topics.pop(name)
        self.topics_by_id.pop(topic.topic_id, None)
        self.catalog.topics.pop(name, None)
        self.catalog.save()
        for p in topic.partitions:
            p.wake_waiters()
        for p in topic.partitions:
            await anyio.to_thread.run_sync(p.log.delete)
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count <= current:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"topic has {current} partitions; the new count must be larger, not {count}")
        if count > MAX_PARTITIONS:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at most {MAX_PARTITIONS}")
        if validate_only:
            return
        lc = self._log_config(topic.configs)
        for i in range(current, count):
            topic.partitions.append(self._open_partition(name, i, lc))
        self.catalog.topics[name].partitions = count
        self.catalog.save()

    def set_topic_configs(self, name: str, overrides: dict[str, Any]) -> None:
        """Replace a topic's overrides (already validated) and apply them to its logs."""
        topic = self.topics[name]
        topic.configs = TopicConfigs(overrides, self.config.topic_defaults())
        self.catalog.topics[name].configs = topic.configs.rendered_overrides()
        self.catalog.save()
        lc = self._log_config(topic.configs)
        for p in topic.partitions:
            p.update_config(lc)

    def auto_create_allowed(self, name: str) -> bool:
        return self.config["auto.create.topics.enable"] and not name.startswith("__")

    # ------------------------------------------------------------------ background jobs

    def all_partitions(self):
        for topic in list(self.topics.values()):
            yield from topic.partitions

    async def run_flush_scheduler(self) -> None:
        """Apply flush.ms: Kafka checks it every log.flush.scheduler.interval.ms."""
        interval = self.config["log.flush.scheduler.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            for p in list(self.all_partitions()):
                if p.flush_policy_active or p.log.flush_due():
                    try:
                        await p.flush()
                    except OSError as exc:
                        log.error("%r: flush failed: %s", p, exc)

    async def run_retention(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            await self.apply_retention()

    async def apply_retention(self) -> int:
        deleted = 0
        for p in list(self.all_partitions()):
            try:
                deleted += await p.apply_retention()
            except OSError as exc:
                log.error("%r: retention failed: %s", p, exc)
        return deleted
