#!/usr/bin/env python
"""Hand-run benchmark: what one produce request costs a Seaway node, apart from its records.

    python tests/benchmarks/bench_produce_requests.py                 # 100,000 requests, 3 runs
    python tests/benchmarks/bench_produce_requests.py --requests 20000 --repeat 1

bench_node measures bytes per second, where a request carries a 1 MiB batch and what a request
costs on its own is lost in the copying. Here a confluent-kafka producer makes every record its
own request (batch.num.messages=1, linger.ms=0, acks=all, idempotence off, 100 B values), so
the per-request work of the node (decoding, the partition lock, the replica's bookkeeping, the
log append, the response) is all that is measured. Each run starts a fresh one-node cluster.
Printed per run: requests per second, and the node's user and system CPU per request, read
from /proc, for the whole process and for its busiest thread (the event loop).

Use it before and after a change to the produce path: run it from each tree, alternating
(`cd TREE && PYTHONPATH=TREE python tests/benchmarks/bench_produce_requests.py --repeat 1`).
Not a pytest test (tests/benchmarks/conftest.py ignores bench_*.py).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from confluent_kafka import Producer

from tests.support.clients import create_topic
from tests.support.node import SeawayNode

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_of(stat_path: Path) -> tuple[float, float]:
    """(user, system) seconds from a /proc stat file."""
    fields = stat_path.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def _threads(pid: int) -> dict[str, float]:
    busy = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            user, system = _cpu_of(task / "stat")
        except FileNotFoundError:
            continue   # the thread ended while we looked
        busy[task.name] = user + system
    return busy


def run_once(requests: int, value_size: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="bench-produce-requests-"))
    node = SeawayNode(directory).start()
    try:
        create_topic(node.bootstrap, "requests", partitions=1)
        producer = Producer({
            "bootstrap.servers": node.bootstrap, "acks": -1, "linger.ms": 0,
            "batch.num.messages": 1, "enable.idempotence": False,
            "queue.buffering.max.messages": max(requests, 100_000)})
        value = b"v" * value_size
        producer.produce("requests", value)   # connect and learn the leader outside the timing
        producer.flush()
        assert node.proc is not None
        stat = Path(f"/proc/{node.proc.pid}/stat")
        user0, system0 = _cpu_of(stat)
        threads0 = _threads(node.proc.pid)
        started = time.perf_counter()
        for _ in range(requests):
            while True:
                try:
                    producer.produce("requests", value)
                    break
                except BufferError:
                    producer.poll(0.001)
        remaining = producer.flush(120)
        elapsed = time.perf_counter() - started
        if remaining:
            raise SystemExit(f"{remaining} records were not delivered within 120 s")
        user1, system1 = _cpu_of(stat)
        threads1 = _threads(node.proc.pid)
        busiest = max(threads1[t] - threads0.get(t, 0.0) for t in threads1)
        return {"requests_per_s": requests / elapsed,
                "user_us": (user1 - user0) / requests * 1e6,
                "system_us": (system1 - system0) / requests * 1e6,
                "loop_thread_us": busiest / requests * 1e6}
    finally:
        node.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100_000, help="produce requests per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs, each on a fresh node")
    ap.add_argument("--value-size", type=int, default=100, help="bytes per record value")
    args = ap.parse_args()
    if args.requests <= 0 or args.repeat <= 0 or args.value_size < 0:
        raise SystemExit("--requests and --repeat must be positive, --value-size not negative")
    print(f"{REPO}: {args.requests:,} produce requests of one {args.value_size} B record, "
          f"acks=all, per run")
    runs = []
    for i in range(args.repeat):
        run = run_once(args.requests, args.value_size)
        runs.append(run)
        print(f"  run {i + 1}: {run['requests_per_s']:,.0f} requests/s; node CPU per request: "
              f"user {run['user_us']:.1f} us, system {run['system_us']:.1f} us, "
              f"event-loop thread {run['loop_thread_us']:.1f} us", flush=True)
    if len(runs) > 1:
        print(f"  median: {statistics.median(r['requests_per_s'] for r in runs):,.0f} "
              f"requests/s, user {statistics.median(r['user_us'] for r in runs):.1f} us "
              f"per request")


if __name__ == "__main__":
    main()
