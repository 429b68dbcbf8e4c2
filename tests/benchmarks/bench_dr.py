"""What DR costs on the default platform (secured, 40 ms and 100 Mbit/s of WAN): a drill, an
unplanned failover under a steady load, and the failback after it.

    python tests/benchmarks/bench_dr.py                  # 1,000 records/s, 10 s of load before the kill
    python tests/benchmarks/bench_dr.py --rate 500 --load 20

1. `regions up --detach` in a fresh state directory (the shipped topology, fixed ports removed).
2. `dr drill eu-west`: the canary over and back; its report gives the planned failover's
   RTO as the canary clients saw it (writes, and reads again), and the drill's duration.
3. A confluent-kafka producer (idempotent, acks=all) writes `--rate` records/s to `bench-orders`
   in eu-west for `--load` seconds, then `regions stop eu-west --kill` under that load.
   `dr failover eu-west --force` is timed; the producer's acknowledged records are then read
   back from us-east-1: those missing are what applications lost, and the time from the
   oldest of them to the last acknowledged record is the RPO in seconds.
4. `regions start eu-west`; its log is read (the records only it has are the stranded ones),
   then `dr failback eu-west` is timed, and its stranded-record count (the failover's exact
   RPO) is compared with what the reader found.
5. `dr drill eu-west --full`: eu-west killed under the canary, the pair failed over unplanned,
   eu-west started and failed back; its report's RTOs (from the kill) and counts.

The figures go in tests/benchmarks/README.md by hand.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from core.client.properties import read_properties  # noqa: E402
from regions.topology import DEFAULT_TOPOLOGY  # noqa: E402

TOPIC = "bench-orders"
PARTITIONS = 3


def run(state: Path, module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", module, "--state-dir", str(state), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{module} {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done


def timed(state: Path, module: str, *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = run(state, module, *args)
    return time.perf_counter() - t0, done.stdout


class Load:
    """A steady idempotent producer; remembers what was acknowledged, and when."""

    def __init__(self, config: dict, rate: float):
        self.producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                  "message.timeout.ms": 5000})
        self.rate = rate
        self.acked: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n, start = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while n < due:
                key = f"r{n}"
                self.producer.produce(TOPIC, key.encode(), key.encode(), partition=n % PARTITIONS,
                                      on_delivery=self._delivered)
                n += 1
            self.producer.poll(0.005)

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.key().decode()] = msg.timestamp()[1] / 1000

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        self.producer.flush(10)


def keys_in(config: dict, bootstrap: str) -> set[str]:
    """Every key of the topic on one cluster (a cluster just restarted may need a while to
    elect its leaders: its answers are retried for a minute)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return _keys_in(config, bootstrap)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _keys_in(config: dict, bootstrap: str) -> set[str]:
    c = Consumer({**config, "bootstrap.servers": bootstrap, "group.id": "bench-dr-reader",
                  "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        keys: set[str] = set()
        deadline = time.monotonic() + 120
        done: set[int] = {p for p, end in ends.items() if end == 0}
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for msg in c.consume(1000, timeout=0.5):
                if msg.error():
                    continue
                keys.add(msg.key().decode())
                if msg.offset() + 1 >= ends[msg.partition()]:
                    done.add(msg.partition())
        return keys
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="records per second of the steady load")
    ap.add_argument("--load", type=float, default=10.0, help="seconds of load before eu-west is killed")
    args = ap.parse_args()
    doc = yaml.safe_load(Path(DEFAULT_TOPOLOGY).read_text())
    for region in doc["regions"].values():
        for cluster in region["clusters"].values():
            for node in cluster["nodes"]:
                for key in ("port", "controller_port", "metrics_port"):
                    node.pop(key, None)
    with tempfile.TemporaryDirectory(prefix="seaway-bench-dr-") as d:
        state = Path(d) / "platform"
        topology = Path(d) / "two-regions.yaml"
        topology.write_text(yaml.safe_dump(doc))
        run(state, "regions.cli", "up", str(topology), "--detach", "--timeout", "120")
        try:
            return measure(state, args)
        finally:
            subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state), "down"], cwd=REPO,
                           capture_output=True, timeout=300)


