"""A real Prometheus server scrapes every node of a KRaft cluster, and what it stores is what an
operator's dashboards and alerts would query: request rate and latency by API, bytes in and out
by topic, partition sizes, follower lag, under-replicated and offline partitions, ISR shrinks,
the active controller and the controller epoch, fenced and active brokers.

Every check goes through Prometheus's HTTP API. Prometheus scrapes leniently, so each node's
exposition also goes through `promtool check metrics`, which rejects what a scrape lets pass
(a family exposed twice, say by two collectors on a combined node).
"""
from __future__ import annotations

import math
import time

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.clients import CLIENTS, Record, create_topic, unique_topic
from tests.support.cluster import KRaftCluster
from tests.support.node import free_port
from tests.support.prometheus import PrometheusServer, Sample, lint_metrics

pytestmark = pytest.mark.integration

# Short lag time and session: a dead follower leaves the ISR (and its broker is fenced) within
# seconds rather than Kafka's 30 s and 9 s defaults.
OVERRIDES = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "replica.lag.time.max.ms": "2000"}
# Prometheus sees a change only at its next scrape (every second), and the CI machine has two
# busy cores: waits are generous, but a passing run does not use them up.
WAIT = 30.0


def with_metrics_ports(cluster: KRaftCluster) -> dict[int, int]:
    """Give every node its own metrics.port (cluster overrides are the same for all nodes)."""
    ports = {}
    for node_id, node in cluster.nodes.items():
        ports[node_id] = free_port()
        with open(node.config_path, "a") as f:
            f.write(f"metrics.port={ports[node_id]}\n")
    return ports


def by_node(samples: list[Sample]) -> dict[int, float]:
    return {int(s.labels["node"]): s.value for s in samples}


def one(samples: list[Sample]) -> float | None:
    return samples[0].value if len(samples) == 1 else None


def assert_clean_expositions(ports: dict[int, int]) -> None:
    for node_id, port in ports.items():
        problems = lint_metrics(f"http://127.0.0.1:{port}/metrics")
        assert problems == "", f"node {node_id}: {problems}"


def scraping(ports: dict[int, int], directory) -> PrometheusServer:
    return PrometheusServer(directory, {str(i): f"127.0.0.1:{p}" for i, p in ports.items()})


