"""What the compose platform costs: image build time and size, seconds from `up` to healthy, and
the idle CPU of every container of compose/two-regions.yml together, and of the Docker daemons
beside them (healthcheck execs run through them).

    python tests/benchmarks/bench_compose.py                 # 3 up/down trials, 60 s idle each
    python tests/benchmarks/bench_compose.py --trials 1 --idle 30

It builds the images as the tests do (compose/build-image.sh: a Debian base made with
debootstrap unless one is there, a wheelhouse, nothing pulled) under tags of its own, then per
trial: `docker compose up -d --wait` from a clean state (timed), `--settle` seconds, the CPU time
each container's cgroup used over `--idle` seconds, then `down -v`. Everything it made is
removed at the end. The figures go in tests/benchmarks/README.md by hand.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.compose import ComposePlatform, run  # noqa: E402


def container_cpu_seconds(container_id: str) -> float:
    """CPU time of a container's cgroup (v1 cpuacct or v2 cpu.stat)."""
    full = run(["docker", "inspect", "--format", "{{.Id}}", container_id]).stdout.strip()
    v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{full}/cpuacct.usage")
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for v2 in (Path(f"/sys/fs/cgroup/system.slice/docker-{full}.scope/cpu.stat"),
               Path(f"/sys/fs/cgroup/docker/{full}/cpu.stat")):
        if v2.exists():
            usage = re.search(r"^usage_usec (\d+)$", v2.read_text(), re.M)
            return int(usage.group(1)) / 1e6
    raise SystemExit(f"no cgroup CPU accounting found for container {full[:12]}")


def docker_daemons_cpu_seconds() -> float:
    """CPU time of the Docker daemons (dockerd, containerd and its shims, docker-proxy): where
    healthcheck execs and published ports cost the host outside any container's cgroup."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        if name in ("dockerd", "containerd", "docker-proxy") or name.startswith("containerd-shim"):
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
    return total


def trial(platform: ComposePlatform, settle: float, idle: float) -> tuple[float, float, float, dict[str, float]]:
    took = platform.up()
    time.sleep(settle)
    names = {}
    for line in platform.compose("ps", "--format", "{{.ID}} {{.Service}}").stdout.splitlines():
        cid, service = line.split()
        names[cid] = service
    before = {cid: container_cpu_seconds(cid) for cid in names}
    daemons_before = docker_daemons_cpu_seconds()
    started = time.monotonic()
    time.sleep(idle)
    after = {cid: container_cpu_seconds(cid) for cid in names}
    daemons = docker_daemons_cpu_seconds() - daemons_before
    elapsed = time.monotonic() - started
    per_service = {names[cid]: 100 * (after[cid] - before[cid]) / elapsed for cid in names}
    platform.compose("down", "-v", "--timeout", "20")
    return took, sum(per_service.values()), 100 * daemons / elapsed, per_service


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=60.0)
    args = parser.parse_args()
    with ComposePlatform() as platform:
        built = platform.build_log
        steps = re.findall(r"build-image: (.*)", built)
        size = platform.image_size()
        print(f"images built in {platform.build_s:.1f}s ({'made the Debian base' if platform.made_base else 'base already there'}):",
              flush=True)
        for step in steps:
            print(f"  {step}")
        print(f"image {platform.image}: {size / 1e6:.0f} MB")
        ups, idles, daemons = [], [], []
        for i in range(args.trials):
            took, total, daemon, per_service = trial(platform, args.settle, args.idle)
            ups.append(took)
            idles.append(total)
            daemons.append(daemon)
            top = ", ".join(f"{s} {v:.1f}%" for s, v in sorted(per_service.items(), key=lambda kv: -kv[1]))
            print(f"trial {i + 1}: healthy {took:.1f}s after up; idle {total:.1f}% of one core in the "
                  f"containers ({top}), {daemon:.1f}% in the Docker daemons", flush=True)
        for what, values, unit in (("up to healthy", ups, "s"), ("idle CPU, all containers", idles, "%"),
                                   ("idle CPU, Docker daemons", daemons, "%")):
            print(f"{what}: median {statistics.median(values):.1f}{unit} "
                  f"({min(values):.1f} to {max(values):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
