#!/usr/bin/env python
"""Hand-run benchmark: one Seaway node against tansu, driven by confluent-kafka.

    python tests/benchmarks/bench_node.py                 # default run, about 1.5 minutes
    python tests/benchmarks/bench_node.py --quick         # smaller N, one repeat: a smoke run
    python tests/benchmarks/bench_node.py --partitions 1,3      # a second, 3-partition scenario
    python tests/benchmarks/bench_node.py --profile /tmp/prof   # py-spy on the Seaway node

Both brokers run at once on loopback (an idle broker costs nothing measurable); the client
drives one at a time, alternating which goes first in each repeat, so that drift in a shared
machine hits both alike. Each scenario runs --repeat times on a fresh topic, deleted after
the run; the table shows the median and the range. Before anything starts, --prefault-gib of
memory is touched and released (see prefault()). Measured:

- produce throughput, 100 B and 1 KiB values (no keys), one producer, acks=all (-1),
  linger.ms=5, batch.size=1 MiB, no compression; timed from the first produce() of N records
  to the end of flush(), after warm-up records (5% of N, at most 20,000) on the same producer;
- consume throughput, reading back exactly those N records with a consumer assigned by hand
  at explicit offsets (no group join, no commits); timed from assign() to the last record.
  fetch.queue.backoff.ms is 10: with librdkafka's default (1000) the consumer idles a whole
  second each time its prefetch queue fills, which measures the client's pause, not the broker;
- produce latency with a paced producer (default 1000 msg/s of 1 KiB for 3 s, linger.ms=0,
  acks=all): delivery-callback time minus produce() time, p50/p99/max.

It prints Seaway's and tansu's figures side by side with the ratio Seaway/tansu, and rewrites
the "Latest results" section of tests/benchmarks/README.md (unless --no-readme, --profile or
only one broker is chosen). MB means 10^6 bytes of record values.

With --profile DIR it attaches ``py-spy record --format raw`` to the Seaway node during the
first 1 KiB produce and the first 1 KiB consume, writes the collapsed stacks and a summary to
DIR and prints the top frames. Figures from a profiled run are perturbed (py-spy shares the
cores) and are not written to README.

Not a pytest test: the file name is bench_*.py and tests/benchmarks/conftest.py ignores it.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from confluent_kafka import (
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
    libversion,
)
from confluent_kafka import version as ck_version

from tests.support.clients import create_topic, drop_topic, produce_many
from tests.support.node import SeawayNode
from tests.support.procstat import prefault
from tests.support.tansu import TansuBroker, tansu_binary

README = Path(__file__).resolve().parent / "README.md"
RESULTS_START = "<!-- bench_node results: start (rewritten by bench_node.py) -->"
RESULTS_END = "<!-- bench_node results: end -->"
MB = 1_000_000


# --------------------------------------------------------------------------- results


@dataclass
class Throughput:
    records: int
    nbytes: int
    seconds: float
    client_cpu: float = 0.0  # CPU seconds of this process (Python + librdkafka threads)
    broker_cpu: float = 0.0  # CPU seconds of the broker process

    @property
    def cpu_note(self) -> str:
        return (f"client {self.client_cpu / self.seconds:.0%} CPU, "
                f"broker {self.broker_cpu / self.seconds:.0%} CPU")

    @property
    def mb_s(self) -> float:
        return self.nbytes / MB / self.seconds

    @property
    def msg_s(self) -> float:
        return self.records / self.seconds


@dataclass
class Latency:
    samples: list[float]  # ms
    sent: int
    seconds: float
    behind_ms: float  # how late the pacer fell behind its schedule at worst

    def pct(self, q: float) -> float:
        s = sorted(self.samples)
        return s[min(len(s) - 1, round(q * (len(s) - 1)))]

    @property
    def max(self) -> float:
        return max(self.samples)


@dataclass
class BrokerRun:
    name: str
    # (size, partitions) -> one Throughput per repeat
    produce: dict[tuple[int, int], list[Throughput]] = field(default_factory=dict)
    consume: dict[tuple[int, int], list[Throughput]] = field(default_factory=dict)
    latency: Latency | None = None


def median(runs: list[Throughput]) -> Throughput:
    return sorted(runs, key=lambda t: t.mb_s)[(len(runs) - 1) // 2]


# --------------------------------------------------------------------------- clients


class CpuMeter:
    """CPU seconds used by this process and by the broker process between start() and stop()."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def _broker(self) -> float:
        if self.pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / self.tick  # utime, stime
        except (OSError, IndexError, ValueError):
            return 0.0

    def start(self) -> None:
        self.c0, self.b0 = time.process_time(), self._broker()

    def stop(self) -> tuple[float, float]:
        return time.process_time() - self.c0, self._broker() - self.b0


