"""Mirror throughput against direct produce throughput, and replication latency across 40 ms
of WAN, on a platform of two one-node regions started with `regions up`.

    python tests/benchmarks/bench_mirror.py                  # ~30 s
    python tests/benchmarks/bench_mirror.py --n 500000       # 500 MB: ~4 s a copy at 1 Gbit/s
    python tests/benchmarks/bench_mirror.py --n 50000 --latency-ms 40

0. Across the WAN: the same producer, in eu-west, writes the N records straight into a topic
   of us-east-1 through the WAN proxies (the direction the mirror's data takes). This is
   what a client gets from the link, and the baseline the mirror is held against; the link's
   bandwidth is the ceiling of both.
1. Direct: a confluent-kafka producer (acks=all, linger.ms=5, batch.size=1 MiB) writes N
   records of `--size` bytes to eu-west-1; the time from the first produce() to flush() is
   the direct throughput (no WAN: it bounds nothing the mirror can do across one).
2. Mirror: the platform's mirror (started by `regions up`, reading eu-west-1 through the WAN
   proxy from us-east's side) copies them to us-east-1 as eu-west-1.<topic>; the time from the
   first produce() until all N are in the target (its end offsets) is the mirror's figure,
   started once the mirror has a copier on every partition. It is printed as a ratio to 0,
   to 1 and to the link's bandwidth.
3. Latency: a paced producer (200 records/s for 10 s, linger.ms=0) on eu-west-1 and a consumer
   on us-east-1 reading eu-west-1.<topic>; per record, receive time minus its create
   timestamp (both clocks are this machine's): p50 and p99, end to end.
"""
from __future__ import annotations

import argparse
import json
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

TOPOLOGY = """\
name: bench-mirror
regions:
  eu-west:
    clusters:
      eu-west-1:
        config: {{default.replication.factor: 1, offsets.topic.replication.factor: 1}}
        nodes: [{{id: 1, roles: [broker, controller], zone: a}}]
  us-east:
    clusters:
      us-east-1:
        config: {{default.replication.factor: 1, offsets.topic.replication.factor: 1}}
        nodes: [{{id: 1, roles: [broker, controller], zone: a}}]
wan: {{latency_ms: {latency}, bandwidth_mbit: {bandwidth}}}
mirrors:
  - {{source: eu-west-1, target: us-east-1}}
"""


def regions(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        md = c.list_topics(topic, timeout=5)
        if topic not in md.topics or not md.topics[topic].partitions:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions))
    except Exception:   # noqa: BLE001 — not created yet
        return 0
    finally:
        c.close()


def copied_partitions(state: Path, topic: str) -> int:
    """How many partitions of `topic` the platform's mirror has a copier for."""
    out = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--platform", "--state-dir", str(state),
                          "--output", "json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return 0
    return sum(row["topic"] == topic for row in json.loads(out.stdout)["partitions"])


