"""The group coordinator's driver: the only place where groups meet I/O and the clock.

Theory of operation
-------------------
Request handlers turn a request into an event and `await manager.request(event)`. The event
runs through the pure `Coordinator` at once, on the event loop, and comes back as actions.
Timer actions only wake the timer task; every other action joins an ordered pipeline that
one writer task executes: `PersistGroup` and `WriteOffsets` append records to the group's
`__consumer_offsets` partition, and a `Respond` resolves the future its handler waits on. A
response therefore never leaves before the records that precede it are in the log (the
`Ready` contract of etcd-raft), and records reach the log in the order they were decided.
An action batch with nothing to write, behind an empty pipeline, is answered on the spot, so
heartbeats do not queue behind anything.

Committed offsets are kept in `OffsetStore` and change only after their records are
appended, so the store always matches what a restart loads back.

Transactional offsets (TxnOffsetCommit, KIP-98/KIP-447) are appended as a transactional batch of
the producer's id and epoch, and wait in `_txn_pending` (producer id -> group -> offsets) until
the transaction's marker reaches the group's partition (`complete_transaction`): a commit
moves them into the store, an abort drops them. Loading does the same from the log: the offsets
of a transactional batch wait for their producer's marker, and those still waiting at the end
belong to transactions not decided yet. While a group has pending offsets for a partition,
OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for it.
Departure from Kafka: a committed transactional offset always replaces the stored one; Kafka
keeps whichever of the two was appended last. A broker coordinates the
groups of the `__consumer_offsets` partitions it leads: when it comes to lead one (on_metadata),
it reads that partition from its start, and the latest record per key wins (tombstones remove);
when it stops leading one, it forgets that partition's groups.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections import deque
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional

import anyio

from core.protocol.errors import DecodeError, KafkaError
from core.protocol.errors import ErrorCode as E
from core.protocol.records import ControlRecord, build_batch, decode_batch, iter_batch_headers, scan_batches

from ..producer_state import Verdict
from . import storage
from .coordinator import Coordinator, GroupConfig
from .events import (CancelTimer, CommitResult, DeleteGroups, DeleteResult, DescribeGroups, DescribeResult,
                     GroupDescription, GroupMetadataRecord, HeartbeatResult, JoinGroup, JoinResult, LeaveGroup, LeaveResult,
                     ListGroups, PersistGroup, Respond, ScheduleTimer, SyncGroup, SyncResult)
from .offsets import OffsetStore, TopicPartition
from .state import GroupState
from .storage import TOPIC, CommittedOffset, GroupKey, OffsetKey

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

# Append errors that mean another broker leads (or is about to lead) the group's partition.
_MOVED = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH, E.UNKNOWN_TOPIC_OR_PARTITION})


@dataclass(frozen=True)
class WriteOffsets:
    """Append offset records (None: tombstone), then apply them to the store."""
    group_id: str
    offsets: dict[TopicPartition, Optional[CommittedOffset]]


@dataclass(frozen=True)
class WriteTxnOffsets:
    """Append offsets as part of a producer's transaction; they stay pending until its marker."""
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: dict[TopicPartition, CommittedOffset]


@dataclass(frozen=True)
class DropTopicOffsets:
    """Tombstone every committed offset of a deleted topic that the store holds when the
    writer gets here, i.e. after the commits queued before it were applied."""
    topic: str


@dataclass(frozen=True)
class Signal:
    """Resolves a future once everything before it in the pipeline is done."""
    request_id: object


def _failed(result, code: E):
    """The answer a response gets when a write before it failed."""
    if isinstance(result, JoinResult):
        return JoinResult(code, member_id=result.member_id)
    if isinstance(result, SyncResult):
        return SyncResult(code)
    if isinstance(result, LeaveResult):
        return LeaveResult(code)
    if isinstance(result, DeleteResult):
        return DeleteResult(tuple((g, code) for g, _ in result.results))
    if isinstance(result, CommitResult):
        return CommitResult(code)
    return result


