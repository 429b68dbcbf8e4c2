"""Admin operations on transactions (KIP-664), as Kafka's Java Admin does them:
describeProducers, describeTransactions, listTransactions and abortTransaction, and
fenceProducers (KIP-618).

`TxnAdmin` is a part of `Admin` (which inherits it), as GroupAdmin is.

Routing
-------
DescribeProducers goes to each partition's leader (or, with `broker_id`, to that broker, whose
replica answers whether it leads or follows). DescribeTransactions goes to each transactional
id's coordinator, found with FindCoordinator key type 1 (batched from v4, KIP-699), and so
does fence_producers' InitProducerId.
ListTransactions goes to every broker (each lists the ids it coordinates) and the answers are
merged. abort_transaction sends WriteTxnMarkers with an ABORT marker straight to the leader of
the partition where a transaction hangs, which is what `kafka-transactions abort` does: the
coordinator is not involved, so this is for transactions the coordinator has forgotten. It
needs CLUSTER_ACTION on the cluster, as markers from a coordinator do.

Retriable answers are retried, with the partition's leader or the id's coordinator looked up
again, until the admin's timeout: NOT_LEADER_OR_FOLLOWER (not when a `broker_id` was named, as
Kafka), NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS. Results
follow admin.py's convention: a dict from each item to its result or a KafkaError instance;
list_transactions and abort_transaction raise.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

from .admin_core import AdminCore
from .errors import UnsupportedVersionError

__all__ = ["TxnAdmin", "ProducerState", "TransactionDescription", "TransactionListing", "TRANSACTION_STATES",
           "transaction_state"]

TopicPartition = tuple[str, int]

FIND_COORDINATOR, WRITE_TXN_MARKERS = m.ApiKey.FIND_COORDINATOR, m.ApiKey.WRITE_TXN_MARKERS
INIT_PRODUCER_ID = m.ApiKey.INIT_PRODUCER_ID
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
TRANSACTION_KEY = 1     # FindCoordinator's key type for transactional ids

# The states a transaction can be listed in, by Kafka's names (its client's TransactionState).
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "PrepareEpochFence")

_UNKNOWN_TOPIC = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


def transaction_state(name: str) -> str:
    """Kafka's name of a transaction state, read case-insensitively ("ongoing" -> "Ongoing");
    ValueError naming the states for anything else."""
    for state in TRANSACTION_STATES:
        if state.lower() == name.strip().lower():
            return state
    raise ValueError(f"unknown transaction state {name!r} (one of {', '.join(TRANSACTION_STATES)})")


@dataclass(frozen=True)
class ProducerState:
    """One active producer of a partition, as its replica's producer state holds it."""
    producer_id: int
    producer_epoch: int
    last_sequence: int                           # -1: none
    last_timestamp: int                          # -1: none
    coordinator_epoch: int | None                # of the last marker written for it; None: none yet
    current_transaction_start_offset: int | None  # first offset of its open transaction; None: none


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    state: str                                   # Kafka's name: Empty, Ongoing, PrepareCommit, ...
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None        # None: no transaction started yet
    topic_partitions: tuple[TopicPartition, ...]  # sorted; those the caller may describe


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int                          # the broker that listed it


