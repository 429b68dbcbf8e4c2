"""One mirror link, source cluster -> target cluster: topic discovery, topic creation, one
PartitionCopier per partition, and the offset syncs that record where batches landed.

Theory of operation
-------------------
Every `refresh_topics_s` the link lists the source's topics and keeps those the filter and
the replication policy allow (never a topic that came from the target: mirror/policy.py).
Each is created on the target under its remote name with the same partition count and the
source's non-default configs (less those MM2 never copies: mirror/configsync.py), which are
kept in line with the source's every `sync_topic_configs_interval_s` (mirror/topicconfigs.py);
a target topic with fewer partitions than its source gets more.

A DR link (`dr_pair`, identity names) follows the roles the DR controller gives each topic
(core/protocol/dr.py): it creates a missing target topic as a read-only replica of its source
(topic config seaway.replica.of), copies a topic only while its target copy is a replica of
this source and its source copy is not a replica of the target, and stops the partition's
copier when that stops being true. A topic that becomes copyable while the link runs (the
reverse link, once a failover points it back) resumes where the offset syncs for it end:
the DR controller writes the sync that says where the promoted side stood.

Offset syncs go where MirrorMaker 2 puts them by default: `mm2-offset-syncs.<target>.internal`
on the source cluster, one compacted partition, MM2's record format (mirror/records.py). On
start the link reads that topic to its end: where the latest sync of each partition's run ends
is where its copier resumes (so a killed mirror re-sends at most what it had not yet recorded),
and every sync seen feeds the OffsetSyncStore that translates consumer-group offsets.
"""
from __future__ import annotations

import logging
import time
from contextlib import AsyncExitStack

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.client import Admin, KafkaClient, NewTopic
from core.client.admin import ConfigResource
from core.client.consumer import read_to_end
from core.client.errors import KafkaError
from core.client.producer import Producer
from core.client.properties import PropertiesFileError, read_properties
from core.client.security import ClientSecurity, checked_properties, security_from_properties
from core.protocol.dr import REPLICA_OF, link_copies, mirror_client_id, txn_decisions_topic
from core.protocol.errors import ErrorCode

from .checkpoints import CheckpointEmitter
# NOT_COPIED and DYNAMIC_TOPIC_CONFIG are also read from here (dr/observe.py's drift check).
from .configsync import DYNAMIC_TOPIC_CONFIG, NOT_COPIED, copyable  # noqa: F401
from .copier import PartitionCopier, ProducerIdentity, TxnRelay
from .fetcher import SourceFetchers
from .policy import DefaultReplicationPolicy, IdentityReplicationPolicy, TopicFilter, should_replicate
from .records import (
    Heartbeat, OffsetSync, decode_offset_sync, encode_heartbeat, encode_offset_sync, offset_sync_headers)
from .topicconfigs import TopicConfigSync
from .translation import OffsetSyncStore

log = logging.getLogger("mirror.link")

# Closing the link's producers (flushing the last offset syncs and checkpoints) gets this long,
# after the copiers' hand-over (8 s): 11 s in all, inside the 12 s the process gives a stop
# (mirror/cli.py HAND_OVER_S) and the 20 s `regions` gives the process.
CLOSE_S = 3.0

# A source broker holds the link's fetch this long when none of its partitions has news.
FETCH_MAX_WAIT_MS = 500

UNKNOWN_ROLE = "?"      # a copy whose configs could not be read (never a cluster name)


class LinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source_alias: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    source_bootstrap: str = Field(min_length=1)
    target_alias: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    target_bootstrap: str = Field(min_length=1)
    topics: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(default_factory=lambda: [r".*[\-\.]internal", r".*\.replica", r"__.*"])
    policy: str = Field(default="default", pattern=r"^(default|identity)$")
    # One direction of a DR pair: target topics are read-only replicas, and the topics' roles
    # decide what is copied (the module's docstring). Needs the identity policy.
    dr_pair: bool = False
    refresh_topics_s: float = Field(default=5.0, gt=0)
    max_in_flight: int = Field(default=5, ge=1, le=5)
    # Per partition and fetch, and per Fetch to a source broker with all its partitions
    # (mirror/fetcher.py; also what may wait in the mirror, fetched and not yet produced). A
    # fetch in flight per broker must carry a WAN round trip's worth: 1 Gbit/s over 80 ms is
    # 10 MB. Kafka's consumer defaults are 1 MiB and 50 MiB.
    fetch_max_bytes: int = Field(default=16 << 20, ge=1024)
    fetch_response_max_bytes: int = Field(default=64 << 20, ge=1024)
    # Fetches in flight per source broker, each over a connection and a fetch session of its
    # own (mirror/fetcher.py's lanes; MM2 gets the same from tasks.max): with one, the WAN
    # idles for a round trip between answers. Idle partitions cost one long poll per lane.
    fetchers_per_broker: int = Field(default=4, ge=1, le=32)
    replication_factor: int = Field(default=-1)       # of created topics; -1: the target's default
    checkpoint_interval_s: float = Field(default=5.0, gt=0)
    sync_group_offsets: bool = False    # commit translated offsets into idle target groups
    # Keep the target topics' configs in line with their sources' (mirror/topicconfigs.py),
    # MM2's sync.topic.configs.enabled and .interval.seconds (600 there: a changed retention
    # should reach a DR replica well before anyone fails over to it).
    sync_topic_configs: bool = True
    sync_topic_configs_interval_s: float = Field(default=60.0, gt=0)
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    # The DR recovery-point target this link serves (the topology's dr.rpo_target_s), exported
    # as a gauge so that the lag alert compares each link against its own target.
    rpo_target_s: float | None = Field(default=None, gt=0)
    # Kafka client properties for each side's connections (security.protocol, ssl.*, sasl.*),
    # as MirrorMaker 2 takes them per cluster alias.
    source_properties: dict[str, str] = Field(default_factory=dict)
    target_properties: dict[str, str] = Field(default_factory=dict)
    # The same from a properties file (a `--command-config` file), so that passwords need not
    # sit in the link's configuration; the inline properties override the file's.
    source_properties_file: str | None = None
    target_properties_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_properties_files(cls, data):
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for side in ("source", "target"):
            path = data.get(f"{side}_properties_file")
            if path is None:
                continue
            try:
                from_file = read_properties(str(path))
            except PropertiesFileError as exc:
                raise ValueError(f"{side}_properties_file: {exc}") from None
            data[f"{side}_properties"] = {**from_file, **(data.get(f"{side}_properties") or {})}
        return data

    @model_validator(mode="after")
    def _dr_pair_keeps_names(self):
        if self.dr_pair and self.policy != "identity":
            raise ValueError("dr_pair: a DR pair keeps topic names, so it needs policy identity")
        return self

    _security_works = field_validator("source_properties", "target_properties")(checked_properties)

    def security(self, side: str) -> ClientSecurity:
        return security_from_properties(self.source_properties if side == "source" else self.target_properties)


