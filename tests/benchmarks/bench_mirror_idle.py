"""What idle partitions cost the mirror: CPU of the mirror and of the source and target nodes,
and the mirror's TCP connections, while a link copies N partitions that get no records.

    python tests/benchmarks/bench_mirror_idle.py                     # 0, 60 and 300 partitions
    python tests/benchmarks/bench_mirror_idle.py --partitions 0 600 --idle 30

Two single Seaway nodes on loopback, one link between them (`mirror run --config`). The
link's fetchers (mirror/fetcher.py: `fetchers_per_broker` lanes, each a fetch session
long-polling the source every 500 ms) carry every partition, and each idle copier looks at
its slot every 5 s; this measures what, if anything, still grows with the partition count.
With `--profile DIR`, py-spy records the mirror over the idle window of each trial (raw
collapsed stacks, DIR/mirror-<partitions>.txt). The figures go in
tests/benchmarks/README.md by hand.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.node import SeawayNode  # noqa: E402
from tests.support.procstat import cpu_seconds  # noqa: E402



def connections(pid: int) -> int:
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
    return sum(f"pid={pid}," in line for line in out.splitlines())


def trial(partitions: int, settle: float, idle: float, profile: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-mirror-idle-") as tmp:
        base = Path(tmp)
        src, tgt = SeawayNode(base / "src").start(), SeawayNode(base / "tgt").start()
        mirror = None
        try:
            if partitions:
                admin = AdminClient({"bootstrap.servers": src.bootstrap})
                admin.create_topics([NewTopic("idle", partitions, 1)])["idle"].result(60)
            config = base / "links.yaml"
            config.write_text(f"links:\n  - {{source_alias: src, source_bootstrap: '{src.bootstrap}', "
                              f"target_alias: tgt, target_bootstrap: '{tgt.bootstrap}'}}\n")
            mirror = subprocess.Popen([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)],
                                      cwd=REPO, stderr=open(base / "mirror.log", "ab"))
            time.sleep(settle)
            pids = {"mirror": mirror.pid, "source": src.proc.pid, "target": tgt.proc.pid}
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.monotonic()
            if profile is not None:
                profile.mkdir(parents=True, exist_ok=True)
                subprocess.run(["py-spy", "record", "-p", str(mirror.pid), "-r", "100", "-d", str(int(idle)),
                                "-f", "raw", "-o", str(profile / f"mirror-{partitions}.txt")],
                               capture_output=True, check=True)
            else:
                time.sleep(idle)
            took = time.monotonic() - started
            result = {name: 100 * (cpu_seconds(pid) - before[name]) / took for name, pid in pids.items()}
            result["connections"] = connections(mirror.pid)
            return result
        finally:
            if mirror is not None:
                mirror.send_signal(signal.SIGTERM)
                mirror.wait(30)
            src.stop()
            tgt.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[0, 60, 300])
    parser.add_argument("--settle", type=float, default=15.0, help="seconds before sampling")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds sampled")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the mirror into DIR")
    args = parser.parse_args()
    print(f"{'partitions':>10}  {'mirror %':>8}  {'source %':>8}  {'target %':>8}  {'connections':>11}")
    for n in args.partitions:
        r = trial(n, args.settle, args.idle, args.profile)
        print(f"{n:>10}  {r['mirror']:>8.1f}  {r['source']:>8.1f}  {r['target']:>8.1f}  {r['connections']:>11}")


if __name__ == "__main__":
    main()