def _check_errors(errors: list) -> None:
    if errors:
        raise KafkaException(f"{len(errors)} delivery errors, first: {errors[0]}")


def producer_conf(bootstrap: str, args, *, linger_ms: int) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "-1",
        "linger.ms": linger_ms,
        "batch.size": args.batch_size,
        "compression.type": "none",
        "enable.idempotence": False,
    }


def bench_produce(bootstrap: str, topic: str, size: int, n: int, warmup: int, partitions: int,
                  args, meter: CpuMeter) -> tuple[dict[int, int], Throughput]:
    """Warm up, then time N records; returns where the N records start in each partition."""
    errors: list = []
    conf = producer_conf(bootstrap, args, linger_ms=args.linger_ms)
    conf["delivery.report.only.error"] = True
    conf["on_delivery"] = lambda err, msg: errors.append(err) if err is not None else None
    producer = Producer(conf)
    payload = os.urandom(size)
    # Warm-up (connections, metadata, first appends) into a fresh topic, round-robin over the
    # partitions by hand, so that the measured records start at known offsets.
    starts = dict.fromkeys(range(partitions), 0)
    for i in range(warmup):
        p = i % partitions
        while True:
            try:
                producer.produce(topic, payload, partition=p)
                break
            except BufferError:
                producer.poll(0.002)
        starts[p] += 1
    if producer.flush(30):
        raise KafkaException("warm-up records not delivered in 30 s")
    _check_errors(errors)
    meter.start()
    t0 = time.perf_counter()
    produce_many(producer, topic, payload, n)
    left = producer.flush(120)
    seconds = time.perf_counter() - t0
    cpu = meter.stop()
    if left:
        raise KafkaException(f"{left} records not delivered within 120 s of the last produce()")
    _check_errors(errors)
    return starts, Throughput(n, n * size, seconds, *cpu)


def consumer_conf(bootstrap: str) -> dict:
    # group.id is mandatory in confluent-kafka; the group is never joined nor committed to.
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "fetch.queue.backoff.ms": 10,  # see the module docstring
    }


def bench_consume(bootstrap: str, topic: str, size: int, starts: dict[int, int], n: int,
                  meter: CpuMeter, timeout: float = 120) -> Throughput:
    consumer = Consumer(consumer_conf(bootstrap))
    try:
        consumer.list_topics(topic, timeout=10)  # connect before the clock starts
        got = nbytes = 0
        meter.start()
        t0 = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        deadline = t0 + timeout
        consume = consumer.consume
        while got < n:
            if time.perf_counter() > deadline:
                raise KafkaException(f"consumed {got} of {n} records in {timeout} s")
            for msg in consume(min(1000, n - got), 1.0):
                if msg.error():
                    raise KafkaException(msg.error())
                nbytes += len(msg)
                got += 1
        seconds = time.perf_counter() - t0
        cpu = meter.stop()
    finally:
        consumer.close()
    if got != n or nbytes != n * size:
        raise KafkaException(f"consumed {got} records / {nbytes} bytes, expected {n} / {n * size}")
    return Throughput(got, nbytes, seconds, *cpu)


