"""The fault run: producers against a 3-node KRaft cluster while a nemesis breaks things.

    python tests/faults/run_faults.py --seed 7 --duration 60 --runs 3
    python tests/faults/run_faults.py --no-faults --duration 10      # the plumbing alone

Each run: three combined (broker,controller) nodes behind a FaultNet; a topic with RF=3 and
min.insync.replicas=2; confluent-kafka producers (acks=all, idempotent) writing unique values
for --duration seconds while a seeded nemesis kills -9 and restarts, SIGSTOPs, partitions,
blackholes, cuts, delays and resets links. Then every fault is healed, the cluster is given
time to restore full ISRs, every partition is read back from the beginning, the Jepsen
checker judges the history, and after a clean stop the replicas' segment files are compared
byte for byte up to the high watermark. Exit status 1 if any run lost, duplicated or misplaced
a record, if replicas disagree, or if the cluster did not recover (ISR not full after the
settle time, a producer's fatal error, a node that would not restart).

A failed run keeps its directory: node logs, data, and history.jsonl (every op, read and
fault). The seed fixes the nemesis's schedule, not the processes' timing: a replay repeats
the faults, not necessarily the outcome. `kill -USR1 <pid>` prints every thread's stack.
"""
from __future__ import annotations

import argparse
import faulthandler
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.faults.nemesis import KINDS, Nemesis  # noqa: E402
from tests.faults.watch import Watcher  # noqa: E402
from tests.faults.workload import ProducerThread, read_back  # noqa: E402
from tests.support.cluster import KRaftCluster  # noqa: E402
from tests.support.faultnet import FaultNet  # noqa: E402
from tests.support.jepsen import History, Report, check, compare_replicas, explain_duplicates  # noqa: E402

TOPIC = "jepsen"
# Faults are held 1-8 s. For them to move leaders and shrink ISRs inside that window, a broker
# that stops heartbeating is fenced after 4 s (Kafka: 9 s) and a follower that stops fetching
# leaves the ISR after 3 s (Kafka: 30 s); shorter holds only stall the producers.
OVERRIDES = {"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "4000",
             "broker.heartbeat.interval.ms": "500"}


@dataclass
class RunResult:
    seed: int
    report: Report | None = None
    replica_problems: list[str] = field(default_factory=list)
    high_watermarks: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)      # what went wrong outside the checker
    history: History | None = None
    client_ids: set[tuple] = field(default_factory=set)  # FaultNet.client_ids_seen()
    observed: str = ""                                    # what the Watcher saw change
    duplicate_causes: dict[str, list] = field(default_factory=dict)   # explain_duplicates()

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.valid and not self.replica_problems \
            and not self.notes

    def summary(self) -> str:
        lines = [self.report.summary() if self.report else "no history checked"]
        if self.observed:
            lines.append(f"  {self.observed}")
        if self.high_watermarks:
            lines.append(f"  replicas compared up to HW {self.high_watermarks}: "
                         + ("agree" if not self.replica_problems else "DISAGREE"))
        lines += [f"  replica problem: {p}" for p in self.replica_problems]
        for cause, entries in self.duplicate_causes.items():
            lines.append(f"  duplicated, {cause} ({len(entries)}): {entries[:3]}")
        lines += [f"  note: {n}" for n in self.notes]
        if self.history is not None and self.history.faults:
            lines.append("  faults: " + "; ".join(f"{t:.1f}s {text}" for t, text in self.history.faults))
        return "\n".join(lines)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:   # the cluster may still be coming back
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout}s (last: {last})")


def healthy(admin: AdminClient, brokers: int, partitions: int, rf: int):
    """The topic's metadata once every broker is up and every partition has a leader and a
    full ISR, else None."""
    md = admin.list_topics(TOPIC, timeout=5)
    t = md.topics.get(TOPIC)
    if len(md.brokers) < brokers or t is None or t.error is not None or len(t.partitions) < partitions:
        return None
    if all(p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values()):
        return md
    return None


def heal(cluster: KRaftCluster) -> None:
    cluster.net.heal_all()
    for node_id, node in cluster.nodes.items():
        node.resume()
        if node.proc is None or node.proc.poll() is not None:
            node.start(timeout=60)


