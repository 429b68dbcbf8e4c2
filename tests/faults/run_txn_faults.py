"""The transactional fault run: exactly-once under kill -9, pauses and cut links.

    python tests/faults/run_txn_faults.py --seed 7 --duration 60 --runs 3
    python tests/faults/run_txn_faults.py --no-faults --duration 10     # the plumbing alone

Each run: three combined (broker,controller) nodes behind a FaultNet, with every topic at
RF=3 and min.insync.replicas=2, __transaction_state and __consumer_offsets included. Two
workloads run at once while the nemesis of the fault run (tests/faults/nemesis.py) kills -9
and restarts nodes (transaction coordinators and partition leaders among them), SIGSTOPs them,
and partitions, cuts, delays and drops links, and a second nemesis kills -9 the loops:

- consume-transform-produce (issue 23, item 8): `txn-input` is fed unique values all through
  the run (idempotent, acks=all), and loop processes (tests/faults/txn_loop.py) in one consumer group copy each value v to
  `txn-output` as "out:v" with their consumed offsets in the same transaction. After the heal
  the loops are given time to finish the input; then `txn-output`, read read_committed, must
  hold every acknowledged input value exactly once (and an input value whose delivery the
  feeder was not told at most once).
- transactional writers (item 9, tests/faults/txn_workload.py): transactions over several
  partitions of `txn-ledger`, committed or aborted, read all along by a read_committed reader
  and read back at the end; the checker finds aborted reads, lost and fractured transactions,
  duplicates and phantoms.

Exit status 1 if any run is invalid. A failed run keeps its directory (node logs, data).
"""
from __future__ import annotations

