"""Admin: topics, partitions, configs, records, offsets and the cluster, over the wire.

Results
-------
Operations on many items return a dict from each item (topic name, (topic, partition) or
ConfigResource) to its result; an item that failed maps to a KafkaError *instance* instead
of raising, so one bad topic does not hide what happened to the others. Operations whose
result is only success map successes to None. `check(results)` raises the first error
and returns the results otherwise, for callers that want all-or-nothing:

    check(await admin.create_topics([NewTopic("orders", 6, 3)]))

Whole-request failures (no broker reachable, unsupported API, a top-level error code) raise
KafkaError. Retriable errors, per item or per request, are retried for the items concerned
only (so a topic created on the first attempt is not reported TOPIC_ALREADY_EXISTS by the
second), with backoff and a metadata refresh, until `timeout_ms`.

Routing: CreateTopics, DeleteTopics and CreatePartitions go to the controller named by
Metadata (in KRaft a broker, which forwards); configs of a broker go to that broker (the
cluster-wide default, ConfigResource.broker(), to any broker), topic configs to any broker;
DeleteRecords and ListOffsets go to partition leaders. Consumer-group operations
(group_admin.py) go to each group's coordinator. Leader elections and partition
reassignments (replica_admin.py) go to the controller. Transaction operations (txn_admin.py)
go to partition leaders, transaction coordinators or every broker, as Kafka's Admin sends them.
"""
from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, TypeVar

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

from .cluster import NO_TOPIC_ID, BrokerInfo
from .group_admin import GroupAdmin, GroupDescription, GroupListing, MemberDescription, OffsetAndMetadata
from .offsets import OffsetAndTimestamp, list_offsets
from .replica_admin import ElectionType, PartitionReassignment, ReplicaAdmin
from .txn_admin import TxnAdmin
from .user_admin import UserAdmin

__all__ = ["Admin", "NewTopic", "TopicDescription", "PartitionDescription", "ConfigResource",
           "ConfigResourceType", "ConfigEntry", "AlterConfigOp", "ClusterDescription", "check",
           "GroupListing", "GroupDescription", "MemberDescription", "OffsetAndMetadata",
           "ElectionType", "PartitionReassignment"]

K = TypeVar("K")
TopicPartition = tuple[str, int]

METADATA, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = (m.ApiKey.METADATA, m.ApiKey.CREATE_TOPICS,
                                                          m.ApiKey.DELETE_TOPICS, m.ApiKey.DELETE_RECORDS)
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 37, 44
DESCRIBE_CLUSTER = m.ApiKey.DESCRIBE_CLUSTER

_UNKNOWN_TOPIC = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


def check(results: Mapping[K, Any]) -> Mapping[K, Any]:
    """Raise the first KafkaError among `results`' values; else return `results`."""
    for value in results.values():
        if isinstance(value, KafkaError):
            raise value
    return results


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1          # -1: the broker's num.partitions (CreateTopics v4+)
    replication_factor: int = -1      # -1: the broker's default.replication.factor
    configs: dict[str, str] = field(default_factory=dict)
    assignments: dict[int, list[int]] | None = None  # partition -> replicas, instead of counts


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: bytes | None
    is_internal: bool
    partitions: list[PartitionDescription]


class ConfigResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


@dataclass(frozen=True)
class ConfigResource:
    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> "ConfigResource":
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str = "") -> "ConfigResource":
        """A broker's configs; "" means the cluster-wide default broker config."""
        return cls(ConfigResourceType.BROKER, str(node_id))


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: int           # Kafka's ConfigSource: 1 dynamic topic, 4 static broker, 5 default...
    sensitive: bool
    is_default: bool
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


class AlterConfigOp(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]


