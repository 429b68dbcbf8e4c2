"""Transaction markers: the control batches that end a transaction on each of its partitions,
how a partition leader appends them, and how the coordinator gets them written.

A marker is a control batch (attributes transactional + control) of the producer's id and
epoch, with one record: key = version int16 (0) + type int16 (ABORT 0, COMMIT 1), value =
version int16 (0) + the coordinator epoch int32, then what names the transaction (its start
and its partition count per topic, core/protocol/txn_markers.py), which Kafka's readers
ignore. Kafka's layout, so Kafka's consumers skip them and read_committed ones end the
transaction with them.

`append_markers` is the leader's side, shared by the WriteTxnMarkers handler and by a
coordinator that leads the partition itself: per partition, the producer state checks the
marker (an older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED), the batch is appended with acks=all, and a marker on a
`__consumer_offsets` partition makes that producer's pending transactional offsets visible or
drops them (KIP-98's TxnOffsetCommit).

`MarkerSender.send` is the coordinator's side (Kafka's TransactionMarkerChannelManager):
partitions are grouped by their leader, written, and the ones that failed with a retriable
error are tried again after a backoff that doubles up to a second, until every partition has
its marker or is gone (its topic was deleted). A coordinator or producer fence stops the
round: another coordinator owns the transaction now.

Requests to another broker are combined, as Kafka's channel manager drains its queue per
broker into one request: one WriteTxnMarkers (and one verifying AddPartitionsToTxn) is in
flight per broker at a time, and what the other transactions ask for meanwhile goes in the
next one, together (`_Combiner`). Many producers committing at once then cost the leaders
one request per round trip instead of one per transaction; one producer alone waits no
longer than before.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable

import anyio

from core.client.connection import BrokerConnection
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from core.protocol.records import build_batch
from core.protocol.txn_markers import TxnShape, encode_marker_value, marker_key

from .events import SendMarkers
from .state import TopicPartition

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

GROUPS_TOPIC = "__consumer_offsets"

# Errors after which the coordinator stops: the transaction is someone else's now.
_STOP = frozenset({E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED})
# Errors that mean the partition is gone for good: its marker is not needed.
_GONE = frozenset({E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID})
BACKOFF_S = (0.02, 1.0)


def marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                 now_ms: int, shape: TxnShape | None = None) -> bytearray:
    value = encode_marker_value(coordinator_epoch, shape)
    return bytearray(build_batch([(marker_key(commit), value, None, now_ms)], producer_id=producer_id,
                                 producer_epoch=producer_epoch, transactional=True, control=True))


async def append_markers(broker: "Broker", producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool, partitions: Iterable[TopicPartition],
                         shape: TxnShape | None = None) -> dict[TopicPartition, E]:
    """Append one transaction's marker to each of `partitions` this broker leads (naming the
    transaction with `shape` when its coordinator sent one); the error per partition (NONE
    once the ISR holds it)."""
    results: dict[TopicPartition, E] = {}
    waiting = []
    for tp in partitions:
        topic = broker.topics.get(tp[0])
        partition, code = broker.leader_partition(topic, tp[1])
        if partition is None:
            results[tp] = code
            continue
        try:
            result = await partition.append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                                   broker.clock(), timeout_ms=broker.config["request.timeout.ms"],
                                                   shape=shape)
        except OSError as exc:
            log.error("%s-%d: marker append failed: %s", tp[0], tp[1], exc)
            results[tp] = E.KAFKA_STORAGE_ERROR
            continue
        if isinstance(result, E):
            results[tp] = result
        else:
            waiting.append((tp, partition, result))
    for tp, partition, result in waiting:
        code = await partition.wait_replicated(result)
        results[tp] = code
        if not code and tp[0] == GROUPS_TOPIC:
            broker.groups.complete_transaction(producer_id, tp[1], commit)
    return results


class _Ask:
    """One transaction's part of a combined request, and its answer once sent."""
    __slots__ = ("item", "answer")

    def __init__(self, item):
        self.item = item
        self.answer = None


