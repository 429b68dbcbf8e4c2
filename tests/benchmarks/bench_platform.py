"""What the default platform costs on this machine: how long `regions up` takes until every
cluster is healthy, and how much CPU the whole platform (supervisor with the WAN proxies, six
node processes and the mirror) burns at idle.

    python tests/benchmarks/bench_platform.py                # 3 trials, 30 s idle sample each
    python tests/benchmarks/bench_platform.py --trials 1 --idle 60
    python tests/benchmarks/bench_platform.py --plaintext    # the same with `security` off
    python tests/benchmarks/bench_platform.py --clusters-per-region 2   # 4 clusters, 2 DR pairs

Each trial starts the shipped two-region topology (fixed ports removed, so it cannot clash
with a platform already running) in a fresh state directory with `regions up --detach`, waits
`--settle` seconds, reads utime+stime of every platform process from /proc over `--idle`
seconds and their resident memory at the end, then `regions down`. With
`--clusters-per-region N` every region holds N copies of its cluster (eu-west-1 ... eu-west-N),
and cluster k of one region is a DR pair with cluster k of the other, as the shipped pair is.
The figures go in tests/benchmarks/README.md by hand.
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

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from regions.topology import DEFAULT_TOPOLOGY  # noqa: E402
from tests.support.procstat import cpu_seconds, rss_bytes  # noqa: E402



def regions(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def platform_pids(state: Path) -> dict[int, str]:
    """Every process of the platform, by pid, with what it is: supervisor, mirror, or node."""
    info = json.loads((state / "platform.json").read_text())
    status = json.loads(regions(state, "status", "--output", "json").stdout)
    pids = {info["supervisor_pid"]: "supervisor"}
    if status.get("mirror") and status["mirror"]["pid"]:
        pids[status["mirror"]["pid"]] = "mirror"
    for region in status["regions"].values():
        for cluster in region.values():
            pids.update({n["pid"]: "node" for n in cluster["nodes"].values() if n["pid"]})
    return pids


def trial(topology: Path, settle: float, idle: float) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory(prefix="seaway-bench-platform-") as d:
        state = Path(d)
        started = time.perf_counter()
        up = regions(state, "up", str(topology), "--detach", "--timeout", "120")
        took = time.perf_counter() - started
        if up.returncode != 0:
            raise SystemExit(f"regions up failed: {up.stderr}")
        try:
            time.sleep(settle)
            pids = platform_pids(state)
            before = {p: cpu_seconds(p) for p in pids}
            t0 = time.monotonic()
            time.sleep(idle)
            elapsed = time.monotonic() - t0
            used_by = {p: cpu_seconds(p) - before[p] for p in pids}
            used = sum(used_by.values())
            rss = sum(rss_bytes(p) for p in pids)
            kinds = {kind: [100.0 * used_by[p] / elapsed for p, k in pids.items() if k == kind]
                     for kind in ("supervisor", "mirror", "node")}
            print("  idle CPU by process: " + "; ".join(
                f"{kind} {sum(v):.1f}%" + (f" ({len(v)}, {min(v):.1f}-{max(v):.1f} each)" if len(v) > 1 else "")
                for kind, v in kinds.items() if v), flush=True)
        finally:
            regions(state, "down")
        return took, 100.0 * used / elapsed, len(pids), rss


def multiply_clusters(doc: dict, per_region: int) -> None:
    """Every region's first cluster copied as <region>-2 ... <region>-N, and the shipped DR
    pair's link repeated for each k: <first region>-k <-> <second region>-k."""
    if per_region == 1:
        return
    regions_ = list(doc["regions"])
    for region in regions_:
        clusters = doc["regions"][region]["clusters"]
        first = clusters[f"{region}-1"]
        for k in range(2, per_region + 1):
            clusters[f"{region}-{k}"] = {"config": dict(first["config"]),
                                         "nodes": [dict(n) for n in first["nodes"]]}
    [pair] = doc["mirrors"]
    for k in range(2, per_region + 1):
        doc["mirrors"].append(dict(pair, source=f"{regions_[0]}-{k}", target=f"{regions_[1]}-{k}"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after up before sampling")
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU sampling")
    ap.add_argument("--plaintext", action="store_true",
                    help="turn the topology's security off (what TLS, SCRAM and ACLs cost)")
    ap.add_argument("--clusters-per-region", type=int, default=1, metavar="N",
                    help="copies of each region's cluster, paired across the regions (default 1)")
    args = ap.parse_args()
    if args.clusters_per_region < 1:
        ap.error("--clusters-per-region: must be >= 1")
    doc = yaml.safe_load(Path(DEFAULT_TOPOLOGY).read_text())
    multiply_clusters(doc, args.clusters_per_region)
    if args.plaintext:
        doc["security"] = {"enabled": False}
    for region in doc["regions"].values():
        for cluster in region["clusters"].values():
            for node in cluster["nodes"]:
                for key in ("port", "controller_port", "metrics_port"):
                    node.pop(key, None)
    with tempfile.TemporaryDirectory() as d:
        topology = Path(d) / "two-regions.yaml"
        topology.write_text(yaml.safe_dump(doc))
        results = []
        for i in range(args.trials):
            took, cpu, n, rss = trial(topology, args.settle, args.idle)
            print(f"trial {i + 1}: up and healthy in {took:.1f} s; idle CPU {cpu:.1f}% of one core "
                  f"over {args.idle:g} s ({n} processes, {rss / 2**20:.0f} MiB resident)", flush=True)
            results.append((took, cpu, rss))
    ups, cpus, rsss = [r[0] for r in results], [r[1] for r in results], [r[2] / 2**20 for r in results]
    print(f"\nstart: median {statistics.median(ups):.1f} s (min {min(ups):.1f}, max {max(ups):.1f})")
    print(f"idle CPU: median {statistics.median(cpus):.1f}% of one core "
          f"(min {min(cpus):.1f}, max {max(cpus):.1f})")
    print(f"resident memory of the platform: median {statistics.median(rsss):.0f} MiB "
          f"(min {min(rsss):.0f}, max {max(rsss):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