class MirrorLink:
    def __init__(self, config: LinkConfig):
        self.config = config
        self.policy = (IdentityReplicationPolicy() if config.policy == "identity"
                       else DefaultReplicationPolicy())
        self.filter = TopicFilter(tuple(config.topics), tuple(config.exclude))
        self.syncs_topic = self.policy.offset_syncs_topic(config.target_alias)
        self.store = OffsetSyncStore()
        self.copiers: dict[tuple[str, int], PartitionCopier] = {}
        self._retiring: dict[tuple[str, int], PartitionCopier] = {}
        self._started_once: set[tuple[str, int]] = set()     # partitions with a copier this run
        self.resume: dict[tuple[str, int], int] = {}
        self.source_security = config.security("source")
        self.target_security = config.security("target")
        self.source, self.target = self._clients()
        self._sync_producer: Producer | None = None
        self.checkpoint_producer: Producer | None = None
        self.checkpoints = CheckpointEmitter(self, interval_s=config.checkpoint_interval_s,
                                             sync_group_offsets=config.sync_group_offsets)
        self.topic_configs = TopicConfigSync(self, interval_s=config.sync_topic_configs_interval_s)
        self._started = False
        self._stopping = anyio.Event()
        self._unstarted: anyio.CancelScope | None = None    # startup, before any copier runs
        self._discovering: anyio.CancelScope | None = None
        self.fetchers: SourceFetchers | None = None     # while copying: one per source broker
        self.relay: TxnRelay | None = None              # a DR link's transactions, while copying
        self._decisions_topic_ready = False

    @property
    def name(self) -> str:
        return f"{self.config.source_alias}->{self.config.target_alias}"

    def _clients(self) -> tuple[KafkaClient, KafkaClient]:
        c = self.config
        return (KafkaClient(c.source_bootstrap, client_id=f"mirror-{c.source_alias}", security=self.source_security),
                # The name a DR replica's brokers take its mirror's writes from (core/protocol/dr.py).
                KafkaClient(c.target_bootstrap, client_id=mirror_client_id(c.source_alias),
                            security=self.target_security))

    async def run(self, *, task_status: TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until stopped or cancelled; a cluster that is down or unreachable (at the start,
        or later for the link's own bookkeeping) is retried with backoff, not fatal."""
        attempt = 0
        while not self._stopping.is_set():
            try:
                await self._run_once(task_status)
            except* (KafkaError, OSError) as group:    # raised in the task group, or before it
                attempt += 1
                delay = min(0.2 * 2 ** attempt, 10.0)
                log.warning("%s: %s; starting the link again in %.1fs", self.name,
                            "; ".join(str(exc) for exc in group.exceptions), delay)
                self.copiers.clear()
                self._retiring.clear()
                self._started_once.clear()
                self.source, self.target = self._clients()
                with anyio.move_on_after(delay):
                    await self._stopping.wait()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """A graceful stop: copiers hand over (mirror/copier.py) and the syncs they recorded
        are flushed before `run` returns; startup and topic discovery just stop."""
        self._stopping.set()
        for scope in (self._unstarted, self._discovering):
            if scope is not None:
                scope.cancel()

    async def _run_once(self, task_status) -> None:
        # The clients and producers run their task groups in this task, so they are closed here
        # too, in reverse order (anyio's rule), by the exit stack: the producers' last records
        # are flushed first (_flush_producers), then the producers and the clients close.
        self._sync_producer = self.checkpoint_producer = None
        with anyio.CancelScope() as self._unstarted:     # stop() cancels it until the copiers run
            if self._stopping.is_set():
                return
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(self.source)
                await stack.enter_async_context(self.target)
                await self._ensure_syncs_topic()
                await self._load_syncs()
                self._sync_producer = await self._start_producer(stack, self.source)
                self.checkpoint_producer = await self._start_producer(stack, self.target)
                stack.push_async_callback(self._flush_producers)
                self._unstarted = None
                if self._stopping.is_set():
                    return
                await self._copy(task_status)

    async def _start_producer(self, stack: AsyncExitStack, client: KafkaClient) -> Producer:
        producer = Producer(client, acks=-1, linger_ms=20)
        await producer.start()
        stack.push_async_callback(_close_quietly, producer)
        return producer

    async def _copy(self, task_status) -> None:
        identity = ProducerIdentity(self.target)
        self.fetchers = SourceFetchers(self.source, max_wait_ms=FETCH_MAX_WAIT_MS,
                                       partition_max_bytes=self.config.fetch_max_bytes,
                                       max_bytes=self.config.fetch_response_max_bytes,
                                       per_broker=self.config.fetchers_per_broker)
        async with anyio.create_task_group() as tg:
            # Source transactions are copied whole (mirror/txn_gate.py) on a DR pair's links.
            self.relay = TxnRelay(tg, self._record_decisions) if self.config.dr_pair else None
            await tg.start(self.fetchers.run, name=f"{self.name} fetchers")
            await self._discover_until_stopped(tg, identity, retry=False)
            tg.start_soon(self.checkpoints.run, name=f"{self.name} checkpoints")
            tg.start_soon(self._heartbeats, name=f"{self.name} heartbeats")
            if self.config.sync_topic_configs:
                tg.start_soon(self.topic_configs.run, name=f"{self.name} topic configs")
            if not self._started:
                self._started = True
                task_status.started()
            while not self._stopping.is_set():
                with anyio.move_on_after(self.config.refresh_topics_s):
                    await self._stopping.wait()
                await self._discover_until_stopped(tg, identity, retry=True)
            copiers = list(self.copiers.values())
            for copier in copiers:      # each bounds its own hand-over
                copier.request_stop()
            for copier in copiers + list(self._retiring.values()):
                await copier.stopped.wait()
            log.info("%s: stopped; %d of %d partitions handed over", self.name,
                     sum(c.handed_over for c in copiers), len(copiers))
            tg.cancel_scope.cancel()

    async def _discover_until_stopped(self, tg, identity: ProducerIdentity, *, retry: bool) -> None:
        """One discovery pass, cut short by a stop. The first pass of a run fails the run (so it
        starts again with backoff); later ones are retried at the next refresh."""
        if self._stopping.is_set():
            return
        with anyio.CancelScope() as self._discovering:
            try:
                await self._discover(tg, identity)
            except (KafkaError, OSError) as exc:
                if not retry:
                    raise
                log.info("%s: topic discovery failed (%s); retrying", self.name, exc)
        self._discovering = None

    async def _flush_producers(self) -> None:
        """Flush the recorded syncs (and checkpoints), within CLOSE_S together, even when
        cancelled: the process's stop budget is the copiers' hand-over plus this. The
        producers close right after, failing what is still unsent; the clients close last."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_S):
                async with anyio.create_task_group() as flushing:
                    for producer in (self._sync_producer, self.checkpoint_producer):
                        if producer is not None:
                            flushing.start_soon(_flush_quietly, producer)

    # ------------------------------------------------------------------ heartbeats

    async def _heartbeats(self) -> None:
        """MM2's heartbeats: one record a second in the source's `heartbeats` topic, which the
        link itself mirrors (as `<source>.heartbeats`), so replication latency stays measured
        while the data topics are idle, and the target can tell which clusters feed it."""
        topic = self.policy.heartbeats_topic()
        admin = Admin(self.source)
        if topic not in await admin.list_topics(internal=True):
            result = await admin.create_topics([NewTopic(topic, 1, self.config.replication_factor)])
            error = result.get(topic)
            if isinstance(error, KafkaError) and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise error
        while True:
            key, value = encode_heartbeat(Heartbeat(self.config.source_alias, self.config.target_alias,
                                                    int(time.time() * 1000)))
            try:
                await self._sync_producer.send(topic, value=value, key=key, partition=0)
            except KafkaError as exc:
                log.info("%s: heartbeat not sent: %s", self.name, exc)
            await anyio.sleep(self.config.heartbeat_interval_s)

    # ------------------------------------------------------------------ offset syncs

    async def _ensure_syncs_topic(self) -> None:
        await self._ensure_compacted(Admin(self.source), self.syncs_topic)

    async def _load_syncs(self, only: set[tuple[str, int]] | None = None) -> None:
        """Read the offset-syncs topic to its end: resume points and the translation store,
        of every partition or (`only`) of these partitions, which no copier is copying, whose
        history is then read again from the start."""
        if only is not None:
            for key in only:
                self.store.forget(*key)
                self.resume.pop(key, None)
        for sync in await read_offset_syncs(self.source, self.syncs_topic):
            if only is None or (sync.topic, sync.partition) in only:
                self._observe(sync)
        log.info("%s: %d partitions resume from recorded offset syncs", self.name,
                 len(self.resume) if only is None else sum(k in only for k in self.resume))

    def _observe(self, sync: OffsetSync) -> None:
        key = (sync.topic, sync.partition)
        try:
            self.store.observe(sync)
        except ValueError as exc:
            log.warning("%s: ignoring offset sync %s: %s", self.name, sync, exc)
            return
        # The latest sync in the topic is the truth, even below an earlier one (a restart
        # that re-forwarded from an older point). Its run was acknowledged whole, so the copy
        # resumes after it.
        self.resume[key] = sync.upstream_offset + sync.extent

    async def _record_sync(self, topic: str, partition: int, upstream: int, downstream: int, extent: int) -> None:
        sync = OffsetSync(topic, partition, upstream, downstream, extent)
        self._observe(sync)
        key, value = encode_offset_sync(sync)
        await self._sync_producer.send(self.syncs_topic, value=value, key=key, headers=offset_sync_headers(sync),
                                       partition=0)

    async def _record_decisions(self, records: list[tuple[bytes, bytes]]) -> None:
        """That the link has all of a copied transaction (mirror/copier.py TxnRelay), on the
        target, acknowledged by its ISR, before any of its markers is written."""
        producer = self.checkpoint_producer
        assert producer is not None
        topic = txn_decisions_topic(self.config.source_alias)
        if not self._decisions_topic_ready:
            await self._ensure_compacted(Admin(self.target), topic)
            self._decisions_topic_ready = True
        futures = [await producer.send(topic, value=value, key=key, partition=0) for key, value in records]
        await producer.flush()
        for future in futures:
            await future

    async def _ensure_compacted(self, admin: Admin, topic: str) -> None:
        """One compacted partition (the offset syncs, the transaction decisions)."""
        if topic in await admin.list_topics(internal=True):
            return
        result = await admin.create_topics([NewTopic(topic, 1, self.config.replication_factor,
                                                     {"cleanup.policy": "compact"})])
        error = result.get(topic)
        if isinstance(error, KafkaError) and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise error

    # ------------------------------------------------------------------ topics

    async def _discover(self, tg, identity: ProducerIdentity) -> None:
        source_admin, target_admin = Admin(self.source), Admin(self.target)
        # One Metadata answer for everything: with thousands of partitions, decoding it is most
        # of what an idle link does, so it is not asked twice (names, then the wanted topics).
        everything = await source_admin.describe_topics(None)
        topics = sorted(name for name, d in everything.items() if not isinstance(d, KafkaError) and not d.is_internal)
        # A DR pair's heartbeats are copied too (as `<source>.heartbeats`, never a DR topic:
        # no roles, never failed over): they are how the surviving region tells that it no
        # longer hears from the other (dr/autofailover.py).
        wanted = [t for t in topics if should_replicate(
            t, self.config.source_alias, self.config.target_alias, self.policy, topic_filter=self.filter)]
        if not wanted:
            return
        described = {topic: everything[topic] for topic in wanted}
        target_topics = await target_admin.describe_topics(None)
        roles = await self._roles(source_admin, target_admin, wanted, target_topics) \
            if self.config.dr_pair else {}
        newly_copied: list[tuple[str, str, int]] = []
        for topic in wanted:
            desc = described.get(topic)
            if desc is None or isinstance(desc, KafkaError):
                continue
            remote = self.policy.format_remote_topic(self.config.source_alias, topic)
            count = len(desc.partitions)
            dr_topic = self.config.dr_pair and not self.policy.is_heartbeats_topic(topic)
            if dr_topic:
                source_role, target_role = roles.get(topic, (UNKNOWN_ROLE, UNKNOWN_ROLE))
                if UNKNOWN_ROLE in (source_role, target_role):
                    continue                # decided at the next look, when both can be read
                if target_role is None:     # a missing target copy is made a replica of ours
                    target_role = self.config.source_alias
                if not link_copies(self.config.source_alias, self.config.target_alias,
                                   source_role, target_role):
                    self._retire(topic)
                    continue
            created = await self._ensure_target_topic(source_admin, target_admin, topic, remote, count,
                                                      target_topics.get(remote), replica=dr_topic)
            if dr_topic and created is False:
                continue    # someone else made it meanwhile: its role is read at the next look
            newly_copied += [(topic, remote, p) for p in range(count)
                             if (topic, p) not in self.copiers and not self._still_retiring((topic, p))]
        if newly_copied and self._started and self.config.dr_pair:
            # Copyable since the link started (a failover pointed it here): the offset syncs
            # the DR controller wrote for it say where to begin.
            await self._load_syncs({(t, p) for t, _, p in newly_copied})
        for topic, remote, p in newly_copied:
            self._start_copier(tg, identity, topic, remote, p)

    async def _roles(self, source_admin: Admin, target_admin: Admin, wanted: list[str],
                     target_topics: dict) -> dict[str, tuple[str | None, str | None]]:
        """topic -> (its source copy's seaway.replica.of, its target copy's): None where the
        target copy does not exist, UNKNOWN_ROLE where a copy's configs could not be read."""
        def replica_of(found: dict, resource: ConfigResource) -> str:
            entries = found.get(resource)
            if not isinstance(entries, dict):
                return UNKNOWN_ROLE
            entry = entries.get(REPLICA_OF)
            return "" if entry is None or entry.value is None else entry.value

        existing = [t for t in wanted
                    if t in target_topics and not isinstance(target_topics[t], KafkaError)]
        source_found = await source_admin.describe_configs([ConfigResource.topic(t) for t in wanted])
        target_found = await target_admin.describe_configs([ConfigResource.topic(t) for t in existing]) \
            if existing else {}
        return {t: (replica_of(source_found, ConfigResource.topic(t)),
                    replica_of(target_found, ConfigResource.topic(t)) if t in existing else None)
                for t in wanted}

    def _retire(self, topic: str) -> None:
        """Stop copying `topic` at once (mirror/copier.py abort), and start no new copier of
        the partition until the old one has stopped (two would race on the target)."""
        for key in [k for k in self.copiers if k[0] == topic]:
            copier = self._retiring[key] = self.copiers.pop(key)
            copier.abort()
            log.info("%s: %s-%d is no longer copied here (its DR role changed)", self.name, *key)

    def _still_retiring(self, key: tuple[str, int]) -> bool:
        copier = self._retiring.get(key)
        if copier is not None and copier.stopped.is_set():
            del self._retiring[key]
            copier = None
        return copier is not None

    async def _ensure_target_topic(self, source_admin: Admin, target_admin: Admin, topic: str,
                                   remote: str, count: int, existing, *, replica: bool = False) -> bool | None:
        """None if the target topic was there; True if this link created it; False if someone
        else did meanwhile."""
        if existing is not None and not isinstance(existing, KafkaError):
            if len(existing.partitions) < count:
                log.info("%s: %s grew to %d partitions upstream; adding them to %s", self.name,
                         topic, count, remote)
                errors = await target_admin.create_partitions({remote: count})
                error = errors.get(remote)
                if isinstance(error, KafkaError) and error.code != ErrorCode.INVALID_PARTITIONS:
                    raise error
            return None
        configs = {}
        found = await source_admin.describe_configs(ConfigResource.topic(topic))
        entries = found.get(ConfigResource.topic(topic))
        if isinstance(entries, dict):
            configs = copyable(entries)     # the rule topic config syncs keep (mirror/configsync.py)
        if replica:
            configs[REPLICA_OF] = self.config.source_alias
        result = await target_admin.create_topics([NewTopic(remote, count, self.config.replication_factor,
                                                            configs)])
        error = result.get(remote)
        if isinstance(error, KafkaError):
            if error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise error
            return False
        log.info("%s: created %s (%d partitions, configs %s)", self.name, remote, count, configs)
        return True

    def _start_copier(self, tg, identity: ProducerIdentity, topic: str, remote: str, partition: int) -> None:
        start = self.resume.get((topic, partition))        # None: from the source's log start
        if (topic, partition) in self._started_once:
            # A partition copied again in this run (its DR role came back): a copier's
            # sequence numbers start at 0, and under the producer id an earlier copier of the
            # partition used the target would take its first batches for retries of that
            # copier's and drop them. A producer id of its own cannot collide.
            identity = ProducerIdentity(self.target)
        self._started_once.add((topic, partition))
        fetchers = self.fetchers
        assert fetchers is not None     # copiers start inside _copy, which sets it
        copier = PartitionCopier(
            self.source, self.target, identity, source_topic=topic, target_topic=remote,
            partition=partition, start_offset=start,
            on_synced=lambda u, d, x, t=topic, p=partition: self._record_sync(t, p, u, d, x),
            fetchers=fetchers, max_in_flight=self.config.max_in_flight,
            keep_producers=self.config.dr_pair, relay=self.relay)
        self.copiers[(topic, partition)] = copier
        tg.start_soon(copier.run, name=repr(copier))


async def read_offset_syncs(client: KafkaClient, topic: str) -> list[OffsetSync]:
    """Every offset sync in `topic` (partition 0) to its end, in order; records that are not
    syncs are skipped, and said so."""
    out: list[OffsetSync] = []
    for record in await read_to_end(client, topic):
        try:
            out.append(decode_offset_sync(record.key, record.value, record.headers))
        except ValueError as exc:       # someone else's record
            log.warning("offset %d of %s is not an offset sync: %s", record.offset, topic, exc)
    return out


async def _flush_quietly(producer: Producer) -> None:
    try:
        await producer.flush()
    except Exception as exc:   # noqa: BLE001 — closing on the way out; what was unsent is redone
        log.info("flushing a producer: %s", exc)


async def _close_quietly(producer: Producer) -> None:
    """After _flush_producers: what is still unsent fails now."""
    try:
        await producer.close(timeout_ms=0)
    except Exception as exc:   # noqa: BLE001 — closing on the way out; what was unsent is redone
        log.info("closing a producer: %s", exc)
