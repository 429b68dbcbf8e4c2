#!/usr/bin/env python
"""Hand-run benchmark: SCRAM authentications per second on one Seaway node.

    python tests/benchmarks/bench_scram.py                       # 10 s per mechanism, 2 clients
    python tests/benchmarks/bench_scram.py --seconds 5 --clients 4

One node (a one-node cluster) with a SASL_PLAINTEXT listener offering SCRAM-SHA-256 and
SCRAM-SHA-512, and one user per mechanism stored with 4096 iterations (Kafka's minimum and the
CLI's default). Each client process opens a connection, sends SaslHandshake and the two
SaslAuthenticate round trips, checks the server's signature, and closes, again and again. A
client derives the salted password once (PBKDF2 is the client's cost, and a real client
pays it per connection too, so this measures the server's side): what is left per
authentication is a TCP connect, three round trips and the server's HMACs. Printed per
mechanism: authentications per second, and the node's CPU per authentication (user and
system, from /proc).

Not a pytest test (tests/benchmarks/conftest.py ignores bench_*.py).
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core.client import sasl as client_sasl
from core.protocol import messages as m
from tests.support import wire
from tests.support.node import SeawayNode, free_port

TICKS = os.sysconf("SC_CLK_TCK")
PASSWORD = "bench-secret"


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _client(port: int, mechanism: str, seconds: float, counts) -> None:
    # The salted password once per process: PBKDF2 is the client's cost, not the server's.
    client_sasl.salted_password = functools.lru_cache(maxsize=4)(client_sasl.salted_password)
    credentials = client_sasl.SaslCredentials(mechanism, "bench-" + mechanism.lower(), PASSWORD)
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            shake = wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism=mechanism))
            assert shake.error_code == 0, shake
            scram = client_sasl._ScramClient(credentials)
            first = wire.roundtrip(sock, m.ApiKey.SASL_AUTHENTICATE, 2,
                                   m.SaslAuthenticateRequest(auth_bytes=scram.first()), 2)
            assert first.error_code == 0, first.error_message
            final = wire.roundtrip(sock, m.ApiKey.SASL_AUTHENTICATE, 2,
                                   m.SaslAuthenticateRequest(auth_bytes=scram.final(bytes(first.auth_bytes))), 3)
            assert final.error_code == 0, final.error_message
            scram.verify(bytes(final.auth_bytes))
        done += 1
    counts.put(done)


def measure(node: SeawayNode, port: int, mechanism: str, seconds: float, clients: int) -> tuple[float, float]:
    counts: multiprocessing.Queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_client, args=(port, mechanism, seconds, counts))
               for _ in range(clients)]
    assert node.proc is not None
    cpu0 = _cpu(node.proc.pid)
    started = time.perf_counter()
    for w in workers:
        w.start()
    total = sum(counts.get(timeout=seconds + 60) for _ in workers)
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    return total / elapsed, (_cpu(node.proc.pid) - cpu0) / total * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="per mechanism")
    ap.add_argument("--clients", type=int, default=2, help="client processes")
    args = ap.parse_args()
    if args.seconds <= 0 or args.clients <= 0:
        raise SystemExit("--seconds and --clients must be positive")
    directory = Path(tempfile.mkdtemp(prefix="bench-scram-"))
    plain, sasl = free_port(), free_port()
    node = SeawayNode(directory, {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"}, port=plain).start()
    try:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            subprocess.run([sys.executable, "-m", "core.cli", "users", "add", "bench-" + mechanism.lower(),
                            "--mechanism", mechanism, "--iterations", "4096", "--password", PASSWORD,
                            "--bootstrap-server", node.bootstrap], cwd=REPO, check=True, capture_output=True)
        print(f"{REPO}: {args.clients} client processes, {args.seconds:g} s per mechanism, 4096 iterations")
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            rate, cpu_us = measure(node, sasl, mechanism, args.seconds, args.clients)
            print(f"  {mechanism}: {rate:,.0f} authentications/s; node CPU {cpu_us:,.0f} us per authentication",
                  flush=True)
    finally:
        node.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