class TxnAdmin(AdminCore):
    """Mixed into Admin; uses its client, timeout and `_per_item` retry core (AdminCore)."""

    # ------------------------------------------------------------------ producers

    async def describe_producers(self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None
                                 ) -> dict[TopicPartition, list[ProducerState] | KafkaError]:
        """The active producers of each partition, sorted by producer id, from its leader (or
        from broker `broker_id`'s replica)."""
        R = m.DescribeProducersRequest
        final = _UNKNOWN_TOPIC | {ErrorCode.NOT_LEADER_OR_FOLLOWER} if broker_id is not None else _UNKNOWN_TOPIC

        async def one_node(node: int, group: dict[TopicPartition, None]):
            topics: dict[str, list[int]] = {}
            for t, p in sorted(group):
                topics.setdefault(t, []).append(p)
            resp = await self.client.send(node, R(topics=[R.TopicRequest(name=t, partition_indexes=ps)
                                                          for t, ps in topics.items()]),
                                          api_key=DESCRIBE_PRODUCERS)
            out: dict[TopicPartition, list[ProducerState] | KafkaError] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in group:
                        continue
                    if p.error_code:
                        where = f"broker {node}" if broker_id is not None else "the leader"
                        said = f" ({p.error_message})" if p.error_message else ""
                        out[tp] = KafkaError(p.error_code,
                                             f"describe producers of {t.name}-{p.partition_index} on {where}{said}")
                        continue
                    out[tp] = [ProducerState(
                        s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                        s.coordinator_epoch if s.coordinator_epoch >= 0 else None,
                        s.current_txn_start_offset if s.current_txn_start_offset >= 0 else None)
                        for s in sorted(p.active_producers, key=lambda s: s.producer_id)]
            return _fill(out, group)

        async def attempt(todo: dict[TopicPartition, None]):
            if broker_id is not None:
                await self.client.refresh_metadata([])
                if broker_id not in self.client.cluster.brokers:
                    raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not in the cluster")
                return await one_node(broker_id, todo)
            return await self._by_leader(todo, one_node)

        return await self._per_item(dict.fromkeys(partitions), attempt, final=final)

    async def _by_leader(self, todo: dict[TopicPartition, Any],
                         one_node: Callable[[int, dict[TopicPartition, Any]], Awaitable[dict[TopicPartition, Any]]]
                         ) -> dict[TopicPartition, Any]:
        """Group the partitions by leader and run `one_node(leader, group)` for each; a
        partition without a leader gets the error that says why."""
        await self.client.ensure_topics({t for t, _ in todo})
        cluster = self.client.cluster
        groups: dict[int, dict[TopicPartition, Any]] = {}
        out: dict[TopicPartition, Any] = {}
        for tp, spec in todo.items():
            leader = self.client.leader_for(*tp)
            if leader is not None:
                groups.setdefault(leader, {})[tp] = spec
                continue
            known = cluster.partitions_for(tp[0])
            info = cluster.topic(tp[0])
            if known is None:
                code = info.error if info is not None and info.error else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out[tp] = KafkaError(code, f"topic {tp[0]!r}")
            elif tp[1] not in known:
                out[tp] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"topic {tp[0]!r} has no partition {tp[1]}")
            else:
                out[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]}")
        outcomes = await asyncio.gather(*(one_node(n, g) for n, g in groups.items()), return_exceptions=True)
        for (_n, g), outcome in zip(groups.items(), outcomes):
            if isinstance(outcome, KafkaError):
                out.update({tp: outcome for tp in g})
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                out.update(outcome)
        return out

    # ------------------------------------------------------------------ transactions

    async def _find_txn_coordinators(self, ids: list[str]) -> dict[str, int | KafkaError]:
        """transactional id -> its coordinator's node id, or the KafkaError FindCoordinator
        answered (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on the id)."""
        conn = await self.client.connection(await self.client.any_node())
        R = m.FindCoordinatorRequest
        found: dict[str, tuple[int, str | None] | KafkaError] = {}
        if conn.supports(FIND_COORDINATOR, 4):
            resp = await conn.send(R(key_type=TRANSACTION_KEY, coordinator_keys=ids), api_key=FIND_COORDINATOR)
            for c in resp.coordinators:
                found[c.key] = (KafkaError(c.error_code, c.error_message or f"coordinator of transactional id {c.key!r}")
                                if c.error_code else (c.node_id, None))
        else:
            async def one(tid: str):
                resp = await conn.send(R(key=tid, key_type=TRANSACTION_KEY), api_key=FIND_COORDINATOR)
                if resp.error_code:
                    return KafkaError(resp.error_code, resp.error_message or f"coordinator of transactional id {tid!r}")
                return (resp.node_id, None)
            found.update(zip(ids, await asyncio.gather(*(one(t) for t in ids))))
        out: dict[str, int | KafkaError] = {}
        for tid in ids:
            res = found.get(tid, KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {tid!r}"))
            if isinstance(res, KafkaError):
                out[tid] = res
                continue
            node_id = res[0]
            if node_id not in self.client.cluster.brokers:
                await self.client.refresh_metadata([])
            out[tid] = node_id if node_id in self.client.cluster.brokers else KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {node_id} of {tid!r} is not in the metadata")
        return out

    async def describe_transactions(self, transactional_ids: Iterable[str]
                                    ) -> dict[str, TransactionDescription | KafkaError]:
        """State, producer, timeout, start time and partitions of each transactional id, from
        its coordinator; TRANSACTIONAL_ID_NOT_FOUND for an id it does not know."""
        R = m.DescribeTransactionsRequest

        async def one_node(node: int, group: dict[str, None]):
            resp = await self.client.send(node, R(transactional_ids=list(group)), api_key=DESCRIBE_TRANSACTIONS)
            out: dict[str, TransactionDescription | KafkaError] = {}
            for s in resp.transaction_states:
                if s.transactional_id not in group:
                    continue
                if s.error_code:
                    out[s.transactional_id] = KafkaError(s.error_code, f"describe transactional id "
                                                                       f"{s.transactional_id!r}")
                    continue
                out[s.transactional_id] = TransactionDescription(
                    node, s.transaction_state, s.producer_id, s.producer_epoch, s.transaction_timeout_ms,
                    s.transaction_start_time_ms if s.transaction_start_time_ms >= 0 else None,
                    tuple(sorted((t.topic, p) for t in s.topics for p in t.partitions)))
            return out

        async def attempt(todo: dict[str, None]):
            coordinators = await self._find_txn_coordinators(list(todo))
            out: dict[str, Any] = {}
            by_node: dict[int, dict[str, None]] = {}
            for tid, c in coordinators.items():
                if isinstance(c, KafkaError):
                    out[tid] = c
                else:
                    by_node.setdefault(c, {})[tid] = None
            outcomes = await asyncio.gather(*(one_node(n, g) for n, g in by_node.items()), return_exceptions=True)
            for (_n, g), outcome in zip(by_node.items(), outcomes):
                if isinstance(outcome, KafkaError):
                    out.update({tid: outcome for tid in g})
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    out.update(outcome)
            return _fill(out, todo)

        ids = list(dict.fromkeys(transactional_ids))
        if not ids:
            return {}
        return await self._per_item(dict.fromkeys(ids), attempt, final=frozenset())

    async def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                duration_ms: int = -1) -> list[TransactionListing]:
        """Every transactional id of the cluster (ListTransactions to each broker), sorted by
        id; only those in one of `states` (Kafka's names, read case-insensitively), of one of
        `producer_ids`, and with `duration_ms` >= 0 only transactions running longer than
        that (ListTransactions v1, KIP-994). An unknown state is a ValueError."""
        wanted_states = list(dict.fromkeys(transaction_state(s) for s in states))
        wanted_ids = list(dict.fromkeys(int(p) for p in producer_ids))
        await self.client.start()
        await self.client.call(lambda: self.client.refresh_metadata([]), timeout_ms=self.timeout_ms)

        async def one(node: int) -> list[TransactionListing]:
            async def once():
                conn = await self.client.connection(node)
                version = conn.version_for(LIST_TRANSACTIONS)
                if duration_ms >= 0 and version < 1:
                    raise UnsupportedVersionError(f"filtering transactions by duration needs ListTransactions v1; "
                                                  f"{conn} speaks v{version}")
                resp = await conn.send(m.ListTransactionsRequest(state_filters=wanted_states,
                                                                 producer_id_filters=wanted_ids,
                                                                 duration_filter=duration_ms),
                                       api_key=LIST_TRANSACTIONS, version=version)
                if resp.error_code:
                    raise KafkaError(resp.error_code, f"ListTransactions on broker {node}")
                return [TransactionListing(s.transactional_id, s.producer_id, s.transaction_state, node)
                        for s in resp.transaction_states]
            return await self.client.call(once, timeout_ms=self.timeout_ms)

        merged: dict[str, TransactionListing] = {}
        for listing in await asyncio.gather(*(one(n) for n in sorted(self.client.cluster.brokers))):
            for t in listing:
                merged.setdefault(t.transactional_id, t)
        return [merged[t] for t in sorted(merged)]

    # ------------------------------------------------------------------ fence

    async def fence_producers(self, transactional_ids: Iterable[str], *, transaction_timeout_ms: int = 60_000
                              ) -> dict[str, tuple[int, int] | KafkaError]:
        """Fence the producers of each transactional id, as Kafka's Admin.fenceProducers
        (KIP-618): InitProducerId with the id at its coordinator, which bumps the epoch and
        aborts the id's open transaction, so the producer that held it hears PRODUCER_FENCED
        and nothing it wrote in that transaction is ever committed. Each id's result is its
        (producer id, new epoch) or the KafkaError the coordinator answered
        (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without WRITE on the id). CONCURRENT_TRANSACTIONS,
        answered while the abort is written, is retried until the admin's timeout."""
        R = m.InitProducerIdRequest

        async def one(node: int, tid: str) -> tuple[int, int] | KafkaError:
            resp = await self.client.send(node, R(transactional_id=tid, transaction_timeout_ms=transaction_timeout_ms,
                                                  producer_id=-1, producer_epoch=-1), api_key=INIT_PRODUCER_ID)
            if resp.error_code:
                return KafkaError(resp.error_code, f"fence the producer of transactional id {tid!r}")
            return resp.producer_id, resp.producer_epoch

        async def attempt(todo: dict[str, None]):
            coordinators = await self._find_txn_coordinators(list(todo))
            pending = {tid: c for tid, c in coordinators.items() if not isinstance(c, KafkaError)}
            out: dict[str, Any] = {tid: c for tid, c in coordinators.items() if isinstance(c, KafkaError)}
            outcomes = await asyncio.gather(*(one(c, tid) for tid, c in pending.items()), return_exceptions=True)
            for tid, outcome in zip(pending, outcomes):
                if isinstance(outcome, BaseException) and not isinstance(outcome, KafkaError):
                    raise outcome
                out[tid] = outcome
            return _fill(out, todo)

        ids = list(dict.fromkeys(transactional_ids))
        if not ids:
            return {}
        # CONCURRENT_TRANSACTIONS is not retriable by Kafka's table, but it is how the
        # coordinator says "the abort is being written; ask again", and Kafka's admin asks again.
        return await self._per_item(dict.fromkeys(ids), attempt, final=frozenset(),
                                    also_retry=frozenset({ErrorCode.CONCURRENT_TRANSACTIONS}))

    # ------------------------------------------------------------------ abort

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, *, commit: bool = False) -> None:
        """Write an ABORT marker for (producer_id, producer_epoch) to the partition, at its
        leader, as a coordinator with `coordinator_epoch` would; raises the partition's error
        (CLUSTER_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
        ...). The epochs are the ones DescribeProducers shows for the hanging producer.
        `commit` writes a COMMIT marker instead: what `dr failover` does for a transaction a
        DR link had decided to commit but not yet marked everywhere (dr/failover.py)."""
        R = m.WriteTxnMarkersRequest
        tp = (topic, partition)

        async def one_node(node: int, group: dict[TopicPartition, None]):
            req = R(markers=[R.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                coordinator_epoch=coordinator_epoch,
                topics=[R.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])])
            resp = await self.client.send(node, req, api_key=WRITE_TXN_MARKERS)
            results = [
                p for mk in resp.markers if mk.producer_id == producer_id
                for t in mk.topics if t.name == topic for p in t.partitions if p.partition_index == partition]
            if len(results) != 1:
                return {tp: KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                       f"WriteTxnMarkers answered for other markers than {topic}-{partition}")}
            code = results[0].error_code
            what = "commit" if commit else "abort"
            return {tp: KafkaError(code, f"{what} the transaction of producer {producer_id} (epoch {producer_epoch}) "
                                         f"on {topic}-{partition}") if code else None}

        async def attempt(todo: dict[TopicPartition, None]):
            return await self._by_leader(todo, one_node)

        result = (await self._per_item({tp: None}, attempt))[tp]
        if isinstance(result, KafkaError):
            raise result


def _fill(out: dict, todo: Mapping) -> dict:
    for key in todo:
        out.setdefault(key, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {key!r}"))
    return out
