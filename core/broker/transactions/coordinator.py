"""The transaction coordinator as a pure state machine (Kafka's TransactionCoordinator and
TransactionStateManager, transaction protocol version 1).

    coord = TxnCoordinator(TxnConfig(), num_partitions=50)
    coord.load_partition(7, coordinator_epoch=3, records={...}, now_ms=...)  # now it leads 7
    actions = coord.handle(EndTxn(...))          # one request in, actions out
    actions = coord.handle(LogWritten(...))      # the driver reports a write
    actions = coord.tick(now_ms)                 # time out transactions, expire ids

Theory of operation
-------------------
Each transactional id lives in one `__transaction_state` partition (Java's String.hashCode,
as `__consumer_offsets`), and the broker that leads that partition coordinates it, with the
partition's leader epoch as its *coordinator epoch*: markers carry it, so that partition
leaders refuse markers from a coordinator that has since been replaced.

Per id, the coordinator holds the metadata last written to the log (`entry.meta`) and at most
one transition being written (`entry.pending`). A request that would change the metadata
emits `WriteTxnLog` and its answer waits for `LogWritten`; any other request for that id
meanwhile gets CONCURRENT_TRANSACTIONS, which clients retry. So the answers a client sees are
always backed by the log, and a coordinator that loads the partition after a crash resumes
from exactly what was answered.

A commit or abort is two writes with the markers between them: PrepareCommit/PrepareAbort is
written, the client is answered, the markers are written to every partition of the
transaction (`SendMarkers`, done by the driver with retries), and then CompleteCommit or
CompleteAbort is written. A coordinator that loads a partition re-sends the markers of every
transaction it finds prepared, so a decided transaction is always finished.

Producer fencing: InitProducerId bumps the epoch. If it finds a transaction ongoing, it
aborts it first with the epoch bumped (PrepareEpochFence, written as PrepareAbort), and asks
the client to retry (CONCURRENT_TRANSACTIONS), whose retry bumps the epoch again. Markers
with the bumped epoch fence the old producer on every partition it wrote, and its
coordinator requests get PRODUCER_FENCED. A transaction that outlives its timeout is
aborted the same way by `tick`.

Departures from Kafka, and why:
- An AddPartitionsToTxn that arrives while the producer's previous transaction is being
  completed (markers in flight) waits for CompleteX and is then served, instead of being
  answered CONCURRENT_TRANSACTIONS at once: the client's retry backoff (librdkafka: up to
  100 ms) was most of a transaction's cost. The driver bounds the wait (`Unpark`), after which
  the answer is Kafka's. When the markers are done, CompleteX and the waiting request's
  Ongoing are written as one batch of two records: the log holds Kafka's transitions, and a
  transaction costs one replicated write less.
- A failed epoch-fence write changes nothing in memory (state.py, prepare_fenced_abort).
- A failed Complete write is retried after `retry_backoff_ms` (Kafka re-queues it at once).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Hashable, Iterable, Optional

from core.protocol.errors import ErrorCode as E

from ..groups.storage import partition_for
from .events import (Action, AddPartitions, AddResult, EndResult, EndTxn, InitProducerId, InitResult,
                     LogWritten, MarkersWritten, NeedProducerId, Respond, Result, SendMarkers, Unpark, WriteTxnLog)
from .state import NO_PRODUCER_EPOCH, TxnMetadata, TxnState as S, epoch_exhausted


# The key of a __transaction_state record holds the id as a non-compact string (int16 length):
# a longer id could never be stored. Kafka fails to serialize it; we refuse it up front.
MAX_ID_BYTES = 32767


@dataclass(frozen=True)
class TxnConfig:
    """Kafka's broker properties, Kafka's defaults."""
    max_timeout_ms: int = 900_000                    # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000              # transactional.id.expiration.ms
    retry_backoff_ms: int = 100                      # a failed CompleteX write is retried after this


@dataclass
class _Pending:
    target: Optional[TxnMetadata]     # None: the tombstone of an expired id
    token: int
    request_id: Hashable = None       # the request answered when the write is done
    on_success: Optional[Result] = None
    on_failure: Callable[[E], Result] | None = None
    folded: Optional[AddPartitions] = None   # the parked request whose Ongoing follows CompleteX

    @property
    def completes(self) -> bool:
        """Whether this write ends a transaction (CompleteX, perhaps with the next Ongoing)."""
        return self.folded is not None or (self.target is not None and self.target.state.completed)


@dataclass
class _Entry:
    meta: TxnMetadata
    partition: int
    durable: bool = True              # False: created by InitProducerId, not in the log yet
    pending: Optional[_Pending] = None
    complete_retry_at: Optional[int] = None
    # AddPartitionsToTxn of the producer's next transaction, waiting for this one to complete
    parked: list[AddPartitions] = field(default_factory=list)


@dataclass(frozen=True)
class TxnDescription:
    coordinator_epoch: int
    meta: TxnMetadata


@dataclass
class TxnCoordinator:
    config: TxnConfig = field(default_factory=TxnConfig)
    num_partitions: int = 50
    entries: dict[str, _Entry] = field(default_factory=dict)
    # __transaction_state partitions this broker leads, and its coordinator epoch for each
    epochs: dict[int, int] = field(default_factory=dict)
    loading: set[int] = field(default_factory=set)
    _tokens: int = 0
    _out: list[Action] = field(default_factory=list)

    # ================================================================ entry points

    def handle(self, event) -> list[Action]:
        handler: Callable[[TxnCoordinator, Any], None] | None = self._HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"unknown event {type(event).__name__}")
        self._out = []
        handler(self, event)
        out, self._out = self._out, []
        return out

    def tick(self, now_ms: int, *, expire_ids: bool = False) -> list[Action]:
        """Abort the transactions that outlived their timeout, retry failed completions and,
        with `expire_ids`, remove ids idle for transactional.id.expiration.ms."""
        self._out = []
        for tid, entry in list(self.entries.items()):
            meta = entry.meta
            if entry.pending is not None or not entry.durable:
                continue
            if meta.state is S.ONGOING and meta.start_ms + meta.timeout_ms < now_ms:
                self._write(entry, meta.prepare_fenced_abort(now_ms))
            elif meta.state.preparing and entry.complete_retry_at is not None \
                    and entry.complete_retry_at <= now_ms:
                entry.complete_retry_at = None
                self._complete(entry, now_ms)
            elif expire_ids and meta.state.completed \
                    and meta.last_update_ms + self.config.id_expiration_ms <= now_ms:
                self._write(entry, None)
        out, self._out = self._out, []
        return out

    # ================================================================ partitions

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def begin_loading(self, partition: int) -> None:
        self.loading.add(partition)

    def load_partition(self, partition: int, coordinator_epoch: int,
                       records: dict[str, Optional[TxnMetadata]], now_ms: int) -> list[Action]:
        """This broker now leads `partition`: `records` is the latest value per id read from
        it (None: tombstoned). Prepared transactions get their markers sent again."""
        self._out = []
        self.loading.discard(partition)
        self.epochs[partition] = coordinator_epoch
        for tid, meta in records.items():
            if meta is None or meta.state is S.DEAD:
                continue
            entry = _Entry(meta, partition)
            self.entries[tid] = entry
            if meta.state.preparing:
                self._send_markers(entry)
        out, self._out = self._out, []
        return out

    def unload_partition(self, partition: int) -> list[Action]:
        """Another broker leads `partition` now. Requests waiting on a write answer
        NOT_COORDINATOR; a write still in flight is ignored when it reports back."""
        self._out = []
        self.loading.discard(partition)
        self.epochs.pop(partition, None)
        for tid in [t for t, e in self.entries.items() if e.partition == partition]:
            entry = self.entries.pop(tid)
            self._fail_pending(entry, E.NOT_COORDINATOR)
            for add in entry.parked:
                self._respond(add.request_id, AddResult(E.NOT_COORDINATOR))
        out, self._out = self._out, []
        return out

    # ================================================================ queries

    def describe(self, transactional_id: str) -> TxnDescription | E:
        code = self._where(transactional_id)
        if code:
            return code
        entry = self.entries.get(transactional_id)
        if entry is None or not entry.durable:
            return E.TRANSACTIONAL_ID_NOT_FOUND
        return TxnDescription(self.epochs[entry.partition], entry.meta)

    def listed(self, states: Iterable[S] = (), producer_ids: Iterable[int] = (),
               min_duration_ms: int = -1, now_ms: int = 0) -> list[TxnMetadata]:
        """ListTransactions: the durable ids, filtered as KIP-664 and KIP-994 say (an empty
        filter matches everything; the duration is of ongoing transactions)."""
        wanted_states, wanted_ids = frozenset(states), frozenset(producer_ids)
        out = []
        for entry in self.entries.values():
            meta = entry.meta
            if not entry.durable or (wanted_states and meta.state not in wanted_states) \
                    or (wanted_ids and meta.producer_id not in wanted_ids):
                continue
            if min_duration_ms >= 0 and (meta.state is not S.ONGOING or now_ms - meta.start_ms < min_duration_ms):
                continue
            out.append(meta)
        return out

    # ================================================================ requests

    def _where(self, transactional_id: str) -> E:
        partition = self.partition_of(transactional_id)
        if partition in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.epochs:
            return E.NOT_COORDINATOR
        return E.NONE

    def _on_init(self, ev: InitProducerId) -> None:
        def answer(code: E) -> None:
            self._respond(ev.request_id, InitResult(code))

        if not ev.transactional_id or len(ev.transactional_id.encode()) > MAX_ID_BYTES:
            return answer(E.INVALID_REQUEST)
        if not 0 < ev.timeout_ms <= self.config.max_timeout_ms:
            return answer(E.INVALID_TRANSACTION_TIMEOUT)
        code = self._where(ev.transactional_id)
        if code:
            return answer(code)
        entry = self.entries.get(ev.transactional_id)
        if entry is None:
            if ev.fresh_producer_id is None:
                self._out.append(NeedProducerId(ev))
                return
            entry = _Entry(TxnMetadata(ev.transactional_id, ev.fresh_producer_id, NO_PRODUCER_EPOCH,
                                       ev.timeout_ms, last_update_ms=ev.now_ms),
                           self.partition_of(ev.transactional_id), durable=False)
            self.entries[ev.transactional_id] = entry
            ev = InitProducerId(ev.request_id, ev.now_ms, ev.transactional_id, ev.timeout_ms,
                                ev.producer_id, ev.producer_epoch)   # that id is used now
        if entry.pending is not None:
            return answer(E.CONCURRENT_TRANSACTIONS)
        meta = entry.meta
        expected = ev.producer_id >= 0
        if expected and not _valid_producer_id(meta, ev.producer_id, ev.producer_epoch):
            return answer(E.PRODUCER_FENCED)
        if meta.state.preparing:
            return answer(E.CONCURRENT_TRANSACTIONS)
        if meta.state is S.ONGOING:
            # Abort it under a bumped epoch first; the client's retry bumps once more.
            self._write(entry, meta.prepare_fenced_abort(ev.now_ms), ev.request_id,
                        InitResult(E.CONCURRENT_TRANSACTIONS), lambda c: InitResult(c))
            return
        if not meta.state.completed:
            raise AssertionError(f"{ev.transactional_id} found in state {meta.state.kafka_name}")
        if epoch_exhausted(meta.producer_epoch) and (not expected or ev.producer_epoch == meta.producer_epoch):
            if ev.fresh_producer_id is None:
                self._out.append(NeedProducerId(ev))
                return
            target = meta.prepare_rotate_producer_id(ev.fresh_producer_id, ev.timeout_ms, ev.now_ms, expected)
        else:
            bumped = meta.prepare_increment_epoch(ev.timeout_ms, ev.producer_epoch if expected else None,
                                                  ev.now_ms)
            if bumped is None:
                return answer(E.PRODUCER_FENCED)
            target = bumped
        self._write(entry, target, ev.request_id,
                    InitResult(E.NONE, target.producer_id, target.producer_epoch), lambda c: InitResult(c))

    def _producer_entry(self, ev: AddPartitions | EndTxn) -> tuple[_Entry | None, E]:
        """The id's entry if the request's producer holds it (Kafka's checks, in its order),
        else the error to answer."""
        if not ev.transactional_id:
            return None, E.INVALID_REQUEST
        code = self._where(ev.transactional_id)
        if code:
            return None, code
        entry = self.entries.get(ev.transactional_id)
        if entry is None or not entry.durable or entry.meta.producer_id != ev.producer_id:
            return None, E.INVALID_PRODUCER_ID_MAPPING
        if entry.meta.producer_epoch != ev.producer_epoch:
            return None, E.PRODUCER_FENCED
        return entry, E.NONE

    def _on_add(self, ev: AddPartitions) -> None:
        def answer(code: E) -> None:
            self._respond(ev.request_id, AddResult(code))

        entry, code = self._producer_entry(ev)
        if entry is None:
            return answer(code)
        meta = entry.meta
        if meta.state.preparing and not ev.verify_only:
            # The producer's previous transaction is being completed (its markers, then
            # CompleteX): wait for that here rather than send the client away to retry.
            entry.parked.append(ev)
            return
        if entry.pending is not None or meta.state.preparing:
            return answer(E.CONCURRENT_TRANSACTIONS)
        if ev.verify_only:
            ongoing = meta.state is S.ONGOING
            self._respond(ev.request_id, AddResult(E.NONE, tuple(
                (tp, E.NONE if ongoing and tp in meta.partitions else E.INVALID_TXN_STATE)
                for tp in sorted(ev.partitions))))
            return
        if meta.state is S.ONGOING and ev.partitions <= meta.partitions:
            return answer(E.NONE)
        self._write(entry, meta.prepare_add_partitions(ev.partitions, ev.now_ms), ev.request_id,
                    AddResult(E.NONE), lambda c: AddResult(c))

    def _on_end(self, ev: EndTxn) -> None:
        def answer(code: E) -> None:
            self._respond(ev.request_id, EndResult(code))

        entry, code = self._producer_entry(ev)
        if entry is None:
            return answer(code)
        meta = entry.meta
        if entry.pending is not None:
            return answer(E.CONCURRENT_TRANSACTIONS)
        state = meta.state
        if state is S.ONGOING:
            self._write(entry, meta.prepare_end(ev.commit, ev.now_ms), ev.request_id, EndResult(E.NONE),
                        lambda c: EndResult(c))
            return
        same = ev.commit == (state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT))
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return answer(E.NONE if same else E.INVALID_TXN_STATE)      # a retry of a finished one
        if state.preparing:
            return answer(E.CONCURRENT_TRANSACTIONS if same else E.INVALID_TXN_STATE)
        return answer(E.INVALID_TXN_STATE)                               # Empty: nothing to end

    # ================================================================ driver reports

    def _on_log_written(self, ev: LogWritten) -> None:
        entry = self.entries.get(ev.transactional_id)
        pending = entry.pending if entry is not None else None
        if entry is None or pending is None or pending.token != ev.token:
            return   # unloaded meanwhile (its requests were answered then)
        entry.pending = None
        if ev.error:
            if not entry.durable:
                del self.entries[ev.transactional_id]
            elif entry.meta.state.preparing and pending.completes and ev.error != E.NOT_COORDINATOR:
                entry.complete_retry_at = ev.now_ms + self.config.retry_backoff_ms
            if pending.folded is not None:
                entry.parked.insert(0, pending.folded)     # it waits for the retried completion
            elif pending.request_id is not None and pending.on_failure is not None:
                self._respond(pending.request_id, pending.on_failure(ev.error))
            return
        if pending.target is None:
            del self.entries[ev.transactional_id]
        else:
            entry.meta, entry.durable = pending.target, True
            if entry.meta.state.preparing:
                self._send_markers(entry)
        if pending.request_id is not None and pending.on_success is not None:
            self._respond(pending.request_id, pending.on_success)
        if entry.parked and not entry.meta.state.preparing:
            parked, entry.parked = entry.parked, []
            for add in parked:
                self._on_add(add)

    def _on_unpark(self, ev: Unpark) -> None:
        """A parked AddPartitionsToTxn waited long enough (the previous transaction's markers
        are slow): the client is told to retry, as Kafka tells it at once."""
        entry = self.entries.get(ev.transactional_id)
        if entry is None:
            return
        for add in entry.parked:
            if add.request_id == ev.request_id:
                entry.parked.remove(add)
                self._respond(add.request_id, AddResult(E.CONCURRENT_TRANSACTIONS))
                return

    def _on_markers_written(self, ev: MarkersWritten) -> None:
        entry = self.entries.get(ev.transactional_id)
        if entry is None or entry.pending is not None:
            return
        meta = entry.meta
        if not meta.state.preparing or meta.producer_id != ev.producer_id \
                or meta.producer_epoch != ev.producer_epoch \
                or self.epochs.get(entry.partition) != ev.coordinator_epoch:
            return   # markers of another coordinator's or another transaction's round
        self._complete(entry, ev.now_ms)

    _HANDLERS: ClassVar[dict[type, Callable[["TxnCoordinator", Any], None]]] = {
        InitProducerId: _on_init, AddPartitions: _on_add, EndTxn: _on_end, LogWritten: _on_log_written,
        MarkersWritten: _on_markers_written, Unpark: _on_unpark}

    # ================================================================ helpers

    def _write(self, entry: _Entry, target: Optional[TxnMetadata], request_id: Hashable = None,
               on_success: Optional[Result] = None, on_failure: Callable[[E], Result] | None = None, *,
               preceding: tuple[TxnMetadata, ...] = (), folded: Optional[AddPartitions] = None) -> None:
        self._tokens += 1
        entry.pending = _Pending(target, self._tokens, request_id, on_success, on_failure, folded)
        self._out.append(WriteTxnLog(entry.meta.transactional_id, entry.partition,
                                     self.epochs[entry.partition], target, self._tokens, preceding))

    def _complete(self, entry: _Entry, now_ms: int) -> None:
        """Write CompleteX; if the producer's next AddPartitionsToTxn is parked, its Ongoing
        goes in the same batch, and it is answered when the batch is written."""
        meta = entry.meta
        complete = meta.prepare_complete(now_ms)
        add = next((a for a in entry.parked if a.producer_id == meta.producer_id
                    and a.producer_epoch == meta.producer_epoch), None)
        if add is None:
            self._write(entry, complete)
            return
        entry.parked.remove(add)
        self._write(entry, complete.prepare_add_partitions(add.partitions, now_ms), add.request_id,
                    AddResult(E.NONE), lambda c: AddResult(c), preceding=(complete,), folded=add)

    def _send_markers(self, entry: _Entry) -> None:
        meta = entry.meta
        self._out.append(SendMarkers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                                     self.epochs[entry.partition], meta.state is S.PREPARE_COMMIT,
                                     meta.partitions, meta.start_ms))

    def _fail_pending(self, entry: _Entry, code: E) -> None:
        pending, entry.pending = entry.pending, None
        if pending is not None and pending.request_id is not None and pending.on_failure is not None:
            self._respond(pending.request_id, pending.on_failure(code))

    def _respond(self, request_id: Hashable, result: Result) -> None:
        self._out.append(Respond(request_id, result))


def _valid_producer_id(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
    """KIP-360: may a producer that holds (producer_id, producer_epoch) re-initialise? Yes if
    the id is new, if it is the current producer id (its epoch is judged by the bump), or if
    it is the previous id and its epoch was exhausted: a retry after a rotation whose answer
    was lost."""
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
            or (producer_id == meta.last_producer_id and epoch_exhausted(producer_epoch)))


def map_append_error(code: E) -> E:
    """What a failed __transaction_state append means to the coordinator's caller (Kafka's
    TransactionStateManager.appendTransactionToLog)."""
    if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                E.REQUEST_TIMED_OUT):
        return E.COORDINATOR_NOT_AVAILABLE
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR, E.FENCED_LEADER_EPOCH):
        return E.NOT_COORDINATOR
    return E.UNKNOWN_SERVER_ERROR
