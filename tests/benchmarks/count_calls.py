"""Python function calls per transaction in the nodes of a 3-node cluster under
bench_transactions' load: the interpreter's work, counted instead of timed.

    python tests/benchmarks/count_calls.py                  # 16 producers, 100,000 records
    python tests/benchmarks/count_calls.py --idempotent     # per 100 idempotent records instead
    python tests/benchmarks/count_calls.py --top 60

Why count. On this kind of machine (a VM on a shared host) the nodes' CPU per transaction
moved by 40% within one session with no change to the code, so a change worth 2-5% cannot be
seen by timing it (tests/benchmarks/README.md). What the nodes' Python does per transaction
is about 77% of their CPU (perf), and the number of function calls it makes moves by under
half a percent from run to run, whatever the machine is doing: fewer calls for the same work
is the change that shows here. It is not time: a call to len() and a call to a handler count one each;
read the top of the list, not only the total.

How. The script puts a sitecustomize module on the nodes' PYTHONPATH (the nodes inherit this
process's environment, tests/support/node.py); in a node it installs cProfile, switched on
and off by SIGUSR1, so that only the measured run is counted: after one warm-up run (every
connection open, every codec compiled), the script signals the nodes, runs the load, signals
them again, and reads the counts each node wrote. Nothing of it is in the nodes' own code.

It also prints what the calls are spent on: the requests the nodes handled, by API (each
node's own seaway_requests_total, read by the same signal before and after the run), and the
appends to their logs (calls of the segment's append, and of the leader's).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.bench_transactions import (_topic, cluster_of_three, concurrent, idempotent_run,  # noqa: E402
                                                 transactional_run)

SITECUSTOMIZE = '''\
import os, sys
if "core.cli" in getattr(sys, "orig_argv", ()) and "node" in sys.orig_argv:
    import cProfile, signal
    import gc, json
    _profile, _on = cProfile.Profile(), [False]
    def _requests():
        # the node's own seaway_requests_total by API (its BrokerMetrics, found without a hook in
        # the node); get_objects() does not see the heap the node has frozen, so thaw it a moment
        frozen = gc.get_freeze_count() > 0
        gc.unfreeze()
        metrics = next(o for o in gc.get_objects() if type(o).__name__ == "BrokerMetrics")
        if frozen:
            gc.freeze()
        return {s.labels["api"]: s.value for f in metrics.requests.collect() for s in f.samples
                if s.name.endswith("_total")}
    def _toggle(signum, frame):
        where = os.path.join(os.environ["SEAWAY_COUNT_CALLS_DIR"], str(os.getpid()))
        if _on[0]:
            _profile.disable()
            with open(where + ".after.json", "w") as f:
                json.dump(_requests(), f)
            _profile.dump_stats(where + ".prof")
        else:
            with open(where + ".before.json", "w") as f:
                json.dump(_requests(), f)
            _profile.enable()
        _on[0] = not _on[0]
    signal.signal(signal.SIGUSR1, _toggle)
'''

# (area, what a function's file path starts with); the first that matches wins
AREAS = [
    ("codec (core/protocol, generated code included)", ("core/protocol/", "<codec")),
    ("replication (core/broker/replication)", ("core/broker/replication/",)),
    ("transactions (core/broker/transactions)", ("core/broker/transactions/",)),
    ("request handlers (core/broker/handlers)", ("core/broker/handlers/",)),
    ("connections (core/broker/connection.py, core/client)", ("core/broker/connection.py", "core/client/")),
    ("log (core/log)", ("core/log/",)),
    ("rest of core/broker", ("core/broker/",)),
    ("rest of core", ("core/",)),
    ("asyncio", ("asyncio/",)),
    ("anyio and sniffio", ("anyio/", "sniffio/")),
    ("prometheus_client", ("prometheus_client/",)),
    ("built-in functions and methods", ("~",)),
]


# the functions called once per append: (file, function)
APPENDS = {"leader": ("core/broker/replication/leader.py", "append"),
           "segment": ("core/log/segment.py", "append")}


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/lib/python3.11/", str(Path(__file__).resolve().parents[2]) + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def area_of(path: str) -> str:
    short = _short(path)
    for name, prefixes in AREAS:
        if short.startswith(prefixes):
            return name
    return "other"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", type=int, default=16)
    ap.add_argument("--n", type=int, default=100_000, help="records in the counted run")
    ap.add_argument("--idempotent", action="store_true", help="idempotent producers instead")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    units = args.n / 100   # transactions of 100 records, or 100 idempotent records
    with tempfile.TemporaryDirectory() as site, tempfile.TemporaryDirectory() as counts:
        (Path(site) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
        os.environ["SEAWAY_COUNT_CALLS_DIR"] = counts
        with cluster_of_three() as (cluster, admin):
            topic = _topic(admin)
            run, extra = (idempotent_run, ()) if args.idempotent else (transactional_run, (100,))
            concurrent(run, cluster.bootstrap, topic, 100 * args.producers * 2, args.producers, *extra)  # warm-up
            pids = [n.proc.pid for n in cluster.nodes.values()]
            for pid in pids:
                os.kill(pid, signal.SIGUSR1)
            mb = concurrent(run, cluster.bootstrap, topic, args.n, args.producers, *extra)
            for pid in pids:
                os.kill(pid, signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while len(list(Path(counts).glob("*.prof"))) < len(pids) and time.monotonic() < deadline:
                time.sleep(0.2)
        files = sorted(str(p) for p in Path(counts).glob("*.prof"))
        if len(files) < 3:
            print(f"only {len(files)} of 3 nodes wrote their counts", file=sys.stderr)
            return 1
        stats = pstats.Stats(*files)
        requests: collections.Counter = collections.Counter()
        for path in Path(counts).glob("*.before.json"):
            before = json.loads(path.read_text())
            after = json.loads(path.with_name(path.name.replace(".before", ".after")).read_text())
            for api, value in after.items():
                requests[api] += value - before.get(api, 0)
    per_function = {key: value[1] for key, value in stats.stats.items()}   # type: ignore[attr-defined]
    total = sum(per_function.values())
    appends: collections.Counter = collections.Counter()
    for (path, _, name), calls in per_function.items():
        for kind, (file, function) in APPENDS.items():
            if path.endswith(file) and name == function:
                appends[kind] += calls
    by_area: collections.Counter = collections.Counter()
    for (path, _, _), calls in per_function.items():
        by_area[area_of(path)] += calls
    unit = "100 idempotent records" if args.idempotent else "transaction of 100 records"
    print(f"{args.producers} producer(s), {args.n} records ({mb:.1f} MB/s with the counting on)")
    print(f"Python function calls in the 3 nodes per {unit}: {total / units:,.0f}")
    print("by area:")
    for name, calls in by_area.most_common():
        print(f"  {calls / units:8,.0f}  {name}")
    print(f"requests the 3 nodes handled per {unit}, by API (their seaway_requests_total):")
    for api, count in sorted(requests.items(), key=lambda kv: -kv[1]):
        if count / units >= 0.005:
            print(f"  {count / units:8.2f}  {api}")
    print(f"log appends per {unit}: {appends['segment'] / units:.2f}, of which {appends['leader'] / units:.2f} "
          "by leaders (the rest are their followers' copies)")
    print(f"the {args.top} most called:")
    for (path, line, name), calls in sorted(per_function.items(), key=lambda kv: -kv[1])[:args.top]:
        where = name if path == "~" else f"{_short(path)}:{line} {name}"
        print(f"  {calls / units:8,.1f}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
