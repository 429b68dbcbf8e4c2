"""What every request costs a node: the node's CPU time per request for the cheapest request
there is, a Heartbeat for a group that does not exist (answered at once with an error code).

    python tests/benchmarks/bench_request_floor.py              # about 10 s
    python tests/benchmarks/bench_request_floor.py --n 100000 --repeat 5

One single-node cluster (tests/support/node.py); our own client (core/client) keeps
--in-flight requests pipelined on one connection. The node's CPU time (user + system, from
/proc/PID/stat, every thread) is read before and after each run, so the figure is the node's
own work: receiving, decoding, dispatching, answering and writing, whatever the client costs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio  # noqa: E402

from core.client.connection import BrokerConnection  # noqa: E402
from core.protocol import messages as m  # noqa: E402
from tests.support.node import SeawayNode  # noqa: E402
from tests.support.procstat import cpu_seconds  # noqa: E402


async def one_run(bootstrap: str, pid: int, n: int, in_flight: int) -> tuple[float, float]:
    """(requests per second, node CPU microseconds per request)."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection(host, int(port)).connect()
    request = m.HeartbeatRequest(group_id="no-such-group", generation_id=1, member_id="m", group_instance_id=None)

    async def worker(count: int) -> None:
        for _ in range(count):
            await conn.send(request, m.ApiKey.HEARTBEAT, version=4)
    try:
        before, start = cpu_seconds(pid), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(in_flight):
                tg.start_soon(worker, n // in_flight)
        elapsed, used = time.perf_counter() - start, cpu_seconds(pid) - before
    finally:
        await conn.close()
    done = n // in_flight * in_flight
    return done / elapsed, used / done * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40_000, help="requests per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=20)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        node = SeawayNode(Path(d) / "node").start()
        try:
            anyio.run(one_run, node.bootstrap, node.proc.pid, 2000, args.in_flight)     # warm up
            runs = [anyio.run(one_run, node.bootstrap, node.proc.pid, args.n, args.in_flight)
                    for _ in range(args.repeat)]
        finally:
            node.stop()
    print(f"Heartbeat (unknown group), {args.n} requests, {args.in_flight} in flight, {args.repeat} runs:")
    print(f"  node CPU per request   {statistics.median(u for _, u in runs):5.1f} us "
          f"(runs {', '.join(f'{u:.1f}' for _, u in runs)})")
    print(f"  requests per second    {statistics.median(r for r, _ in runs):7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
