#!/usr/bin/env python
"""Hand-run benchmark: several producer processes at once against one Seaway node and tansu.

    python tests/benchmarks/bench_producers.py                      # 1 and 4 producers, ~4 minutes
    python tests/benchmarks/bench_producers.py --producers 4 --repeat 1   # a smoke run

bench_node.py drives each broker with one producer, and at 100 B that producer's Python loop
is the bottleneck for both brokers. Here K processes (multiprocessing, spawned), each with
its own confluent-kafka Producer (acks=all, linger.ms=5, batch.size=1 MiB, no compression,
no keys, so librdkafka's sticky partitioner spreads batches over the topic's partitions),
write N/K records each to a fresh topic of `--partitions` partitions. Every process first
sends warm-up records and flushes (connections, metadata), then all start together; the
figure is N records of values over the time from the first start to the last flush(). Only
failed deliveries are reported back, and any failure or record left unflushed fails the run.

Both brokers run at once on loopback; runs alternate which broker goes first. Each run's
topic is deleted afterwards. "broker CPU" is the broker process's utime+stime over the run's
wall time, "clients CPU" the producers' together (100% is one core of 2). MB is 10^6 bytes of
record values. The figures are printed, not written anywhere: copy them into
tests/benchmarks/README.md with the command line.

Not a pytest test: the file name is bench_*.py and tests/benchmarks/conftest.py ignores it.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.clients import create_topic, drop_topic, produce_many  # noqa: E402
from tests.support.node import SeawayNode  # noqa: E402
from tests.support.procstat import cpu_seconds, prefault  # noqa: E402
from tests.support.tansu import TansuBroker  # noqa: E402

MB = 1_000_000
WARMUP = 2_000


@dataclass
class Run:
    records: int
    value_bytes: int
    seconds: float
    broker_cpu: float
    clients_cpu: float

    @property
    def mb_s(self) -> float:
        return self.value_bytes / self.seconds / MB


def produce_worker(bootstrap: str, topic: str, size: int, n: int, ready, go, results) -> None:
    """One producer process: warm up, wait for `go`, produce n records, flush; puts
    (start, end, cpu seconds, failures) on `results`."""
    from confluent_kafka import Producer

    failures = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "-1", "linger.ms": 5, "batch.size": 1 << 20,
                         "compression.type": "none", "enable.idempotence": False,
                         "delivery.report.only.error": True,
                         "on_delivery": lambda err, msg: failures.append(str(err)) if err else None})
    payload = os.urandom(size)
    produce_many(producer, topic, payload, WARMUP)
    if producer.flush(30):
        failures.append("warm-up records not delivered in 30 s")
    ready.release()
    go.wait()
    cpu0, start = time.process_time(), time.monotonic()
    produce_many(producer, topic, payload, n)
    left = producer.flush(120)
    end = time.monotonic()
    if left:
        failures.append(f"{left} records not delivered within 120 s of the last produce()")
    results.put((start, end, time.process_time() - cpu0, failures[:3]))


def run_once(ctx, bootstrap: str, broker_pid: int, producers: int, size: int, n: int, partitions: int) -> Run:
    topic = f"bench-producers-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions)
    ready, go, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    share = n // producers
    procs = [ctx.Process(target=produce_worker, args=(bootstrap, topic, size, share, ready, go, results))
             for _ in range(producers)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=60):
            raise SystemExit("a producer process did not warm up in 60 s")
    broker0 = cpu_seconds(broker_pid)
    go.set()
    outcomes = [results.get(timeout=300) for _ in procs]
    broker_cpu = cpu_seconds(broker_pid) - broker0
    for p in procs:
        p.join(30)
    failures = [f for *_, fs in outcomes for f in fs]
    if failures:
        raise SystemExit(f"{topic}: delivery failures: {failures[:3]}")
    drop_topic(bootstrap, topic)
    seconds = max(o[1] for o in outcomes) - min(o[0] for o in outcomes)
    records = share * producers
    return Run(records, records * size, seconds, broker_cpu / seconds, sum(o[2] for o in outcomes) / seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", default="1,4", help="producer process counts to run (default %(default)s)")
    ap.add_argument("--records-100", type=int, default=4_000_000, metavar="N", help="records of 100 B per run")
    ap.add_argument("--records-1k", type=int, default=1_500_000, metavar="N", help="records of 1 KiB per run")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prefault-gib", type=float, default=4.0, metavar="GiB",
                    help="memory touched and released first (see bench_node.py); 0 skips it")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.producers.split(",") if c.strip()]
    if not counts or min(counts) < 1:
        ap.error("--producers: a comma-separated list of counts >= 1")
    if args.prefault_gib > 0:
        print(f"# memory prefault: {prefault(args.prefault_gib)}", flush=True)
    ctx = mp.get_context("spawn")   # librdkafka's threads do not survive a fork
    workdir = Path(tempfile.mkdtemp(prefix="seaway-bench-producers-"))
    runs: dict[tuple[str, int, int], list[Run]] = {}
    try:
        with contextlib.ExitStack() as stack:
            node = stack.enter_context(SeawayNode(workdir / "seaway"))
            tansu = stack.enter_context(TansuBroker(workdir / "tansu"))
            brokers = [("seaway", node.bootstrap, node.proc.pid), ("tansu", tansu.bootstrap, tansu.proc.pid)]
            for rep in range(args.repeat):
                for producers in counts:
                    for size, n in ((100, args.records_100), (1024, args.records_1k)):
                        for name, bootstrap, pid in (brokers if rep % 2 == 0 else brokers[::-1]):
                            run = run_once(ctx, bootstrap, pid, producers, size, n, args.partitions)
                            runs.setdefault((name, producers, size), []).append(run)
                            print(f"  repeat {rep + 1}: {name:6s} {producers} producer(s) {size:5d} B: "
                                  f"{run.mb_s:7.1f} MB/s ({run.records:,} in {run.seconds:.2f} s; broker CPU "
                                  f"{run.broker_cpu:.0%}, clients CPU {run.clients_cpu:.0%})", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{args.partitions} partitions, {args.repeat} repeat(s): median MB/s (min-max), CPU of the median run")
    print(f"{'producers':>9} {'size':>6} {'seaway':>22} {'tansu':>22} {'seaway/tansu':>12}  broker CPU s/t  clients CPU s/t")
    for producers in counts:
        for size in (100, 1024):
            medians = {}
            for name in ("seaway", "tansu"):
                rs = sorted(runs[(name, producers, size)], key=lambda r: r.mb_s)
                medians[name] = rs[len(rs) // 2]
                medians[name + "_range"] = f"{statistics.median(r.mb_s for r in rs):.1f} ({rs[0].mb_s:.1f}-{rs[-1].mb_s:.1f})"
            s, t = medians["seaway"], medians["tansu"]
            print(f"{producers:>9} {size:>6} {medians['seaway_range']:>22} {medians['tansu_range']:>22} "
                  f"{s.mb_s / t.mb_s:>11.2f}x  {s.broker_cpu:5.0%} / {t.broker_cpu:4.0%}   "
                  f"{s.clients_cpu:5.0%} / {t.clients_cpu:4.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
