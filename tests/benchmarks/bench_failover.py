"""Controller and broker failover times of a KRaft cluster of real processes.

    python tests/benchmarks/bench_failover.py              # 5 trials of each (~3 minutes)
    python tests/benchmarks/bench_failover.py --trials 10

Controller failover: 3 controllers + 1 broker, Kafka's default quorum timeouts
(controller.quorum.election.timeout.ms=1000, fetch.timeout.ms=2000). kill -9 of the active
controller, then CreateTopics to whoever leads, retried every 50 ms: the time until one
succeeds (its record committed by the new quorum) and the time until DescribeQuorum names a
new leader.

Broker failover: 3 controllers + 3 brokers, broker.session.timeout.ms=9000 (Kafka's default)
and broker.heartbeat.interval.ms=2000; a 6-partition RF=3 topic; kill -9 of a broker that
leads some of them, then Metadata every 100 ms through a surviving broker: the time until no
partition names it as leader. The session timeout dominates it by design: a broker that stops
heartbeating is presumed alive until then. Controlled shutdown (SIGTERM) is measured too: the
time from SIGTERM until its partitions have other leaders.

Prints the figures and rewrites the "Failover" section of tests/benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import KRaftCluster, ask_controller, create_topics_request  # noqa: E402

README = ROOT / "tests" / "benchmarks" / "README.md"


def controller_failover(root: Path, trial: int) -> tuple[float, float]:
    from core.protocol.errors import ErrorCode
    with KRaftCluster(root / f"c{trial}", controllers=3, brokers=1) as cluster:
        leader, epoch = cluster.wait_for_leader()
        _create_until_ok(cluster, "probe", 30)
        cluster.kill(leader)
        start = time.monotonic()
        elected = None
        done = None
        while done is None and time.monotonic() - start < 30:
            if elected is None:
                d = cluster.describe(timeout=1)
                if d is not None and d.leader_id not in (-1, leader) and d.leader_epoch > epoch:
                    elected = time.monotonic() - start
            try:
                r = ask_controller(cluster, 19, create_topics_request([f"after-{trial}"]), timeout=1)
                if r.topics[0].error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    done = time.monotonic() - start
            except Exception:   # noqa: BLE001 — no leader yet
                pass
            time.sleep(0.05)
        return elected or float("nan"), done or float("nan")


def _create_until_ok(cluster, name, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            r = ask_controller(cluster, 19, create_topics_request([name]), timeout=2)
            if r.topics[0].error_code in (0, 36):
                return
        except Exception:   # noqa: BLE001
            pass
        time.sleep(0.1)
    raise RuntimeError(f"could not create {name}")


def broker_failover(root: Path, trial: int, graceful: bool) -> float:
    from confluent_kafka.admin import AdminClient

    from tests.support.clients import create_topic
    overrides = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
    with KRaftCluster(root / f"b{trial}{'g' if graceful else 'k'}", controllers=3, brokers=3,
                      overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=5).brokers) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        create_topic(cluster.bootstrap, "failover", partitions=6, replication_factor=3)
        md = admin.list_topics("failover", timeout=5)
        victim = 102
        led = [p.id for p in md.topics["failover"].partitions.values() if p.leader == victim]
        survivor = AdminClient({"bootstrap.servers": cluster.nodes[101].bootstrap})
        start = time.monotonic()
        if graceful:
            import signal
            cluster.nodes[victim].proc.send_signal(signal.SIGTERM)
        else:
            cluster.kill(victim)
        while time.monotonic() - start < 60:
            parts = survivor.list_topics("failover", timeout=5).topics["failover"].partitions
            if all(parts[p].leader not in (victim, -1) for p in led):
                return time.monotonic() - start
            time.sleep(0.1)
        return float("nan")


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        elected, writes = [], []
        for t in range(args.trials):
            e, w = controller_failover(root, t)
            elected.append(e)
            writes.append(w)
            print(f"controller trial {t}: new leader after {e:.2f} s, admin write after {w:.2f} s", flush=True)
        killed, stopped = [], []
        for t in range(args.trials):
            killed.append(broker_failover(root, t, graceful=False))
            print(f"broker trial {t}: kill -9 -> leadership moved after {killed[-1]:.2f} s", flush=True)
            stopped.append(broker_failover(root, t, graceful=True))
            print(f"broker trial {t}: SIGTERM -> leadership moved after {stopped[-1]:.2f} s", flush=True)
    lines = [
        f"| controller kill -9: new leader elected | {summary(elected)} |",
        f"| controller kill -9: first admin write committed | {summary(writes)} |",
        f"| broker kill -9 (session 9 s): leadership moved | {summary(killed)} |",
        f"| broker SIGTERM (controlled shutdown): leadership moved | {summary(stopped)} |",
    ]
    print("\n".join(lines))
    if not args.no_readme:
        _update_readme(args.trials, lines)


def _update_readme(trials: int, lines: list[str]) -> None:
    text = README.read_text()
    marker = "## bench_failover.py"
    section = (f"{marker}: controller and broker failover\n\n"
               f"```\npython tests/benchmarks/bench_failover.py --trials {trials}\n```\n\n"
               + (__doc__.split("\n\n", 2)[2].split("Prints the figures")[0].strip()) + "\n\n"
               f"Latest results ({time.strftime('%Y-%m-%d')}, {trials} trials each, this machine: "
               f"2 cores, every process on loopback):\n\n| measurement | time |\n|---|---|\n"
               + "\n".join(lines) + "\n")
    if marker in text:
        head, rest = text.split(marker, 1)
        nxt = rest.find("\n## ")
        text = head + section + (rest[nxt:] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    README.write_text(text)


if __name__ == "__main__":
    main()
