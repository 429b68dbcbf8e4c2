"""Replication cost: acks=all produce to RF=3 (min.insync.replicas=2) against RF=1, on one
KRaft cluster of a controller and three brokers (real processes on this machine).

    python tests/benchmarks/bench_replication.py            # ~2 minutes; prints a table
    python tests/benchmarks/bench_replication.py --n 20000  # quicker

Per scenario: a fresh 1-partition topic, confluent-kafka Producer (acks=all, linger.ms=5,
batch.size=1 MiB, 1 KiB values, up to 100 requests in flight), N records timed from the first
produce() to the end of flush(); then a paced producer (500 msg/s for 3 s, linger.ms=0,
idempotent) for per-record latency p50/p99 from produce() to the delivery report. The figures
go in tests/benchmarks/README.md by hand, with the command.

Why the throughput producer is not idempotent: an idempotent librdkafka producer may have only
5 requests in flight, and while its batches wait for a slot its broker thread polls in a
loop, about a core of this machine's two, taken from the brokers being measured (perf:
`rdk:broker` in poll and clock_gettime; librdkafka issues #1553 and #429). `--idempotent`
measures that producer anyway.

Before the first scenario the benchmark touches and releases memory (`--prefault-gib`,
tests/support/procstat.prefault): on a fresh virtual machine the brokers' page cache writes
would otherwise cost up to five times as much for the first few GiB.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.cluster import KRaftCluster  # noqa: E402
from tests.support.procstat import cpu_seconds, prefault  # noqa: E402


def wait_brokers(admin, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(admin.list_topics(timeout=5).brokers) < n:
        if time.monotonic() > deadline:
            raise SystemExit("brokers did not register")
        time.sleep(0.2)


def create(admin, name: str, rf: int) -> None:
    admin.create_topics([NewTopic(name, 1, rf, config={"min.insync.replicas": str(min(rf, 2))})])[name].result(30)
    deadline = time.monotonic() + 30
    while True:
        p = admin.list_topics(name, timeout=5).topics[name].partitions[0]
        if p.leader >= 0 and len(p.isrs) == rf:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: no full ISR")
        time.sleep(0.1)


IDEMPOTENT = False     # --idempotent


def throughput(bootstrap: str, topic: str, n: int, size: int) -> float:
    window = {"enable.idempotence": True} if IDEMPOTENT else \
        {"enable.idempotence": False, "max.in.flight.requests.per.connection": 100}
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **window,
                  "linger.ms": 5, "batch.size": 1 << 20, "delivery.report.only.error": True,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for _ in range(2000):
        p.produce(topic, value, partition=0)
    p.flush(60)
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(120):
        raise SystemExit("records left unacknowledged")
    return n * size / (time.perf_counter() - start) / 1e6


def measured(cluster, admin, topic: str, n: int, size: int) -> tuple[float, dict[str, float]]:
    """throughput(), and the CPU each process used for it in ms per MB: the client (this
    process: Python and librdkafka's threads), the partition's leader, its followers, the rest."""
    part = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    pids = {node_id: node.proc.pid for node_id, node in cluster.nodes.items() if node.proc is not None}
    before = {i: cpu_seconds(pid) for i, pid in pids.items()}
    own = os.times()
    mbs = throughput(cluster.bootstrap, topic, n, size)
    own_after = os.times()
    used = {i: cpu_seconds(pid) - before[i] for i, pid in pids.items()}
    mb = n * size / 1e6
    cost = {"client": (own_after.user + own_after.system - own.user - own.system) * 1000 / mb,
            "leader": used.pop(part.leader, 0.0) * 1000 / mb}
    followers = [r for r in part.replicas if r != part.leader]
    cost["followers"] = sum(used.pop(r, 0.0) for r in followers) * 1000 / mb
    cost["rest"] = sum(used.values()) * 1000 / mb
    return mbs, cost


def latency(bootstrap: str, topic: str, rate: int = 500, seconds: float = 3.0) -> tuple[float, float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0})
    samples: list[float] = []

    def done(err, msg, sent):
        if err is None:
            samples.append(time.perf_counter() - sent)
    value = b"y" * 1024
    for _ in range(50):   # connections, metadata and the producer id before anything is timed
        p.produce(topic, value, partition=0)
    p.flush(30)
    interval = 1 / rate
    next_at = time.perf_counter()
    end = next_at + seconds
    while next_at < end:
        now = time.perf_counter()
        if now < next_at:
            p.poll(next_at - now)
            continue
        sent = time.perf_counter()
        p.produce(topic, value, partition=0, on_delivery=lambda e, m, s=sent: done(e, m, s))
        next_at += interval
    p.flush(30)
    samples.sort()
    return statistics.median(samples) * 1000, samples[int(len(samples) * 0.99)] * 1000


def profile(cluster, topic_rf: int, args) -> None:
    """py-spy the partition's leader and one follower during a throughput run."""
    import subprocess
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"bench-profile-rf{topic_rf}"
    create(admin, topic, topic_rf)
    part = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    spies = []
    for role, node_id in [("leader", part.leader)] + [("follower", r) for r in part.replicas if r != part.leader][:1]:
        out = Path(args.profile) / f"{role}-{node_id}.txt"
        spies.append(subprocess.Popen(["py-spy", "record", "--format", "raw", "-o", str(out), "--pid",
                                       str(cluster.nodes[node_id].proc.pid), "--duration", "30"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1)
    print(f"profiling RF={topic_rf}: {throughput(cluster.bootstrap, topic, args.n, args.size):.1f} MB/s")
    for spy in spies:
        spy.wait()
    print(f"flame graphs in {args.profile}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="records per throughput run (default 100000)")
    ap.add_argument("--size", type=int, default=1024, help="value bytes (default 1024)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", metavar="DIR", help="py-spy the leader and a follower (RF=3) instead")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every node, e.g. replica.fetch.max.bytes=8388608 (repeatable)")
    ap.add_argument("--idempotent", action="store_true",
                    help="an idempotent throughput producer (5 in flight; its client spins, see above)")
    ap.add_argument("--prefault-gib", type=float, default=8.0, metavar="GIB",
                    help="touch and release this much memory first (default 8; 0 skips)")
    args = ap.parse_args()
    global IDEMPOTENT
    IDEMPOTENT = args.idempotent
    if args.prefault_gib > 0:
        print(f"memory prefault: {prefault(args.prefault_gib)}", flush=True)
    overrides = dict(o.split("=", 1) for o in args.override)
    with tempfile.TemporaryDirectory() as d, KRaftCluster(Path(d), controllers=1, brokers=3,
                                                          overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_brokers(admin, 3)
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            profile(cluster, 3, args)
            return
        rows, costs = [], {}
        for rf in (1, 3):
            mbs, lat, cpu = [], [], []
            for r in range(args.repeat):
                topic = f"bench-rf{rf}-{r}"
                create(admin, topic, rf)
                got, cost = measured(cluster, admin, topic, args.n, args.size)
                mbs.append(got)
                cpu.append(cost)
                lat.append(latency(cluster.bootstrap, topic))
            rows.append((rf, statistics.median(mbs), min(mbs), max(mbs),
                         statistics.median(x[0] for x in lat), statistics.median(x[1] for x in lat)))
            costs[rf] = {k: statistics.median(c[k] for c in cpu) for k in cpu[0]}
        print(f"{'RF':>3} {'MB/s (median, min-max)':>26} {'p50 ms':>8} {'p99 ms':>8}")
        for rf, med, lo, hi, p50, p99 in rows:
            print(f"{rf:>3} {med:>10.1f} ({lo:.1f}-{hi:.1f}){'':>8} {p50:>8.2f} {p99:>8.2f}")
        print(f"RF=3 / RF=1 throughput: {rows[1][1] / rows[0][1]:.2f}")
        # With every core busy, throughput is at most cores / (CPU per MB, all processes).
        cores = os.cpu_count() or 1
        print(f"CPU per MB (ms, median) and the bound {cores} cores set: cores / total")
        for rf, cost in costs.items():
            total = sum(cost.values())
            print(f"  RF={rf}: " + ", ".join(f"{k} {v:.2f}" for k, v in cost.items()) +
                  f"; total {total:.2f} -> at most {cores * 1000 / total:.0f} MB/s")


if __name__ == "__main__":
    main()
