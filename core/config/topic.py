"""Topic-level settings and how they resolve: topic override, else broker default.

Each topic setting names its broker synonym (`log.retention.ms` for `retention.ms`), as
Kafka's LogConfig does, so DescribeConfigs can report where a value came from.
"""
from __future__ import annotations

from typing import Any

import re

from core.protocol.dr import DR_EPOCH, FENCED, REPLICA_OF, UNPLANNED_FROM

from .defs import LONG_MAX, ConfigDef, ConfigError, ConfigType

_T = ConfigType

TOPIC_CONFIG_LIST = [
    ConfigDef("cleanup.policy", _T.LIST, ["delete"], "delete or compact old segments, or both",
              choices=("delete", "compact"), synonym="log.cleanup.policy"),
    ConfigDef("compression.type", _T.STRING, "producer", "codec the broker stores batches with",
              choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
              synonym="compression.type"),
    ConfigDef("delete.retention.ms", _T.LONG, 86_400_000, "how long tombstones are kept on compacted topics",
              minimum=0, synonym="log.cleaner.delete.retention.ms"),
    ConfigDef("file.delete.delay.ms", _T.LONG, 60_000, "delay before a deleted segment's files are removed",
              minimum=0, synonym="log.segment.delete.delay.ms"),
    ConfigDef("flush.messages", _T.LONG, LONG_MAX, "fsync after this many records are unflushed",
              minimum=1, synonym="log.flush.interval.messages"),
    ConfigDef("flush.ms", _T.LONG, LONG_MAX, "fsync when the oldest unflushed record is this old",
              minimum=0, synonym="log.flush.interval.ms"),
    ConfigDef("index.interval.bytes", _T.INT, 4096, "bytes of log between offset index entries",
              minimum=0, synonym="log.index.interval.bytes"),
    ConfigDef("max.message.bytes", _T.INT, 1_048_588, "largest record batch the topic accepts",
              minimum=0, synonym="message.max.bytes"),
    ConfigDef("message.timestamp.type", _T.STRING, "CreateTime", "CreateTime or LogAppendTime",
              choices=("CreateTime", "LogAppendTime"), synonym="log.message.timestamp.type"),
    ConfigDef("min.insync.replicas", _T.INT, 1, "replicas that must have a write for acks=all",
              minimum=1, synonym="min.insync.replicas"),
    ConfigDef("retention.bytes", _T.LONG, -1, "partition size above which old segments are deleted (-1: none)",
              synonym="log.retention.bytes"),
    ConfigDef("retention.ms", _T.LONG, 604_800_000, "age after which segments are deleted (-1: never)",
              minimum=-1, synonym="log.retention.ms"),
    ConfigDef("segment.bytes", _T.INT, 1_073_741_824, "segment file size at which the log rolls",
              minimum=14, synonym="log.segment.bytes"),
    ConfigDef("segment.index.bytes", _T.INT, 10_485_760, "maximum size of a segment's offset index",
              minimum=4, synonym="log.index.size.max.bytes"),
    ConfigDef("segment.ms", _T.LONG, 604_800_000, "age at which the active segment rolls",
              minimum=1, synonym="log.roll.ms"),
    ConfigDef("segment.jitter.ms", _T.LONG, 0, "random jitter subtracted from segment.ms",
              minimum=0, synonym="log.roll.jitter.ms"),
    ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, False,
              "allow an out-of-sync replica to become leader (may lose data)",
              synonym="unclean.leader.election.enable"),
    ConfigDef("min.cleanable.dirty.ratio", _T.DOUBLE, 0.5, "dirty share of a log that triggers compaction",
              minimum=0, maximum=1, synonym="log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", _T.LONG, 0, "minimum age before a record can be compacted",
              minimum=0, synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", _T.LONG, LONG_MAX, "maximum age before a record must be compacted",
              minimum=1, synonym="log.cleaner.max.compaction.lag.ms"),
    ConfigDef("message.timestamp.before.max.ms", _T.LONG, LONG_MAX,
              "how far a record's timestamp may lie in the past", minimum=0,
              synonym="log.message.timestamp.before.max.ms"),
    ConfigDef("message.timestamp.after.max.ms", _T.LONG, LONG_MAX,
              "how far a record's timestamp may lie in the future", minimum=0,
              synonym="log.message.timestamp.after.max.ms"),
    ConfigDef("preallocate", _T.BOOLEAN, False, "preallocate segment files", synonym="log.preallocate"),
    ConfigDef("leader.replication.throttled.replicas", _T.LIST, [],
              "replicas (PARTITION:BROKER, or *) whose replication is throttled on the leader side "
              "(leader.replication.throttled.rate)", validator=lambda v: _check_throttled(
                  "leader.replication.throttled.replicas", v)),
    ConfigDef("follower.replication.throttled.replicas", _T.LIST, [],
              "replicas (PARTITION:BROKER, or *) whose replication is throttled on the follower side "
              "(follower.replication.throttled.rate)", validator=lambda v: _check_throttled(
                  "follower.replication.throttled.replicas", v)),
    # Seaway's DR roles (core/protocol/dr.py): no broker-wide default, a topic's own only.
    ConfigDef(REPLICA_OF, _T.STRING, "",
              "the cluster whose mirror alone may write this topic, a read-only DR replica "
              "(empty: writable)", validator=lambda v: _check_cluster_name(REPLICA_OF, v)),
    ConfigDef(DR_EPOCH, _T.LONG, 0, "the DR epoch of the last role change (only grows)",
              minimum=0),
    ConfigDef(UNPLANNED_FROM, _T.STRING, "",
              "the cluster an unplanned failover promoted this topic away from: producers that "
              "came from it may skip the sequences stranded there (empty: none may)",
              validator=lambda v: _check_cluster_name(UNPLANNED_FROM, v, fenced=False)),
]


