"""The gateway's cost and what clients see of a failover through it, on a DR pair of two Seaway
nodes joined by identity links both ways (`mirror run`), with `dr` and `seaway gateway` run
as a person runs them.

    python tests/benchmarks/bench_gateway.py              # ~3 minutes
    python tests/benchmarks/bench_gateway.py --quick      # ~1 minute
    python tests/benchmarks/bench_gateway.py --profile /tmp/gw   # py-spy the gateway meanwhile

1. Throughput: a confluent-kafka producer (acks=all, linger.ms=5, batch.size=1 MiB, 1 KiB
   values) writes N records, directly to the active cluster and through the gateway, in
   alternating order, `--repeat` times; then a consumer (assigned, no group) reads them back
   both ways. Medians, and gateway / direct.
2. Latency: a paced producer (1000 records/s of 1 KiB for 3 s, linger.ms=0, acks=all), both
   ways; per record, delivery time minus produce() time: p50 and p99, and what the gateway adds.
3. RTO: an idempotent producer (200 records/s) and a group of two consumers, bootstrapped at
   the gateway, through `dr failover eu-west`: from the command's start until the producer's
   first acknowledgement after the pause (the old side is fenced at the `fence` step, so the
   pause ends on the new side) and until the consumers' first record after theirs.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.gateway_traffic import ConfluentTraffic  # noqa: E402
from tests.support.gateway import GatewayProcess, free_ports  # noqa: E402
from tests.support.mirror import start_dr_links, stop_mirror, write_dr_config  # noqa: E402
from tests.support.node import SeawayNode  # noqa: E402
from tests.support.procstat import cpu_seconds  # noqa: E402

PARTITIONS = 3


def produce_throughput(bootstrap: str, topic: str, n: int, size: int) -> float:
    value = b"x" * size
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "delivery.report.only.error": True})
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return n * size / 1e6 / (time.perf_counter() - start)


def consume_throughput(bootstrap: str, topic: str, starts: dict[int, int], n: int, size: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 10})
    start = time.perf_counter()
    c.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    got = 0
    while got < n:
        for msg in c.consume(10_000, 1.0):
            if not msg.error():
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    return n * size / 1e6 / elapsed


def ends(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def latencies(bootstrap: str, topic: str, rate: int = 1000, seconds: float = 3.0,
              warmup: float = 1.0) -> tuple[float, float]:
    """p50 and p99 in ms, after `warmup` seconds at the same rate that are not counted (the
    producer's connections and the first metadata are not what is measured)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    got: list[float] = []
    sent_at: dict[int, float] = {}
    counted_from = rate * warmup
    start = time.perf_counter()
    seconds += warmup
    i = 0
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        sent_at[i] = t
        p.produce(topic, b"l" * 1024, partition=i % PARTITIONS,
                  on_delivery=lambda err, msg, k=i: got.append(time.perf_counter() - sent_at[k])
                  if not err and k >= counted_from else None)
        i += 1
        p.poll(0)
        sleep = start + i / rate - time.perf_counter()
        if sleep > 0:
            time.sleep(sleep)
    p.flush(30)
    got.sort()
    return got[len(got) // 2] * 1000, got[int(len(got) * 0.99)] * 1000


def first_after_pause(times: list[float], since: float) -> tuple[float, float]:
    """(when the longest pause after `since` began, when it ended), relative to `since`."""
    window = sorted(t for t in times if t >= since)
    if len(window) < 2:
        return float("nan"), float("nan")
    gap, at = max((b - a, i) for i, (a, b) in enumerate(zip(window, window[1:])))
    return window[at] - since, window[at + 1] - since


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N=20000, one repeat")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy the gateway during the throughput runs")
    ap.add_argument("--initial-rebalance-delay-ms", type=int, default=500,
                    help="the clusters' group.initial.rebalance.delay.ms (500 as in the shipped DR "
                         "topologies; Kafka's default is 3000)")
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeat = 20_000, 1
    with tempfile.TemporaryDirectory(prefix="seaway-bench-gateway-") as d:
        tmp = Path(d)
        overrides = {"group.initial.rebalance.delay.ms": str(args.initial_rebalance_delay_ms)}
        eu = SeawayNode(tmp / "eu", overrides).start()
        us = SeawayNode(tmp / "us", overrides).start()
        config = write_dr_config(tmp, eu, us, drain_timeout_s=60)
        mirror = start_dr_links(tmp, ("eu-1", eu.bootstrap), ("us-1", us.bootstrap), checkpoint_interval_s=1)
        gateway = GatewayProcess(tmp, "eu-1~us-1", [("eu-1", eu.bootstrap), ("us-1", us.bootstrap)],
                                 listen=f"127.0.0.1:{free_ports(3)}").start()
        profiler = None
        try:
            admin = AdminClient({"bootstrap.servers": eu.bootstrap})
            for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("bench", "lat", "orders")]).values():
                f.result(30)
            time.sleep(2)
            if args.profile:
                profiler = subprocess.Popen(["py-spy", "record", "-o", f"{args.profile}.svg", "--pid",
                                             str(gateway.proc.pid), "--rate", "200"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs: dict[str, list[float]] = {"direct produce": [], "gateway produce": [],
                                            "direct consume": [], "gateway consume": []}
            gateway_cpu = {"produce": 0.0, "consume": 0.0}
            for r in range(args.repeat):
                order = [("direct", eu.bootstrap), ("gateway", gateway.bootstrap)]
                for name, bootstrap in (order if r % 2 == 0 else order[::-1]):
                    starts = ends(eu.bootstrap, "bench")
                    for phase, run in (("produce", lambda: produce_throughput(bootstrap, "bench", args.n, args.size)),
                                       ("consume", lambda: consume_throughput(bootstrap, "bench", starts, args.n,
                                                                              args.size))):
                        before = cpu_seconds(gateway.proc.pid)
                        runs[f"{name} {phase}"].append(run())
                        if name == "gateway":
                            gateway_cpu[phase] += cpu_seconds(gateway.proc.pid) - before
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(60)
            med = {k: statistics.median(v) for k, v in runs.items()}
            print(f"\n{args.n} x {args.size} B, {PARTITIONS} partitions, {args.repeat} repeat(s); median (min-max) MB/s")
            for k, v in runs.items():
                print(f"  {k:16s} {med[k]:7.1f} ({min(v):.1f}-{max(v):.1f})")
            print(f"  produce gateway / direct = {med['gateway produce'] / med['direct produce']:.2f}")
            print(f"  consume gateway / direct = {med['gateway consume'] / med['direct consume']:.2f}")
            gigabytes = args.repeat * args.n * args.size / 1e9
            print(f"  the gateway's CPU per GB passed: produce {gateway_cpu['produce'] / gigabytes:.2f} s, "
                  f"consume {gateway_cpu['consume'] / gigabytes:.2f} s")
            lat = {name: latencies(b, "lat") for name, b in (("direct", eu.bootstrap), ("gateway", gateway.bootstrap))}
            print("\nproduce latency, 1000 x 1 KiB/s for 3 s after 1 s not counted, acks=all, linger.ms=0 (ms)")
            for name, (p50, p99) in lat.items():
                print(f"  {name:8s} p50 {p50:6.2f}  p99 {p99:6.2f}")
            print(f"  added    p50 {lat['gateway'][0] - lat['direct'][0]:6.2f}  p99 {lat['gateway'][1] - lat['direct'][1]:6.2f}")

            traffic = ConfluentTraffic(gateway.bootstrap, "orders", "billing", rate=200).start()
            deadline = time.monotonic() + 60
            while len(traffic.consumed) < 500 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3)
            t0 = time.monotonic()
            out = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "failover", "eu-west"],
                                 cwd=REPO, capture_output=True, text=True, timeout=300)
            took = time.monotonic() - t0
            time.sleep(12)
            traffic.finish()
            if out.returncode != 0:
                raise SystemExit(f"dr failover failed: {out.stdout}{out.stderr}")
            p_pause, p_rto = first_after_pause([t for t, _ in traffic.ack_times], t0)
            c_pause, c_rto = first_after_pause(traffic.consume_times, t0)
            print(f"\nplanned failover through the gateway (dr failover took {took:.2f} s; "
                  f"group.initial.rebalance.delay.ms={args.initial_rebalance_delay_ms})")
            print(f"  producer: acks paused at +{p_pause:.2f} s, first acknowledgement on the new side at +{p_rto:.2f} s")
            print(f"  consumers: reads paused at +{c_pause:.2f} s, first record on the new side at +{c_rto:.2f} s")
            try:
                traffic.check()
                print("  lost 0, read twice 0, skipped 0, out of order 0, fatal errors 0")
            except AssertionError as exc:
                print(f"  CHECK FAILED: {exc}")
        finally:
            if profiler is not None and profiler.poll() is None:
                profiler.kill()
            gateway.stop()
            stop_mirror(mirror)
            eu.stop()
            us.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