class Admin(GroupAdmin, ReplicaAdmin, UserAdmin, TxnAdmin):
    """Topics, configs, records, offsets and the cluster here; consumer groups in GroupAdmin;
    leader elections and reassignments in ReplicaAdmin; SCRAM credentials in UserAdmin;
    transactions (producers, descriptions, listings, aborts) in TxnAdmin."""

    async def __aenter__(self) -> "Admin":
        await self.client.start()
        return self

    async def __aexit__(self, *exc) -> None:
        pass  # the client belongs to the caller

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False,
                            timeout_ms: int | None = None) -> dict[str, KafkaError | None]:
        by_name = {t.name: t for t in topics}
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.CreateTopicsRequest

        async def attempt(todo: dict[str, NewTopic]):
            node = self.client.controller_node()
            conn = await self.client.connection(node)
            version = conn.version_for(CREATE_TOPICS)
            reqs = []
            for t in todo.values():
                if version < 4 and (t.assignments is None and (t.num_partitions < 0 or t.replication_factor < 0)):
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"default partition counts need CreateTopics v4; {conn} speaks v{version}")
                assignments = [R.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                               for p, b in sorted((t.assignments or {}).items())]
                reqs.append(R.CreatableTopic(
                    name=t.name,
                    num_partitions=-1 if t.assignments else t.num_partitions,
                    replication_factor=-1 if t.assignments else t.replication_factor,
                    assignments=assignments,
                    configs=[R.CreatableTopicConfig(name=k, value=None if v is None else str(v))
                             for k, v in t.configs.items()]))
            resp = await conn.send(R(topics=reqs, timeout_ms=broker_timeout, validate_only=validate_only),
                                   api_key=CREATE_TOPICS, version=version,
                                   timeout_ms=self._send_timeout(broker_timeout))
            return _named_results(resp.topics, todo, lambda r: (r.error_code, r.error_message))

        return await self._per_item(by_name, attempt, timeout_ms)

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None
                            ) -> dict[str, KafkaError | None]:
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.DeleteTopicsRequest

        async def attempt(todo: dict[str, None]):
            conn = await self.client.connection(self.client.controller_node())
            version = conn.version_for(DELETE_TOPICS)
            if version >= 6:
                req = R(topics=[R.DeleteTopicState(name=n, topic_id=NO_TOPIC_ID) for n in todo],
                        timeout_ms=broker_timeout)
            else:
                req = R(topic_names=list(todo), timeout_ms=broker_timeout)
            resp = await conn.send(req, api_key=DELETE_TOPICS, version=version,
                                   timeout_ms=self._send_timeout(broker_timeout))
            return _named_results(resp.responses, todo, lambda r: (r.error_code, r.error_message))

        results = await self._per_item(dict.fromkeys(names), attempt, timeout_ms)
        self.client.untrack_topics(n for n, err in results.items() if err is None)
        return results

    async def _metadata(self, topics: list[str] | None):
        """Metadata without auto-creating anything, from any broker; not merged into the
        client's view (a description is a snapshot for the caller)."""
        await self.client.start()

        async def once():
            node = await self.client.any_node()
            conn = await self.client.connection(node)
            version = conn.version_for(METADATA)
            req_topics: list[m.MetadataRequest.MetadataRequestTopic] | None
            if topics is None:
                req_topics = [] if version == 0 else None
            else:
                req_topics = [m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
            return await conn.send(m.MetadataRequest(topics=req_topics, allow_auto_topic_creation=False),
                                   api_key=METADATA, version=version)
        return await self.client.call(once, timeout_ms=self.timeout_ms)

    async def list_topics(self, *, internal: bool = False) -> list[str]:
        resp = await self._metadata(None)
        return sorted(t.name for t in resp.topics
                      if t.name is not None and not t.error_code and (internal or not t.is_internal))

    async def describe_topics(self, names: Iterable[str] | None = None
                              ) -> dict[str, TopicDescription | KafkaError]:
        """Partitions, leaders, replicas, ISR and topic id of each topic (None: every topic)."""
        resp = await self._metadata(None if names is None else list(names))
        out: dict[str, TopicDescription | KafkaError] = {}
        for t in resp.topics:
            if t.name is None:
                continue
            if t.error_code and not t.partitions:
                out[t.name] = KafkaError(t.error_code, f"describe topic {t.name!r}")
                continue
            parts = [PartitionDescription(p.partition_index, p.leader_id, p.leader_epoch,
                                          list(p.replica_nodes), list(p.isr_nodes), list(p.offline_replicas))
                     for p in sorted(t.partitions, key=lambda p: p.partition_index)]
            tid = t.topic_id if t.topic_id and t.topic_id != NO_TOPIC_ID else None
            out[t.name] = TopicDescription(t.name, tid, t.is_internal, parts)
        return out

    async def create_partitions(self, counts: Mapping[str, int], *, validate_only: bool = False,
                                timeout_ms: int | None = None,
                                assignments: Mapping[str, list[list[int]]] | None = None
                                ) -> dict[str, KafkaError | None]:
        """Raise each topic's partition count to `counts[topic]` (the new total)."""
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.CreatePartitionsRequest

        async def attempt(todo: dict[str, int]):
            conn = await self.client.connection(self.client.controller_node())
            req = R(topics=[R.CreatePartitionsTopic(
                        name=n, count=c,
                        assignments=None if not assignments or n not in assignments else
                        [R.CreatePartitionsAssignment(broker_ids=list(b)) for b in assignments[n]])
                        for n, c in todo.items()],
                    timeout_ms=broker_timeout, validate_only=validate_only)
            resp = await conn.send(req, api_key=CREATE_PARTITIONS,
                                   timeout_ms=self._send_timeout(broker_timeout))
            return _named_results(resp.results, todo, lambda r: (r.error_code, r.error_message))

        results = await self._per_item(dict(counts), attempt, timeout_ms)
        if any(v is None for v in results.values()):
            self.client.request_metadata_update()
        return results

    # ------------------------------------------------------------------ configs

    def _config_node(self, resource: ConfigResource) -> int | None:
        if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and resource.name:
            return int(resource.name)
        return None  # any broker

    async def _by_node(self, todo: dict[ConfigResource, Any], one_node) -> dict[ConfigResource, Any]:
        groups: dict[int | None, dict] = {}
        for res, spec in todo.items():
            groups.setdefault(self._config_node(res), {})[res] = spec
        out: dict[ConfigResource, Any] = {}
        outcomes = await asyncio.gather(*(one_node(node, g) for node, g in groups.items()),
                                        return_exceptions=True)
        for (_node, g), outcome in zip(groups.items(), outcomes):
            if isinstance(outcome, KafkaError):
                out.update({r: outcome for r in g})
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                out.update(outcome)
        return out

    async def _conn_for(self, node: int | None):
        if node is None:
            node = self.client.least_loaded_node()
        return await self.client.connection(node)

    async def describe_configs(self, resources: Iterable[ConfigResource] | ConfigResource, *,
                               include_synonyms: bool = False
                               ) -> dict[ConfigResource, dict[str, ConfigEntry] | KafkaError]:
        if isinstance(resources, ConfigResource):
            resources = [resources]
        R = m.DescribeConfigsRequest

        async def one_node(node, group):
            conn = await self._conn_for(node)
            req = R(resources=[R.DescribeConfigsResource(resource_type=r.type, resource_name=r.name,
                                                         configuration_keys=None) for r in group],
                    include_synonyms=include_synonyms, include_documentation=False)
            resp = await conn.send(req, api_key=DESCRIBE_CONFIGS)
            out: dict[ConfigResource, KafkaError | dict[str, ConfigEntry]] = {}
            for res in resp.results:
                key = ConfigResource(ConfigResourceType(res.resource_type), res.resource_name)
                if res.error_code:
                    out[key] = KafkaError(res.error_code, res.error_message)
                    continue
                out[key] = {c.name: ConfigEntry(
                    c.name, c.value, c.read_only, c.config_source, c.is_sensitive,
                    c.is_default or c.config_source == 5,
                    [(s.name, s.value, s.source) for s in (c.synonyms or [])]) for c in res.configs}
            return out

        async def attempt(todo):
            return await self._by_node(todo, one_node)

        return await self._per_item(dict.fromkeys(resources), attempt)

    async def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, str | None]], *,
                            validate_only: bool = False) -> dict[ConfigResource, KafkaError | None]:
        """Replace each resource's whole set of dynamic configs (AlterConfigs); configs not
        listed revert to their defaults. Prefer incremental_alter_configs."""
        R = m.AlterConfigsRequest

        async def one_node(node, group):
            conn = await self._conn_for(node)
            req = R(resources=[R.AlterConfigsResource(
                        resource_type=r.type, resource_name=r.name,
                        configs=[R.AlterableConfig(name=k, value=None if v is None else str(v))
                                 for k, v in cfg.items()]) for r, cfg in group.items()],
                    validate_only=validate_only)
            resp = await conn.send(req, api_key=ALTER_CONFIGS)
            return _resource_results(resp.responses, group)

        async def attempt(todo):
            return await self._by_node(todo, one_node)

        return await self._per_item(dict(configs), attempt)

    async def incremental_alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, Any]], *,
                                        validate_only: bool = False) -> dict[ConfigResource, KafkaError | None]:
        """Change single configs: {"retention.ms": "1000"} sets, {"x": None} deletes (back to
        the default), {"x": (AlterConfigOp.APPEND, "v")} appends to a list config. Resources
        are topics or brokers: ConfigResource.broker(101) is broker 101's dynamic config (sent
        to that broker), ConfigResource.broker() the cluster-wide default of every broker."""
        R = m.IncrementalAlterConfigsRequest

        def op(name, spec):
            if spec is None:
                return R.AlterableConfig(name=name, config_operation=AlterConfigOp.DELETE, value=None)
            if isinstance(spec, tuple):
                operation, value = spec
                return R.AlterableConfig(name=name, config_operation=int(operation),
                                         value=None if value is None else str(value))
            return R.AlterableConfig(name=name, config_operation=AlterConfigOp.SET, value=str(spec))

        async def one_node(node, group):
            conn = await self._conn_for(node)
            req = R(resources=[R.AlterConfigsResource(
                        resource_type=r.type, resource_name=r.name,
                        configs=[op(k, v) for k, v in cfg.items()]) for r, cfg in group.items()],
                    validate_only=validate_only)
            resp = await conn.send(req, api_key=INCREMENTAL_ALTER_CONFIGS)
            return _resource_results(resp.responses, group)

        async def attempt(todo):
            return await self._by_node(todo, one_node)

        return await self._per_item(dict(configs), attempt)

    # ------------------------------------------------------------------ records & offsets

    async def delete_records(self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
                             ) -> dict[TopicPartition, int | KafkaError]:
        """Delete records below each offset (-1: up to the high watermark); returns each
        partition's new low watermark."""
        broker_timeout = int(self.timeout_ms if timeout_ms is None else timeout_ms)
        R = m.DeleteRecordsRequest

        async def one_leader(node, group: dict[TopicPartition, int]):
            topics: dict[str, list] = {}
            for (t, p), off in group.items():
                topics.setdefault(t, []).append(R.DeleteRecordsPartition(partition_index=p, offset=off))
            resp = await self.client.send(
                node, R(topics=[R.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                        timeout_ms=broker_timeout),
                api_key=DELETE_RECORDS, timeout_ms=self._send_timeout(broker_timeout))
            out: dict[TopicPartition, int | KafkaError] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    out[tp] = (KafkaError(p.error_code, f"delete records {t.name}-{p.partition_index}")
                               if p.error_code else p.low_watermark)
            for tp in group:
                out.setdefault(tp, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {tp}"))
            return out

        async def attempt(todo: dict[TopicPartition, int]):
            await self.client.ensure_topics({t for t, _ in todo})
            groups: dict[int, dict] = {}
            out: dict[TopicPartition, Any] = {}
            for tp, off in todo.items():
                leader = self.client.leader_for(*tp)
                if leader is None:
                    out[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE
                                         if self.client.cluster.partitions_for(tp[0]) else
                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no leader for {tp[0]}-{tp[1]}")
                else:
                    groups.setdefault(leader, {})[tp] = off
            outcomes = await asyncio.gather(*(one_leader(n, g) for n, g in groups.items()),
                                            return_exceptions=True)
            for (_n, g), outcome in zip(groups.items(), outcomes):
                if isinstance(outcome, KafkaError):
                    out.update({tp: outcome for tp in g})
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    out.update(outcome)
            return out

        return await self._per_item(dict(offsets), attempt, timeout_ms)

    async def list_offsets(self, specs: Mapping[TopicPartition, str | int], *,
                           isolation_level: str = "read_uncommitted"
                           ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]:
        """Offsets for "earliest", "latest", "max_timestamp" or a timestamp in ms. For a
        timestamp later than every record the offset is -1."""
        level = 1 if isolation_level == "read_committed" else 0
        return await list_offsets(self.client, specs, isolation_level=level, timeout_ms=self.timeout_ms)

    # ------------------------------------------------------------------ cluster

    async def describe_cluster(self) -> ClusterDescription:
        """DescribeCluster where the broker has it (KIP-700), Metadata otherwise."""
        await self.client.start()

        async def once():
            node = self.client.least_loaded_node()
            conn = await self.client.connection(node)
            if conn.supports(DESCRIBE_CLUSTER):
                resp = await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                endpoint_type=1),
                                       api_key=DESCRIBE_CLUSTER)
                if resp.error_code:
                    raise KafkaError(resp.error_code, resp.error_message)
                brokers = [BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]
                return ClusterDescription(resp.cluster_id, resp.controller_id,
                                          sorted(brokers, key=lambda b: b.node_id))
            view = await self.client.refresh_metadata([])
            return ClusterDescription(view.cluster_id, view.controller_id,
                                      sorted(view.brokers.values(), key=lambda b: b.node_id))
        return await self.client.call(once, timeout_ms=self.timeout_ms)


def _named_results(rows, todo: Mapping[str, Any], get) -> dict[str, KafkaError | None]:
    out: dict[str, KafkaError | None] = {}
    for r in rows:
        if r.name not in todo:
            continue
        code, message = get(r)
        out[r.name] = KafkaError(code, message) if code else None
    for name in todo:
        out.setdefault(name, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {name!r}"))
    return out


def _resource_results(rows, group: Mapping[ConfigResource, Any]) -> dict[ConfigResource, KafkaError | None]:
    out: dict[ConfigResource, KafkaError | None] = {}
    for r in rows:
        key = ConfigResource(ConfigResourceType(r.resource_type), r.resource_name)
        out[key] = KafkaError(r.error_code, r.error_message) if r.error_code else None
    for res in group:
        out.setdefault(res, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {res}"))
    return out