def _check_throttled(name: str, items: list[str]) -> None:
    if items == ["*"]:
        return
    for item in items:
        partition, _, broker = item.partition(":")
        if not (partition.isdigit() and broker.isdigit()):
            raise ConfigError(f"{name}: {item!r} is not PARTITION:BROKER (or the list is not just *)")


def _check_cluster_name(name: str, value: str, fenced: bool = True) -> None:
    if value and not (fenced and value == FENCED) and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
        raise ConfigError(f"{name}: {value!r} is not a cluster name (letters, digits, '_', '-')"
                          + (f" nor {FENCED}" if fenced else ""))


def is_throttled(items: list[str], partition: int, broker: int) -> bool:
    """Does a *.replication.throttled.replicas list name this partition's replica on `broker`?"""
    return items == ["*"] or f"{partition}:{broker}" in items

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in TOPIC_CONFIG_LIST}


class TopicConfigs:
    """A topic's overrides, resolved against the broker's defaults."""

    def __init__(self, overrides: dict[str, Any], broker_defaults: dict[str, Any]):
        self.overrides = overrides          # name -> parsed value
        self.broker_defaults = broker_defaults  # topic name -> value from the broker config

    @staticmethod
    def validate(raw: dict[str, str | None]) -> dict[str, Any]:
        """Parse a set of overrides as a client sent them; ConfigError names the bad key."""
        parsed = {}
        for name, value in raw.items():
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise ConfigError(f"{name}: unknown topic config")
            if value is None:
                raise ConfigError(f"{name}: a value is required")
            parsed[name] = definition.parse(value)
        return parsed

    def get(self, name: str) -> Any:
        if name in self.overrides:
            return self.overrides[name]
        if name in self.broker_defaults:
            return self.broker_defaults[name]
        return TOPIC_CONFIGS[name].default

    def source(self, name: str) -> str:
        if name in self.overrides:
            return "topic"
        if name in self.broker_defaults:
            return "broker"
        return "default"

    def items(self):
        for name in TOPIC_CONFIGS:
            yield name, self.get(name)

    def rendered_overrides(self) -> dict[str, str]:
        return {k: TOPIC_CONFIGS[k].render(v) for k, v in self.overrides.items()}


def check_policy_combination(values: dict[str, Any]) -> None:
    policy = values.get("cleanup.policy")
    if policy is not None and not policy:
        raise ConfigError("cleanup.policy: must name delete, compact or both")