def bench_latency(bootstrap: str, topic: str, args) -> Latency:
    producer = Producer(producer_conf(bootstrap, args, linger_ms=0))
    payload = os.urandom(args.latency_size)
    errors: list = []
    samples: list[float] = []
    now = time.perf_counter

    def make_cb(t_sent: float, record: bool):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            elif record:
                samples.append((now() - t_sent) * 1000)
        return cb

    for _ in range(min(200, args.latency_rate)):  # warm-up
        producer.produce(topic, payload, on_delivery=make_cb(now(), False))
        producer.poll(0.001)
    producer.flush(30)
    _check_errors(errors)

    total = int(args.latency_rate * args.latency_seconds)
    interval = 1.0 / args.latency_rate
    behind = 0.0
    start = now()
    for i in range(total):
        due = start + i * interval
        while (wait := due - now()) > 0:
            producer.poll(wait)
        behind = max(behind, now() - due)
        producer.produce(topic, payload, on_delivery=make_cb(now(), True))
        producer.poll(0)
    seconds = now() - start
    if producer.flush(30):
        raise KafkaException("latency records not delivered in 30 s")
    _check_errors(errors)
    return Latency(samples, total, seconds, behind * 1000)


# --------------------------------------------------------------------------- py-spy


class PySpy:
    """``py-spy record --format raw`` on a pid while a `with` block runs."""

    def __init__(self, pid: int, out: Path, rate: int, native: bool = False):
        self.pid, self.out, self.rate, self.native = pid, out, rate, native
        self.proc: subprocess.Popen | None = None
        self.seconds = 0.0

    def __enter__(self) -> PySpy:
        self.proc = subprocess.Popen(
            ["py-spy", "record", "--pid", str(self.pid), "--format", "raw", "--rate", str(self.rate),
             *(["--native"] if self.native else ["--nonblocking"]), "-o", str(self.out)],
            stdout=subprocess.DEVNULL, stderr=open(self.out.with_suffix(".pyspy.log"), "wb"))
        time.sleep(1.0)  # let it attach
        if self.proc.poll() is not None:
            raise RuntimeError(f"py-spy exited: {self.out.with_suffix('.pyspy.log').read_text()}")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def _short(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        parts = Path(path).parts
        if "site-packages" in parts:
            return "/".join(parts[parts.index("site-packages") + 1:])
        return "/".join(parts[-2:])


def summarize_profile(raw: Path, seconds: float, rate: int, top: int = 15) -> str:
    """Self time per frame (function, file:line) and inclusive time per function."""
    self_by_frame: collections.Counter = collections.Counter()
    incl_by_func: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = []
        for f in stack.split(";"):
            mm = _FRAME.match(f)
            frames.append((mm["func"], _short(mm["file"]), mm["line"]) if mm else (f, "?", None))
        leaf = frames[-1]
        self_by_frame[(leaf[0], f"{leaf[1]}:{leaf[2]}" if leaf[2] else leaf[1])] += n
        for func in {(f[0], f[1]) for f in frames}:
            incl_by_func[func] += n
    if not total:
        return f"{raw.name}: no samples\n"
    wall = seconds * rate
    out = [(f"{raw.name}: {total} non-idle samples over {seconds:.1f} s at {rate} Hz "
            f"(~{total / wall:.0%} of one core busy in Python threads, wall-clock estimate)"),
           "  top self time (leaf frame):"]
    for (func, where), n in self_by_frame.most_common(top):
        out.append(f"    {n / total:6.1%}  {func}  {where}")
    out.append("  top inclusive time (function anywhere on the stack):")
    for (func, where), n in incl_by_func.most_common(top + 10):
        out.append(f"    {n / total:6.1%}  {func}  {where}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- runs


@dataclass
class Broker:
    name: str
    bootstrap: str
    pid: int | None


def run_scenario(broker: Broker, run: BrokerRun, size: int, partitions: int, args,
                 profile_dir: Path | None) -> None:
    """One produce + consume of N records of `size` bytes on a fresh topic."""
    meter = CpuMeter(broker.pid)
    n = args.records[size]
    topic = f"bench-{size}b-p{partitions}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions)
    warmup = max(1, min(n // 20, 20_000))
    label = f"{size}B-p{partitions}"

    def measured(kind, fn):
        if profile_dir is None:
            return fn()
        spy = PySpy(broker.pid, profile_dir / f"{broker.name}-{kind}-{label}.txt", args.profile_rate,
                    args.profile_native)
        with spy:
            result = fn()
        text = summarize_profile(spy.out, spy.seconds, args.profile_rate, args.profile_top)
        spy.out.with_suffix(".summary").write_text(text)
        print(text, flush=True)
        return result

    starts, tp = measured(
        "produce", lambda: bench_produce(broker.bootstrap, topic, size, n, warmup, partitions, args, meter))
    run.produce.setdefault((size, partitions), []).append(tp)
    _report(broker.name, f"produce {label}", tp)
    tc = measured("fetch", lambda: bench_consume(broker.bootstrap, topic, size, starts, n, meter))
    run.consume.setdefault((size, partitions), []).append(tc)
    _report(broker.name, f"consume {label}", tc)
    drop_topic(broker.bootstrap, topic)


def run_latency(broker: Broker, run: BrokerRun, args) -> None:
    topic = f"bench-latency-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    run.latency = lat = bench_latency(broker.bootstrap, topic, args)
    drop_topic(broker.bootstrap, topic)
    print(f"  {broker.name:7s} latency {args.latency_size}B @{args.latency_rate}/s: p50 {lat.pct(.5):.2f} ms "
          f"p99 {lat.pct(.99):.2f} ms max {lat.max:.2f} ms ({len(lat.samples)} samples, pacer at worst "
          f"{lat.behind_ms:.1f} ms late)", flush=True)


def run_all(brokers: list[Broker], args) -> dict[str, BrokerRun]:
    runs = {b.name: BrokerRun(b.name) for b in brokers}
    for rep in range(args.repeat):
        order = brokers if rep % 2 == 0 else brokers[::-1]
        for partitions in args.partitions:
            for size in args.sizes:
                print(f"-- repeat {rep + 1}/{args.repeat}: {_size_label(size)}, {partitions} partition(s)",
                      flush=True)
                for b in order:
                    profile = (args.profile if args.profile and b.name == "seaway" and rep == 0
                               and size == max(args.sizes) and partitions == args.partitions[0] else None)
                    run_scenario(b, runs[b.name], size, partitions, args, profile)
    if args.latency_seconds > 0:
        print("-- latency", flush=True)
        for b in brokers:
            run_latency(b, runs[b.name], args)
    return runs


def _report(name: str, what: str, t: Throughput) -> None:
    print(f"  {name:7s} {what:16s} {t.mb_s:8.1f} MB/s {t.msg_s:11,.0f} msg/s "
          f"({t.records:,} records in {t.seconds:.2f} s; {t.cpu_note})", flush=True)


# --------------------------------------------------------------------------- report


def machine_facts() -> dict[str, str]:
    import importlib.util

    def cmd(*argv) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=REPO, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    uv = importlib.util.find_spec("uvloop")
    if uv is not None:
        import uvloop
        uvloop_fact = f"on (uvloop {uvloop.__version__}; core/cli/node_cmd.py runs anyio on it when importable)"
    else:
        uvloop_fact = "off (uvloop not installed; default asyncio loop)"
    commit = cmd("git", "rev-parse", "--short", "HEAD")
    dirty = cmd("git", "status", "--porcelain", "--untracked-files=no", "--", "core")
    try:
        tansu_version = cmd(tansu_binary(), "--version") or "?"
    except Exception:  # noqa: BLE001 - a fact, not a failure
        tansu_version = "?"
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "nproc": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "uvloop": uvloop_fact,
        "confluent-kafka": f"{_first(ck_version())} (librdkafka {_first(libversion())})",
        "tansu": tansu_version,
        "seaway commit": commit + (" + uncommitted changes in core/" if dirty else ""),
    }


def _first(v) -> str:
    return str(v[0] if isinstance(v, tuple) else v)


def table(runs: dict[str, BrokerRun], args) -> list[list[str]]:
    s, t = runs.get("seaway"), runs.get("tansu")
    rows = [["scenario", "metric", "Seaway", "tansu", "Seaway/tansu"]]

    def add(scenario, metric, fs, ft, fmt, ratio=True):
        r = f"{fs / ft:.2f}x" if ratio and fs is not None and ft else "-"
        rows.append([scenario, metric, fmt(fs) if fs is not None else "-", fmt(ft) if ft is not None else "-", r])

    def spread(reps, attr, fmt):
        if not reps:
            return None
        vals = sorted(getattr(x, attr) for x in reps)
        mid = getattr(median(reps), attr)
        return (mid, f"{fmt(mid)} ({fmt(vals[0])}–{fmt(vals[-1])})" if len(vals) > 1 else fmt(mid))

    f1, f0, ms = (lambda v: f"{v:,.1f}"), (lambda v: f"{v:,.0f}"), (lambda v: f"{v:.2f}")
    for partitions in args.partitions:
        for size in args.sizes:
            key = (size, partitions)
            label = f"{_size_label(size)}, {partitions} partition{'s' if partitions > 1 else ''}"
            for kind in ("produce", "consume"):
                a = getattr(s, kind).get(key) if s else None
                b = getattr(t, kind).get(key) if t else None
                for i, (metric, attr, fmt) in enumerate((("MB/s", "mb_s", f1), ("msg/s", "msg_s", f0))):
                    sa, sb = spread(a, attr, fmt), spread(b, attr, fmt)
                    rows.append([f"{kind} {label}" if i == 0 else "", metric,
                                 sa[1] if sa else "-", sb[1] if sb else "-",
                                 f"{sa[0] / sb[0]:.2f}x" if sa and sb and sb[0] else "-"])
                ma, mb = a and median(a), b and median(b)
                rows.append(["", "broker CPU", f"{ma.broker_cpu / ma.seconds:.0%}" if ma else "-",
                             f"{mb.broker_cpu / mb.seconds:.0%}" if mb else "-", "-"])
                rows.append(["", "client CPU", f"{ma.client_cpu / ma.seconds:.0%}" if ma else "-",
                             f"{mb.client_cpu / mb.seconds:.0%}" if mb else "-", "-"])
    if args.latency_seconds > 0:
        a, b = s and s.latency, t and t.latency
        scen = f"latency {_size_label(args.latency_size)} @ {args.latency_rate}/s"
        add(scen, "p50 ms", a and a.pct(.5), b and b.pct(.5), ms)
        add("", "p99 ms", a and a.pct(.99), b and b.pct(.99), ms)
        add("", "max ms", a and a.max, b and b.max, ms)
    return rows


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def render_text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(rows[0]) + " |", "|---|---|---:|---:|---:|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def target_lines(runs: dict[str, BrokerRun], args) -> list[str]:
    s, t = runs.get("seaway"), runs.get("tansu")
    if not (s and t) or 1024 not in args.sizes:
        return []
    out = []
    for kind in ("produce", "consume"):
        for partitions in args.partitions:
            a, b = getattr(s, kind).get((1024, partitions)), getattr(t, kind).get((1024, partitions))
            if a and b:
                r = median(a).mb_s / median(b).mb_s
                out.append(f"1 KiB {kind}, {partitions} partition(s): Seaway/tansu = {r:.2f}x "
                           f"-> target >= 0.5x {'MET' if r >= 0.5 else 'NOT MET'}")
    return out


def write_readme(rows, facts, command: str, targets: list[str], args) -> None:
    section = [RESULTS_START, "", "## Latest results", "",
               f"Produced by `{command}` on {facts['date']}.", ""]
    section += [f"- {k}: {v}" for k, v in facts.items() if k != "date"]
    overrides = ", ".join(args.seaway_override) or "none (tests/support/node.py's defaults)"
    section += [
        (f"- N: {args.records[100]:,} records of 100 B, {args.records[1024]:,} of 1 KiB per run "
         f"(after 5%, at most 20,000, warm-up records); {args.repeat} repeat(s), median shown with "
         f"(min–max); latency: {args.latency_rate} msg/s of {_size_label(args.latency_size)} "
         f"for {args.latency_seconds:g} s"),
        f"- Seaway property overrides: {overrides}",
        ("- Seaway writes every record to its log files (page cache; no fsync with the default flush "
         "policy); tansu runs with `--storage-engine memory://` and keeps everything in RAM."),
        ("- The client (confluent-kafka, Python loop + librdkafka threads) and the broker share the "
         "machine's cores, so client CPU competes with the broker's."),
        "", render_markdown(rows), ""]
    section += [f"- {line}" for line in targets]
    section += ["", RESULTS_END]
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    block = "\n".join(section)
    if RESULTS_START in text and RESULTS_END in text:
        head, rest = text.split(RESULTS_START, 1)
        tail = rest.split(RESULTS_END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    README.write_text(text)


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records-100", type=int, default=4_000_000, metavar="N",
                    help="100 B records per throughput run (default %(default)s)")
    ap.add_argument("--records-1k", type=int, default=1_500_000, metavar="N",
                    help="1 KiB records per throughput run (default %(default)s)")
    ap.add_argument("--partitions", default="1", metavar="LIST",
                    help="comma-separated partition counts, one scenario each (default 1; try 1,3)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each scenario (median reported)")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=1 << 20, help="producer batch.size (default 1 MiB)")
    ap.add_argument("--latency-rate", type=int, default=1000, help="msg/s of the paced producer")
    ap.add_argument("--latency-seconds", type=float, default=3.0, help="0 skips the latency run")
    ap.add_argument("--latency-size", type=int, default=1024, help="record size of the latency run")
    ap.add_argument("--brokers", default="seaway,tansu", help="which to run, in order (default %(default)s)")
    ap.add_argument("--seaway-override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra node property for Seaway, e.g. log.flush.interval.messages=1 (repeatable)")
    ap.add_argument("--quick", action="store_true", help="a tenth of the records, one repeat, 1 s of latency")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite README.md's results")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="py-spy the Seaway node during the largest-size produce and consume")
    ap.add_argument("--profile-rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--profile-top", type=int, default=15)
    ap.add_argument("--profile-native", action="store_true",
                    help="py-spy --native (C frames too, e.g. inside uvloop; pauses the node per sample)")
    ap.add_argument("--prefault-gib", type=float, default=4.0, metavar="GiB",
                    help="touch and release this much memory first (see prefault(); 0 skips)")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    args = ap.parse_args(argv)
    if args.quick:
        args.records_100 //= 10
        args.records_1k //= 10
        args.latency_seconds = min(args.latency_seconds, 1.0)
        args.repeat = 1
    args.sizes = [100, 1024]
    args.records = {100: args.records_100, 1024: args.records_1k}
    args.partitions = [int(p) for p in args.partitions.split(",") if p.strip()]
    args.brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if unknown := set(args.brokers) - {"seaway", "tansu"}:
        ap.error(f"unknown broker(s): {', '.join(sorted(unknown))}")
    return args


def _log_tail_on_error(node: SeawayNode, exc_type) -> None:
    if exc_type is not None or (node.proc is not None and node.proc.poll() is not None):
        print(f"--- seaway log {node.log_path} (tail) ---\n{node.log_tail()}", file=sys.stderr)


def main(argv=None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", os.path.relpath(__file__, REPO), *(sys.argv[1:] if argv is None else argv)])
    facts = machine_facts()
    print(f"# {command}")
    for k, v in facts.items():
        print(f"#   {k}: {v}")
    if args.prefault_gib > 0:
        facts["memory prefault"] = prefault(args.prefault_gib)
        print(f"#   memory prefault: {facts['memory prefault']}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="seaway-bench-"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    try:
        with contextlib.ExitStack() as stack:
            brokers = []
            for name in args.brokers:
                if name == "seaway":
                    overrides = dict(o.split("=", 1) for o in args.seaway_override)
                    node = stack.enter_context(SeawayNode(workdir / "seaway", overrides))
                    stack.push(lambda et, e, tb, node=node: _log_tail_on_error(node, et))
                    brokers.append(Broker(name, node.bootstrap, node.proc.pid))
                else:
                    tb = stack.enter_context(TansuBroker(workdir / "tansu"))
                    brokers.append(Broker(name, tb.bootstrap, tb.proc.pid))
            runs = run_all(brokers, args)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = table(runs, args)
    targets = target_lines(runs, args)
    print(f"\nTotal {time.perf_counter() - t_start:.0f} s. MB = 10^6 bytes of record values.\n")
    print(render_text(rows))
    for line in targets:
        print(line)
    if args.no_readme or args.profile or set(args.brokers) != {"seaway", "tansu"}:
        print("\n(README.md not updated)")
    else:
        write_readme(rows, facts, command, targets, args)
        print(f"\nWrote results to {os.path.relpath(README, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
