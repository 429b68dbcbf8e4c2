"""What the default platform costs on this machine: how long `regions up` takes until every
cluster is healthy, and how much CPU the whole platform (supervisor with the WAN proxies, six
node processes and the mirror) burns at idle.

    python tests/benchmarks/bench_platform.py                # 3 trials, 30 s idle sample each
    python tests/benchmarks/bench_platform.py --trials 1 --idle 60
    python tests/benchmarks/bench_platform.py --plaintext    # the same with `security` off

Each trial starts the shipped two-region topology (fixed ports removed, so it cannot clash
with a platform already running) in a fresh state directory with `regions up --detach`, waits
`--settle` seconds, reads utime+stime of every platform process from /proc over `--idle`
seconds, then `regions down`. The figures go in tests/benchmarks/README.md by hand.
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
from tests.support.procstat import cpu_seconds  # noqa: E402



def regions(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def platform_pids(state: Path) -> list[int]:
    info = json.loads((state / "platform.json").read_text())
    status = json.loads(regions(state, "status", "--output", "json").stdout)
    pids = [info["supervisor_pid"]]
    if status.get("mirror") and status["mirror"]["pid"]:
        pids.append(status["mirror"]["pid"])
    for region in status["regions"].values():
        for cluster in region.values():
            pids += [n["pid"] for n in cluster["nodes"].values() if n["pid"]]
    return pids


def trial(topology: Path, settle: float, idle: float) -> tuple[float, float, int]:
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
            used = sum(cpu_seconds(p) - before[p] for p in pids)
        finally:
            regions(state, "down")
        return took, 100.0 * used / elapsed, len(pids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after up before sampling")
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU sampling")
    ap.add_argument("--plaintext", action="store_true",
                    help="turn the topology's security off (what TLS, SCRAM and ACLs cost)")
    args = ap.parse_args()
    doc = yaml.safe_load(Path(DEFAULT_TOPOLOGY).read_text())
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
            took, cpu, n = trial(topology, args.settle, args.idle)
            print(f"trial {i + 1}: up and healthy in {took:.1f} s; idle CPU {cpu:.1f}% of one core "
                  f"over {args.idle:g} s ({n} processes)", flush=True)
            results.append((took, cpu))
    ups, cpus = [r[0] for r in results], [r[1] for r in results]
    print(f"\nstart: median {statistics.median(ups):.1f} s (min {min(ups):.1f}, max {max(ups):.1f})")
    print(f"idle CPU: median {statistics.median(cpus):.1f}% of one core "
          f"(min {min(cpus):.1f}, max {max(cpus):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
