"""Where the nodes' CPU goes under bench_transactions' load: py-spy on each node of the
3-node cluster while producers run, the nodes' CPU per 100 records, and the samples sorted
into what a node does (a request handler, the replica fetcher, the socket writes, ...).

    python tests/benchmarks/profile_nodes.py                       # 16 transactional producers
    python tests/benchmarks/profile_nodes.py --idempotent --producers 1
    python tests/benchmarks/profile_nodes.py --keep /tmp/prof      # keep the raw stacks

Needs py-spy (`pip install py-spy`) and the right to attach to the nodes (root, or
ptrace_scope 0). Not part of the suite: it is how the figures in README.md were explained.

How to read it. py-spy samples with --gil, only while a node holds the GIL. On 2 cores with
the clients on the same machine, plain samples pile up wherever a node waits for a CPU (after
each write, which wakes a reader): they put 14% of the time in the log's write() and 13% in
socket writes, where time.thread_time() around the socket writes found an eighth of their
wall time spent on the CPU. uvloop writes to sockets holding the GIL, so the kernel's
loopback work appears under "socket write". `perf record -g -p
PID,...` agrees on the large split (about 77% of a node's CPU is the interpreter, 16% the
kernel, 3% uvloop), but cannot see Python frames on 3.11.
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.bench_transactions import (_topic, cluster_of_three, concurrent, idempotent_run,  # noqa: E402
                                                 transactional_run)
from tests.support.procstat import cpu_seconds  # noqa: E402

# (what a stack is counted as, a pattern it contains); the first that matches wins
CATEGORIES = [
    ("follower: fetch request and response", r"ReplicaFetcher.*BrokerConnection\.send"),
    ("follower: appending what was fetched", r"ReplicaFetcher.*(fetch_answered|fetch_failed)"),
    ("follower: other", r"ReplicaFetcher"),
    ("server: socket write (kernel included)", r"Connection\.run.*_transport_writer"),
    ("server: decode", r"Connection\.run.*Connection\._decode"),
    ("server: encode", r"Connection\.run.*encode_response"),
    ("handler: {0}", r"Connection\.run.*core/broker/handlers/(\w+)\.py"),
    ("handler: transaction coordinator", r"Connection\.run.*core/broker/transactions/"),
    ("server: receive, frames, dispatch", r"Connection\.run"),
    ("coordinator task: {0}", r"(TxnManager\.\w+|MarkerSender\.\w+)"),
    ("background: {0}", r"core/broker/handlers/(\w+)\.py"),
]


def categorise(stacks: list[tuple[str, int]]) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    compiled = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
    for stack, n in stacks:
        for name, pattern in compiled:
            found = pattern.search(stack)
            if found:
                counts[name.format(*found.groups())] += n
                break
        else:
            counts["other: " + stack.rsplit(";", 1)[-1].split(" (")[0]] += n
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", type=int, default=16)
    ap.add_argument("--n", type=int, default=200_000, help="records in all")
    ap.add_argument("--idempotent", action="store_true", help="idempotent producers instead")
    ap.add_argument("--seconds", type=int, default=6, help="how long py-spy samples (whole seconds)")
    ap.add_argument("--keep", type=Path, help="a directory for py-spy's raw stacks, one file per node")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    out = args.keep or Path(tempfile.mkdtemp(prefix="profile-nodes-"))
    out.mkdir(parents=True, exist_ok=True)
    with cluster_of_three() as (cluster, admin):
        topic = _topic(admin)
        result: dict[str, float] = {}
        run = (idempotent_run,) if args.idempotent else (transactional_run,)
        extra = () if args.idempotent else (100,)

        def load() -> None:
            result["MB/s"] = concurrent(run[0], cluster.bootstrap, topic, args.n, args.producers, *extra)
        pids = {i: n.proc.pid for i, n in cluster.nodes.items()}
        before = {i: cpu_seconds(p) for i, p in pids.items()}
        worker = threading.Thread(target=load)
        worker.start()
        time.sleep(2)   # the producers set up and run
        spies = [subprocess.Popen(["py-spy", "record", "-p", str(pid), "-d", str(args.seconds), "-r", "250",
                                   "-f", "raw", "--gil", "--nonblocking", "-o", str(out / f"node{i}.txt")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for i, pid in pids.items()]
        for spy in spies:
            spy.wait()
        worker.join()
        after = {i: cpu_seconds(p) for i, p in pids.items()}
    stacks = []
    for f in sorted(out.glob("node*.txt")):
        for line in f.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            stacks.append((stack, int(n)))
    total = sum(n for _, n in stacks)
    if not total:
        print(f"py-spy took no samples (is it installed, may it attach?); see {out}", file=sys.stderr)
        return 1
    used = sum(after.values()) - sum(before.values())
    kind = "idempotent" if args.idempotent else "transactional, 100 records per transaction"
    print(f"{args.producers} producer(s), {kind}, {args.n} records of 1 KiB: {result['MB/s']:.1f} MB/s")
    print(f"node CPU (3 nodes, whole run): {used:.1f} s, {used * 1000 / (args.n / 100):.2f} ms per 100 records")
    print(f"where it goes ({total} samples with the GIL held, raw stacks in {out}):")
    for name, n in categorise(stacks).most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
