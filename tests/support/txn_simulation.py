"""A seeded simulation of the pure transaction coordinator (core/broker/transactions).

One coordinator leads two `__transaction_state` partitions. Producers (two per transactional
id, so that one fences the other) send InitProducerId, AddPartitionsToTxn and EndTxn over a
network that delays and reorders; some name their id and epoch (KIP-360), some are fenced
and carry on as zombies with their old epoch. The driver plays the log: writes land in order
per partition, a share of them fail, and a crash of a partition's leader lands some of the
writes in flight without telling anyone, then the partition is loaded again from what the log
holds, under a new coordinator epoch. Markers take a while and may finish after the crash, as
the old coordinator's.

Checked after every event (`_check_*`; a violation raises InvalidTransition or
InvariantViolation):
- the log only ever holds Kafka's transitions for each id: partitions only grow while
  ongoing, are the same in the prepare record, and are empty once complete; the epoch only
  goes up, by one per bump, or a new producer id starts at 0;
- what the coordinator holds for each id is what the log says last;
- every answer is backed by the log when it is given: an InitProducerId grant is the Empty
  record of that id and epoch; an AddPartitionsToTxn success is an Ongoing record holding the
  partitions; an EndTxn success is the matching Prepare or Complete record;
- markers go out for exactly the prepared transaction's partitions and outcome, under the
  current coordinator epoch;
- no request is answered twice.
At the end the chaos stops, time runs past every timeout, and every request must have been
answered and no transaction left ongoing or prepared.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from core.broker.transactions.coordinator import TxnConfig, TxnCoordinator
from core.broker.transactions.events import (AddPartitions, AddResult, EndResult, EndTxn, InitProducerId,
                                             InitResult, LogWritten, MarkersWritten, NeedProducerId, Respond,
                                             SendMarkers, Unpark, WriteTxnLog)
from core.broker.transactions.state import TxnMetadata, TxnState as S
from core.protocol.errors import ErrorCode as E

from .simulation import EventLoop, InvariantViolation, Network

PARTITIONS = [("t", i) for i in range(4)] + [("__consumer_offsets", 3)]


class InvalidTransition(InvariantViolation):
    pass


@dataclass(frozen=True)
class Faults:
    drop: float
    slow: float
    write_failure: float
    crash: float                 # per event, that a partition's leader crashes


@dataclass
class Producer:
    tid: str
    name: str
    pid: int = -1
    epoch: int = -1
    waiting: bool = False
    zombie: bool = False          # fenced, and still sending with its old epoch


class TxnSimulation(EventLoop):
    def __init__(self, seed: int, trace: bool = False, ids: int = 3, steps_ms: int = 40_000):
        super().__init__(seed, trace)
        self.steps_ms = steps_ms
        rng = self.rng
        self.network = Network(delay_ms=(1, 20), slow_ms=(50, 400))
        self.faults = Faults(drop=0.0, slow=rng.choice([0.0, 0.1, 0.3]),
                             write_failure=rng.choice([0.0, 0.05, 0.2]),
                             crash=rng.choice([0.0, 0.002, 0.01]))
        self.config = TxnConfig(max_timeout_ms=10_000, id_expiration_ms=rng.choice([20_000, 10**9]),
                                retry_backoff_ms=100)
        self.coordinator = TxnCoordinator(self.config, num_partitions=2)
        self.coordinator_epochs = {0: 1, 1: 1}
        self.log: dict[int, list[tuple[str, Optional[TxnMetadata]]]] = {0: [], 1: []}
        self.latest: dict[int, dict[str, Optional[TxnMetadata]]] = {0: {}, 1: {}}   # the log, compacted
        self.writes: dict[int, list[WriteTxnLog]] = {0: [], 1: []}
        self.next_pid = 1000
        self.marker_jobs: list[SendMarkers] = []     # markers being written
        self.markers_written: set[tuple] = set()     # (id, producer id, epoch, partition)
        self.requests = 0
        self.answered: set = set()
        self.asked: dict = {}
        self.producers = [Producer(f"txn-{i}", f"p{i}{c}") for i in range(ids) for c in "ab"]
        for p in (0, 1):
            self._act(self.coordinator.load_partition(p, 1, {}, self.now))

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        for p in self.producers:
            self._push(self.rng.randrange(0, 50), "client", p)
        self._push(500, "tick", False)
        self._push(5_000, "tick", True)
        self._run_until(self.steps_ms)
        self.chaos = False
        for p in self.producers:
            p.zombie = True      # no new work: only what is in flight finishes
        settled = self._settle(120_000, 1_000, self._quiet)
        if not settled:
            stuck = {t: (e.meta.state.kafka_name, e.pending is not None) for t, e in self.coordinator.entries.items()}
            raise InvariantViolation(f"not settled: unanswered {set(self.asked) - self.answered}, entries {stuck}")

    def _quiet(self) -> bool:
        if set(self.asked) - self.answered or any(self.writes.values()):
            return False
        return all(e.pending is None and e.meta.state.completed for e in self.coordinator.entries.values()) \
            and not self.coordinator.loading

    # ------------------------------------------------------------------ clients

    def _on_client(self, p: Producer) -> None:
        if p.waiting:
            return
        rng = self.rng
        if p.zombie and not self.chaos:
            return
        if p.pid < 0:
            event = InitProducerId(self._rid(p), self.now, p.tid, rng.choice([2_000, 5_000, 8_000]))
        else:
            roll = rng.random()
            if roll < 0.45:
                tps = frozenset(rng.sample(PARTITIONS, rng.randrange(1, 3)))
                event = AddPartitions(self._rid(p), self.now, p.tid, p.pid, p.epoch, tps, rng.random() < 0.1)
            elif roll < 0.85:
                event = EndTxn(self._rid(p), self.now, p.tid, p.pid, p.epoch, rng.random() < 0.6)
            elif roll < 0.95:
                event = InitProducerId(self._rid(p), self.now, p.tid, 5_000, p.pid, p.epoch)   # KIP-360
            else:
                event = InitProducerId(self._rid(p), self.now, p.tid, 5_000)                  # a new instance
        p.waiting = True
        self.asked[event.request_id] = (p, event)
        self._trace(f"{p.name} -> {type(event).__name__} {event}")
        self._push(self.now + self._delay(), "deliver", event)

    def _rid(self, p: Producer) -> tuple:
        self.requests += 1
        return (p.name, self.requests)

    def _delay(self) -> int:
        return self.rng.randrange(*self.network.delay_ms) + (
            self.rng.randrange(*self.network.slow_ms) if self.chaos and self.rng.random() < self.faults.slow else 0)

    def _on_answer(self, request_id, result) -> None:
        p, event = self.asked[request_id]
        p.waiting = False
        self._trace(f"{p.name} <- {result}")
        if isinstance(result, InitResult) and result.error == E.NONE:
            p.pid, p.epoch, p.zombie = result.producer_id, result.producer_epoch, False
            self.stats["init granted"] += 1
        elif result.error == E.PRODUCER_FENCED:
            self.stats["fenced"] += 1
            if self.rng.random() < 0.5:
                p.pid, p.epoch = -1, -1          # a new instance takes over
            else:
                p.zombie = True                  # carries on with its old epoch for a while
        elif result.error == E.CONCURRENT_TRANSACTIONS:
            self.stats["concurrent"] += 1
        elif isinstance(result, EndResult) and result.error == E.NONE:
            self.stats["commit" if event.commit else "abort"] += 1
        if self.chaos:
            self._push(self.now + self.rng.randrange(1, 200), "client", p)

    # ------------------------------------------------------------------ coordinator and driver

    def _on_deliver(self, event) -> None:
        self._maybe_crash()
        self._act(self.coordinator.handle(event))
        if isinstance(event, AddPartitions) and event.request_id not in self.answered:
            self.stats["parked"] += 1
            # the driver gives up waiting after a while (TxnManager's PARKED_WAIT_S)
            self._push(self.now + self.rng.randrange(50, 1_500), "unpark", event)

    def _on_unpark(self, event) -> None:
        if event.request_id not in self.answered:
            self.stats["unparked"] += 1
            self._act(self.coordinator.handle(Unpark(event.transactional_id, event.request_id)))

    def _act(self, actions) -> None:
        for a in actions:
            if isinstance(a, Respond):
                if a.request_id in self.answered:
                    raise InvariantViolation(f"answered twice: {a}")
                self.answered.add(a.request_id)
                self._check_answer(a)
                self._push(self.now + self._delay(), "answer", a.request_id, a.result)
            elif isinstance(a, WriteTxnLog):
                if a.preceding:
                    self.stats["complete+ongoing"] += 1
                self.writes[a.partition].append(a)
                self._push(self.now + self.rng.randrange(1, 30), "write_done", a.partition)
            elif isinstance(a, SendMarkers):
                self._check_markers(a)
                self.stats["markers"] += 1
                self.marker_jobs.append(a)
                slow = self.rng.random() < 0.2     # a partition leader that is slow to answer
                self._push(self.now + self.rng.randrange(*((300, 2_000) if slow else (5, 300))), "markers_done", a)
            elif isinstance(a, NeedProducerId):
                self._push(self.now + self.rng.randrange(0, 20), "pid_ready", a.event)
            else:
                raise AssertionError(a)
        self._check_state()

    def _on_pid_ready(self, event: InitProducerId) -> None:
        self.next_pid += 1
        self._act(self.coordinator.handle(InitProducerId(
            event.request_id, self.now, event.transactional_id, event.timeout_ms, event.producer_id,
            event.producer_epoch, fresh_producer_id=self.next_pid)))

    def _on_write_done(self, partition: int) -> None:
        if not self.writes[partition]:
            return           # already landed (or lost) by a crash
        w = self.writes[partition].pop(0)
        if self.chaos and self.rng.random() < self.faults.write_failure:
            self.stats["write failed"] += 1
            self._act(self.coordinator.handle(LogWritten(w.transactional_id, w.token, self.now,
                                                         E.COORDINATOR_NOT_AVAILABLE)))
            return
        self._land(w)
        self._act(self.coordinator.handle(LogWritten(w.transactional_id, w.token, self.now)))

    def _land(self, w: WriteTxnLog) -> None:
        for metadata in w.records:      # one batch: every record lands, each a valid transition
            before = self._last(w.transactional_id, w.partition)
            self._check_transition(w.transactional_id, before, metadata)
            self._check_cause(w.transactional_id, before, metadata)
            self.log[w.partition].append((w.transactional_id, metadata))
            self.latest[w.partition][w.transactional_id] = metadata
            self._trace(f"log[{w.partition}] += {w.transactional_id} {metadata}")

    def _on_markers_done(self, m: SendMarkers) -> None:
        if m in self.marker_jobs:
            self.marker_jobs.remove(m)
            self.markers_written.update((m.transactional_id, m.producer_id, m.producer_epoch, tp)
                                        for tp in m.partitions)
        # else the job was cut short by a crash, and its sender reports anyway, as a stale
        # coordinator's sender could: the coordinator must not complete on its word
        self._act(self.coordinator.handle(MarkersWritten(m.transactional_id, m.producer_id, m.producer_epoch,
                                                         m.coordinator_epoch, self.now)))

    def _on_tick(self, expire: bool) -> None:
        self._act(self.coordinator.tick(self.now, expire_ids=expire))
        self._push(self.now + (5_000 if expire else 500), "tick", expire)

    def _maybe_crash(self) -> None:
        if not self.chaos or self.rng.random() >= self.faults.crash:
            return
        partition = self.rng.randrange(2)
        if partition not in self.coordinator.epochs:
            return
        self.stats["crash"] += 1
        # What was in flight may or may not have reached the log; nobody is told.
        for w in self.writes[partition]:
            if self.rng.random() < 0.5:
                self._land(w)
                self.stats["landed unreported"] += 1
        self.writes[partition] = []
        for m in [m for m in self.marker_jobs if self.coordinator.partition_of(m.transactional_id) == partition]:
            self.marker_jobs.remove(m)
            # some of its markers were written before the crash
            self.markers_written.update((m.transactional_id, m.producer_id, m.producer_epoch, tp)
                                        for tp in m.partitions if self.rng.random() < 0.5)
            self.stats["markers cut short"] += 1
        self._trace(f"crash of partition {partition}'s leader")
        self._act(self.coordinator.unload_partition(partition))
        self.coordinator.begin_loading(partition)
        self._push(self.now + self.rng.randrange(20, 400), "load", partition)

    def _on_load(self, partition: int) -> None:
        self.coordinator_epochs[partition] += 1
        self._act(self.coordinator.load_partition(partition, self.coordinator_epochs[partition],
                                                  dict(self.latest[partition]), self.now))

    # ------------------------------------------------------------------ invariants

    def _last(self, tid: str, partition: int | None = None) -> Optional[TxnMetadata]:
        partition = self.coordinator.partition_of(tid) if partition is None else partition
        return self.latest[partition].get(tid)

    @staticmethod
    def _check_transition(tid: str, before: Optional[TxnMetadata], after: Optional[TxnMetadata]) -> None:
        def bad(why: str):
            return InvalidTransition(f"{tid}: {why}: {before} -> {after}")

        if after is None:
            if before is None or not before.state.completed:
                raise bad("only a completed id is removed")
            return
        if before is None:
            if after.state is not S.EMPTY or after.producer_epoch != 0:
                raise bad("an id starts Empty at epoch 0")
            return
        a, b = after.state, before.state
        same_producer = (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch)
        if a is S.EMPTY:
            rotated = after.producer_id != before.producer_id and after.producer_epoch == 0
            bumped = after.producer_id == before.producer_id and after.producer_epoch - before.producer_epoch in (0, 1)
            if not b.completed or not (rotated or bumped) or after.partitions:
                raise bad("InitProducerId bumps a completed id's epoch by one")
        elif a is S.ONGOING:
            if b not in (S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) or not same_producer \
                    or (b is S.ONGOING and not before.partitions <= after.partitions):
                raise bad("a transaction's partitions only grow, under its producer")
        elif a is S.PREPARE_COMMIT:
            if b is not S.ONGOING or not same_producer or after.partitions != before.partitions:
                raise bad("a commit is prepared for the ongoing transaction as it stands")
        elif a is S.PREPARE_ABORT:
            fence = after.producer_epoch == before.producer_epoch + 1
            if b is not S.ONGOING or not (same_producer or fence) or after.partitions != before.partitions:
                raise bad("an abort is prepared for the ongoing transaction, fenced or not")
        elif a in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            want = S.PREPARE_COMMIT if a is S.COMPLETE_COMMIT else S.PREPARE_ABORT
            if b is not want or not same_producer or after.partitions:
                raise bad("only a prepared transaction completes, with the same outcome")
        else:
            raise bad("a state never written")

    def _check_cause(self, tid: str, before: Optional[TxnMetadata], after: Optional[TxnMetadata]) -> None:
        """An abort its producer did not ask for fences it (a bumped epoch), and a transaction
        completes only once every one of its partitions has its marker."""
        if before is None or after is None:
            return
        if after.state is S.PREPARE_ABORT and after.producer_epoch == before.producer_epoch:
            asked = any(isinstance(e, EndTxn) and not e.commit and e.transactional_id == tid
                        and (e.producer_id, e.producer_epoch) == (before.producer_id, before.producer_epoch)
                        and rid not in self.answered for rid, (_, e) in self.asked.items())
            if not asked:
                raise InvariantViolation(f"{tid}: aborted on its producer's behalf without a fence: {after}")
        if after.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            missing = [tp for tp in before.partitions
                       if (tid, before.producer_id, before.producer_epoch, tp) not in self.markers_written]
            if missing:
                raise InvariantViolation(f"{tid} completed without markers on {missing}")

    def _check_answer(self, a: Respond) -> None:
        p, event = self.asked[a.request_id]
        r = a.result
        if r.error != E.NONE:
            return
        last = self._last(event.transactional_id)
        if isinstance(r, InitResult):
            if last is None or last.state is not S.EMPTY or (last.producer_id, last.producer_epoch) != \
                    (r.producer_id, r.producer_epoch):
                raise InvariantViolation(f"{a} not backed by the log: {last}")
        elif isinstance(r, AddResult) and not event.verify_only:
            if last is None or last.state is not S.ONGOING or not event.partitions <= last.partitions \
                    or (last.producer_id, last.producer_epoch) != (event.producer_id, event.producer_epoch):
                raise InvariantViolation(f"{a} for {event} not backed by the log: {last}")
        elif isinstance(r, EndResult):
            want = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if event.commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
            if last is None or last.state not in want or last.producer_epoch != event.producer_epoch:
                raise InvariantViolation(f"{a} for {event} not backed by the log: {last}")

    def _check_markers(self, m: SendMarkers) -> None:
        last = self._last(m.transactional_id)
        want = S.PREPARE_COMMIT if m.commit else S.PREPARE_ABORT
        partition = self.coordinator.partition_of(m.transactional_id)
        if last is None or last.state is not want or last.partitions != m.partitions \
                or (last.producer_id, last.producer_epoch) != (m.producer_id, m.producer_epoch) \
                or m.coordinator_epoch != self.coordinator_epochs[partition]:
            raise InvariantViolation(f"{m} is not the prepared transaction {last}")

    def _check_state(self) -> None:
        c = self.coordinator
        for partition in c.epochs:
            for tid, meta in self.latest[partition].items():
                entry = c.entries.get(tid)
                if meta is None or meta.state is S.DEAD:
                    if entry is not None and entry.durable:
                        raise InvariantViolation(f"{tid} was removed from the log but not here")
                    continue
                if entry is None or not entry.durable:
                    raise InvariantViolation(f"{tid} is in the log ({meta}) but the coordinator lost it")
                held = entry.meta
                if (held.producer_id, held.producer_epoch, held.state, held.partitions, held.timeout_ms) != \
                        (meta.producer_id, meta.producer_epoch, meta.state, meta.partitions, meta.timeout_ms):
                    raise InvariantViolation(f"{tid}: the coordinator holds {held}, the log {meta}")
        for tid, entry in c.entries.items():
            if entry.partition not in c.epochs:
                raise InvariantViolation(f"{tid} held for an unloaded partition")


def build(seed: int, trace: bool = False) -> TxnSimulation:
    return TxnSimulation(seed, trace)
