"""Every real client negotiates its newest versions with Seaway: no fallback.

A proxy between client and node records the (API, version) of every request. Each client
must use at least the version it uses against a broker that supports everything it knows
(measured against tansu, whose ranges are wider than these clients'), and must never retry
ApiVersions at a lower version, which is what a client does when a broker refuses its first.
"""
from __future__ import annotations

import pytest

from tests.support.clients import CLIENTS, Record, create_topic, unique_topic
from tests.support.node import SeawayNode, free_port
from tests.support.proxy import KafkaProxy

pytestmark = pytest.mark.integration

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18

# The newest version each client speaks, from the table in tests/support/clients.py' tansu runs.
NEWEST = {
    "confluent": {PRODUCE: 10, FETCH: 16, METADATA: 12, API_VERSIONS: 3},
    "kafka-python": {PRODUCE: 9, FETCH: 12, METADATA: 12, API_VERSIONS: 4},
    "kcat": {PRODUCE: 7, FETCH: 11, METADATA: 4, API_VERSIONS: 3},
    "kafkajs": {PRODUCE: 7, FETCH: 11, METADATA: 6, API_VERSIONS: 2},
}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    proxy_port = free_port()
    # Clients learn the proxy's address from Metadata, so every connection goes through it.
    with SeawayNode(tmp_path_factory.mktemp("negotiation"),
                    {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}) as node:
        with KafkaProxy(node.port, port=proxy_port) as proxy:
            yield node, proxy


@pytest.mark.parametrize("name", list(NEWEST))
def test_client_uses_its_newest_versions(proxied, name):
    node, proxy = proxied
    client = CLIENTS[name]
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = unique_topic(name)
    create_topic(node.bootstrap, topic, 1)
    start = len(proxy.requests)
    ts = 1_700_000_000_000 if client.sets_timestamps else None
    client.produce(bootstrap, topic, [Record(key=b"k", value=b"v", partition=0, timestamp=ts)])
    got = client.consume(bootstrap, topic, {0: 0}, count=1, timeout=20)
    assert [r.value for r in got] == [b"v"]
    seen: dict[int, set[int]] = {}
    for key, version in proxy.requests[start:]:
        seen.setdefault(key, set()).add(version)
    for key, newest in NEWEST[name].items():
        assert key in seen, f"{name} sent no request with API key {key}: {seen}"
        assert max(seen[key]) >= newest, f"{name} used {key} v{sorted(seen[key])}, below its newest v{newest}"
    assert len(seen[API_VERSIONS]) == 1, f"{name} fell back on ApiVersions: v{sorted(seen[API_VERSIONS])}"
