"""What a broker tells clients comes from the image it last reconciled (KRaftLink.image), not
the loader's newest: a topic the loader holds but this broker has not opened yet is not named,
so no client is sent to a leader that would answer NOT_LEADER_OR_FOLLOWER. The window is held
open here by holding the broker's admin lock, which every reconcile takes."""
from __future__ import annotations

import anyio
import pytest

from core.client import Admin, KafkaClient, NewTopic
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from tests.support.inprocess import bootstrap, create_topic, running_node

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

M = m.MetadataRequest


async def metadata(client: KafkaClient, names: list[str] | None):
    topics = None if names is None else [M.MetadataRequestTopic(name=n, topic_id=bytes(16)) for n in names]
    return await client.send_any(M(topics=topics, allow_auto_topic_creation=False), version=12)


async def test_a_topic_is_described_only_once_this_broker_has_opened_it(tmp_path, anyio_backend):
    async with running_node(tmp_path) as node:
        await create_topic(node, "settled")
        loader = node.broker.kraft.quorum.loader
        # Two clients: a broker answers one connection's requests in order, and the
        # CreateTopics is held until this broker has opened the topic.
        async with KafkaClient(bootstrap(node)) as client, KafkaClient(bootstrap(node)) as creator:
            created: dict = {}

            async def create_fresh():
                created.update(await Admin(creator).create_topics([NewTopic("fresh", 2, 1, {})]))

            async with anyio.create_task_group() as tg:
                async with node.broker.admin_lock:          # no reconcile can finish
                    tg.start_soon(create_fresh)
                    with anyio.fail_after(10):
                        while "fresh" not in loader.image.topic_ids:
                            await anyio.sleep(0.01)
                    assert node.broker.topics.get("fresh") is None     # not opened here yet
                    one = (await metadata(client, ["fresh"])).topics[0]
                    assert one.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    listed = {t.name for t in (await metadata(client, None)).topics}
                    assert "settled" in listed and "fresh" not in listed
                    assert not created            # CreateTopics waits for this broker too
            assert created == {"fresh": None}
            one = (await metadata(client, ["fresh"])).topics[0]
            assert one.error_code == 0
            assert [p.leader_id for p in one.partitions] == [1, 1]
            assert all(p.is_leader for p in node.broker.topics["fresh"].partitions)
