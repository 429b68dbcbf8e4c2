"""The transaction coordinator's driver: where the pure `TxnCoordinator` meets the log, the
clock, the producer id allocator and the other brokers.

Theory of operation
-------------------
A handler turns a request into an event and `await manager.request(event)`. The event runs
through the coordinator at once, on the event loop, and its actions are carried out:

- `WriteTxnLog` appends its records (one batch) to the id's `__transaction_state` partition, with acks=all
  (the partition's min.insync.replicas applies), in a task of its own, and reports back with
  `LogWritten`. The coordinator keeps at most one write in flight per transactional id, so
  writes of one id never overtake each other, while different ids write concurrently.
- `SendMarkers` runs a marker task (markers.py) that writes the commit or abort marker to every
  partition of the transaction, here or on other brokers, retrying until each is written or
  gone, and reports back with `MarkersWritten`.
- `NeedProducerId` allocates an id from the controller's blocks and submits the request again.
- `Respond` resolves the future the handler waits on.

A broker coordinates the ids of the `__transaction_state` partitions it leads, with the
partition's leader epoch as its coordinator epoch. When it comes to lead one (`on_metadata`)
it reads the partition from its start (the latest record per id wins) and loads it; the
coordinator then re-sends the markers of every prepared transaction. When it stops leading
one, or the leader epoch changes, the partition is unloaded: waiting requests answer
NOT_COORDINATOR, its marker tasks are cancelled, and late write reports are ignored.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any, Optional

import anyio

from core.protocol.errors import DecodeError, ErrorCode as E, KafkaError
from core.protocol.records import build_batch, iter_records, scan_batches

from . import storage
from .coordinator import TxnConfig, TxnCoordinator, map_append_error
from ..groups.storage import partition_for
from .events import (AddPartitions, AddResult, EndResult, InitProducerId, InitResult, LogWritten, MarkersWritten,
                     NeedProducerId, Respond, SendMarkers, Unpark, WriteTxnLog)
from .markers import MarkerSender
from .state import TxnMetadata

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

TOPIC = storage.TOPIC
# How long an AddPartitionsToTxn may wait for the producer's previous transaction to complete
# before it is answered CONCURRENT_TRANSACTIONS (coordinator.py, "Departures").
PARKED_WAIT_S = 2.0


def _refused(event, code: E):
    if isinstance(event, InitProducerId):
        return InitResult(code)
    if isinstance(event, AddPartitions):
        return AddResult(code)
    return EndResult(code)


class TxnManager:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        cfg = broker.config
        self.coordinator = TxnCoordinator(
            TxnConfig(max_timeout_ms=cfg["transaction.max.timeout.ms"],
                      id_expiration_ms=cfg["transactional.id.expiration.ms"]),
            num_partitions=cfg["transaction.state.log.num.partitions"])
        self.markers = MarkerSender(broker)
        self._ids = itertools.count()
        self._futures: dict[Any, asyncio.Future] = {}
        self._loaded: dict[int, int] = {}        # partition -> the leader epoch it was loaded at
        self._marker_scopes: dict[str, tuple[int, anyio.CancelScope]] = {}
        self._tg: Optional[anyio.abc.TaskGroup] = None
        self._topic_wanted = anyio.Event()

    # ------------------------------------------------------------------ requests

    def new_request_id(self) -> int:
        return next(self._ids)

    async def request(self, event):
        """Run one request event; returns its result once the coordinator answers."""
        if self._tg is None:
            return _refused(event, E.COORDINATOR_NOT_AVAILABLE)
        future = asyncio.get_running_loop().create_future()
        self._futures[event.request_id] = future
        try:
            self._execute(self.coordinator.handle(event))
            if isinstance(event, AddPartitions) and not event.verify_only and not future.done():
                # parked behind the previous transaction's completion, for a while at most
                with anyio.move_on_after(PARKED_WAIT_S):
                    return await asyncio.shield(future)
                self._execute(self.coordinator.handle(Unpark(event.transactional_id, event.request_id)))
            return await future
        finally:
            self._futures.pop(event.request_id, None)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     tp: tuple[str, int]) -> E:
        """KIP-890 part 1, for a partition leader about to append a transaction's first batch:
        is `tp` in the producer's ongoing transaction? Asks the id's coordinator, here or on
        another broker (AddPartitionsToTxn v4, VerifyOnly). Returns the coordinator's answer
        for the partition, or the error that kept it from answering."""
        index = self.coordinator_partition(transactional_id)
        kraft = self.broker.kraft
        reg = kraft.image.partition(TOPIC, index) if kraft is not None and index is not None else None
        if reg is None or reg.leader < 0:
            return E.COORDINATOR_NOT_AVAILABLE
        if reg.leader == self.broker.config["node.id"]:
            result = await self.request(AddPartitions(self.new_request_id(), self.broker.clock(), transactional_id,
                                                      producer_id, producer_epoch, frozenset({tp}), verify_only=True))
            assert isinstance(result, AddResult)
            return result.error_for(tp)
        return await self.markers.verify_remotely(reg.leader, transactional_id, producer_id, producer_epoch, tp)

    def describe(self, transactional_id: str):
        return self.coordinator.describe(transactional_id)

    def coordinator_partition(self, transactional_id: str) -> Optional[int]:
        topic = self.broker.topics.get(TOPIC)
        return None if topic is None else partition_for(transactional_id, len(topic.partitions))

    # ------------------------------------------------------------------ actions

    def _execute(self, actions) -> None:
        for action in actions:
            if isinstance(action, Respond):
                future = self._futures.get(action.request_id)
                if future is not None and not future.done():
                    future.set_result(action.result)
            elif isinstance(action, WriteTxnLog):
                self._spawn(self._write, action)
            elif isinstance(action, SendMarkers):
                self._spawn(self._send_markers, action)
            elif isinstance(action, NeedProducerId):
                self._spawn(self._allocate, action.event)
            else:
                raise AssertionError(f"unknown action {action!r}")

    def _spawn(self, fn, *args) -> None:
        assert self._tg is not None
        self._tg.start_soon(fn, *args)

    async def _allocate(self, event: InitProducerId) -> None:
        try:
            pid = await self.broker.allocate_producer_id()
        except KafkaError as exc:
            future = self._futures.get(event.request_id)
            if future is not None and not future.done():
                future.set_result(InitResult(E(exc.code)))
            return
        self._execute(self.coordinator.handle(InitProducerId(
            event.request_id, self.broker.clock(), event.transactional_id, event.timeout_ms,
            event.producer_id, event.producer_epoch, fresh_producer_id=pid)))

    async def _write(self, w: WriteTxnLog) -> None:
        try:
            code = await self._append(w)
        except Exception:
            # the coordinator must hear back, or the id would wait on this write forever
            log.exception("%s: unexpected error writing %s", w.transactional_id, TOPIC)
            code = E.UNKNOWN_SERVER_ERROR
        if code:
            log.warning("%s: writing %s failed: %s", w.transactional_id, TOPIC, code.name)
        mapped = map_append_error(code) if code else E.NONE
        self._execute(self.coordinator.handle(LogWritten(w.transactional_id, w.token, self.broker.clock(), mapped)))

    async def _append(self, w: WriteTxnLog) -> E:
        topic = self.broker.topics.get(TOPIC)
        partition = topic.partition(w.partition) if topic is not None else None
        if partition is None or not partition.is_leader or partition.leader_epoch != w.coordinator_epoch:
            return E.NOT_LEADER_OR_FOLLOWER
        now = self.broker.clock()
        key = storage.key_bytes(w.transactional_id)
        data = bytearray(build_batch([(key, None if md is None else storage.value_bytes(md), None, now)
                                      for md in w.records]))
        try:
            result = await partition.append(data, scan_batches(data), now, acks=-1,
                                            timeout_ms=self.broker.config["request.timeout.ms"])
        except OSError:
            return E.KAFKA_STORAGE_ERROR
        if isinstance(result, E):
            return result
        return await partition.wait_replicated(result)

    async def _send_markers(self, m: SendMarkers) -> None:
        partition = self.coordinator.partition_of(m.transactional_id)
        with anyio.CancelScope() as scope:
            self._marker_scopes[m.transactional_id] = (partition, scope)
            try:
                done = await self.markers.send(m)
            finally:
                if self._marker_scopes.get(m.transactional_id, (None, None))[1] is scope:
                    del self._marker_scopes[m.transactional_id]
            if done:
                self._execute(self.coordinator.handle(MarkersWritten(
                    m.transactional_id, m.producer_id, m.producer_epoch, m.coordinator_epoch, self.broker.clock())))

    # ------------------------------------------------------------------ background

    async def run(self) -> None:
        """The manager's tasks: writes, markers and allocations it spawns, the timeout
        checks, and the creation of __transaction_state when first wanted."""
        cfg = self.broker.config
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._run_ticks, cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"], False)
                tg.start_soon(self._run_ticks, cfg["transaction.remove.expired.transaction.cleanup.interval.ms"], True)
                tg.start_soon(self._run_topic_creator)
        finally:
            self._tg = None
            await self.markers.close()

    async def _run_ticks(self, interval_ms: int, expire_ids: bool) -> None:
        while True:
            await anyio.sleep(interval_ms / 1000)
            self._execute(self.coordinator.tick(self.broker.clock(), expire_ids=expire_ids))

    def unload_all(self) -> None:
        """Shutdown: waiting requests answer NOT_COORDINATOR, so clients look elsewhere."""
        for partition in list(self._loaded):
            self._unload(partition)

    # ------------------------------------------------------------------ topic

    async def ensure_topic(self) -> None:
        """As GroupManager.ensure_topic: the first FindCoordinator for a transactional id has
        the controller create __transaction_state, in the background; meanwhile the answer
        is COORDINATOR_NOT_AVAILABLE, which clients retry."""
        if TOPIC in self.broker.topics:
            return
        self._topic_wanted.set()
        raise KafkaError(E.COORDINATOR_NOT_AVAILABLE, f"{TOPIC} is being created")

    def _topic_settings(self) -> tuple[int, int, dict[str, str]]:
        """Replication factor and configs. As Kafka, the topic is created with
        transaction.state.log.replication.factor replicas, so a cluster that has fewer brokers
        registered yet waits (FindCoordinator answers COORDINATOR_NOT_AVAILABLE) rather than
        keeping its transactions on fewer replicas for good. The exception is a one-node
        cluster (no controller.quorum.voters), which never has more brokers to wait for:
        there the factor is capped at the brokers registered, where Kafka's own single-node
        configuration sets it to 1. min.insync.replicas is capped at the factor."""
        cfg = self.broker.config
        rf = cfg["transaction.state.log.replication.factor"]
        if cfg.single_node:
            rf = max(1, min(rf, self._registered_brokers()))
        min_isr = min(cfg["transaction.state.log.min.isr"], rf)
        return rf, min_isr, {"cleanup.policy": "compact", "compression.type": "uncompressed",
                             "min.insync.replicas": str(min_isr), "unclean.leader.election.enable": "false",
                             "segment.bytes": str(cfg["transaction.state.log.segment.bytes"])}

    def _registered_brokers(self) -> int:
        assert self.broker.kraft is not None
        return sum(not b.fenced for b in self.broker.kraft.image.brokers.values())

    async def _run_topic_creator(self) -> None:
        while True:
            await self._topic_wanted.wait()
            if TOPIC not in self.broker.topics:
                assert self.broker.kraft is not None
                rf, _, configs = self._topic_settings()
                if (registered := self._registered_brokers()) < rf:
                    log.warning("%s is not created while %d of the %d brokers its replication factor needs "
                                "(transaction.state.log.replication.factor) are registered; transactional "
                                "clients are told COORDINATOR_NOT_AVAILABLE meanwhile", TOPIC, registered, rf)
                    await anyio.sleep(1.0)
                    self._topic_wanted = anyio.Event()
                    continue
                codes = await self.broker.kraft.create_topics(
                    [TOPIC], self.broker.config["transaction.state.log.num.partitions"], rf, configs)
                if TOPIC not in self.broker.topics:
                    log.info("%s not created yet (%s); will retry when asked", TOPIC,
                             codes.get(TOPIC, E.NONE).name)
                    await anyio.sleep(0.1)
            self._topic_wanted = anyio.Event()

    # ------------------------------------------------------------------ loading

    async def on_metadata(self, image) -> None:
        """Load the __transaction_state partitions this broker has come to lead; unload those
        it no longer leads (or leads under a new epoch: a new coordinator epoch)."""
        topic = self.broker.topics.get(TOPIC)
        if topic is None:
            return
        self.coordinator.num_partitions = len(topic.partitions)
        for index, epoch in list(self._loaded.items()):
            p = topic.partition(index)
            if p is None or not p.is_leader or p.leader_epoch != epoch:
                self._unload(index)
        for p in topic.partitions:
            if p is not None and p.is_leader and p.index not in self._loaded:
                self._load(p)

    def _unload(self, index: int) -> None:
        self._loaded.pop(index, None)
        for tid, (partition, scope) in list(self._marker_scopes.items()):
            if partition == index:
                scope.cancel()
                del self._marker_scopes[tid]
        self._execute(self.coordinator.unload_partition(index))
        log.info("%s-%d is led elsewhere now: its transactional ids are unloaded", TOPIC, index)

    def _load(self, partition) -> None:
        """Read the partition (on the event loop: loading changes the coordinator's state,
        which requests use meanwhile) and hand its latest records to the coordinator."""
        records: dict[str, Optional[TxnMetadata]] = {}
        skipped = 0
        plog = partition.log
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            read = plog.read(offset, 8 << 20, min_one_batch=True)
            for rec in iter_records(read.data):
                if rec.offset < offset or rec.key is None:
                    continue
                try:
                    tid = storage.decode_key(rec.key)
                    if tid is None:
                        skipped += 1
                        continue
                    records[tid] = storage.decode_value(tid, rec.value)
                except DecodeError as exc:
                    skipped += 1
                    log.warning("%r offset %d: unreadable record skipped: %s", partition, rec.offset, exc)
            if read.next_offset <= offset:
                break
            offset = read.next_offset
        self._loaded[partition.index] = partition.leader_epoch
        self._execute(self.coordinator.load_partition(partition.index, partition.leader_epoch, records,
                                                      self.broker.clock()))
        live = sum(1 for m in records.values() if m is not None)
        log.info("%s-%d loaded at coordinator epoch %d: %d transactional ids%s", TOPIC, partition.index,
                 partition.leader_epoch, live, f" ({skipped} records skipped)" if skipped else "")

