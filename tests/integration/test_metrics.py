"""The node's Prometheus endpoint reports requests, bytes, errors and partition offsets."""
from __future__ import annotations

import urllib.request

import pytest

from tests.support.clients import CLIENTS, Record
from tests.support.node import SeawayNode, free_port
from tests.support.wire import create_topic, produce
from core.protocol.records import build_batch

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_follow_traffic(tmp_path):
    port = free_port()
    with SeawayNode(tmp_path, {"metrics.port": str(port)}) as node:
        create_topic(node, "watched", partitions=2)
        CLIENTS["confluent"].produce(node.bootstrap, "watched", [Record(value=b"x" * 100, partition=1)] * 25)
        CLIENTS["confluent"].consume(node.bootstrap, "watched", {1: 0}, count=25, timeout=20)
        bad = bytearray(build_batch([(None, b"v", [], 1)]))
        bad[-1] ^= 1
        produce(node, "watched", bytes(bad))
        m = scrape(port)
        assert m['seaway_partition_log_end_offset{partition="1",topic="watched"}'] == 25
        assert m['seaway_partition_log_end_offset{partition="0",topic="watched"}'] == 0
        assert m['seaway_records_in_total{topic="watched"}'] == 25
        assert m['seaway_bytes_in_total{topic="watched"}'] > 2500
        assert m['seaway_bytes_out_total{topic="watched"}'] >= m['seaway_bytes_in_total{topic="watched"}']
        assert m['seaway_requests_total{api="Produce"}'] >= 2
        assert m['seaway_requests_total{api="Fetch"}'] >= 1
        assert m['seaway_partition_errors_total{api="Produce",error="CORRUPT_MESSAGE"}'] == 1
        assert m['seaway_request_duration_seconds_count{api="Produce"}'] == m['seaway_requests_total{api="Produce"}']
        assert m["seaway_connections"] >= 0


def test_group_metrics_report_committed_offsets_and_lag(tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    port = free_port()
    with SeawayNode(tmp_path, {"metrics.port": str(port)}) as node:
        create_topic(node, "lagging", partitions=1)
        CLIENTS["confluent"].produce(node.bootstrap, "lagging", [Record(value=b"x", partition=0)] * 40)
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "watchers"})
        try:
            consumer.commit(offsets=[TopicPartition("lagging", 0, 15)], asynchronous=False)
        finally:
            consumer.close()
        m = scrape(port)
        labels = 'group="watchers",partition="0",topic="lagging"'
        assert m[f"seaway_group_committed_offset{{{labels}}}"] == 15
        assert m[f"seaway_group_lag{{{labels}}}"] == 25
        assert m['seaway_groups{state="Empty"}'] == 1
        assert m['seaway_groups{state="Stable"}'] == 0