class GroupManager:
    def __init__(self, broker: "Broker"):
        self._loaded_partitions: set[int] = set()
        self.broker = broker
        cfg = broker.config
        self.num_partitions = cfg["offsets.topic.num.partitions"]
        self.retention_ms = cfg["offsets.retention.minutes"] * 60_000
        self.coordinator = Coordinator(GroupConfig(
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            max_size=cfg["group.max.size"]), seed=secrets.randbits(64))
        self.offsets = OffsetStore()
        self._ids = itertools.count()
        self._futures: dict[object, asyncio.Future] = {}
        self._pipeline: deque[list] = deque()
        # offsets queued for writing but not applied yet, per group: expiry must not judge
        # them (Kafka's pendingOffsetCommits)
        self._pending: dict[str, dict[TopicPartition, int]] = {}
        self._pipeline_ready = anyio.Event()
        self._timers_changed = anyio.Event()
        self._sleeping_until: Optional[int] = None
        self._topic_wanted = anyio.Event()   # a request found __consumer_offsets missing
        # transactional offsets awaiting their transaction's marker: producer id -> group -> offsets
        self._txn_pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}

    # ------------------------------------------------------------------ requests

    def new_request_id(self) -> int:
        return next(self._ids)

    def is_coordinator(self, group_id: str) -> bool:
        """Does this broker coordinate the group? When it leads the group's __consumer_offsets
        partition and has loaded it (Kafka's isCoordinatorForGroup); elsewhere group requests
        get NOT_COORDINATOR and the client asks FindCoordinator again."""
        index = self.coordinator_partition(group_id)
        if index is None:
            return False
        p = self.broker.topics[TOPIC].partitions[index]
        return p is not None and p.is_leader and index in self._loaded_partitions

    def _refuse(self, event):
        """NOT_COORDINATOR answers for the groups of `event` this broker does not coordinate,
        and the event narrowed to those it does (None when nothing is left to run)."""
        code = E.NOT_COORDINATOR
        if isinstance(event, (DescribeGroups, DeleteGroups)):
            mine = tuple(g for g in event.group_ids if self.is_coordinator(g))
            if len(mine) == len(event.group_ids):
                return None, event
            others = [g for g in event.group_ids if g not in mine]
            refused: DescribeResult | DeleteResult
            if isinstance(event, DescribeGroups):
                refused = DescribeResult(tuple(GroupDescription(g, code, "", "", "") for g in others))
            else:
                refused = DeleteResult(tuple((g, code) for g in others))
            return refused, (dataclasses.replace(event, group_ids=mine) if mine else None)
        if isinstance(event, ListGroups) or self.is_coordinator(event.group_id):
            return None, event
        if isinstance(event, JoinGroup):
            return JoinResult(code, member_id=event.member_id), None
        if isinstance(event, SyncGroup):
            return SyncResult(code), None
        if isinstance(event, LeaveGroup):
            return LeaveResult(code), None
        return HeartbeatResult(code), None

    async def request(self, event):
        """Run one coordinator event; returns the result the coordinator answers it with
        (possibly much later: a JoinGroup waits for the rebalance)."""
        refused, event = self._refuse(event)
        if event is None:
            return refused
        result = await self._request(event)
        if refused is None:
            return result
        if isinstance(result, DescribeResult):
            return DescribeResult(result.groups + refused.groups)
        return DeleteResult(result.results + refused.results)

    async def _request(self, event):
        future = self._future(event.request_id)
        self.submit(self.coordinator.handle(event))
        try:
            return await future
        finally:
            self._futures.pop(event.request_id, None)

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             instance_id: Optional[str],
                             offsets: dict[TopicPartition, CommittedOffset]) -> E:
        if not self.is_coordinator(group_id):
            return E.NOT_COORDINATOR
        err, actions = self.coordinator.validate_offset_commit(
            group_id, generation_id, member_id, instance_id, self.broker.clock())
        self.submit(actions)
        if err is not None:
            return err
        if not offsets:
            return E.NONE
        rid = self.new_request_id()
        future = self._future(rid)
        self.submit([WriteOffsets(group_id, dict(offsets)), Respond(rid, CommitResult(E.NONE))])
        try:
            return (await future).error
        finally:
            self._futures.pop(rid, None)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                                 member_id: str, instance_id: Optional[str],
                                 offsets: dict[TopicPartition, CommittedOffset]) -> E:
        """TxnOffsetCommit: NONE once the offsets are in the log as part of the producer's
        transaction (pending until its marker). A member's generation is checked as for
        OffsetCommit (v3+, KIP-447); without one (v0-2, or generation -1 and no member id) the
        group is not checked, as Kafka."""
        if not self.is_coordinator(group_id):
            return E.NOT_COORDINATOR
        now = self.broker.clock()
        if generation_id >= 0 or member_id or instance_id is not None:
            err, actions = self.coordinator.validate_offset_commit(group_id, generation_id, member_id,
                                                                   instance_id, now)
            self.submit(actions)
            if err is not None:
                return err
        else:
            self.coordinator.ensure_group(group_id, now)
        if not offsets:
            return E.NONE
        rid = self.new_request_id()
        future = self._future(rid)
        self.submit([WriteTxnOffsets(group_id, producer_id, producer_epoch, dict(offsets)),
                     Respond(rid, CommitResult(E.NONE))])
        try:
            return (await future).error
        finally:
            self._futures.pop(rid, None)

    def complete_transaction(self, producer_id: int, partition_index: int, commit: bool) -> None:
        """The producer's transaction marker is on __consumer_offsets partition
        `partition_index`: its pending offsets for the groups of that partition are committed
        or dropped (Kafka's GroupCoordinator.onTransactionCompleted)."""
        pending = self._txn_pending.get(producer_id)
        topic = self.broker.topics.get(TOPIC)
        if not pending or topic is None:
            return
        count = len(topic.partitions)
        for gid in [g for g in pending if storage.partition_for(g, count) == partition_index]:
            offsets = pending.pop(gid)
            if commit:
                for tp, c in offsets.items():
                    self.offsets.put(gid, tp, c)
                self.coordinator.ensure_group(gid, self.broker.clock())
        if not pending:
            del self._txn_pending[producer_id]

    def has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        """A transaction not decided yet holds an offset of this partition (KIP-447)."""
        return any(tp in groups.get(group_id, ()) for groups in self._txn_pending.values())

    def fetch_offsets(self, group_id: str, tps: Optional[list[TopicPartition]]
                      ) -> Mapping[TopicPartition, Optional[CommittedOffset]]:
        if tps is None:
            return self.offsets.all(group_id)
        return {tp: self.offsets.get(group_id, tp) for tp in tps}

    async def delete_offsets(self, group_id: str, tps: list[TopicPartition]) -> None:
        await self._write_and_wait([WriteOffsets(group_id, {tp: None for tp in tps})])

    def group_state(self, group_id: str) -> Optional[GroupState]:
        group = self.coordinator.groups.get(group_id)
        return None if group is None else group.state

    async def on_topic_deleted(self, topic: str) -> None:
        """Committed offsets of a deleted topic go with it (Kafka's onPartitionsDeleted)."""
        self.submit([DropTopicOffsets(topic)])

    def unload_all(self) -> None:
        """Shutdown: answer every parked JoinGroup/SyncGroup with NOT_COORDINATOR, so that
        members look for the coordinator again instead of holding the node up."""
        now = self.broker.clock()
        for gid in list(self.coordinator.groups):
            self.submit(self.coordinator.unload_group(gid, now))

    # ------------------------------------------------------------------ pipeline

    def _future(self, request_id) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._futures[request_id] = future
        return future

    def _resolve(self, request_id, result) -> None:
        future = self._futures.get(request_id)
        if future is not None and not future.done():
            future.set_result(result)
        # else: the requester went away (connection closed); the coordinator moved on already

    def submit(self, actions: list) -> None:
        ordered = []
        for action in actions:
            if isinstance(action, ScheduleTimer):
                if self._sleeping_until is None or action.at_ms < self._sleeping_until:
                    self._timers_changed.set()
            elif not isinstance(action, CancelTimer):
                ordered.append(action)
        if not ordered:
            return
        if not self._pipeline and all(isinstance(a, (Respond, Signal)) for a in ordered):
            for a in ordered:
                self._resolve(a.request_id, a.result if isinstance(a, Respond) else None)
            return
        for a in ordered:
            if isinstance(a, WriteOffsets):
                pending = self._pending.setdefault(a.group_id, {})
                for tp in a.offsets:
                    pending[tp] = pending.get(tp, 0) + 1
        self._pipeline.append(ordered)
        self._pipeline_ready.set()

    def _applied(self, action) -> None:
        """A queued WriteOffsets is done (written, failed or skipped): no longer pending."""
        if not isinstance(action, WriteOffsets):
            return
        pending = self._pending.get(action.group_id)
        if pending is None:
            return
        for tp in action.offsets:
            n = pending.get(tp, 0) - 1
            if n > 0:
                pending[tp] = n
            else:
                pending.pop(tp, None)
        if not pending:
            del self._pending[action.group_id]

    async def _write_and_wait(self, actions: list) -> None:
        rid = self.new_request_id()
        future = self._future(rid)
        self.submit(actions + [Signal(rid)])
        try:
            await future
        finally:
            self._futures.pop(rid, None)

    async def run_writer(self) -> None:
        while True:
            while not self._pipeline:
                self._pipeline_ready = anyio.Event()
                await self._pipeline_ready.wait()
            batch = self._pipeline[0]
            try:
                await self._execute(batch)
            finally:
                self._pipeline.popleft()

    async def _execute(self, batch: list) -> None:
        failure: Optional[E] = None
        for action in batch:
            if isinstance(action, Respond):
                result = action.result if failure is None else _failed(action.result, failure)
                self._resolve(action.request_id, result)
            elif isinstance(action, Signal):
                self._resolve(action.request_id, None)
            elif failure is not None:
                self._applied(action)
                continue   # later writes of a batch whose earlier write failed are not made
            else:
                try:
                    if isinstance(action, PersistGroup):
                        await self._persist_group(action)
                    elif isinstance(action, WriteOffsets):
                        await self._write_offsets(action)
                    elif isinstance(action, WriteTxnOffsets):
                        await self._write_txn_offsets(action)
                    elif isinstance(action, DropTopicOffsets):
                        await self._drop_topic_offsets(action.topic)
                except KafkaError as exc:
                    log.error("group %s: cannot write to %s: %s", getattr(action, "group_id", "*"),
                              TOPIC, exc)
                    failure = E(exc.code)
                except Exception:
                    # never let the writer die: that would take the node down and leave
                    # every queued request unanswered
                    log.exception("group %s: unexpected error writing to %s",
                                  getattr(action, "group_id", "*"), TOPIC)
                    failure = E.UNKNOWN_SERVER_ERROR
                finally:
                    self._applied(action)

    async def _persist_group(self, action: PersistGroup) -> None:
        gid = action.group_id
        if action.metadata is not None:
            await self._append(gid, [(storage.group_key(gid), storage.group_value(action.metadata))])
            return
        # a deleted group takes its offsets with it
        records: list[tuple[bytes, Optional[bytes]]] = [
            (storage.offset_key(gid, t, p), None) for t, p in self.offsets.all(gid)]
        records.append((storage.group_key(gid), None))
        await self._append(gid, records)
        self.offsets.remove_group(gid)

    async def _write_offsets(self, action: WriteOffsets) -> None:
        gid = action.group_id
        records = [(storage.offset_key(gid, t, p), None if c is None else storage.offset_value(c))
                   for (t, p), c in action.offsets.items()]
        await self._append(gid, records, commit=True)
        removed = [tp for tp, c in action.offsets.items() if c is None]
        for tp, c in action.offsets.items():
            if c is not None:
                self.offsets.put(gid, tp, c)
        self.offsets.remove(gid, removed)

    async def _write_txn_offsets(self, action: WriteTxnOffsets) -> None:
        gid = action.group_id
        records: list[tuple[bytes, Optional[bytes]]] = [
            (storage.offset_key(gid, t, p), storage.offset_value(c)) for (t, p), c in action.offsets.items()]
        await self._append(gid, records, commit=True, producer=(action.producer_id, action.producer_epoch))
        self._txn_pending.setdefault(action.producer_id, {}).setdefault(gid, {}).update(action.offsets)

    async def _drop_topic_offsets(self, topic: str) -> None:
        for gid in self.offsets.groups():
            gone = [tp for tp in self.offsets.all(gid) if tp[0] == topic]
            if gone:
                try:
                    await self._write_offsets(WriteOffsets(gid, dict.fromkeys(gone)))
                except KafkaError as exc:
                    log.error("group %s: cannot remove offsets of deleted topic %s: %s", gid, topic, exc)

    async def _append(self, group_id: str, records: list[tuple[bytes, Optional[bytes]]],
                      commit: bool = False, producer: Optional[tuple[int, int]] = None) -> None:
        await self.ensure_topic()
        topic = self.broker.topics.get(TOPIC)
        if topic is None:
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE, f"{TOPIC} is not available")
        partition = topic.partition(storage.partition_for(group_id, len(topic.partitions)))
        if partition is None:
            # Another broker leads this group's partition, so it coordinates the group.
            raise KafkaError(E.NOT_COORDINATOR, f"this broker does not lead the group's {TOPIC} partition")
        if not partition.is_leader:
            raise KafkaError(E.NOT_COORDINATOR, f"this broker does not lead the group's {TOPIC} partition")
        now = self.broker.clock()
        if producer is None:
            data = bytearray(build_batch([(k, v, None, now) for k, v in records]))
        else:
            data = bytearray(build_batch([(k, v, None, now) for k, v in records], producer_id=producer[0],
                                         producer_epoch=producer[1], transactional=True))
        limit = topic.configs.get("max.message.bytes")
        if len(data) > limit:
            raise KafkaError(E.INVALID_COMMIT_OFFSET_SIZE if commit else E.UNKNOWN_SERVER_ERROR,
                                   f"a {len(data)}-byte batch exceeds max.message.bytes {limit}")
        try:
            result = await partition.append(data, scan_batches(data), now, coordinator=producer is not None)
        except OSError as exc:
            raise KafkaError(E.COORDINATOR_NOT_AVAILABLE, str(exc)) from None
        code = result if isinstance(result, E) else await partition.wait_replicated(result)
        if isinstance(result, Verdict):
            raise KafkaError(result.code, result.message)   # a fenced producer's offsets
        if code:
            # As Kafka's GroupMetadataManager maps a failed append of the group's records.
            raise KafkaError(E.NOT_COORDINATOR if code in _MOVED else E.COORDINATOR_NOT_AVAILABLE,
                                   f"writing {TOPIC} failed: {code.name}")

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` on first use, as Kafka does on the first FindCoordinator.

        The controller creates it, which takes a quorum commit (and blocks for as long as the
        quorum has no majority); the request that asked must not wait for that, since
        responses on a connection go out in order and a client's fetches would queue behind
        it. So, as Kafka does, the creation runs in the background (run_topic_creator) and the
        caller gets COORDINATOR_NOT_AVAILABLE, which clients retry.
        """
        if TOPIC in self.broker.topics:
            return
        self._topic_wanted.set()
        raise KafkaError(E.COORDINATOR_NOT_AVAILABLE, f"{TOPIC} is being created")

    def _topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "compression.type": "producer",
                "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"])}

    async def run_topic_creator(self) -> None:
        """Create __consumer_offsets through the controller when a request wanted it."""
        while True:
            await self._topic_wanted.wait()
            if TOPIC not in self.broker.topics:
                assert self.broker.kraft is not None   # the node links the broker before it serves
                codes = await self.broker.kraft.create_topics(
                    [TOPIC], self.num_partitions, self.broker.config["offsets.topic.replication.factor"],
                    self._topic_configs())
                if TOPIC not in self.broker.topics:
                    log.info("%s not created yet (%s); will retry when asked", TOPIC,
                             codes.get(TOPIC, E.NONE).name)
                    await anyio.sleep(0.1)
            self._topic_wanted = anyio.Event()

    # ------------------------------------------------------------------ timers and expiry

    async def run_timers(self) -> None:
        while True:
            self._timers_changed = anyio.Event()
            deadline = self.coordinator.next_deadline()
            self._sleeping_until = deadline
            if deadline is None:
                await self._timers_changed.wait()
                continue
            delay = (deadline - self.broker.clock()) / 1000
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self._timers_changed.wait()
                continue
            self._sleeping_until = None
            self.submit(self.coordinator.tick(self.broker.clock()))

    async def run_expiry(self) -> None:
        interval = self.broker.config["offsets.retention.check.interval.ms"] / 1000
        while True:
            await anyio.sleep(interval)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """Remove expired offsets, then Empty groups left with none; returns how many
        offsets expired."""
        now = self.broker.clock()
        expired_total = 0
        for gid in set(self.offsets.groups()) | set(self.coordinator.groups):
            group = self.coordinator.groups.get(gid)
            stable = group is not None and group.state is GroupState.STABLE
            pending = self._pending.get(gid, {})
            expired = [tp for tp in self.offsets.expired(
                gid, now, self.retention_ms,
                has_protocol=bool(group is not None and group.protocol_type),
                is_empty=group is None or group.state is GroupState.EMPTY,
                empty_since_ms=group.state_timestamp_ms if group is not None else -1,
                subscribed=self.coordinator.subscribed_topics(gid) if stable else None)
                if tp not in pending]
            if expired:
                expired_total += len(expired)
                await self._write_and_wait([WriteOffsets(gid, {tp: None for tp in expired})])
            if not self.offsets.has_offsets(gid) and gid not in self._pending:
                actions = self.coordinator.remove_group_if_empty(gid, now)
                if actions:
                    await self._write_and_wait(actions)
        if expired_total:
            log.info("expired %d committed offsets", expired_total)
        return expired_total

    # ------------------------------------------------------------------ loading

    async def on_metadata(self, image) -> None:
        """Load the __consumer_offsets partitions this broker has come to lead (their
        groups are coordinated here from now on)."""
        topic = self.broker.topics.get(TOPIC)
        if topic is None:
            return
        gone = [i for i in self._loaded_partitions
                if i >= len(topic.partitions) or (p := topic.partitions[i]) is None or not p.is_leader]
        for index in gone:
            self._unload_partition(index, len(topic.partitions))
        new = [p for p in topic.partitions
               if p is not None and p.is_leader and p.index not in self._loaded_partitions]
        if new:
            # On the event loop: loading changes the coordinator's state, which requests are
            # using meanwhile.
            self.load_partitions(new)

    def _unload_partition(self, index: int, count: int) -> None:
        """Another broker leads this __consumer_offsets partition now: forget its groups (their
        parked requests answer NOT_COORDINATOR), as Kafka's onResignation does."""
        self._loaded_partitions.discard(index)
        now = self.broker.clock()
        groups = set(self.coordinator.groups) | set(self.offsets.groups()) | {
            g for pending in self._txn_pending.values() for g in pending}
        mine = [g for g in groups if storage.partition_for(g, count) == index]
        for gid in mine:
            if gid in self.coordinator.groups:
                self.submit(self.coordinator.unload_group(gid, now))
            self.offsets.remove_group(gid)
        for pid in list(self._txn_pending):
            pending = self._txn_pending[pid]
            for gid in mine:
                pending.pop(gid, None)
            if not pending:
                del self._txn_pending[pid]
        log.info("%s-%d is led elsewhere now: unloaded %d groups", TOPIC, index, len(mine))

    def coordinator_partition(self, group_id: str) -> int | None:
        topic = self.broker.topics.get(TOPIC)
        return None if topic is None else storage.partition_for(group_id, len(topic.partitions))

    def load_partitions(self, partitions) -> None:
        groups: dict[str, Optional[GroupMetadataRecord]] = {}
        skipped = 0
        self._loaded_partitions.update(p.index for p in partitions)
        for partition in partitions:
            # producer id -> offsets of its transaction read so far, until its marker
            undecided: dict[int, list[tuple[str, TopicPartition, CommittedOffset]]] = {}
            plog = partition.log
            offset, end = plog.log_start_offset, plog.log_end_offset
            while offset < end:
                read = plog.read(offset, 8 << 20, min_one_batch=True)
                for info in iter_batch_headers(read.data):
                    if info.base_offset + info.last_offset_delta < offset:
                        continue
                    try:
                        skipped += self._load_batch(read.data, info, offset, groups, undecided)
                    except DecodeError as exc:
                        skipped += 1
                        log.warning("%r offset %d: unreadable batch skipped: %s", partition, info.base_offset, exc)
                # move past whole batches, not past the last record: compaction keeps a batch's
                # last offset when it drops its last records (and may leave batches empty)
                if read.next_offset <= offset:
                    break
                offset = read.next_offset
            for pid, pending in undecided.items():
                for gid, tp, c in pending:
                    self._txn_pending.setdefault(pid, {}).setdefault(gid, {})[tp] = c
        now = self.broker.clock()
        for gid, record in groups.items():
            if record is not None:
                self.coordinator.load_group(gid, record, now)
        for gid in self.offsets.groups():
            self.coordinator.ensure_group(gid, now)
        log.info("loaded %d groups and offsets of %d groups from %s%s", len(self.coordinator.groups),
                 len(self.offsets.groups()), TOPIC, f" ({skipped} records skipped)" if skipped else "")

    def _load_batch(self, data, info, offset: int, groups: dict,
                    undecided: dict[int, list[tuple[str, TopicPartition, CommittedOffset]]]) -> int:
        """Apply one batch read at load; returns how many records were skipped."""
        records = decode_batch(data, info)
        if info.is_control:
            marker = next((r for r in records if isinstance(r, ControlRecord)), None)
            pending = undecided.pop(info.producer_id, [])
            if marker is not None and marker.type == 1:
                for gid, tp, c in pending:
                    self.offsets.put(gid, tp, c)
            return 0
        skipped = 0
        for rec in records:
            if isinstance(rec, ControlRecord) or rec.offset < offset or rec.key is None:
                continue
            if info.is_transactional:
                k = storage.decode_key(rec.key)
                if isinstance(k, OffsetKey) and rec.value is not None:
                    undecided.setdefault(info.producer_id, []).append(
                        (k.group, (k.topic, k.partition), storage.decode_offset_value(rec.value)))
                continue
            skipped += not self._load_record(rec.key, rec.value, groups)
        return skipped

    def _load_record(self, key, value, groups: dict) -> bool:
        k = storage.decode_key(key)
        if isinstance(k, OffsetKey):
            if value is None:
                self.offsets.remove(k.group, [(k.topic, k.partition)])
            else:
                self.offsets.put(k.group, (k.topic, k.partition), storage.decode_offset_value(value))
            return True
        if isinstance(k, GroupKey):
            groups[k.group] = None if value is None else storage.decode_group_value(value)
            return True
        return False   # a record type of a newer group protocol
