"""Our client (core/client) against a Seaway node run as a subprocess.

The shared scenarios live in tests/support/client_scenarios.py; the tests here need a node of
their own (restarts).
"""
from __future__ import annotations

import asyncio

import pytest

from core.client import KafkaClient, Producer
from tests.support.client_scenarios import ClientScenarios, consume, new_topic
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration


class TestSeaway(ClientScenarios):
    @pytest.fixture
    def bootstrap(self, seaway_broker):
        return seaway_broker


@pytest.fixture
def own_node(tmp_path):
    with SeawayNode(tmp_path / "node") as node:
        yield node


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_producer_and_consumer_ride_out_a_restart(own_node, anyio_backend):
    """Records sent while the node is down are retried and delivered once it is back;
    the consumer reconnects and carries on from its position."""
    async with KafkaClient(own_node.bootstrap, request_timeout_ms=3000, reconnect_backoff_ms=100) as client:
        topic = await new_topic(client)
        async with Producer(client, delivery_timeout_ms=30000) as producer:
            first = [await producer.send(topic, b"a%d" % i) for i in range(50)]
            await producer.flush()
            got = await consume(client, topic, 50)
            assert len(got) == 50
            await asyncio.to_thread(own_node.stop)
            second = [await producer.send(topic, b"b%d" % i) for i in range(50)]
            await asyncio.sleep(0.5)  # the producer is failing and retrying now
            assert not any(f.done() for f in second)
            await asyncio.to_thread(own_node.start)
            metas = await asyncio.wait_for(asyncio.gather(*second), 30)
        assert [m.offset for m in metas] == list(range(50, 100))
        assert [f.result().offset for f in first] == list(range(50))
        got = await consume(client, topic, 100)
        assert [r.value for r in got] == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]
