#!/usr/bin/env python
"""Hand-run benchmark: produce and consume over TLS and SASL_SSL, as ratios to plaintext on one node.

    python tests/benchmarks/bench_tls.py                    # 1,000,000 records of 1 KiB, 3 rounds
    python tests/benchmarks/bench_tls.py --records 200000 --repeat 1

One Seaway node (a one-node cluster) listens on a PLAINTEXT, an SSL and a SASL_SSL listener
(a certificate from a throwaway CA, TLS 1.3; SCRAM-SHA-512 for SASL_SSL). Each round produces N records of 1 KiB with one confluent-kafka
producer (acks=all, linger.ms=5, batch.size=1 MiB, idempotence off, as bench_node) to a fresh
topic through each listener in turn, then reads them back with a consumer assigned by hand
(fetch.queue.backoff.ms=10, as bench_node). Which listener goes first alternates between
rounds, so that drift on a shared machine hits them alike. Printed: each round's MB/s
(10^6 bytes of values) and the medians, with TLS and SASL_SSL as ratios to plaintext.

Not a pytest test (tests/benchmarks/conftest.py ignores bench_*.py).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition

from core.security.ca import CertificateAuthority
from tests.support.clients import create_topic
from tests.support.node import SeawayNode, free_port

MB = 1_000_000


def produce(bootstrap: str, topic: str, records: int, value: bytes, security: dict) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": -1, "linger.ms": 5,
                         "batch.size": 1 << 20, "enable.idempotence": False,
                         "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 2_000_000, **security})
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(300):
        raise SystemExit("records were not delivered within 300 s")
    return records * len(value) / (time.perf_counter() - started) / MB


def consume(bootstrap: str, topic: str, records: int, value_size: int, security: dict) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-tls", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 10, **security})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    deadline = started + 300
    while got < records:
        if time.perf_counter() > deadline:
            raise SystemExit(f"read {got} of {records} records in 300 s")
        got += sum(1 for m in consumer.consume(10_000, 1) if not m.error())
    elapsed = time.perf_counter() - started
    consumer.close()
    return records * value_size / elapsed / MB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3, help="rounds (median reported)")
    args = ap.parse_args()
    if args.records <= 0 or args.repeat <= 0 or args.value_size <= 0:
        raise SystemExit("--records, --repeat and --value-size must be positive")
    directory = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    ca = CertificateAuthority(directory / "ca")
    issued = ca.issue("server")
    keystore = directory / "server.pem"
    keystore.write_bytes(issued.key.read_bytes() + issued.cert.read_bytes())
    plain_port, tls_port, sasl_port = free_port(), free_port(), free_port()
    node = SeawayNode(directory / "node", {
        "listeners": f"PLAIN://127.0.0.1:{plain_port},TLS://127.0.0.1:{tls_port},SASL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,TLS:SSL,SASL:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.location": str(keystore)}, port=plain_port).start()
    subprocess.run([sys.executable, "-m", "core.cli", "users", "add", "bench", "--mechanism", "SCRAM-SHA-512",
                    "--password", "bench-secret", "--bootstrap-server", node.bootstrap],
                   cwd=REPO, check=True, capture_output=True)
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cert_path)}
    ways = {"plaintext": (f"127.0.0.1:{plain_port}", {}),
            "tls": (f"127.0.0.1:{tls_port}", tls),
            "sasl_ssl": (f"127.0.0.1:{sasl_port}", {**tls, "security.protocol": "SASL_SSL",
                                                     "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench",
                                                     "sasl.password": "bench-secret"})}
    figures: dict[tuple[str, str], list[float]] = {}
    value = b"v" * args.value_size
    print(f"{args.records:,} records of {args.value_size} B per run, one node, {REPO}")
    try:
        for round_no in range(args.repeat):
            order = list(ways) if round_no % 2 == 0 else list(reversed(ways))
            for name in order:
                bootstrap, security = ways[name]
                topic = f"bench-tls-{name}-{round_no}"
                create_topic(ways["plaintext"][0], topic, partitions=1)
                p = produce(bootstrap, topic, args.records, value, security)
                c = consume(bootstrap, topic, args.records, args.value_size, security)
                figures.setdefault((name, "produce"), []).append(p)
                figures.setdefault((name, "consume"), []).append(c)
                print(f"  round {round_no + 1} {name:9s} produce {p:7.1f} MB/s   consume {c:7.1f} MB/s", flush=True)
    finally:
        node.stop()
        shutil.rmtree(directory, ignore_errors=True)
    for what in ("produce", "consume"):
        plain = statistics.median(figures[("plaintext", what)])
        line = f"{what}: plaintext {plain:.1f} MB/s"
        for name in ("tls", "sasl_ssl"):
            got = statistics.median(figures[(name, what)])
            line += f", {name} {got:.1f} MB/s ({got / plain:.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
