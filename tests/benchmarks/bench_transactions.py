"""Transactions on a 3-node cluster: throughput against idempotent produce, commit latency, and
how long the transaction coordinator takes to come back after its node is killed.

    python tests/benchmarks/bench_transactions.py              # about 2 minutes
    python tests/benchmarks/bench_transactions.py --quick      # ~40 s smoke run
    python tests/benchmarks/bench_transactions.py --producers 8   # 8 producers of each kind at once

Three combined nodes (tests/support/cluster.py), a topic of 3 partitions with RF=3 and
min.insync.replicas=2, confluent-kafka clients on the same 2 cores:

- throughput: N records of 1 KiB, acks=all, linger.ms=5, from one idempotent producer, then
  from one transactional producer committing every 100 records (the issue's target: at least
  0.7 of the idempotent figure); the median of --repeat runs each. With --producers P, P of
  each kind at once, N in all; the clock starts when every producer is set up and has
  written its first record (or transaction), so that setting up is not what is measured.
  Each idempotent run is followed by a transactional one: the ratio of each pair is printed
  beside the ratio of the medians, and so is the nodes' CPU (user and system, /proc) per 100
  records of each run, the cost that does not depend on how busy the machine is, and the
  clients' (this process's CPU: the producers share the 2 cores with the nodes, so what they
  spend bounds the throughput too). The ratio of the nodes' CPU per record, idempotent over
  transactional, is the throughput ratio the nodes allow when they have the cores to
  themselves: on 2 shared cores the idempotent figure is bound by librdkafka, which spins
  while it waits (tests/benchmarks/README.md);
- commit latency: transactions of one record, begin to commit_transaction() returning,
  p50/p99/max over --commits transactions;
- coordinator recovery: kill -9 the node leading the transactional id's __transaction_state
  partition, then time from the kill to the first transaction committed by a new producer
  with the same id (it must find the new coordinator, which loads the partition and finishes
  the old producer's transaction first).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import sys
import tempfile
import time
import uuid
from typing import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from core.broker.groups.storage import partition_for  # noqa: E402
from tests.support.cluster import KRaftCluster  # noqa: E402
from tests.support.procstat import cpu_user_system  # noqa: E402

VALUE = b"x" * 1024
BASE = {"acks": "all", "linger.ms": 5, "batch.size": 1 << 20, "log_level": 3,
        "delivery.report.only.error": True}


@contextlib.contextmanager
def cluster_of_three() -> Iterator[tuple[KRaftCluster, AdminClient]]:
    """The benchmarks' cluster (this one's, profile_nodes.py's and count_calls.py's): three
    combined nodes, with an admin client that has seen all three brokers."""
    with tempfile.TemporaryDirectory() as d, KRaftCluster(Path(d), combined=3, overrides={
            "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": "3"}) as cluster:
        cluster.wait_for_leader()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        deadline = time.monotonic() + 30
        while len(admin.list_topics(timeout=5).brokers) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        yield cluster, admin


def _topic(admin: AdminClient) -> str:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    for f in admin.create_topics([NewTopic(name, 3, 3, config={"min.insync.replicas": "2"})]).values():
        f.result(30)
    time.sleep(1)
    return name


def idempotent_run(bootstrap: str, topic: str, n: int, ready: threading.Barrier | None = None) -> float:
    p = Producer(dict(BASE, **{"bootstrap.servers": bootstrap, "enable.idempotence": True}))
    p.produce(topic, VALUE)
    p.flush(30)
    if ready is not None:
        ready.wait()
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=i % 3)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    return n * len(VALUE) / (time.perf_counter() - start) / 1e6


def transactional_run(bootstrap: str, topic: str, n: int, per_txn: int,
                      ready: threading.Barrier | None = None) -> float:
    p = Producer(dict(BASE, **{"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:6]}"}))
    p.init_transactions(60)
    p.begin_transaction()           # warm-up, as the idempotent run's first record
    p.produce(topic, VALUE)
    p.commit_transaction(60)
    if ready is not None:
        ready.wait()
    start = time.perf_counter()
    for first in range(0, n, per_txn):
        p.begin_transaction()
        for i in range(first, min(n, first + per_txn)):
            while True:
                try:
                    p.produce(topic, VALUE, partition=i % 3)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
    return n * len(VALUE) / (time.perf_counter() - start) / 1e6


def concurrent(run, bootstrap: str, topic: str, n: int, producers: int, *args) -> float:
    """`producers` of `run` at once (threads: librdkafka releases the GIL), n records in all:
    the aggregate MB/s, timed from the moment every producer has started and written its
    first record (setting producers up is not what is measured) until the last is done."""
    share = n // producers
    ready = threading.Barrier(producers + 1)
    threads = [threading.Thread(target=run, args=(bootstrap, topic, share, *args, ready)) for _ in range(producers)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return share * producers * len(VALUE) / (time.perf_counter() - start) / 1e6


def nodes_cpu(pids: list[int]) -> tuple[float, float]:
    """The nodes' user and system CPU seconds so far, all of them together."""
    both = [cpu_user_system(pid) for pid in pids]
    return sum(u for u, _ in both), sum(s for _, s in both)


