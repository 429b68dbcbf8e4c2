"""The transactional fault run's writers, reader and checker (a Jepsen-style transactional
workload, as Jepsen's Kafka tests check Kafka's transactions).

Writers are transactional confluent-kafka producers. Each transaction writes 2-4 unique values
"w<writer>-t<n>-<i>" to random partitions of `txn-ledger`, then commits, or (one in five)
aborts on purpose. The outcome of each transaction is what the client was told:
- committed: commit_transaction returned;
- aborted: the writer aborted it, or never asked to commit it (an abortable error, a fatal one
  before the commit): its values may never be read by read_committed consumers;
- unknown: commit_transaction raised something fatal, or timed out: it may have committed.

A read_committed reader polls the ledger from the start all through the run, and a final
read_committed and read_uncommitted read-back happen after the heal. `check` reports:
- aborted reads: a value of an aborted transaction read by a read_committed consumer;
- lost: a value of a committed transaction missing from the final read_committed read;
- fractured: a transaction of which the final read_committed read holds some values but not
  all (Jepsen's "intermediate" and "partial" reads: never allowed, committed or not);
- duplicated: a value read twice in one read of the ledger;
- phantom: a value that no writer sent.
"""
from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

LEDGER = "txn-ledger"
COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


@dataclass
class TxnLog:
    """What the writers did: transaction -> its values and outcome."""
    values: dict[str, list[str]] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, txn: str, values: list[str]) -> None:
        with self.lock:
            self.values[txn] = values

    def end(self, txn: str, outcome: str) -> None:
        with self.lock:
            self.outcome[txn] = outcome

    def txn_of(self) -> dict[str, str]:
        return {v: t for t, vs in self.values.items() for v in vs}


class TxnWriter(threading.Thread):
    def __init__(self, writer: int, bootstrap: str, partitions: int, log: TxnLog, stop: threading.Event,
                 seed: int, rate: float = 20.0):
        super().__init__(name=f"txn-writer-{writer}", daemon=True)
        self.writer, self.bootstrap, self.partitions, self.log = writer, bootstrap, partitions, log
        self.stop_event, self.rng, self.interval = stop, random.Random(seed), 1.0 / rate
        self.errors: list[str] = []
        self.n = 0

    def _producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"txn-writer-{self.writer}",
                      "transaction.timeout.ms": 10_000, "message.timeout.ms": 10_000,
                      "request.timeout.ms": 5000, "socket.timeout.ms": 5000, "log_level": 3})
        deadline = time.monotonic() + 120
        while True:
            try:
                p.init_transactions(30)
                return p
            except KafkaException as exc:
                if time.monotonic() > deadline or exc.args[0].fatal():
                    raise
                time.sleep(0.5)

    def run(self) -> None:
        try:
            self._write()
        except Exception as exc:   # reported with the run's notes
            self.errors.append(f"{self.name} crashed: {type(exc).__name__}: {exc}")

    def _write(self) -> None:
        producer = self._producer()
        while not self.stop_event.is_set():
            txn = f"w{self.writer}-t{self.n}"
            self.n += 1
            values = [f"{txn}-{i}" for i in range(self.rng.randrange(2, 5))]
            abort = self.rng.random() < 0.2
            self.log.begin(txn, values)
            outcome = self._one(producer, values, abort)
            # "fatal" before the commit was asked for: the next producer's init aborts it
            self.log.end(txn, ABORTED if outcome == "fatal" else outcome)
            if outcome in (UNKNOWN, "fatal"):
                producer = self._producer()    # fences the old one; a prepared commit completes
            time.sleep(self.interval)

    def _one(self, producer: Producer, values: list[str], abort: bool) -> str:
        committing = False
        try:
            producer.begin_transaction()
            for v in values:
                producer.produce(LEDGER, value=v.encode(), partition=self.rng.randrange(self.partitions))
            if abort:
                producer.flush(10)
                producer.abort_transaction(30)
                return ABORTED
            committing = True
            while True:
                try:
                    producer.commit_transaction(30)
                    return COMMITTED
                except KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                except KafkaException:
                    return "fatal"
                return ABORTED
            # fatal, or a commit that timed out: a commit may have been prepared
            return UNKNOWN if committing else "fatal"


class CommittedReader(threading.Thread):
    """read_committed, from the start, all through the run: every value it sees goes in `seen`."""

    def __init__(self, bootstrap: str, partitions: int, stop: threading.Event):
        super().__init__(name="txn-reader", daemon=True)
        self.bootstrap, self.partitions, self.stop_event = bootstrap, partitions, stop
        self.seen: Counter[str] = Counter()

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "txn-live-reader",
                      "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 3})
        c.assign([TopicPartition(LEDGER, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self.stop_event.is_set():
                for m in c.consume(500, 0.5):
                    if not m.error():
                        self.seen[m.value().decode()] += 1
        finally:
            c.close()


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 90.0) -> Counter[str]:
    """Every value of `topic`, from the start to the end the isolation level may read to."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-check-{isolation}",
                  "isolation.level": isolation, "enable.auto.commit": False, "log_level": 3})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {}
        for tp in tps:
            low, high = c.get_watermark_offsets(tp, timeout=10)
            ends[tp.partition] = (low, high)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: Counter[str] = Counter()
        deadline = time.monotonic() + timeout
        # after the heal every transaction is decided, so a read_committed consumer's end (the
        # LSO) is the high watermark; markers and aborted records are skipped, so where it
        # stands is asked of the consumer, not taken from the last record
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.5)
            for m in msgs:
                if not m.error():
                    got[m.value().decode()] += 1
            if msgs:
                quiet_since = time.monotonic()
            done = all(c.position([TopicPartition(topic, p)])[0].offset >= high
                       for p, (_, high) in ends.items())
            if done or time.monotonic() - quiet_since > 5:
                break
        return got
    finally:
        c.close()


@dataclass
class TxnReport:
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    aborted_reads: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    fractured: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not (self.aborted_reads or self.lost or self.fractured or self.duplicated or self.phantom)

    def summary(self) -> str:
        head = (f"{'VALID' if self.valid else 'INVALID'}: transactions committed {self.committed}, "
                f"aborted {self.aborted}, unknown {self.unknown}")
        parts = [head]
        for name in ("aborted_reads", "lost", "fractured", "duplicated", "phantom"):
            found = getattr(self, name)
            if found:
                parts.append(f"  {name} ({len(found)}): {found[:5]}")
        return "\n".join(parts)


def check(log: TxnLog, live: Counter[str], final: Counter[str]) -> TxnReport:
    txn_of = log.txn_of()
    r = TxnReport()
    outcomes = Counter(log.outcome.get(t, UNKNOWN) for t in log.values)
    r.committed, r.aborted, r.unknown = outcomes[COMMITTED], outcomes[ABORTED], outcomes[UNKNOWN]
    for read in (live, final):
        for v in read:
            t = txn_of.get(v)
            if t is None:
                r.phantom.append(v)
            elif log.outcome.get(t) == ABORTED and v not in r.aborted_reads:
                r.aborted_reads.append(v)
    r.duplicated = sorted(v for v, n in final.items() if n > 1) + sorted(v for v, n in live.items() if n > 1)
    for t, vs in log.values.items():
        present = [v for v in vs if v in final]
        if log.outcome.get(t) == COMMITTED and len(present) < len(vs):
            r.lost += [v for v in vs if v not in final]
        if present and len(present) < len(vs):
            r.fractured.append(t)
    return r