def test_prometheus_sees_traffic_replication_and_the_controller(tmp_path):
    # The only partitions a dead node may take offline are then the ones the test places.
    overrides = dict(OVERRIDES, **{"offsets.topic.replication.factor": "3"})
    cluster = KRaftCluster(tmp_path / "cluster", combined=3, overrides=overrides)
    ports = with_metrics_ports(cluster)
    nodes = sorted(cluster.nodes)
    with cluster, scraping(ports, tmp_path / "prometheus") as prom:
        prom.wait_for("up", lambda r: by_node(r) == dict.fromkeys(nodes, 1.0), WAIT, "every node scraped")

        topic = unique_topic("prom")
        create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3, timeout=WAIT)
        # Single replicas: those on the node killed below go offline with it.
        fragile = unique_topic("fragile")
        create_topic(cluster.bootstrap, fragile, partitions=3, replication_factor=1, timeout=WAIT)
        value = b"v" * 1000
        # Several rounds a scrape or more apart: rate() needs the counters to move between two
        # samples, and a labelled counter's first sample already holds whatever came before it.
        rounds, per_round = 4, 30
        for _ in range(rounds):
            records = [Record(value=value, partition=i % 3) for i in range(per_round)]
            sent = CLIENTS["confluent"].produce(cluster.bootstrap, topic, records)
            assert all(s.offset is not None and s.offset >= 0 for s in sent), sent[:3]
            time.sleep(1.2)
        produced = rounds * per_round
        got = CLIENTS["confluent"].consume(cluster.bootstrap, topic, {0: 0, 1: 0, 2: 0}, count=produced,
                                           timeout=WAIT)
        assert len(got) == produced

        # Request rate and latency by API.
        prom.wait_for('sum(rate(seaway_requests_total{api="Produce"}[1m]))', lambda r: (one(r) or 0) > 0,
                      WAIT, "a Produce request rate")
        prom.wait_for('sum(rate(seaway_requests_total{api="Fetch"}[1m]))', lambda r: (one(r) or 0) > 0,
                      WAIT, "a Fetch request rate")
        p99 = one(prom.wait_for('histogram_quantile(0.99, sum by (le) '
                                '(rate(seaway_request_duration_seconds_bucket{api="Produce"}[1m])))',
                                lambda r: len(r) == 1 and not math.isnan(r[0].value), WAIT, "a Produce p99"))
        assert 0 < p99 <= 30, p99

        # Bytes in and out by topic: batches hold at least their values; consumers and
        # followers between them fetched everything at least once.
        bytes_in = one(prom.wait_for(f'sum(seaway_bytes_in_total{{topic="{topic}"}})',
                                     lambda r: (one(r) or 0) >= produced * len(value), WAIT, "bytes in"))
        prom.wait_for(f'sum(seaway_bytes_out_total{{topic="{topic}"}})', lambda r: (one(r) or 0) >= bytes_in,
                      WAIT, "bytes out")

        # Every replica's log holds data, and every follower has caught up with its leader.
        prom.wait_for(f'seaway_partition_size_bytes{{topic="{topic}"}}',
                      lambda r: len(r) == 9 and all(s.value > 0 for s in r), WAIT, "9 replicas with data")
        prom.wait_for(f'seaway_follower_lag{{topic="{topic}"}}',
                      lambda r: len(r) == 6 and all(s.value == 0 for s in r), WAIT, "6 followers caught up")
        prom.wait_for("sum(seaway_under_replicated_partitions)", lambda r: one(r) == 0, WAIT,
                      "no under-replicated partition")
        prom.wait_for("max(seaway_offline_partitions)", lambda r: one(r) == 0, WAIT, "no offline partition")
        assert_clean_expositions(ports)

        # Exactly one active controller, the one DescribeQuorum names; every node knows it and
        # agrees on the epoch.
        leader, epoch = cluster.wait_for_leader(timeout=WAIT)
        prom.wait_for("seaway_active_controller",
                      lambda r: by_node(r) == {n: float(n == leader) for n in nodes}, WAIT,
                      f"node {leader} alone the active controller")
        prom.wait_for("seaway_controller_epoch", lambda r: by_node(r) == dict.fromkeys(nodes, float(epoch)),
                      WAIT, f"every node in epoch {epoch}")
        assert epoch >= 1
        prom.wait_for("seaway_controller_leader",
                      lambda r: by_node(r) == dict.fromkeys(nodes, float(leader)), WAIT,
                      f"every node following {leader}")
        prom.wait_for(f'seaway_active_brokers{{node="{leader}"}}', lambda r: one(r) == 3, WAIT,
                      "3 active brokers")
        prom.wait_for(f'seaway_fenced_brokers{{node="{leader}"}}', lambda r: one(r) == 0, WAIT,
                      "none fenced")

        # A follower dies: Prometheus sees it down, its partitions under-replicated, the ISR
        # shrinks counted by the surviving leaders, and the broker fenced.
        # Not the active controller: the quorum keeps its leader, so what follows is about data.
        fragile_md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(fragile, timeout=10)
        held = {n: sum(1 for p in fragile_md.topics[fragile].partitions.values() if p.leader == n)
                for n in nodes if n != leader}
        victim = max(held, key=held.get)
        lost = held[victim]
        assert lost >= 1, f"no single replica outside the active controller: {held}"
        survivors = [n for n in nodes if n != victim]
        shrinks_query = f'sum(seaway_isr_shrinks_total{{node!="{victim}"}})'
        shrinks_before = one(prom.query(shrinks_query))
        assert shrinks_before is not None
        cluster.kill(victim)
        prom.wait_for(f'up{{node="{victim}"}}', lambda r: one(r) == 0, WAIT, f"node {victim} down")
        prom.wait_for("sum(seaway_under_replicated_partitions)", lambda r: (one(r) or 0) > 0, WAIT,
                      "under-replicated partitions")
        prom.wait_for(shrinks_query, lambda r: (one(r) or 0) > shrinks_before, WAIT, "ISR shrinks")
        prom.wait_for(f'seaway_fenced_brokers{{node="{leader}"}}', lambda r: one(r) == 1, WAIT,
                      f"broker {victim} fenced")
        prom.wait_for(f'seaway_active_brokers{{node="{leader}"}}', lambda r: one(r) == 2, WAIT,
                      "2 active brokers")
        # Every node still up counts the single replicas that died with the victim as offline;
        # the RF=3 partitions all kept a leader.
        prom.wait_for("seaway_offline_partitions",
                      lambda r: by_node(r) == dict.fromkeys(survivors, float(lost)), WAIT,
                      f"{lost} offline partitions")
        assert by_node(prom.query("up")) == {n: float(n != victim) for n in nodes}
        assert set(by_node(prom.query("seaway_active_controller"))) == set(survivors)


def test_prometheus_scrapes_a_controller_only_node(tmp_path):
    """A node with process.roles=controller serves metrics too: the controller's gauges and the
    requests of its controller listener, and no broker's partition gauges."""
    cluster = KRaftCluster(tmp_path / "cluster", controllers=1, brokers=1, overrides=OVERRIDES)
    ports = with_metrics_ports(cluster)
    with cluster, scraping(ports, tmp_path / "prometheus") as prom:
        prom.wait_for("up", lambda r: by_node(r) == {1: 1.0, 101: 1.0}, WAIT, "both nodes scraped")
        # Only a controller reports ActiveControllerCount, as in Kafka.
        prom.wait_for("seaway_active_controller", lambda r: by_node(r) == {1: 1.0}, WAIT,
                      "controller 1 active")
        epochs = by_node(prom.wait_for("seaway_controller_epoch",
                                       lambda r: len(r) == 2 and len(set(by_node(r).values())) == 1,
                                       WAIT, "one epoch on both nodes"))
        assert epochs[1] >= 1
        prom.wait_for('seaway_active_brokers{node="1"}', lambda r: one(r) == 1, WAIT, "broker 101 active")
        prom.wait_for('seaway_requests_total{node="1",api="BrokerHeartbeat"}', lambda r: (one(r) or 0) > 0,
                      WAIT, "heartbeats counted by the controller")
        assert prom.query('seaway_leader_partitions{node="1"}') == []
        assert one(prom.query('seaway_leader_partitions{node="101"}')) is not None
        assert_clean_expositions(ports)
