"""What idle client connections cost a broker: one Seaway node against tansu, in the same run.

    python tests/benchmarks/bench_idle_connections.py            # 1,000 connections, ~2.5 minutes
    python tests/benchmarks/bench_idle_connections.py --n 200 --seconds 10   # quicker

Per broker: its CPU (percent of a core) and resident memory over --seconds with no client
connected, then after --n connections have each done what a client does on connecting
(ApiVersions, then Metadata for no topics) and stayed open with nothing more to say. Printed:
the cost of the connections (CPU above the idle baseline, memory per connection) and the time
it took to open them all, for each broker and as the ratio Seaway / tansu.
"""
from __future__ import annotations

import argparse
import contextlib
import resource
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from core.protocol import messages as m  # noqa: E402
from core.protocol.codegen import Writer  # noqa: E402
from tests.support.node import SeawayNode  # noqa: E402
from tests.support.procstat import cpu_seconds, rss_bytes  # noqa: E402
from tests.support.tansu import TansuBroker, recv_exact  # noqa: E402

_SIZE = struct.Struct(">i")


def request(api_key: int, version: int, body, correlation_id: int) -> bytes:
    api = m.API[api_key]
    w = Writer()
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id="bench-idle")
    m.REQUEST_HEADER.encode_into(api.request_header_version(version), header, w)
    api.request.encode_into(version, body, w)
    data = w.getvalue()
    return _SIZE.pack(len(data)) + data


HELLO = (request(m.ApiKey.API_VERSIONS, 0, m.ApiVersionsRequest(), 1)
         + request(m.ApiKey.METADATA, 1, m.MetadataRequest(topics=[]), 2))


def read_frame(sock: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(recv_exact(sock, 4))
    return recv_exact(sock, size)


def connect_all(bootstrap: str, n: int) -> tuple[list[socket.socket], float]:
    host, port = bootstrap.rsplit(":", 1)
    socks = []
    start = time.perf_counter()
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(HELLO)
        read_frame(s)
        read_frame(s)
        socks.append(s)
    return socks, time.perf_counter() - start


def cpu_percent(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds * 100


def measure(name: str, bootstrap: str, pid: int, args) -> dict[str, float]:
    idle_cpu = cpu_percent(pid, args.seconds)
    idle_rss = rss_bytes(pid)
    socks, took = connect_all(bootstrap, args.n)
    try:
        time.sleep(1)                       # whatever a new connection starts, let it settle
        busy_cpu = cpu_percent(pid, args.seconds)
        busy_rss = rss_bytes(pid)
        alive = sum(1 for s in socks if _alive(s))
    finally:
        for s in socks:
            s.close()
    row = {"idle_cpu": idle_cpu, "cpu": busy_cpu, "extra_cpu": busy_cpu - idle_cpu,
           "rss_mb": busy_rss / 1e6, "kb_per_conn": (busy_rss - idle_rss) / args.n / 1e3,
           "open_s": took, "alive": alive}
    print(f"{name:>7}: no clients {idle_cpu:.2f}% of a core, {idle_rss / 1e6:.1f} MB; "
          f"{args.n} idle connections {busy_cpu:.2f}%, {busy_rss / 1e6:.1f} MB "
          f"({row['kb_per_conn']:.1f} KB each); opened in {took:.2f} s; {alive} still open", flush=True)
    return row


def _alive(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="connections (default 1000)")
    ap.add_argument("--seconds", type=float, default=30.0, help="each measurement's length (default 30)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.n + 1000), hard))
    rows = {}
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        node = stack.enter_context(SeawayNode(Path(d) / "seaway"))
        tansu = stack.enter_context(TansuBroker(Path(d) / "tansu"))
        assert node.proc is not None and tansu.proc is not None
        rows["seaway"] = measure("seaway", node.bootstrap, node.proc.pid, args)
        rows["tansu"] = measure("tansu", tansu.bootstrap, tansu.proc.pid, args)
    s, t = rows["seaway"], rows["tansu"]
    print(f"\n{'':>22} {'seaway':>10} {'tansu':>10}")
    for key, label in (("idle_cpu", "CPU, no clients (%)"), ("cpu", f"CPU, {args.n} idle (%)"),
                       ("extra_cpu", "CPU they add (%)"), ("kb_per_conn", "KB per connection"),
                       ("rss_mb", "RSS with them (MB)"), ("open_s", "opening them (s)")):
        print(f"{label:>22} {s[key]:>10.2f} {t[key]:>10.2f}")
    print(f"Seaway / tansu: memory per connection {s['kb_per_conn'] / max(t['kb_per_conn'], 0.01):.1f}x, "
          f"time to open {s['open_s'] / t['open_s']:.1f}x")


if __name__ == "__main__":
    main()