import argparse
import faulthandler
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.faults.nemesis import KINDS, Nemesis  # noqa: E402
from tests.faults.run_faults import OVERRIDES, heal, wait_until  # noqa: E402
from tests.faults.txn_loop import GROUP, INPUT, OUTPUT  # noqa: E402
from tests.faults.txn_workload import LEDGER, CommittedReader, TxnLog, TxnReport, TxnWriter, check, read_all  # noqa: E402
from tests.support.cluster import KRaftCluster  # noqa: E402
from tests.support.faultnet import FaultNet  # noqa: E402
from tests.support.jepsen import History  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TXN_OVERRIDES = dict(OVERRIDES, **{
    "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3", "group.initial.rebalance.delay.ms": "0",
    # an open transaction whose producer died is aborted within its timeout (10 s) + this
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"})


@dataclass
class TxnRunResult:
    seed: int
    ledger: TxnReport | None = None
    acked_inputs: set = field(default_factory=set)      # input values the broker acknowledged
    unsure_inputs: set = field(default_factory=set)     # delivery unknown: 0 or 1 copies allowed
    output_counts: Counter = field(default_factory=Counter)
    loop_restarts: int = 0
    notes: list[str] = field(default_factory=list)
    faults: list = field(default_factory=list)

    @property
    def lost(self) -> list[str]:
        return sorted(v for v in self.acked_inputs if self.output_counts.get("out:" + v, 0) == 0)

    @property
    def duplicated(self) -> list[str]:
        return sorted(v for v, n in self.output_counts.items() if n > 1)

    @property
    def stray(self) -> list[str]:
        known = self.acked_inputs | self.unsure_inputs
        return sorted(v for v in self.output_counts if v[len("out:"):] not in known)

    @property
    def ok(self) -> bool:
        return self.ledger is not None and self.ledger.valid and not self.notes \
            and bool(self.acked_inputs) and not (self.lost or self.duplicated or self.stray)

    def summary(self) -> str:
        lines = [f"loop: input {len(self.acked_inputs)} acknowledged ({len(self.unsure_inputs)} unsure), "
                 f"output distinct {len(self.output_counts)}, lost {len(self.lost)} {self.lost[:3]}, "
                 f"duplicated {len(self.duplicated)} {self.duplicated[:3]}, stray {len(self.stray)}; "
                 f"loops restarted {self.loop_restarts} times",
                 f"ledger: {self.ledger.summary() if self.ledger else 'not checked'}"]
        lines += [f"  note: {n}" for n in self.notes]
        if self.faults:
            lines.append("  faults: " + "; ".join(f"{t:.1f}s {text}" for t, text in self.faults))
        return "\n".join(lines)


class Loops(threading.Thread):
    """Keeps `count` loop processes running; with `kill`, kills -9 one at random now and then."""

    def __init__(self, bootstrap: str, count: int, directory: Path, stop: threading.Event, seed: int,
                 history: History, kill: bool):
        super().__init__(name="loops", daemon=True)
        self.bootstrap, self.count, self.directory, self.stop_event = bootstrap, count, directory, stop
        self.rng, self.history, self.kill = random.Random(seed), history, kill
        self.procs: dict[int, subprocess.Popen] = {}
        self.restarts = 0
        self.finishing = threading.Event()    # no more kills: let the loops drain the input

    def _start(self, slot: int) -> None:
        out = open(self.directory / f"loop-{slot}.log", "ab")
        self.procs[slot] = subprocess.Popen(
            [sys.executable, str(REPO / "tests/faults/txn_loop.py"), "--bootstrap", self.bootstrap,
             "--slot", str(slot)], stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        out.close()

    def run(self) -> None:
        for slot in range(self.count):
            self._start(slot)
        next_kill = time.monotonic() + self.rng.uniform(3, 8)
        while not self.stop_event.wait(0.2):
            for slot, proc in list(self.procs.items()):
                if proc.poll() is not None:          # exited on an error, or killed: again
                    self.restarts += 1
                    self._start(slot)
            if self.kill and not self.finishing.is_set() and time.monotonic() >= next_kill:
                slot = self.rng.randrange(self.count)
                self.procs[slot].kill()
                self.history.fault(f"kill -9 loop {slot}")
                next_kill = time.monotonic() + self.rng.uniform(3, 8)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


class InputFeeder(threading.Thread):
    """Writes "in-<n>" to the input all through the run (idempotent, acks=all), so that the
    loops work while the faults happen; records which values were acknowledged."""

    def __init__(self, bootstrap: str, stop: threading.Event, rate: float, result: TxnRunResult):
        super().__init__(name="input-feeder", daemon=True)
        self.bootstrap, self.stop_event, self.interval, self.result = bootstrap, stop, 1.0 / rate, result
        self.lock = threading.Lock()

    def _report(self, value: str):
        def delivered(err, msg):
            with self.lock:
                (self.result.acked_inputs if err is None else self.result.unsure_inputs).add(value)
        return delivered

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "log_level": 3,
                      "message.timeout.ms": 20_000, "max.in.flight.requests.per.connection": 1})
        n = 0
        while not self.stop_event.is_set():
            value = f"in-{n}"
            try:
                p.produce(INPUT, value=value.encode(), callback=self._report(value))
            except BufferError:
                p.poll(0.1)
                continue
            n += 1
            p.poll(0)
            time.sleep(self.interval)
        left = p.flush(30)
        if left:
            self.result.notes.append(f"input feeder: {left} values undelivered after the final flush")


def _group_lag(bootstrap: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False, "log_level": 3})
    try:
        tps = [TopicPartition(INPUT, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        lag = 0
        for tp in tps:
            high = c.get_watermark_offsets(tp, timeout=10)[1]
            lag += high - max(committed.get(tp.partition, 0), 0)
        return lag
    finally:
        c.close()


def _create_topics(admin: AdminClient, partitions: int) -> None:
    config = {"min.insync.replicas": "2"}
    for f in admin.create_topics([NewTopic(t, partitions, 3, config=config)
                                  for t in (INPUT, OUTPUT, LEDGER)]).values():
        f.result(30)


def run_once(seed: int, duration: float, directory: Path, *, faults: bool = True, partitions: int = 3,
             input_rate: float = 50.0, loops: int = 2, writers: int = 2, kinds=KINDS, settle: float = 120.0,
             log=print) -> TxnRunResult:
    result = TxnRunResult(seed)
    history = History()
    with KRaftCluster(directory, combined=3, overrides=TXN_OVERRIDES, faultnet=FaultNet(seed=seed)) as cluster:
        cluster.wait_for_leader()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) >= 3, 30, "brokers registered")
        _create_topics(admin, partitions)
        log(f"seed {seed}: cluster up; running {duration:g}s {'with' if faults else 'without'} faults")
        stop, loops_stop = threading.Event(), threading.Event()
        txn_log = TxnLog()
        threads: list = [TxnWriter(w, cluster.bootstrap, partitions, txn_log, stop, seed * 100 + w)
                         for w in range(writers)]
        threads.append(InputFeeder(cluster.bootstrap, stop, input_rate, result))
        reader = CommittedReader(cluster.bootstrap, partitions, stop)
        loop_runner = Loops(cluster.bootstrap, loops, directory, loops_stop, seed, history, kill=faults)
        nemesis = Nemesis(cluster, history, seed, stop, kinds=kinds) if faults else None
        for t in threads + [reader, loop_runner] + ([nemesis] if nemesis else []):
            t.start()
        try:
            time.sleep(duration)
            stop.set()
            if nemesis:
                nemesis.join(120)
                result.notes += nemesis.errors
            for t in threads:
                t.join(120)
                result.notes += getattr(t, "errors", [])
            reader.join(30)
            heal(cluster)
            history.fault("heal: all links, SIGCONT all, restart dead nodes")
            loop_runner.finishing.set()
            try:
                wait_until(lambda: _group_lag(cluster.bootstrap, partitions) == 0, settle,
                           "the loops consumed all the input")
            except TimeoutError as exc:
                result.notes.append(str(exc))
        finally:
            loops_stop.set()
            loop_runner.join(10)
            loop_runner.close()
        result.loop_restarts = loop_runner.restarts
        # every transaction is decided once the open ones time out (10 s) and are aborted
        time.sleep(12)
        result.output_counts = read_all(cluster.bootstrap, OUTPUT, partitions, "read_committed")
        final = read_all(cluster.bootstrap, LEDGER, partitions, "read_committed")
        result.ledger = check(txn_log, reader.seen, final)
        result.faults = history.faults
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="first run's seed (random if unset)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of faults per run")
    ap.add_argument("--runs", type=int, default=1, help="runs, with seeds seed, seed+1, ...")
    ap.add_argument("--no-faults", action="store_true", help="no nemesis: check the plumbing")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds ({','.join(KINDS)})")
    ap.add_argument("--input-rate", type=float, default=50.0, help="input values written per second")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directories")
    args = ap.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    failed = 0
    for i in range(args.runs):
        run_seed = seed + i
        directory = Path(tempfile.mkdtemp(prefix=f"seaway-txn-faults-{run_seed}-"))
        started = time.monotonic()
        try:
            result = run_once(run_seed, args.duration, directory, faults=not args.no_faults, kinds=kinds,
                              input_rate=args.input_rate)
        except Exception as exc:
            import traceback
            result = TxnRunResult(run_seed, notes=[f"run aborted: {type(exc).__name__}: {exc}\n"
                                                   + traceback.format_exc()])
        status = "OK" if result.ok else "FAILED"
        print(f"run {i + 1}/{args.runs} seed {run_seed} {status} in {time.monotonic() - started:.0f}s")
        print(result.summary())
        if not result.ok:
            failed += 1
            print(f"  replay: python tests/faults/run_txn_faults.py --seed {run_seed} --duration {args.duration:g}"
                  f" --kinds {','.join(kinds)}" + (" --no-faults" if args.no_faults else "")
                  + f"\n  cluster directory (node logs, loop logs): {directory}")
        elif not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
        sys.stdout.flush()
    print(f"{args.runs - failed}/{args.runs} runs valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