def produce_timed(bootstrap: str, topic: str, value: bytes, n: int, partitions: int,
                  start: float | None = None) -> float:
    """Produce n records round-robin over the partitions (acks=all, linger.ms=5, 1 MiB
    batches); seconds from `start` (default: the first produce()) to the end of flush()."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 4 << 20})
    start = time.perf_counter() if start is None else start
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:     # the local queue is full: a long run outpaces the link
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(600) != 0:
        raise SystemExit(f"{topic}: not every record was delivered in 600 s")
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=40.0)
    ap.add_argument("--bandwidth-mbit", type=float, default=1000.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="seaway-bench-mirror-") as d:
        state, topology = Path(d) / "state", Path(d) / "topology.yaml"
        topology.write_text(TOPOLOGY.format(latency=args.latency_ms, bandwidth=args.bandwidth_mbit))
        up = regions(state, "up", str(topology), "--detach")
        if up.returncode != 0:
            raise SystemExit(f"regions up failed: {up.stderr}")
        try:
            info = json.loads((state / "platform.json").read_text())
            src = info["clusters"]["eu-west-1"]["bootstrap"]
            tgt = info["clusters"]["us-east-1"]["bootstrap"]
            admin = AdminClient({"bootstrap.servers": src})
            admin.create_topics([NewTopic("bench", args.partitions, 1)])["bench"].result(30)
            # The clock starts once the mirror copies every partition: topic discovery (every
            # 5 s) is not part of the figure (it was, for up to 5 s, in an earlier version).
            deadline = time.monotonic() + 60
            while copied_partitions(state, "bench") < args.partitions:
                if time.monotonic() > deadline:
                    raise SystemExit("the mirror did not pick up the topic in 60 s")
                time.sleep(0.2)
            value = b"x" * args.size
            mb = args.n * args.size / 1e6
            # The same records written across the WAN by a producer in eu-west straight into
            # us-east-1 (its WAN proxies, the pipe the mirror's data takes): what a client gets
            # from this link, to hold the mirror against. Not mirrored (us-east-1 is no source).
            across = info["clusters"]["us-east-1"]["from_regions"]["eu-west"]
            target_admin = AdminClient({"bootstrap.servers": tgt})   # alive until result()
            target_admin.create_topics([NewTopic("bench-across", args.partitions, 1)])["bench-across"].result(30)
            across_s = produce_timed(across, "bench-across", value, args.n, args.partitions)
            print(f"direct produce across the WAN (eu-west client to us-east-1): {mb / across_s:.1f} MB/s "
                  f"({across_s:.2f} s); the link carries at most {args.bandwidth_mbit / 8:.1f} MB/s")
            start = time.perf_counter()
            direct_s = produce_timed(src, "bench", value, args.n, args.partitions, start=start)
            while end_offsets(tgt, "eu-west-1.bench", args.partitions) < args.n:
                if time.perf_counter() - start > 600:
                    raise SystemExit("the mirror did not copy everything in 600 s")
                time.sleep(0.05)
            mirror_s = time.perf_counter() - start
            print(f"direct produce in eu-west: {mb / direct_s:.1f} MB/s ({args.n} x {args.size} B in {direct_s:.2f} s)")
            print(f"mirrored (first produce to all in the target): {mb / mirror_s:.1f} MB/s ({mirror_s:.2f} s); "
                  f"mirror / direct in eu-west = {direct_s / mirror_s:.2f}, "
                  f"mirror / direct across the WAN = {across_s / mirror_s:.2f}, "
                  f"mirror / link = {mb / mirror_s / (args.bandwidth_mbit / 8):.2f}")

            c = Consumer({"bootstrap.servers": tgt, "group.id": "bench-latency", "auto.offset.reset": "latest",
                          "fetch.wait.max.ms": 10})
            c.assign([TopicPartition("eu-west-1.bench", q, -1) for q in range(args.partitions)])
            time.sleep(1)
            paced = Producer({"bootstrap.servers": src, "acks": "all", "linger.ms": 0})
            latencies = []
            t_end = time.time() + 10
            sent = 0
            while time.time() < t_end:
                paced.produce("bench", b"l", partition=sent % args.partitions)
                paced.poll(0)
                sent += 1
                for msg in c.consume(100, timeout=0.005):
                    if not msg.error():
                        latencies.append(time.time() * 1000 - msg.timestamp()[1])
            paced.flush(10)
            deadline = time.time() + 10
            while len(latencies) < sent and time.time() < deadline:
                for msg in c.consume(100, timeout=0.1):
                    if not msg.error():
                        latencies.append(time.time() * 1000 - msg.timestamp()[1])
            c.close()
            latencies.sort()
            print(f"end-to-end latency over {args.latency_ms:g} ms of WAN ({len(latencies)} of {sent} records): "
                  f"p50 {statistics.median(latencies):.0f} ms, "
                  f"p99 {latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]:.0f} ms")
            status = subprocess.run([sys.executable, "-m", "mirror.cli", "status", "--platform", "--state-dir",
                                     str(state)], cwd=REPO, capture_output=True, text=True, timeout=30)
            print(status.stdout.strip().splitlines()[-1] if status.returncode == 0 else status.stderr.strip())
        finally:
            regions(state, "down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