def measure(state: Path, args) -> int:
    info = json.loads((state / "platform.json").read_text())
    login = {k: v for k, v in read_properties(info["security"]["client_properties"]["admin"]).items()}
    eu, us = info["clusters"]["eu-west-1"]["bootstrap"], info["clusters"]["us-east-1"]["bootstrap"]

    took, out = timed(state, "dr.cli", "drill", "eu-west")
    report = json.loads(Path(out.strip().splitlines()[-1].split(" and ")[-1]).read_text())
    print(f"drill: {'passed' if report['passed'] else 'FAILED'} in {took:.1f} s "
          f"({report['acknowledged']} canary records, {report['lost']} lost, {report['skipped']} skipped)")
    for p in report["phases"]:
        print(f"  {p['name']}: steps {p['duration_s']:.2f} s, writes accepted after {p['rto_promoted_s']:.2f} s, "
              f"canary writes after {p['rto_writes_s']:.2f} s, canary reads after {p['rto_reads_s']:.2f} s")

    admin = AdminClient({**login, "bootstrap.servers": eu})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    deadline = time.monotonic() + 60
    while TOPIC not in AdminClient({**login, "bootstrap.servers": us}).list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise SystemExit("the link did not make bench-orders' replica in us-east-1 within 60 s")
        time.sleep(1)
    load = Load({**login, "bootstrap.servers": eu}, args.rate)
    load.thread.start()
    time.sleep(args.load)
    run(state, "regions.cli", "stop", "eu-west", "--kill")
    load.finish()
    took_failover, out = timed(state, "dr.cli", "--timeout", "3", "failover", "eu-west", "--force")
    expected = next(line for line in out.splitlines() if line.startswith("failover #"))
    print(f"unplanned failover at {args.rate:g} records/s: {took_failover:.2f} s for `dr failover --force` "
          f"({expected.split(': ', 1)[1]})")
    on_us = keys_in(login, us)
    missing = set(load.acked) - on_us
    last_acked = max(load.acked.values())
    window = last_acked - min(load.acked[k] for k in missing) if missing else 0.0
    print(f"  acknowledged in eu-west before the kill: {len(load.acked)}; missing in us-east-1: {len(missing)}, "
          f"written in the last {window:.2f} s before the last acknowledgement (the RPO in time)")

    run(state, "regions.cli", "start", "eu-west")
    time.sleep(5)       # elections in the restarted cluster
    on_eu = keys_in(login, eu)
    stranded_keys = on_eu - on_us
    print(f"  eu-west back: {len(on_eu)} records, {len(stranded_keys)} of them not in us-east-1 (stranded); "
          f"acknowledged records eu-west lost: {len(set(load.acked) - on_eu)}")
    took_failback, out = timed(state, "dr.cli", "failback", "eu-west")
    stranded = next(line for line in out.splitlines() if line.startswith("failback #"))
    count = int(stranded.split("s: ", 1)[1].split(" stranded")[0])
    print(f"failback: {took_failback:.2f} s for `dr failback eu-west` ({count} stranded records kept in "
          f"{TOPIC}.stranded, then the planned failover back)")
    print(f"  the unplanned failover's exact RPO: {count} records "
          f"({'equal to' if count == len(stranded_keys) else 'NOT equal to'} the {len(stranded_keys)} the reader "
          f"found only in eu-west)")

    took, out = timed(state, "dr.cli", "--timeout", "3", "drill", "eu-west", "--full")
    full = json.loads(Path(out.strip().splitlines()[-1].split(" and ")[-1]).read_text())
    print(f"full drill (eu-west killed, the pair over and back): {'passed' if full['passed'] else 'FAILED'} in "
          f"{took:.1f} s ({full['acknowledged']} canary records, {full['lost']} lost, {full['stranded']} stranded, "
          f"{full['kept']} kept, {full['reread']} re-read by the group)")
    for p in full["phases"]:
        print(f"  {p['name']}: RPO {p['rpo_records']} records expected, writes accepted after "
              f"{p['rto_promoted_s']:.2f} s, canary writes after {p['rto_writes_s']:.2f} s, canary reads after "
              f"{p['rto_reads_s']:.2f} s ({'from the kill' if p['name'] == 'failover' else 'from its start'})")
    return 0 if count == len(stranded_keys) and report["passed"] and full["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