def commit_latencies(bootstrap: str, topic: str, count: int) -> list[float]:
    p = Producer(dict(BASE, **{"bootstrap.servers": bootstrap, "transactional.id": f"lat-{uuid.uuid4().hex[:6]}",
                               "linger.ms": 0}))
    p.init_transactions(60)
    out = []
    for i in range(count):
        start = time.perf_counter()
        p.begin_transaction()
        p.produce(topic, VALUE, partition=i % 3)
        p.commit_transaction(60)
        out.append((time.perf_counter() - start) * 1000)
    return out


def coordinator_recovery(cluster: KRaftCluster, admin: AdminClient, topic: str) -> tuple[float, int]:
    tid = f"recover-{uuid.uuid4().hex[:6]}"
    p = Producer(dict(BASE, **{"bootstrap.servers": cluster.bootstrap, "transactional.id": tid}))
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, VALUE, partition=0)
    p.commit_transaction(60)
    md = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
    leader = md.partitions[partition_for(tid, len(md.partitions))].leader
    cluster.kill9(leader)
    killed = time.perf_counter()
    while True:
        try:
            q = Producer(dict(BASE, **{"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                                       "transaction.timeout.ms": 60000}))
            q.init_transactions(120)
            q.begin_transaction()
            q.produce(topic, VALUE, partition=1)
            q.commit_transaction(120)
            break
        except Exception:   # noqa: BLE001 - the node is coming back; try again
            time.sleep(0.1)
    elapsed = time.perf_counter() - killed
    cluster.restart(leader)
    return elapsed, leader


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="records per throughput run")
    ap.add_argument("--per-txn", type=int, default=100, help="records per transaction")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--commits", type=int, default=300, help="transactions timed for the latency")
    ap.add_argument("--producers", type=int, default=1, help="producers at once in the throughput runs")
    ap.add_argument("--quick", action="store_true", help="n=20000, 1 repeat, 100 commits")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeat, args.commits = 20_000, 1, 100
    with cluster_of_three() as (cluster, admin):
        idem, txn = [], []
        cpu: dict[str, list[tuple[float, float]]] = {"idempotent": [], "transactional": []}
        clients: dict[str, list[float]] = {"idempotent": [], "transactional": []}
        pids = [n.proc.pid for n in cluster.nodes.values()]
        for _ in range(args.repeat):
            before, c0 = nodes_cpu(pids), time.process_time()
            idem.append(concurrent(idempotent_run, cluster.bootstrap, _topic(admin), args.n, args.producers))
            middle, c1 = nodes_cpu(pids), time.process_time()
            txn.append(concurrent(transactional_run, cluster.bootstrap, _topic(admin), args.n, args.producers,
                                  args.per_txn))
            after, c2 = nodes_cpu(pids), time.process_time()
            clients["idempotent"].append((c1 - c0) * 1000 / (args.n / 100))
            clients["transactional"].append((c2 - c1) * 1000 / (args.n / 100))
            for kind, (a, b) in (("idempotent", (before, middle)), ("transactional", (middle, after))):
                cpu[kind].append(tuple((y - x) * 1000 / (args.n / 100) for x, y in zip(a, b)))
        lat = sorted(commit_latencies(cluster.bootstrap, _topic(admin), args.commits))
        recovery, killed = coordinator_recovery(cluster, admin, _topic(admin))
    i, t = statistics.median(idem), statistics.median(txn)
    print(f"throughput, 1 KiB, acks=all, {args.n} records from {args.producers} producer(s), "
          f"median of {args.repeat}:")
    print(f"  idempotent     {i:7.1f} MB/s  (runs {', '.join(f'{x:.1f}' for x in idem)})")
    print(f"  transactional  {t:7.1f} MB/s  (runs {', '.join(f'{x:.1f}' for x in txn)}), "
          f"{args.per_txn} records per transaction")
    print(f"  ratio          {t / i:7.2f}  (each run's pair: {', '.join(f'{b / a:.2f}' for a, b in zip(idem, txn))})")
    for kind, runs in cpu.items():
        print(f"  nodes' CPU per 100 records, {kind:13s} user + system: "
              + ", ".join(f"{u:.2f} + {sy:.2f} ms" for u, sy in runs))
    print("  ratio bound by the nodes alone (their CPU per 100 idempotent records over theirs per "
          "transaction, each pair): " + ", ".join(f"{sum(a) / sum(b):.2f}"
                                                 for a, b in zip(cpu["idempotent"], cpu["transactional"])))
    for kind, spent in clients.items():
        print(f"  clients' CPU per 100 records, {kind:13s} (this process, librdkafka's threads too): "
              + ", ".join(f"{c:.2f} ms" for c in spent))
    print(f"commit latency, 1 record per transaction, {len(lat)} transactions: "
          f"p50 {lat[len(lat) // 2]:.1f} ms, p99 {lat[int(len(lat) * 0.99) - 1]:.1f} ms, max {lat[-1]:.1f} ms")
    print(f"coordinator recovery: node {killed} killed -9; a new producer committed {recovery:.1f} s later")
    return 0


if __name__ == "__main__":
    sys.exit(main())
