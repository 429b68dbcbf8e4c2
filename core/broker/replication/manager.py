"""ReplicaManager: drives this broker's PartitionReplicas with real I/O (Kafka's ReplicaManager,
AlterPartitionManager and the high-watermark checkpoint task in one place).

Theory of operation
-------------------
Each local partition of a KRaft broker has a PartitionReplica (core/broker/replication), a pure
state machine. This module feeds it inputs and carries out the actions it queues, in order,
right after the call that produced them (`_execute`):

    inputs                                   from
    apply_metadata                           MetadataSync, for every new image
    append_as_leader                         Partition.append (Produce, group commits)
    on_follower_fetch                        the Fetch handler, for a follower's fetch
    on_fetch_response / on_fetch_failed /    ReplicaFetcher (fetcher.py), one task per
      on_leader_offsets                      leader broker
    on_alter_partition_response              the AlterPartition sender below
    tick                                     the ticker below, at next_deadline_ms()

Inputs that may change the log bytes (metadata, fetch answers, log start moves) run under the
partition lock, as appends do, so that no flush in a worker thread races a truncation; the
leader-side inputs (follower fetches, AlterPartition answers, ticks) never change the bytes and
run without it.

ISR changes go to the controller as AlterPartition (v3, topic ids and member broker epochs),
all pending partitions in one request, one request in flight, retried with backoff on a
transport failure or a top-level error, as Kafka's AlterPartitionManager does.

Durability follows Kafka: an acknowledged acks=all write is on every ISR member's log, not
necessarily on any disk; the leader epoch checkpoint is written (fsync) before records that
need its entry, and high watermarks are checkpointed every
replica.high.watermark.checkpoint.interval.ms.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Hashable

import anyio

from core.client.errors import KafkaError
from core.config.topic import is_throttled
from core.log.epochs import EpochEntry
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import iter_batch_headers

from . import (AlterPartitionAnswer, AppendAsFollower, BrokerInfo, CheckpointEpochs, CompleteProduce,
               HighWatermarkChanged, LogStartOffsetChanged, PartitionMetadata, PartitionReplica, RecordsLost,
               ReplicaLog, ReplicationConfig, SendAlterPartition, SendFetch, SendListOffsets, StopReplica,
               TruncateFullyAndStartAt, TruncateTo, UncleanLeadership)
from . import files as replica_files
from .fetcher import ReplicaFetcher
from .quota import ReplicationQuota

if TYPE_CHECKING:
    from ..partition import Partition

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 3
ALTER_RETRY_BACKOFF_S = 0.05
ALTER_TIMEOUT_S = 10.0


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class ReplicationWaiter:
    """An acks=all append waiting for the ISR."""
    done: asyncio.Event
    error: ErrorCode = ErrorCode.NONE


def recover_replica_log(partition, high_watermarks: dict[tuple[str, int], int]) -> ReplicaLog:
    """The replica's view of a log just opened (worker thread): the high watermark from the
    log dir's checkpoint, the epochs from the partition's checkpoint, or, when that file is
    missing, from the batch headers (a log written before replication kept epochs)."""
    plog = partition.log
    epochs = replica_files.read_leader_epochs(plog.directory)
    if epochs is None:
        epochs = _epochs_from_batches(plog)
    hw = high_watermarks.get((partition.topic, partition.index), 0)
    return ReplicaLog(plog.log_start_offset, plog.log_end_offset, hw, epochs)


def _epochs_from_batches(plog):
    entries: list[EpochEntry] = []
    offset, end = plog.log_start_offset, plog.log_end_offset
    while offset < end:
        data = plog.read(offset, 8 << 20, min_one_batch=True).data
        headers = list(iter_batch_headers(data))
        if not headers:
            break
        for h in headers:
            epoch = h.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1].epoch):
                entries.append(EpochEntry(epoch, h.base_offset))
        offset = headers[-1].next_offset
    return entries


class ReplicaManager:
    def __init__(self, broker, link):
        self.broker = broker
        self.link = link                       # KRaftLink: quorum image, controller channel
        self.node_id = broker.node_id
        self.config = broker.config
        self.clock = monotonic_ms
        self._seq = itertools.count()
        self._deadlines: list[tuple[int, int, Partition]] = []
        self._scheduled: dict[Partition, int] = {}   # partition -> its one live entry in _deadlines
        self._ticker_wake = asyncio.Event()
        self._waiters: dict[Hashable, ReplicationWaiter] = {}   # by the replica's request id
        self._alter_pending: dict[Partition, SendAlterPartition] = {}
        self._alter_wake = asyncio.Event()
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._fetching_from: dict[tuple[str, int], int] = {}   # partition -> leader it fetches from
        self._task_group = None
        self._hw_unwritten = False   # the last checkpoint write failed: write again
        # The high-watermark checkpoint, kept up to date from the partitions whose high
        # watermark moved (or that came or went) since the last write: a checkpoint costs the
        # changes, not a walk over every partition (None until the first full build).
        self._hw_marks: dict[Path, dict[tuple[str, int], int]] | None = None
        self._hw_changed: set = set()
        self._isrs: dict[tuple[str, int], frozenset[int]] = {}
        self.leader_quota = ReplicationQuota(lambda: self.throttle_rate("leader.replication.throttled.rate"),
                                             self.clock)
        self.follower_quota = ReplicationQuota(lambda: self.throttle_rate("follower.replication.throttled.rate"),
                                               self.clock)

    # ------------------------------------------------------------------ throttles

    def throttle_rate(self, name: str) -> int:
        """A replication throttle rate: this broker's dynamic config, else the cluster-wide
        dynamic default, else the node's properties."""
        image = self.link.quorum.loader.image
        for resource in (str(self.node_id), ""):
            value = image.broker_config(resource).get(name)
            if value is not None:
                try:
                    return int(value)
                except ValueError:
                    break
        return self.config[name]

    def _throttled(self, partition, config: str) -> bool:
        topic = self.broker.topics.get(partition.topic)
        replica = partition.replica
        if topic is None or replica is None:
            return False
        return is_throttled(topic.configs.get(config), partition.index, self.node_id)

    def is_leader_throttle_target(self, partition, follower_id: int) -> bool:
        """Does our leader throttle count this follower's fetches? Never an ISR member's."""
        return (partition.replica is not None and follower_id not in partition.replica.isr
                and self._throttled(partition, "leader.replication.throttled.replicas"))

    def is_follower_throttle_target(self, partition, caught_up: bool) -> bool:
        """Does our follower throttle count this partition? Not while we are caught up with
        the leader's high watermark (Kafka's fetch state isReplicaInSync: our own image of the
        ISR may be stale, e.g. right after a pause)."""
        return (partition.replica is not None and not caught_up
                and self._throttled(partition, "follower.replication.throttled.replicas"))

    # ------------------------------------------------------------------ setup

    def replication_config(self, topic) -> ReplicationConfig:
        return ReplicationConfig(
            replica_lag_time_max_ms=self.config["replica.lag.time.max.ms"],
            min_insync_replicas=topic.configs.get("min.insync.replicas"),
            replica_fetch_backoff_ms=self.config["replica.fetch.backoff.ms"])

    def attach(self, partition, topic, replica_log: ReplicaLog) -> None:
        """Give a partition just opened its replica (it serves nothing until metadata)."""
        partition.replica = PartitionReplica(
            self.node_id, self.link.lifecycle.broker_epoch, clock=self.clock,
            config=self.replication_config(topic), log=replica_log)
        partition.replicas = self
        self._hw_changed.add(partition)

    def topic_configs_changed(self, topic) -> None:
        for p in topic.partitions:
            if p is not None and p.replica is not None:
                p.replica.config = self.replication_config(topic)

    def broker_epoch(self, image) -> int:
        """This incarnation's broker epoch as the image has it; -1 until it is registered
        there (an image may still hold the previous incarnation's registration)."""
        reg = image.brokers.get(self.node_id)
        if reg is None or reg.incarnation_id != self.link.lifecycle.incarnation_id:
            return -1
        return reg.epoch

    async def apply_metadata(self, partition, reg, brokers: dict[int, BrokerInfo],
                             broker_epoch: int) -> None:
        """The image's registration of a local partition (MetadataSync). Nothing is led or
        followed before this incarnation is registered: fetches and ISR proposals carry the
        broker epoch, which the leader and the controller check."""
        if broker_epoch < 0:
            return
        replica = partition.replica
        meta = PartitionMetadata(reg.leader, reg.leader_epoch, reg.partition_epoch,
                                 tuple(reg.replicas), tuple(reg.isr), reg.leader_recovery_state)
        async with partition.lock:
            replica.broker_epoch = broker_epoch
            before = (replica.leader_id, replica.leader_epoch)
            replica.apply_metadata(meta, brokers)
            await self._execute(partition, locked=True)
            partition.is_leader = replica.is_leader
            partition.leader_epoch = max(replica.leader_epoch, 0)
            if (replica.leader_id, replica.leader_epoch) != before:
                partition.wake_waiters()   # fetches (and fetch sessions) learn of it now
                # Kafka logs each makeLeader/makeFollower: the first thing read after a loss.
                log.info("%s: %s in leader epoch %d (log end %d, high watermark %d, ISR %s)",
                         partition, "leader" if replica.is_leader else f"follower of {reg.leader}",
                         replica.leader_epoch, partition.log.log_end_offset,
                         replica.high_watermark, sorted(reg.isr))

    async def stop_replica(self, partition, delete: bool) -> None:
        """The partition leaves this broker (topic deleted, replica moved away)."""
        replica = partition.replica
        if replica is None:
            return
        async with partition.lock:
            replica.stop(delete)
            await self._execute(partition, locked=True)
            partition.replica = None
            partition.is_leader = False
            self._track_fetcher(partition)
            self._hw_changed.add(partition)   # leaves the checkpoint

    # ------------------------------------------------------------------ inputs

    def append_as_leader(self, partition, count: int, acks: int, timeout_ms: int):
        """Called by Partition.append under its lock, before the bytes are written: the
        replica's AppendResult, and for acks=all the waiter its CompleteProduce will end."""
        request_id = next(self._seq) if acks == -1 else None
        replicated = partition.replica.append_as_leader(count, acks=acks, request_id=request_id,
                                                        timeout_ms=timeout_ms)
        return replicated, self._waiter_for(replicated.pending, request_id)

    def _waiter_for(self, pending: bool, request_id: int | None) -> ReplicationWaiter | None:
        """The waiter a pending acks=all answer ends by. Only a pending answer gets one: its
        CompleteProduce comes from a later input, and an ISR of one (a one-node cluster) never
        waits, so most appends there allocate nothing."""
        if not pending:
            return None
        assert request_id is not None   # only acks=all waits
        waiter = self._waiters[request_id] = ReplicationWaiter(asyncio.Event())
        return waiter

    def duplicate_as_leader(self, partition, base_offset: int, last_offset: int, acks: int,
                            timeout_ms: int):
        """Called by Partition.append under its lock for a retried batch the log holds:
        (error, waiter); the waiter (acks=all) ends when the ISR has the original."""
        request_id = next(self._seq) if acks == -1 else None
        answer = partition.replica.duplicate_as_leader(base_offset, last_offset, acks=acks,
                                                       request_id=request_id, timeout_ms=timeout_ms)
        waiter = self._waiter_for(answer.pending, request_id)
        self._execute_sync(partition)
        return answer.error, waiter

    def appended(self, partition, replicated, waiter, result) -> None:
        """The bytes of an append_as_leader are in the log: carry out its actions."""
        if replicated.base_offset != result.base_offset:
            # The replica and the log disagree on the log end: nothing can be trusted.
            raise OSError(f"{partition!r}: log end {result.base_offset} is not the replica's "
                          f"{replicated.base_offset}")
        if replicated.pending:
            result.replication = waiter
        # An append changes neither the ISR nor whom we fetch from, so of _after_input only the
        # schedule applies (the ISR check falls due again). This runs for every produce request.
        for action in partition.replica.take_actions():
            if not self._do_light(partition, action):
                raise RuntimeError(f"{partition!r}: {action} needs the partition lock")
        self._schedule(partition)

    def answer_follower_fetch(self, partition, fetch, *, update_fetch_state: bool = True):
        answer = partition.replica.on_follower_fetch(fetch, update_fetch_state=update_fetch_state)
        self._execute_sync(partition)
        return answer

    def log_start_advanced(self, partition) -> None:
        """Retention or DeleteRecords moved the log start (caller holds the lock). The replica
        answers LogStartOffsetChanged, which on a leader the log has already done; followers
        follow when their fetches bring the new log start."""
        partition.replica.log_start_advanced(partition.log.log_start_offset)
        for action in partition.replica.take_actions():
            if isinstance(action, LogStartOffsetChanged) and action.log_start_offset <= partition.log.log_start_offset:
                continue
            if not self._do_light(partition, action):
                raise RuntimeError(f"{partition!r}: {action} needs the partition lock")
        self._after_input(partition)

    async def fetch_answered(self, partition, request_id: int, response, data) -> None:
        """A leader's answer to our SendFetch; `data` holds the fetched batches."""
        async with partition.lock:
            if partition.replica is None:
                return
            partition.replica.on_fetch_response(request_id, response)
            await self._execute(partition, locked=True, fetched=data)

    async def fetch_failed(self, partition, request_id: int) -> None:
        if partition.replica is not None:
            partition.replica.on_fetch_failed(request_id)
            self._execute_sync(partition)

    async def leader_offsets_answered(self, partition, request_id: int, answer) -> None:
        async with partition.lock:
            if partition.replica is None:
                return
            partition.replica.on_leader_offsets(request_id, answer)
            await self._execute(partition, locked=True)

    # ------------------------------------------------------------------ actions

    def _execute_sync(self, partition) -> None:
        """Carry out actions that never touch the log bytes (leader-side inputs)."""
        for action in partition.replica.take_actions():
            if not self._do_light(partition, action):
                raise RuntimeError(f"{partition!r}: {action} needs the partition lock")
        self._after_input(partition)

    def _after_input(self, partition) -> None:
        self._schedule(partition)
        self._count_isr_change(partition)
        self._track_fetcher(partition)

    def _track_fetcher(self, partition) -> None:
        """A partition that no longer follows the leader it fetched from leaves that leader's
        fetch session."""
        key = (partition.topic, partition.index)
        current = self._fetching_from.get(key)
        if current is None:
            return
        replica = partition.replica
        follower = replica.follower if replica is not None else None
        if follower is None or follower.leader_id != current:
            del self._fetching_from[key]
            fetcher = self._fetchers.get(current)
            if fetcher is not None:
                fetcher.remove(partition)

    def _count_isr_change(self, partition) -> None:
        """Kafka's IsrShrinksPerSec / IsrExpandsPerSec: changes of the committed ISR of a
        partition we lead, whether our AlterPartition answer or the metadata told us."""
        replica = partition.replica
        key = (partition.topic, partition.index)
        if replica is None or replica.leader is None:
            self._isrs.pop(key, None)
            return
        isr = replica.isr
        before = self._isrs.get(key)
        self._isrs[key] = isr
        if before is not None and isr != before:
            if len(isr) != len(before):
                metrics = self.broker.metrics
                (metrics.isr_shrinks if len(isr) < len(before) else metrics.isr_expands).inc()
            # A follower that left the ISR must be looked at by its fetch session again,
            # although it names nothing new, so that it can rejoin (fetch_session.py).
            partition.wake_waiters()

    async def _execute(self, partition, *, locked: bool, fetched=None) -> None:
        replica = partition.replica
        for action in replica.take_actions():
            if self._do_light(partition, action):
                continue
            plog = partition.log
            if isinstance(action, AppendAsFollower):
                data, batches = fetched.slice(action.base_offset, action.end_offset)
                await partition.append_as_follower(data, batches)
            elif isinstance(action, TruncateTo):
                log.info("%s: truncating from log end %d to %d (leader epoch %d)", partition,
                         plog.log_end_offset, action.offset, replica.leader_epoch)
                plog.truncate_to(action.offset)
                partition.truncated()
            elif isinstance(action, TruncateFullyAndStartAt):
                log.info("%s: emptied, starting at %d (leader epoch %d)", partition,
                         action.offset, replica.leader_epoch)
                plog.truncate_fully_and_start_at(action.offset)
                partition.truncated()
            elif isinstance(action, LogStartOffsetChanged):
                if action.log_start_offset > plog.log_start_offset:
                    plog.delete_records(action.log_start_offset)
            elif isinstance(action, StopReplica):
                pass   # MetadataSync removes partitions no longer assigned here
            else:
                raise RuntimeError(f"{partition!r}: unknown replica action {action}")
        self._after_input(partition)

    def _do_light(self, partition, action) -> bool:
        """Actions without log bytes; False for the ones that need the lock."""
        if isinstance(action, SendFetch) or isinstance(action, SendListOffsets):
            key = (partition.topic, partition.index)
            before = self._fetching_from.get(key)
            if before is not None and before != action.leader_id and before in self._fetchers:
                self._fetchers[before].remove(partition)
            self._fetching_from[key] = action.leader_id
            self._fetcher(action.leader_id).add(partition, action)
        elif isinstance(action, HighWatermarkChanged):
            self._hw_changed.add(partition)
            partition.wake_waiters()
        elif isinstance(action, CompleteProduce):
            waiter = self._waiters.pop(action.request_id, None)
            if waiter is not None:
                waiter.error = action.error
                waiter.done.set()
        elif isinstance(action, SendAlterPartition):
            self._alter_pending[partition] = action
            self._alter_wake.set()
        elif isinstance(action, CheckpointEpochs):
            # Small and rare (a leader change); durable before the records that need it.
            replica_files.write_leader_epochs(partition.log.directory, action.entries)
        elif isinstance(action, RecordsLost):
            self.broker.metrics.records_lost.inc(action.end_offset - action.start_offset)
            log.error("%r: truncated [%d, %d) below its high watermark after an unclean leader "
                      "election (epoch %d): those records are lost", partition,
                      action.start_offset, action.end_offset, action.leader_epoch)
        elif isinstance(action, UncleanLeadership):
            self.broker.metrics.unclean_leaderships.inc()
            log.error("%r: leading epoch %d after an unclean election from log end %d (high "
                      "watermark %d): records the old ISR held beyond it are lost", partition,
                      action.leader_epoch, action.log_end_offset, action.high_watermark)
        else:
            return False
        return True

    # ------------------------------------------------------------------ fetchers

    def _fetcher(self, leader_id: int):
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(self, leader_id)
            self._fetchers[leader_id] = fetcher
            if self._task_group is not None:
                self._task_group.start_soon(fetcher.run)
        return fetcher

    def leader_endpoint(self, leader_id: int) -> tuple[str, int] | None:
        reg = self.link.quorum.loader.image.brokers.get(leader_id)
        if reg is None:
            return None
        name = self.config.inter_broker_listener_name
        ep = next((e for e in reg.endpoints if e.name == name), None)
        return (ep.host, ep.port) if ep is not None else None

    # ------------------------------------------------------------------ background

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            for fetcher in self._fetchers.values():
                tg.start_soon(fetcher.run)
            tg.start_soon(self._run_ticker)
            tg.start_soon(self._run_alter_partition)
            tg.start_soon(self._run_hw_checkpoints)

    def _schedule(self, partition) -> None:
        replica = partition.replica
        if replica is None:
            return
        deadline = replica.next_deadline_ms()
        if deadline is None:
            return
        scheduled = self._scheduled.get(partition)
        if scheduled is not None and scheduled <= deadline:
            return   # the ticker wakes for it by then anyway (and reads the real deadline)
        self._scheduled[partition] = deadline
        if not self._deadlines or deadline < self._deadlines[0][0]:
            self._ticker_wake.set()
        heapq.heappush(self._deadlines, (deadline, next(self._seq), partition))

    async def _run_ticker(self) -> None:
        while True:
            now = self.clock()
            while self._deadlines and self._deadlines[0][0] <= now:
                due, _, partition = heapq.heappop(self._deadlines)
                if self._scheduled.get(partition) != due:
                    continue   # superseded by an earlier entry for the same partition
                del self._scheduled[partition]
                replica = partition.replica
                if replica is None:
                    continue
                deadline = replica.next_deadline_ms()
                if deadline is not None and deadline <= now:
                    replica.tick()
                    self._execute_sync(partition)
                else:
                    self._schedule(partition)
            wait = (self._deadlines[0][0] - now) / 1000 if self._deadlines else 1.0
            self._ticker_wake = asyncio.Event()
            with anyio.move_on_after(max(wait, 0.001)):
                await self._ticker_wake.wait()

    async def _run_alter_partition(self) -> None:
        """One AlterPartition in flight, holding every partition's latest proposal."""
        while True:
            if not self._alter_pending:
                self._alter_wake = asyncio.Event()
                await self._alter_wake.wait()
            batch, self._alter_pending = self._alter_pending, {}
            try:
                answers = await self._send_alter_partition(batch)
            except (KafkaError, OSError) as exc:
                log.info("AlterPartition not answered (%s); retrying", exc)
                for partition, action in batch.items():
                    self._alter_pending.setdefault(partition, action)
                await anyio.sleep(ALTER_RETRY_BACKOFF_S)
                continue
            for partition, action in batch.items():
                answer = answers.get((partition.topic, partition.index),
                                     AlterPartitionAnswer(ErrorCode.UNKNOWN_SERVER_ERROR))
                if partition.replica is not None:
                    partition.replica.on_alter_partition_response(action.request_id, answer)
                    self._execute_sync(partition)

    async def _send_alter_partition(self, batch) -> dict[tuple[str, int], AlterPartitionAnswer]:
        R = m.AlterPartitionRequest
        lifecycle = self.link.lifecycle
        by_topic: dict[str, list] = {}
        ids = {}
        for partition, action in batch.items():
            topic = self.broker.topics.get(partition.topic)
            if topic is None:
                continue
            ids[partition.topic] = topic.topic_id
            req = action.request
            by_topic.setdefault(partition.topic, []).append(R.PartitionData(
                partition_index=partition.index, leader_epoch=req.leader_epoch,
                new_isr=list(req.isr),
                new_isr_with_epochs=[R.BrokerState(broker_id=mb.broker_id, broker_epoch=mb.broker_epoch)
                                     for mb in req.new_isr],
                leader_recovery_state=req.leader_recovery_state, partition_epoch=req.partition_epoch))
        request = R(broker_id=self.node_id, broker_epoch=lifecycle.broker_epoch,
                    topics=[R.TopicData(topic_name=name, topic_id=ids[name], partitions=parts)
                            for name, parts in by_topic.items()])
        response = await self.link.channel.send(m.ApiKey.ALTER_PARTITION, request, ALTER_PARTITION_VERSION,
                                                ALTER_TIMEOUT_S)
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "AlterPartition refused")
        names = {t.topic_id: t.name for t in self.broker.topics.values()}
        answers = {}
        for t in response.topics:
            name = names.get(t.topic_id, t.topic_name)
            for p in t.partitions:
                answers[(name, p.partition_index)] = AlterPartitionAnswer(
                    ErrorCode(p.error_code), p.leader_id, p.leader_epoch, tuple(p.isr),
                    p.partition_epoch, p.leader_recovery_state)
        return answers

    async def _run_hw_checkpoints(self) -> None:
        interval = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            await self.checkpoint_high_watermarks()

    def _high_watermarks_by_dir(self) -> dict[Path, dict[tuple[str, int], int]]:
        by_dir: dict[Path, dict[tuple[str, int], int]] = {Path(d): {} for d in self.config.log_dirs}
        for p in self.broker.all_partitions():
            if p.replica is not None and not p.offline:
                by_dir.setdefault(p.log.directory.parent, {})[(p.topic, p.index)] = p.replica.high_watermark
        return by_dir

    @staticmethod
    def _write_high_watermarks(by_dir) -> None:
        for d, marks in by_dir.items():
            if d.exists():
                replica_files.write_high_watermarks(d, marks)

    def _updated_high_watermarks(self) -> dict[Path, dict[tuple[str, int], int]]:
        """The checkpoint's content now: the last one with the changed partitions applied."""
        changed, self._hw_changed = self._hw_changed, set()
        if self._hw_marks is None:
            self._hw_marks = self._high_watermarks_by_dir()
        else:
            live = [p for p in changed if p.replica is not None and not p.offline and not p.log.closed]
            # Those that left first: a topic deleted and created again has both under one name.
            for p in changed.difference(live):
                self._hw_marks.get(p.log.directory.parent, {}).pop((p.topic, p.index), None)
            for p in live:
                self._hw_marks.setdefault(p.log.directory.parent, {})[(p.topic, p.index)] = \
                    p.replica.high_watermark
        return {d: dict(marks) for d, marks in self._hw_marks.items()}   # the thread's own copy

    async def checkpoint_high_watermarks(self) -> None:
        if not self._hw_changed and not self._hw_unwritten:
            return
        self._hw_unwritten = False
        by_dir = self._updated_high_watermarks()
        try:
            await anyio.to_thread.run_sync(self._write_high_watermarks, by_dir)
        except OSError as exc:
            self._hw_unwritten = True
            log.error("cannot checkpoint high watermarks: %s", exc)

    def close(self) -> None:
        """At shutdown (worker thread, after the logs flushed): the last high watermarks."""
        try:
            self._write_high_watermarks(self._high_watermarks_by_dir())
        except OSError as exc:
            log.error("cannot checkpoint high watermarks: %s", exc)
