"""Scale: what thousands of partitions cost a 3-node KRaft cluster (real processes).

    python tests/benchmarks/bench_scale.py --partitions 1300 --idle-seconds 60     # one point
    python tests/benchmarks/bench_scale.py --partitions 1000,5000,10000            # the table
    python tests/benchmarks/bench_scale.py --partitions 1300 --profile /tmp/prof   # py-spy a node

A cluster of three combined (broker,controller) nodes is started, topics of 10 partitions at
RF=3 are created with confluent-kafka's AdminClient (batches of 50 topics) until the cluster
holds N partitions, and then, per N:

| figure | how |
|---|---|
| create | seconds from the first CreateTopics to every partition having a leader and a full ISR |
| idle CPU | each node's CPU seconds (utime+stime from /proc) over `--idle-seconds`, as % of one core |
| elections | the quorum's leader epoch (DescribeQuorum) after the idle window minus before it |
| metadata | seconds for one Metadata request for all topics (confluent-kafka list_topics), median of 5 |
| RSS | each node's resident memory after the idle window |
| produce | `--produce-partitions` partitions written by one producer (acks=all, 1 KiB, `--produce-rate` msg/s, default 200) for `--produce-seconds`: p50/p99 of produce() to delivery report, and elections meanwhile |
| restart | all three nodes SIGTERMed, started again, until every partition has a leader again |
| failover | the active controller kill -9ed, until another voter leads |
| churn | `--churn-seconds`: `--churn-topics` one-partition topics created and deleted in a loop (`--churn-rounds` times); each node's idle CPU and RSS before and after each round, and any deleted topic that came back |

Figures are printed as a table; record them in tests/benchmarks/README.md by hand with the
command that produced them. This is a benchmark, not a test: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.cluster import KRaftCluster  # noqa: E402
from tests.support.procstat import cpu_seconds  # noqa: E402

PARTITIONS_PER_TOPIC = 10
TOPICS_PER_REQUEST = 50


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pids(cluster: KRaftCluster) -> dict[int, int]:
    return {i: n.proc.pid for i, n in cluster.nodes.items() if n.proc is not None and n.proc.poll() is None}


def epoch(cluster: KRaftCluster) -> int:
    for _ in range(100):
        d = cluster.describe()
        if d is not None and d.leader_id >= 0:
            return d.leader_epoch
        time.sleep(0.1)
    raise SystemExit("no quorum leader")


def wait_brokers(admin, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if len(admin.list_topics(timeout=10).brokers) >= n:
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("brokers did not register")
        time.sleep(0.2)


def all_led(admin, topics: set[str], rf: int, timeout: float) -> float:
    """Seconds until every partition of `topics` has a leader and a full ISR."""
    start = time.monotonic()
    while True:
        try:
            md = admin.list_topics(timeout=30)
            ready = all(t in md.topics and md.topics[t].error is None
                        and len(md.topics[t].partitions) == PARTITIONS_PER_TOPIC
                        and all(p.leader >= 0 and len(p.isrs) == rf for p in md.topics[t].partitions.values())
                        for t in topics)
        except Exception:
            ready = False
        if ready:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise SystemExit(f"partitions not led with a full ISR within {timeout}s")
        time.sleep(1)


def create_topics(admin, first: int, count: int, rf: int) -> set[str]:
    names = [f"scale-{i:05d}" for i in range(first, first + count)]
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        batch = [NewTopic(n, PARTITIONS_PER_TOPIC, rf) for n in names[i:i + TOPICS_PER_REQUEST]]
        for name, fut in admin.create_topics(batch, request_timeout=120, operation_timeout=120).items():
            try:
                fut.result(180)
            except Exception as exc:
                if "already exists" not in str(exc).lower():
                    raise
    return set(names)


def metadata_seconds(admin, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        admin.list_topics(timeout=60)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def idle(cluster: KRaftCluster, seconds: float, profile: Path | None, label: str) -> tuple[dict, int]:
    before_epoch = epoch(cluster)
    procs = pids(cluster)
    spy = None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        leader = cluster.leader_id() or next(iter(procs))
        spy = subprocess.Popen(["py-spy", "record", "--format", "raw", "--nonblocking", "-r", "100",
                                "-d", str(int(seconds)), "-o", str(profile / f"idle-{label}-node{leader}.txt"),
                                "--pid", str(procs[leader])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start_cpu = {i: cpu_seconds(p) for i, p in procs.items()}
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    usage = {i: 100 * (cpu_seconds(p) - start_cpu[i]) / wall for i, p in procs.items()}
    if spy is not None:
        spy.wait(timeout=60)
    return usage, epoch(cluster) - before_epoch


def spy_all(cluster: KRaftCluster, profile: Path | None, label: str, seconds: float) -> list:
    """py-spy every node (50 Hz each, so that three of them leave the cores to the nodes)."""
    if profile is None:
        return []
    profile.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(["py-spy", "record", "--format", "raw", "--nonblocking", "-r", "50",
                              "-d", str(int(seconds)), "-o", str(profile / f"{label}-node{i}.txt"),
                              "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i, pid in pids(cluster).items()]


def produce_latency(cluster: KRaftCluster, admin, topics: list[str], partitions: int, seconds: float,
                    rate: int, profile: Path | None = None) -> tuple[float, float, int]:
    targets = [(t, i) for t in topics for i in range(PARTITIONS_PER_TOPIC)][:partitions]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True})
    for t, i in targets:   # warm up: every partition's leader known, one record each
        p.produce(t, b"w", partition=i)
    p.flush(120)
    latencies: list[float] = []

    def done(sent):
        return lambda err, msg: latencies.append(time.perf_counter() - sent) if err is None else None

    before_epoch = epoch(cluster)
    value = b"x" * 1024
    spies = spy_all(cluster, profile, f"produce-{partitions}", seconds)
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        due = start + n / rate
        now = time.perf_counter()
        if due > now:
            p.poll(due - now)
            continue
        t, i = targets[n % len(targets)]
        p.produce(t, value, partition=i, on_delivery=done(time.perf_counter()))
        n += 1
        p.poll(0)
    p.flush(60)
    for spy in spies:
        spy.wait(timeout=60)
    latencies.sort()
    q = lambda f: 1000 * latencies[min(len(latencies) - 1, int(f * len(latencies)))]   # noqa: E731
    return q(0.5), q(0.99), epoch(cluster) - before_epoch


def restart_seconds(cluster: KRaftCluster, admin_conf: dict, topics: set[str]) -> float:
    start = time.monotonic()
    for node in cluster.nodes.values():
        node.proc.send_signal(signal.SIGTERM)
    for node in cluster.nodes.values():
        node.stop(timeout=120)
    for node in cluster.nodes.values():
        node.start(timeout=300)
    admin = AdminClient(admin_conf)
    wait_brokers(admin, 3, timeout=300)
    all_led(admin, topics, 3, timeout=600)
    return time.monotonic() - start


def failover_seconds(cluster: KRaftCluster) -> float:
    leader, old_epoch = cluster.wait_for_leader()
    start = time.monotonic()
    cluster.kill(leader)
    cluster.wait_for_leader(timeout=120, not_in=(leader,), min_epoch=old_epoch + 1)
    took = time.monotonic() - start
    cluster.nodes[leader].start(timeout=300)
    return took


def churn(cluster: KRaftCluster, admin, seconds: float, topics_per_cycle: int) -> dict:
    """Create `topics_per_cycle` one-partition RF=3 topics and delete them, again and again, for
    `seconds`: each node's RSS and idle CPU before and after, the cycles done, and any deleted
    topic that came back (Metadata without auto-creation, as a consumer's is)."""
    def settle_and_measure() -> tuple[dict, dict]:
        # A minute first: the last deletions' heap walk (core/broker/heap_freezer.py) and the
        # deleted partitions' file removal are over by then; what is left is the idle level.
        time.sleep(60)
        procs = pids(cluster)
        before = {i: cpu_seconds(p) for i, p in procs.items()}
        time.sleep(20)
        return ({i: 100 * (cpu_seconds(p) - before[i]) / 20 for i, p in procs.items()},
                {i: rss_mib(p) for i, p in procs.items()})

    cpu0, rss0 = settle_and_measure()
    start = time.monotonic()
    cycles = 0
    came_back: set[str] = set()
    while time.monotonic() - start < seconds:
        names = [f"churn-{cycles}-{i}" for i in range(topics_per_cycle)]
        for i in range(0, len(names), TOPICS_PER_REQUEST):
            for fut in admin.create_topics([NewTopic(n, 1, 3) for n in names[i:i + TOPICS_PER_REQUEST]],
                                           request_timeout=120).values():
                fut.result(180)
        for i in range(0, len(names), TOPICS_PER_REQUEST):
            for fut in admin.delete_topics(names[i:i + TOPICS_PER_REQUEST], request_timeout=120).values():
                fut.result(180)
        time.sleep(1)
        present = set(admin.list_topics(timeout=60).topics)
        came_back |= present & set(names)
        cycles += 1
    cpu1, rss1 = settle_and_measure()
    return {"cycles": cycles, "cpu_before": cpu0, "cpu_after": cpu1, "rss_before": rss0, "rss_after": rss1,
            "came_back": sorted(came_back)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", default="1300", help="comma-separated partition counts, grown in one cluster")
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--produce-partitions", type=int, default=1000)
    ap.add_argument("--produce-seconds", type=float, default=30, help="0 skips the produce scenario")
    ap.add_argument("--produce-rate", type=int, default=200)
    ap.add_argument("--no-restart", action="store_true", help="skip the restart and failover figures")
    ap.add_argument("--profile", type=Path, help="py-spy the quorum leader during each idle window, and "
                    "every node while producing")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--churn-seconds", type=float, default=0,
                    help="after the table: create and delete --churn-topics topics in a loop this long")
    ap.add_argument("--churn-topics", type=int, default=1000)
    ap.add_argument("--churn-rounds", type=int, default=1,
                    help="repeat the churn loop, measuring after each (does memory level off?)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a node setting for every node (repeatable)")
    args = ap.parse_args()
    counts = sorted(int(x) for x in args.partitions.split(","))
    directory = Path(tempfile.mkdtemp(prefix="seaway-scale-"))
    rows = []
    try:
        overrides = dict(kv.split("=", 1) for kv in args.set)
        with KRaftCluster(directory, combined=3, overrides=overrides) as cluster:
            cluster.wait_for_leader(timeout=60)
            conf = {"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 120000}
            admin = AdminClient(conf)
            wait_brokers(admin, 3)
            topics: set[str] = set()
            for count in counts:
                want = count // PARTITIONS_PER_TOPIC
                start = time.monotonic()
                new = create_topics(admin, len(topics), want - len(topics), 3)
                topics |= new
                all_led(admin, topics, 3, timeout=1800)
                created = time.monotonic() - start
                print(f"[{count}] created {len(new)} topics in {created:.1f}s", flush=True)
                usage, elections = idle(cluster, args.idle_seconds, args.profile, str(count))
                print(f"[{count}] idle CPU {usage} elections {elections}", flush=True)
                md = metadata_seconds(admin)
                rss = {i: rss_mib(p) for i, p in pids(cluster).items()}
                row = {"partitions": count, "create_s": created, "idle": usage, "elections": elections,
                       "metadata_s": md, "rss": rss}
                if args.produce_seconds > 0:
                    p50, p99, produce_elections = produce_latency(
                        cluster, admin, sorted(topics), min(args.produce_partitions, count),
                        args.produce_seconds, args.produce_rate, args.profile)
                    row.update(p50=p50, p99=p99, produce_elections=produce_elections)
                if not args.no_restart:
                    row["restart_s"] = restart_seconds(cluster, conf, topics)
                    admin = AdminClient(conf)
                    row["failover_s"] = failover_seconds(cluster)
                    wait_brokers(admin, 3, timeout=300)
                    all_led(admin, topics, 3, timeout=600)
                print(f"[{count}] {row}", flush=True)
                rows.append(row)
            if args.churn_seconds > 0:
                for round_ in range(1, args.churn_rounds + 1):
                    result = churn(cluster, AdminClient(conf), args.churn_seconds, args.churn_topics)
                    print(f"[churn {round_}] {result}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            print(f"data kept in {directory}")
    print()
    print("| partitions | create s | idle CPU per node (% of a core) | elections | Metadata s | RSS MiB per node"
          " | produce p50/p99 ms | elections while producing | full restart s | controller failover s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cpu = " / ".join(f"{v:.1f}" for v in r["idle"].values())
        rss = " / ".join(f"{v:.0f}" for v in r["rss"].values())
        produce = f"{r['p50']:.1f} / {r['p99']:.1f}" if "p50" in r else "-"
        print(f"| {r['partitions']} | {r['create_s']:.1f} | {cpu} | {r['elections']} | {r['metadata_s']:.2f} | {rss}"
              f" | {produce} | {r.get('produce_elections', '-')} | {r.get('restart_s', float('nan')):.1f}"
              f" | {r.get('failover_s', float('nan')):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
