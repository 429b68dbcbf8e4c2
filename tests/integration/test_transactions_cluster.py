"""Where a cluster keeps its transactions: `__transaction_state` gets the replication factor it
is configured with (transaction.state.log.replication.factor), as in Kafka. A cluster that has
fewer brokers registered waits for them, telling transactional clients
COORDINATOR_NOT_AVAILABLE (which they retry), instead of creating the topic on fewer replicas
for good because a client came early."""
from __future__ import annotations

import time

import anyio
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from core.client import KafkaClient
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.cluster import KRaftCluster

pytestmark = pytest.mark.integration

TRANSACTION_KEY = 1


async def _find_coordinator(bootstrap: str, transactional_id: str):
    async with KafkaClient(bootstrap) as client:
        conn = await client.connection(await client.any_node())
        resp = await conn.send(m.FindCoordinatorRequest(key_type=TRANSACTION_KEY, coordinator_keys=[transactional_id]),
                               version=4)
        return resp.coordinators[0]


def test_the_transaction_log_waits_for_as_many_brokers_as_its_replication_factor(tmp_path):
    overrides = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3"}
    cluster = KRaftCluster(tmp_path, combined=3, overrides=overrides)
    try:
        for node_id in (1, 2):      # the third comes later
            cluster.nodes[node_id].start()
        two = ",".join(cluster.nodes[i].bootstrap for i in (1, 2))
        AdminClient({"bootstrap.servers": two}).list_topics(timeout=30)     # both serve
        deadline = time.monotonic() + 4
        answers = set()
        while time.monotonic() < deadline:          # asked again and again, as clients do
            found = anyio.run(_find_coordinator, two, "early")
            answers.add(found.error_code)
            time.sleep(0.2)
        assert answers == {E.COORDINATOR_NOT_AVAILABLE}, answers
        logs = "".join(cluster.nodes[i].log_path.read_text() for i in (1, 2))
        assert "2 of the 3 brokers its replication factor needs" in logs

        cluster.nodes[3].start()
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "early"})
        producer.init_transactions(60)
        topic = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
            "__transaction_state", timeout=10).topics["__transaction_state"]
        assert {p: len(meta.replicas) for p, meta in topic.partitions.items()} == {0: 3, 1: 3, 2: 3}
    finally:
        cluster.__exit__(None, None, None)
