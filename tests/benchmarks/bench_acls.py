#!/usr/bin/env python
"""Hand-run benchmark: produce with 10,000 ACLs against no authorizer, in the same run.

    python tests/benchmarks/bench_acls.py                      # 3 rounds
    python tests/benchmarks/bench_acls.py --records 200000 --requests 20000 --repeat 1

Two one-node clusters: one without `authorizer.class.name`, one with the StandardAuthorizer,
`allow.everyone.if.no.acl.found=false`, a super user only on an admin listener, and 10,000 ACLs: half LITERAL, half
PREFIXED, on topics, groups and the cluster, for 100 principals, most of which never match
(as on a shared cluster), plus the ALLOWs the benchmark's own principal (User:ANONYMOUS)
needs: WRITE and CREATE on the prefix `bench-`, and a DENY on a sibling prefix so that the
check cannot stop at the first ALLOW. Each round measures on both nodes, alternating which
goes first:

    throughput   1,000,000 records of 1 KiB with one confluent-kafka producer (acks=all,
                 linger.ms=5, batch.size=1 MiB, as bench_node); MB/s
    requests     100,000 produce requests of one 100 B record (batch.num.messages=1, as
                 bench_produce_requests); requests/s, where the per-request check weighs most

Printed: each round's figures, the medians, and ACLs as a ratio to no authorizer.
Not a pytest test (tests/benchmarks/conftest.py ignores bench_*.py).
"""
from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from tests.support.clients import create_topic
from tests.support.node import SeawayNode, free_port

MB = 1_000_000
ACL_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The guarded node's super user, on a listener of its own, creates the ACLs.
ADMIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "admin",
         "sasl.password": "admin-secret"}


def bindings(count: int, seed: int = 1) -> list[AclBinding]:
    rng = random.Random(seed)
    me = "User:ANONYMOUS"
    out = [AclBinding(ResourceType.TOPIC, "bench-", ResourcePatternType.PREFIXED, me, "*", op, AclPermissionType.ALLOW)
           for op in (AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE)]
    out.append(AclBinding(ResourceType.TOPIC, "bench-denied-", ResourcePatternType.PREFIXED, me, "*",
                          AclOperation.WRITE, AclPermissionType.DENY))
    out.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, me, "*",
                          AclOperation.CREATE, AclPermissionType.ALLOW))
    kinds = [ResourceType.TOPIC] * 8 + [ResourceType.GROUP] * 2
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALTER]
    while len(out) < count:
        pattern = ResourcePatternType.PREFIXED if len(out) % 2 else ResourcePatternType.LITERAL
        name = f"{rng.choice(['orders', 'payments', 'bench', 'audit', 'team'])}-{rng.randrange(10**6):06d}"
        out.append(AclBinding(rng.choice(kinds), name, pattern, f"User:app-{rng.randrange(100)}", "*",
                              rng.choice(ops), rng.choice([AclPermissionType.ALLOW] * 9 + [AclPermissionType.DENY])))
    return out


def add_acls(node: SeawayNode, acls: list[AclBinding]) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.admin_port}", **ADMIN})
    for start in range(0, len(acls), 1000):
        for future in admin.create_acls(acls[start:start + 1000], request_timeout=60).values():
            future.result(timeout=120)


def throughput(node: SeawayNode, topic: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": -1, "linger.ms": 5,
                         "batch.size": 1 << 20, "enable.idempotence": False,
                         "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    value = b"v" * 1024
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


def requests_per_s(node: SeawayNode, topic: str, requests: int) -> float:
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": -1, "linger.ms": 0,
                         "batch.num.messages": 1, "enable.idempotence": False,
                         "queue.buffering.max.messages": max(requests, 100_000)})
    value = b"v" * 100
    producer.produce(topic, value)
    producer.flush()
    started = time.perf_counter()
    for _ in range(requests):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120):
        raise SystemExit("records were not delivered within 120 s")
    return requests / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acls", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=1_000_000, help="1 KiB records per throughput run")
    ap.add_argument("--requests", type=int, default=100_000, help="one-record requests per request run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if min(args.acls, args.records, args.requests, args.repeat) <= 0:
        raise SystemExit("--acls, --records, --requests and --repeat must be positive")
    dirs = [Path(tempfile.mkdtemp(prefix="bench-acls-")) for _ in range(2)]
    plain = SeawayNode(dirs[0]).start()
    port, admin_port = free_port(), free_port()
    guarded = SeawayNode(dirs[1], {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},ADMIN://127.0.0.1:{admin_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,ADMIN:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'user_admin="admin-secret";',
        "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:admin"}, port=port).start()
    guarded.admin_port = admin_port
    try:
        started = time.perf_counter()
        add_acls(guarded, bindings(args.acls))
        print(f"{REPO}: {args.acls:,} ACLs created in {time.perf_counter() - started:.1f} s; "
              f"{args.records:,} records of 1 KiB and {args.requests:,} one-record requests per run")
        nodes = {"none": plain, "acls": guarded}
        results: dict[str, dict[str, list[float]]] = {k: {"mb": [], "rps": []} for k in nodes}
        for i in range(args.repeat):
            order = list(nodes) if i % 2 == 0 else list(reversed(nodes))
            for kind in order:
                node = nodes[kind]
                topic = f"bench-{i}-{kind}"
                create_topic(node.bootstrap, topic, partitions=1)
                results[kind]["mb"].append(throughput(node, topic, args.records))
                results[kind]["rps"].append(requests_per_s(node, topic, args.requests))
            print(f"  round {i + 1}: " + "; ".join(
                f"{k}: {results[k]['mb'][-1]:,.1f} MB/s, {results[k]['rps'][-1]:,.0f} requests/s" for k in nodes),
                flush=True)
        med = {k: {f: statistics.median(v) for f, v in r.items()} for k, r in results.items()}
        print(f"  median: none {med['none']['mb']:,.1f} MB/s, {med['none']['rps']:,.0f} requests/s; "
              f"acls {med['acls']['mb']:,.1f} MB/s, {med['acls']['rps']:,.0f} requests/s")
        print(f"  ratio (acls / none): throughput {med['acls']['mb'] / med['none']['mb']:.2f}x, "
              f"requests {med['acls']['rps'] / med['none']['rps']:.2f}x")
    finally:
        plain.stop()
        guarded.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