def run_once(seed: int, duration: float, directory: Path, *, faults: bool = True, partitions: int = 3,
             rf: int = 3, producers: int = 3, rate: float = 100.0, kinds=KINDS,
             settle: float = 60.0, acks: str = "all", max_in_flight: int = 5, log=print) -> RunResult:
    result = RunResult(seed)
    history = result.history = History()
    brokers = 3
    with KRaftCluster(directory, combined=brokers, overrides=OVERRIDES,
                      faultnet=FaultNet(seed=seed)) as cluster:
        cluster.wait_for_leader()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) >= brokers, 30, "brokers registered")
        config = {"min.insync.replicas": str(min(2, rf))}
        for f in admin.create_topics([NewTopic(TOPIC, partitions, rf, config=config)]).values():
            f.result(30)
        wait_until(lambda: healthy(admin, brokers, partitions, rf), 30, "topic ready")
        log(f"seed {seed}: cluster up, topic {TOPIC} ({partitions} partitions, RF={rf}) ready; "
            f"running {duration:g}s {'with' if faults else 'without'} faults")

        stop = threading.Event()
        threads = [ProducerThread(p, cluster.bootstrap, TOPIC, history, stop, rate=rate, acks=acks,
                                  max_in_flight=max_in_flight) for p in range(producers)]
        nemesis = Nemesis(cluster, history, seed, stop, kinds=kinds) if faults else None
        watch_stop = threading.Event()
        watcher = Watcher(cluster, TOPIC, watch_stop)
        for t in threads + [watcher] + ([nemesis] if nemesis else []):
            t.start()
        time.sleep(duration)
        stop.set()
        if nemesis:
            nemesis.join(120)
            result.notes += nemesis.errors
        for t in threads:
            t.join(60)
            if t.is_alive():
                result.notes.append(f"{t.name} did not finish its final flush")
            result.notes += [f"{t.name}: fatal producer error {e}" for e in t.fatal_errors]

        heal(cluster)
        history.fault("heal: all links, SIGCONT all, restart dead nodes")
        try:
            md = wait_until(lambda: healthy(admin, brokers, partitions, rf), settle, "full ISR after heal")
        except TimeoutError as exc:
            result.notes.append(str(exc))
            md = admin.list_topics(TOPIC, timeout=10)
        watch_stop.set()
        watcher.join(10)
        result.observed = watcher.summary()
        replicas = {p: list(md.topics[TOPIC].partitions[p].replicas) for p in range(partitions)}
        # Only in-sync replicas vouch for everything below the HW; one still out of the ISR
        # after the settle time is noted above ("full ISR after heal") and not compared.
        in_sync = {p: list(md.topics[TOPIC].partitions[p].isrs) for p in range(partitions)}
        try:
            result.high_watermarks = read_back(cluster.bootstrap, TOPIC, partitions, history)
        except (TimeoutError, Exception) as exc:   # whatever was read so far still gets checked
            result.notes.append(f"read back failed: {exc}")
        history.dump(directory / "history.jsonl")
        result.report = check(history, result.high_watermarks)
        result.client_ids = cluster.net.client_ids_seen()
    # Stopped: the segment files are final.
    for p, hw in result.high_watermarks.items():
        if set(in_sync[p]) != set(replicas[p]):
            result.notes.append(f"partition {p}: replicas {replicas[p]}, ISR {in_sync[p]} after heal; "
                                f"comparing the ISR only")
        dirs = {n: cluster.nodes[n].data_dir / f"{TOPIC}-{p}" for n in in_sync[p]}
        result.replica_problems += [f"partition {p}: {x}" for x in compare_replicas(dirs, hw)]
    if result.report is not None and result.report.duplicated:
        first_in_sync = {p: cluster.nodes[in_sync[p][0]].data_dir / f"{TOPIC}-{p}"
                         for p in result.high_watermarks if in_sync[p]}
        result.duplicate_causes = explain_duplicates(result.report.duplicated, history.reads,
                                                     first_in_sync)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="first run's seed (random if unset)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load per run")
    ap.add_argument("--runs", type=int, default=1, help="runs, with seeds seed, seed+1, ...")
    ap.add_argument("--no-faults", action="store_true", help="no nemesis: check the plumbing")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds ({','.join(KINDS)})")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rf", type=int, default=3, help="replication factor (1 to test the plumbing)")
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100.0, help="messages/s per producer")
    ap.add_argument("--acks", default="all", choices=("all", "1"),
                    help="1 (not idempotent) shows what the checker finds when durability is not asked for")
    ap.add_argument("--max-in-flight", type=int, default=5,
                    help="max.in.flight.requests.per.connection (1 rules out librdkafka's epoch-bump duplicates)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directories")
    args = ap.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)   # `kill -USR1 <pid>` prints every thread's stack
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    failed = 0
    for i in range(args.runs):
        run_seed = seed + i
        directory = Path(tempfile.mkdtemp(prefix=f"seaway-faults-{run_seed}-"))
        started = time.monotonic()
        # Every phase of a run is bounded; if a run still outlives this, show where it is stuck.
        faulthandler.dump_traceback_later(args.duration + 600, repeat=True)
        try:
            result = run_once(run_seed, args.duration, directory, faults=not args.no_faults,
                              partitions=args.partitions, rf=args.rf, producers=args.producers,
                              rate=args.rate, kinds=kinds, acks=args.acks,
                              max_in_flight=args.max_in_flight)
        except Exception as exc:
            result = RunResult(run_seed, notes=[f"run aborted: {type(exc).__name__}: {exc}\n"
                                                + traceback.format_exc()])
        faulthandler.cancel_dump_traceback_later()
        status = "OK" if result.ok else "FAILED"
        print(f"run {i + 1}/{args.runs} seed {run_seed} {status} in {time.monotonic() - started:.0f}s")
        print(result.summary())
        if not result.ok:
            failed += 1
            print(f"  replay: python tests/faults/run_faults.py --seed {run_seed} "
                  f"--duration {args.duration:g} --kinds {','.join(kinds)}"
                  + (" --no-faults" if args.no_faults else "") + (" --acks 1" if args.acks == "1" else "")
                  + f" --max-in-flight {args.max_in_flight}"
                  + f"\n  cluster directory (history.jsonl, node logs): {directory}")
        elif not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
        sys.stdout.flush()
    print(f"{args.runs - failed}/{args.runs} runs valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