class _Combiner:
    """Per broker, one request in flight; what is asked meanwhile waits and goes in the next
    request, all together. The caller that takes the broker's lock with its own ask still
    unanswered sends everything queued by then; `send` answers each ask of the batch, and
    whatever it leaves unanswered (it raised, or its caller was cancelled) gets `failed`."""

    def __init__(self, send, failed):
        self._send = send
        self._failed = failed
        self._queued: dict[int, list[_Ask]] = defaultdict(list)
        self._locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)   # as Partition's lock

    async def ask(self, node_id: int, item):
        mine = _Ask(item)
        queue = self._queued[node_id]
        queue.append(mine)
        async with self._locks[node_id]:
            if mine.answer is None:
                batch = list(queue)         # `mine` among them: a holder answers all it takes
                queue.clear()
                try:
                    await self._send(node_id, batch)
                finally:
                    for a in batch:
                        if a.answer is None:
                            a.answer = self._failed(a.item)
        return mine.answer


class MarkerSender:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._markers = _Combiner(self._send_markers,
                                  lambda item: dict.fromkeys(item[1], E.NOT_LEADER_OR_FOLLOWER))
        self._verifications = _Combiner(self._send_verifications, lambda item: E.COORDINATOR_NOT_AVAILABLE)

    async def send(self, marker: SendMarkers) -> bool:
        """True once every partition has the marker (or is gone); False if fenced."""
        remaining = set(marker.partitions)
        delay = BACKOFF_S[0]
        while remaining:
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in remaining:
                leader = self._leader_of(tp)
                if leader is None:
                    continue
                by_leader[leader].append(tp)
            gone = [tp for tp in remaining if self._leader_of(tp) is None and self._deleted(tp)]
            remaining.difference_update(gone)
            results: dict[TopicPartition, E] = {}
            async with anyio.create_task_group() as tg:
                for leader, tps in by_leader.items():
                    tg.start_soon(self._write_to, leader, marker, tps, results)
            for tp, code in results.items():
                if code == E.NONE or code in _GONE:
                    remaining.discard(tp)
                elif code in _STOP:
                    log.info("%s: markers stopped: %s on %s-%d", marker.transactional_id, code.name, *tp)
                    return False
                else:
                    log.debug("%s: marker on %s-%d: %s; will retry", marker.transactional_id, tp[0], tp[1], code.name)
            if remaining:
                await anyio.sleep(delay)
                delay = min(delay * 2, BACKOFF_S[1])
        return True

    def _leader_of(self, tp: TopicPartition) -> int | None:
        kraft = self.broker.kraft
        reg = kraft.image.partition(tp[0], tp[1]) if kraft is not None else None
        if reg is None or reg.leader < 0:
            return None
        return reg.leader

    def _deleted(self, tp: TopicPartition) -> bool:
        kraft = self.broker.kraft
        return kraft is not None and kraft.image.partition(tp[0], tp[1]) is None

    async def _write_to(self, leader: int, marker: SendMarkers, tps: list[TopicPartition],
                        results: dict[TopicPartition, E]) -> None:
        shape = TxnShape.of(marker.start_ms, marker.partitions) if marker.start_ms >= 0 else None
        if leader == self.broker.config["node.id"]:
            results.update(await append_markers(self.broker, marker.producer_id, marker.producer_epoch,
                                                marker.coordinator_epoch, marker.commit, tps, shape))
            return
        results.update(await self._markers.ask(leader, (marker, tps, shape)))

    async def _send_markers(self, leader: int, batch: list[_Ask]) -> None:
        """One WriteTxnMarkers with every transaction's markers in `batch` for `leader`; each
        ask's answer is its partitions' errors."""
        R = m.WriteTxnMarkersRequest
        entries = []
        for ask in batch:
            marker, tps, shape = ask.item
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, index in tps:
                by_topic[topic].append(index)
            entries.append(R.WritableTxnMarker(
                producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
                topics=[R.WritableTxnMarkerTopic(name=t, partition_indexes=ix) for t, ix in by_topic.items()],
                seaway_transaction_start_ms=-1 if shape is None else shape.start_ms,
                seaway_transaction_topics=[R.SeawayTransactionTopic(name=t, partition_count=n)
                                           for t, n in ((shape.topics or ()) if shape is not None else ())]))
        try:
            conn = await self._connection(leader)
            response = await conn.send(R(markers=entries))
        except (KafkaError, OSError, anyio.BrokenResourceError, TimeoutError) as exc:
            log.debug("markers to broker %d failed: %s", leader, exc)
            await self._drop(leader)
            return          # each ask is answered as failed (retriable)
        # The answer lists the markers in the request's order (Kafka's handler keeps it).
        for ask, result in zip(batch, response.markers):
            marker, tps, _ = ask.item
            if result.producer_id != marker.producer_id:
                break
            codes = {(t.name, p.partition_index): E(p.error_code) for t in result.topics for p in t.partitions}
            ask.answer = {tp: codes.get(tp, E.UNKNOWN_SERVER_ERROR) for tp in tps}
        for ask in batch:
            if ask.answer is None:
                ask.answer = dict.fromkeys(ask.item[1], E.UNKNOWN_SERVER_ERROR)

    async def verify_remotely(self, node_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                              tp: TopicPartition) -> E:
        """AddPartitionsToTxn v4 with VerifyOnly to the coordinator on `node_id` (KIP-890),
        combined with the other verifications waiting for that broker."""
        return await self._verifications.ask(node_id, (transactional_id, producer_id, producer_epoch, tp))

    async def _send_verifications(self, node_id: int, batch: list[_Ask]) -> None:
        R = m.AddPartitionsToTxnRequest
        # One entry per transactional id (the request's key): asks for the same id go in
        # separate requests, each in its turn.
        first: dict[str, _Ask] = {}
        for ask in batch:
            first.setdefault(ask.item[0], ask)
        now = list(first.values())
        later = [a for a in batch if first[a.item[0]] is not a]
        request = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=[R.AddPartitionsToTxnTopic(name=tp[0], partitions=[tp[1]])])
            for tid, pid, epoch, tp in (a.item for a in now)])
        try:
            conn = await self._connection(node_id)
            response = await conn.send(request, version=min(4, conn.version_for(m.ApiKey.ADD_PARTITIONS_TO_TXN)))
        except (KafkaError, OSError, anyio.BrokenResourceError, TimeoutError) as exc:
            log.debug("verification with broker %d failed: %s", node_id, exc)
            await self._drop(node_id)
            return
        if response.error_code:
            for ask in now:
                ask.answer = E(response.error_code)
        by_id = {txn.transactional_id: txn for txn in response.results_by_transaction}
        for ask in (a for a in now if a.answer is None):
            tid, _, _, tp = ask.item
            txn = by_id.get(tid)
            codes = {(t.name, p.partition_index): p.partition_error_code
                     for t in (txn.topic_results if txn is not None else ()) for p in t.results_by_partition}
            ask.answer = E(codes[tp]) if tp in codes else E.UNKNOWN_SERVER_ERROR
        if later:
            await self._send_verifications(node_id, later)

    async def _connection(self, node_id: int) -> BrokerConnection:
        async with self._connecting[node_id]:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            replicas = self.broker.kraft.replicas if self.broker.kraft is not None else None
            address = replicas.leader_endpoint(node_id) if replicas is not None else None
            if address is None:
                raise KafkaError(E.LEADER_NOT_AVAILABLE, f"broker {node_id} has no inter-broker endpoint")
            cfg = self.broker.config
            listener = cfg.inter_broker_listener_name
            conn = BrokerConnection(*address, node_id=node_id, client_id=f"broker-{cfg['node.id']}-txn-markers",
                                    request_timeout_ms=cfg["request.timeout.ms"],
                                    local_address=cfg["client.local.address"],
                                    ssl_context=cfg.client_tls(listener), sasl=cfg.client_sasl(listener))
            await conn.connect()
            self._connections[node_id] = conn
            return conn

    async def _drop(self, node_id: int) -> None:
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for node_id in list(self._connections):
                await self._drop(node_id)
