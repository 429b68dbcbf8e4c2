"""Forwarded admin requests are answered as if they ran once, across a controller crash.

The active controller is made to die right after a request's records commit and before it
answers (the SEAWAY_FAULT_EXIT_AFTER_COMMIT hook, core/node/controller_runner.py). The broker
that forwarded the request resends it to the next controller, which finds the change already
made; the client must still get the success its request earned, never TOPIC_ALREADY_EXISTS for
its own creation. A real duplicate from a client keeps Kafka's answer.

Requests go as raw frames to one broker that is not the active controller: a client library
would pick its own "controller" from Metadata and might send straight to the node that dies,
and then its own retry elsewhere is a new request that nobody can tell from a duplicate.
"""
from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka.admin import AdminClient

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from tests.support.cluster import KRaftCluster
from tests.support.wire import frame, read_frame

pytestmark = pytest.mark.integration


@pytest.fixture
def armed(tmp_path, monkeypatch):
    fault = tmp_path / "exit-after-commit"
    monkeypatch.setenv("SEAWAY_FAULT_EXIT_AFTER_COMMIT", str(fault))
    with KRaftCluster(tmp_path / "cluster", combined=3) as cluster:
        cluster.wait_for_leader()
        yield cluster, fault


def call(node, api_key: int, version: int, body, timeout: float = 90):
    with socket.create_connection(("127.0.0.1", node.port), timeout=timeout) as sock:
        sock.sendall(frame(api_key, version, body))
        data = read_frame(sock)
    api = m.API[api_key]
    _, pos = m.RESPONSE_HEADER.decode(api.response_header_version(version), data, whole=False)
    return api.response.decode(version, data, pos)


def create(node, name: str, partitions: int, rf: int, configs=None):
    R = m.CreateTopicsRequest
    req = R(topics=[R.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
                                     configs=[R.CreatableTopicConfig(name=k, value=v)
                                              for k, v in (configs or {}).items()])],
            timeout_ms=60_000, validate_only=False)
    return call(node, 19, 7, req).topics[0]


def _arm(cluster, fault, api_key: int):
    """The active controller (which will die) and another node to send the request to."""
    leader, _ = cluster.wait_for_leader()
    other = cluster.nodes[next(i for i in cluster.nodes if i != leader)]
    deadline = time.monotonic() + 60
    while True:
        try:
            if len(AdminClient({"bootstrap.servers": other.bootstrap}).list_topics(timeout=10).brokers) == 3:
                break
        except Exception:   # noqa: BLE001 — a node may still be restarting
            pass
        assert time.monotonic() < deadline, "brokers did not register"
        time.sleep(0.2)
    fault.write_text(str(api_key))
    return leader, other


def _died(cluster, leader: int) -> None:
    proc = cluster.nodes[leader].proc
    proc.wait(timeout=30)
    assert proc.returncode == 86, "the active controller should have died after committing"
    cluster.nodes[leader].start()


def _topics(node) -> dict:
    md = call(node, 3, 12, m.MetadataRequest(topics=None))
    return {t.name: t for t in md.topics}


def test_a_create_committed_before_the_controller_died_is_answered_with_success(armed):
    cluster, fault = armed
    leader, node = _arm(cluster, fault, 19)
    result = create(node, "once", 4, 3, {"retention.ms": "3600000"})
    assert (result.error_code, result.error_message) == (0, None)
    assert result.topic_id != bytes(16) and (result.num_partitions, result.replication_factor) == (4, 3)
    assert {c.name: c.value for c in result.configs}["retention.ms"] == "3600000"
    _died(cluster, leader)
    topic = _topics(node)["once"]
    assert topic.topic_id == result.topic_id and len(topic.partitions) == 4
    assert all(len(p.replica_nodes) == 3 for p in topic.partitions)
    # A client that really creates it twice still hears that it exists.
    assert create(node, "once", 4, 3, {"retention.ms": "3600000"}).error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_a_delete_and_a_partition_increase_are_answered_once(armed):
    cluster, fault = armed
    _, node = _arm(cluster, fault, 0)      # Produce: never reaches a controller
    for name in ("gone", "grown"):
        assert create(node, name, 2, 3).error_code == 0

    leader, node = _arm(cluster, fault, 37)
    P = m.CreatePartitionsRequest
    answer = call(node, 37, 3, P(topics=[P.CreatePartitionsTopic(name="grown", count=5, assignments=None)],
                                 timeout_ms=60_000, validate_only=False))
    assert (answer.results[0].error_code, answer.results[0].error_message) == (0, None)
    _died(cluster, leader)
    assert len(_topics(node)["grown"].partitions) == 5

    leader, node = _arm(cluster, fault, 20)
    answer = call(node, 20, 5, m.DeleteTopicsRequest(topic_names=["gone"], timeout_ms=60_000))
    assert (answer.responses[0].name, answer.responses[0].error_code) == ("gone", 0)
    _died(cluster, leader)
    assert "gone" not in _topics(node)
