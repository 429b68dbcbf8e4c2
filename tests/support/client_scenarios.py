"""Scenarios for our own client (core/client) against a real broker.

This module holds no tests of its own: `ClientScenarios` is subclassed by
tests/integration/test_client_tansu.py and test_client_seaway.py, which provide the `bootstrap`
fixture and mark what their broker cannot do. Running the same scenarios against tansu, a broker nobody here
wrote, shows that a failure against Seaway is Seaway's and not the client's.

Each test uses its own topic(s) with a unique name, so tests share one broker.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from core.client import (Admin, ConfigResource, Consumer, ErrorCode, KafkaClient, KafkaError, NewTopic,
                         Producer, check, murmur2_partition)
from core.client.errors import UnsupportedVersionError

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def unique(prefix: str = "client") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def new_topic(client: KafkaClient, partitions: int = 1, **configs) -> str:
    """Create a topic and wait until every partition has a leader."""
    name = unique()
    check(await Admin(client).create_topics([NewTopic(name, partitions, 1, configs=configs)]))
    deadline = time.monotonic() + 10
    while True:
        await client.refresh_metadata([name])
        info = client.cluster.topic(name)
        if info and len(info.partitions) == partitions and all(p.leader >= 0 for p in info.partitions.values()):
            return name
        assert time.monotonic() < deadline, f"topic {name} has no leaders after 10 s"
        await asyncio.sleep(0.05)


async def consume(client: KafkaClient, topic: str, count: int, *, partitions=(0,), start=None,
                  timeout: float = 10, **kw):
    """Read `count` records from `partitions` (from `start` or auto_offset_reset)."""
    consumer = Consumer(client, **kw)
    consumer.assign([(topic, p) for p in partitions])
    if start is not None:
        for p in partitions:
            consumer.seek(topic, p, start)
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(await consumer.poll(timeout_ms=500))
    await consumer.close()
    return got


def records(n: int, *, tag: str = "r"):
    """(key, value, headers, timestamp) with distinct timestamps a few seconds in the past."""
    now = int(time.time() * 1000)
    return [(f"{tag}-key-{i}".encode(), f"{tag}-value-{i}".encode() * (1 + i % 7),
             [("seq", str(i).encode()), ("dup", b"a"), ("dup", b"b"), ("null", None)],
             now - 60_000 + i * 10) for i in range(n)]


@pytest.mark.anyio
@pytest.mark.integration
class ClientScenarios:
    """Subclasses provide `bootstrap`. Methods are run against each broker."""

    @pytest.fixture
    def anyio_backend(self):
        return "asyncio"

    # ------------------------------------------------------------------ connection & metadata

    async def test_bootstrap_and_metadata(self, bootstrap):
        async with KafkaClient(["127.0.0.1:1", bootstrap]) as client:  # first address is dead
            assert client.cluster.brokers
            topic = await new_topic(client, 3)
            info = client.cluster.topic(topic)
            assert sorted(info.partitions) == [0, 1, 2]
            assert info.topic_id is not None  # Metadata v10+
            node = client.leader_for(topic, 0)
            conn = await client.connection(node)
            assert conn.api_versions_version == 3
            assert conn.version_for(3) >= 10 and conn.version_for(1) >= 13

    # ------------------------------------------------------------------ producer

    @pytest.mark.parametrize("compression", COMPRESSIONS)
    async def test_round_trip_per_compression(self, bootstrap, compression):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            sent = records(300, tag=compression)
            async with Producer(client, compression=compression, linger_ms=20) as producer:
                futures = [await producer.send(topic, v, key=k, headers=h, timestamp_ms=ts)
                           for k, v, h, ts in sent]
                metas = await asyncio.gather(*futures)
            assert [md.offset for md in metas] == list(range(300))
            assert {md.partition for md in metas} == {0}
            assert [md.timestamp for md in metas] == [ts for *_, ts in sent]
            got = await consume(client, topic, 300)
            assert [r.offset for r in got] == list(range(300))
            assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == sent
            assert all(r.timestamp_type == 0 for r in got)

    @pytest.mark.parametrize("acks", [0, 1, -1])
    async def test_acks(self, bootstrap, acks):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client, acks=acks) as producer:
                futures = [await producer.send(topic, b"v%d" % i) for i in range(100)]
                metas = await asyncio.gather(*futures)
            if acks == 0:
                assert all(md.offset == -1 for md in metas)  # the broker does not answer
            else:
                assert [md.offset for md in metas] == list(range(100))
            got = await consume(client, topic, 100)
            assert [r.value for r in got] == [b"v%d" % i for i in range(100)]

    async def test_keys_follow_murmur2(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client, 4)
            keys = [b"key-%d" % i for i in range(80)]
            async with Producer(client) as producer:
                metas = await asyncio.gather(*[await producer.send(topic, b"x", key=k) for k in keys])
            assert [md.partition for md in metas] == [murmur2_partition(k, 4) for k in keys]
            got = await consume(client, topic, 80, partitions=range(4))
            assert {(r.key, r.partition) for r in got} == {(k, murmur2_partition(k, 4)) for k in keys}

    async def test_keys_agree_with_librdkafka(self, bootstrap):
        """confluent-kafka's murmur2_random partitioner is the Java client's default."""
        confluent_kafka = pytest.importorskip("confluent_kafka")
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client, 5)
            keys = [b"agree-%d" % i for i in range(40)]
            placed = {}

            def on_delivery(err, msg):
                assert err is None, err
                placed[msg.key()] = msg.partition()

            def produce_with_librdkafka():
                p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
                for k in keys:
                    p.produce(topic, b"x", key=k, on_delivery=on_delivery)
                assert p.flush(15) == 0

            await asyncio.to_thread(produce_with_librdkafka)
            async with Producer(client) as producer:
                ours = await asyncio.gather(*[await producer.send(topic, b"x", key=k) for k in keys])
            assert {k: md.partition for k, md in zip(keys, ours)} == placed

    async def test_unkeyed_round_robin_and_sticky(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client, 3)
            async with Producer(client, partitioner="round_robin") as producer:
                metas = await asyncio.gather(*[await producer.send(topic, b"x") for _ in range(30)])
            assert [md.partition for md in metas].count(0) == 10
            async with Producer(client, batch_size=200) as producer:  # sticky: switches every ~200 B
                metas = await asyncio.gather(*[await producer.send(topic, b"y" * 50) for _ in range(60)])
            runs = sum(1 for a, b in zip(metas, metas[1:]) if a.partition != b.partition)
            assert runs < 30  # records stick together instead of alternating

    async def test_null_and_empty_keys_values_headers(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            cases = [(None, None, None), (b"", b"", []), (b"k", None, [("h", None)]), (None, b"v", {"a": b"1"})]
            async with Producer(client) as producer:
                for k, v, h in cases:
                    await producer.send(topic, v, key=k, headers=h)
            got = await consume(client, topic, len(cases))
            assert [(r.key, r.value, r.headers) for r in got] == [
                (None, None, []), (b"", b"", []), (b"k", None, [("h", None)]), (None, b"v", [("a", b"1")])]

    async def test_pipelined_requests_keep_partition_order(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client, 3)
            async with Producer(client, batch_size=4096, linger_ms=0, max_in_flight_per_broker=5) as producer:
                futures = [await producer.send(topic, b"%06d" % i, partition=i % 3) for i in range(6000)]
                metas = await asyncio.gather(*futures)
            for p in range(3):
                offs = [md.offset for md in metas if md.partition == p]
                assert offs == list(range(2000)), f"partition {p}"
            got = await consume(client, topic, 6000, partitions=range(3))
            for p in range(3):
                assert [r.value for r in got if r.partition == p] == [b"%06d" % i for i in range(p, 6000, 3)]

    async def test_large_records_and_small_fetch_limits(self, bootstrap):
        """Batches bigger than max_partition_fetch_bytes still come back whole (KIP-74)."""
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            blob = bytes(range(256)) * 1200  # ~300 KB
            async with Producer(client, compression="none") as producer:
                metas = await asyncio.gather(*[await producer.send(topic, blob + b"%d" % i) for i in range(6)])
            assert [md.offset for md in metas] == list(range(6))
            got = await consume(client, topic, 6, max_partition_fetch_bytes=16 * 1024, fetch_max_bytes=32 * 1024)
            assert [r.value for r in got] == [blob + b"%d" % i for i in range(6)]

    async def test_flush_and_send_and_wait(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            producer = await Producer(client, linger_ms=60_000).start()
            fut = await producer.send(topic, b"a")
            await producer.flush(timeout_ms=10_000)  # linger is an hour; flush sends now
            assert fut.done() and fut.result().offset == 0
            await producer.close()
            with pytest.raises(KafkaError):
                await producer.send(topic, b"c")
            async with Producer(client, linger_ms=5) as producer:
                md = await producer.send_and_wait(topic, b"b")
            assert md.offset == 1

    async def test_unknown_partition_is_rejected(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client, 2)
            async with Producer(client) as producer:
                with pytest.raises(ValueError):
                    await producer.send(topic, b"x", partition=7)

    # ------------------------------------------------------------------ consumer

    async def test_seek_mid_batch(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client, linger_ms=1000) as producer:
                futures = [await producer.send(topic, b"v%d" % i) for i in range(20)]
                await producer.flush()  # one batch of 20
            assert [f.result().offset for f in futures] == list(range(20))
            got = await consume(client, topic, 13, start=7)
            assert [r.offset for r in got] == list(range(7, 20))
            assert got[0].value == b"v7"

    async def test_seek_position_and_iterator(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client) as producer:
                for i in range(10):
                    await producer.send(topic, b"v%d" % i)
            consumer = Consumer(client)
            consumer.assign([(topic, 0)])
            assert await consumer.position(topic, 0) == 0  # auto_offset_reset=earliest
            seen = []
            async for record in consumer:
                seen.append(record.offset)
                if len(seen) == 10:
                    break
            assert seen == list(range(10))
            assert await consumer.position(topic, 0) == 10
            consumer.seek_to_beginning()
            assert await consumer.position(topic, 0) == 0
            assert (await consumer.poll(5000))[0].offset == 0
            await consumer.close()

    async def test_seek_to_end(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client, linger_ms=50) as producer:
                for i in range(7):
                    await producer.send(topic, b"v%d" % i)
            consumer = Consumer(client)
            consumer.assign([(topic, 0)])
            consumer.seek_to_end((topic, 0))
            assert await consumer.position(topic, 0) == 7
            assert await consumer.end_offsets([(topic, 0)]) == {(topic, 0): 7}
            assert await consumer.poll(300) == []
            async with Producer(client) as producer:
                await producer.send_and_wait(topic, b"late")
            got = await consumer.poll(5000)
            assert [(r.offset, r.value) for r in got] == [(7, b"late")]
            await consumer.close()

    async def test_offset_out_of_range_resets(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client) as producer:
                for i in range(5):
                    await producer.send(topic, b"v%d" % i)
            got = await consume(client, topic, 5, start=1_000_000, timeout=5)
            assert [r.offset for r in got] == list(range(5))  # reset to earliest
            consumer = Consumer(client, auto_offset_reset="none")
            consumer.assign([(topic, 0)])
            consumer.seek(topic, 0, 1_000_000)
            with pytest.raises(KafkaError) as info:
                for _ in range(20):
                    await consumer.poll(250)
            assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
            await consumer.close()

    async def test_fetch_by_name_and_by_topic_id(self, bootstrap):
        """Fetch v13+ names topics by id; older versions by name. Both must work."""
        async with KafkaClient(bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client) as producer:
                for i in range(5):
                    await producer.send(topic, b"v%d" % i)
            assert len(await consume(client, topic, 5)) == 5  # v13+ (ids)
            conn = await client.connection(client.leader_for(topic, 0))
            conn.api_versions[1] = (4, 12)  # pretend the broker stops at v12: names
            assert conn.version_for(1) == 12
            got = await consume(client, topic, 5)
            assert [r.value for r in got] == [b"v%d" % i for i in range(5)]

    # ------------------------------------------------------------------ admin

    async def test_admin_topics(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            a, b = unique("adm"), unique("adm")
            assert await admin.create_topics([NewTopic(a, 2, 1), NewTopic(b, 1, 1)]) == {a: None, b: None}
            again = await admin.create_topics([NewTopic(a, 2, 1)])
            assert again[a].code == ErrorCode.TOPIC_ALREADY_EXISTS
            with pytest.raises(KafkaError):
                check(again)
            assert {a, b} <= set(await admin.list_topics())
            desc = await admin.describe_topics([a, "missing-" + a])
            assert [p.partition for p in desc[a].partitions] == [0, 1]
            assert all(p.leader >= 0 and p.replicas and p.isr for p in desc[a].partitions)
            assert desc[a].topic_id is not None
            assert desc["missing-" + a].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert await admin.delete_topics([a]) == {a: None}
            missing = await admin.delete_topics([a])
            assert missing[a].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            deadline = time.monotonic() + 10
            while a in await admin.list_topics():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            assert b in await admin.list_topics()

    async def test_admin_create_with_defaults(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            name = unique("dflt")
            assert await admin.create_topics([NewTopic(name)]) == {name: None}  # -1/-1 (v4+)
            desc = await admin.describe_topics([name])
            assert len(desc[name].partitions) >= 1

    async def test_admin_validate_only(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            name = unique("dry")
            assert await admin.create_topics([NewTopic(name, 1, 1)], validate_only=True) == {name: None}
            assert name not in await admin.list_topics()

    async def test_admin_describe_cluster(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            desc = await Admin(client).describe_cluster()
            assert desc.brokers and desc.cluster_id
            assert desc.controller_id in {b.node_id for b in desc.brokers}
            assert {(b.host, b.port) for b in desc.brokers} == {
                (b.host, b.port) for b in client.cluster.brokers.values()}

    async def test_admin_topic_configs(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            topic = unique("cfg")
            check(await admin.create_topics([NewTopic(topic, 1, 1, configs={"retention.ms": "3600000"})]))
            res = ConfigResource.topic(topic)
            configs = check(await admin.describe_configs(res))[res]
            assert configs["retention.ms"].value == "3600000"
            assert check(await admin.incremental_alter_configs({res: {"retention.ms": "7200000"}})) == {res: None}
            assert check(await admin.describe_configs(res))[res]["retention.ms"].value == "7200000"

    async def test_admin_alter_configs(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            topic = unique("alt")
            check(await admin.create_topics([NewTopic(topic, 1, 1, configs={"retention.ms": "3600000"})]))
            res = ConfigResource.topic(topic)
            # AlterConfigs replaces the whole set: retention.ms goes back to its default
            assert await admin.alter_configs({res: {"cleanup.policy": "compact"}}) == {res: None}
            configs = check(await admin.describe_configs(res))[res]
            assert configs["cleanup.policy"].value == "compact"
            assert configs["retention.ms"].value != "3600000"
            assert configs["retention.ms"].is_default

    async def test_admin_broker_configs(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            node = next(iter(client.cluster.brokers))
            res = ConfigResource.broker(node)
            configs = check(await Admin(client).describe_configs(res))[res]
            assert isinstance(configs, dict)

    async def test_admin_create_partitions(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            topic = await new_topic(client, 1)
            assert await admin.create_partitions({topic: 3}) == {topic: None}
            desc = await admin.describe_topics([topic])
            assert len(desc[topic].partitions) == 3
            fewer = await admin.create_partitions({topic: 2})
            assert fewer[topic].code == ErrorCode.INVALID_PARTITIONS
            async with Producer(client) as producer:  # the producer sees the new partitions
                md = await producer.send_and_wait(topic, b"x", partition=2)
            assert md.partition == 2

    async def test_admin_delete_records(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            topic = await new_topic(client)
            async with Producer(client) as producer:
                for i in range(10):
                    await producer.send(topic, b"v%d" % i)
            assert await admin.delete_records({(topic, 0): 4}) == {(topic, 0): 4}
            offsets = check(await admin.list_offsets({(topic, 0): "earliest"}))
            assert offsets[(topic, 0)].offset == 4
            got = await consume(client, topic, 6, start=0)  # below the start: reset to earliest
            assert [r.offset for r in got] == list(range(4, 10))

    async def test_admin_list_offsets(self, bootstrap):
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            topic = await new_topic(client)
            async with Producer(client, linger_ms=1000) as producer:
                for i, ts in enumerate((1000, 5000, 3000)):
                    await producer.send(topic, b"v%d" % i, timestamp_ms=10**12 + ts)
            res = check(await admin.list_offsets({(topic, 0): "earliest"}))
            assert res[(topic, 0)].offset == 0
            res = check(await admin.list_offsets({(topic, 0): "latest"}))
            assert res[(topic, 0)].offset == 3
            res = check(await admin.list_offsets({(topic, 0): 10**12 + 10_000}))
            assert res[(topic, 0)].offset == -1  # nothing that late

    async def test_admin_offsets_for_timestamps(self, bootstrap):
        """Kafka answers with the first *record* whose timestamp is >= the target, and that
        record's own timestamp; MAX_TIMESTAMP gives the record with the largest timestamp."""
        async with KafkaClient(bootstrap) as client:
            admin = Admin(client)
            topic = await new_topic(client)
            base = 10**12
            async with Producer(client, linger_ms=1000) as producer:  # one batch
                for i, ts in enumerate((1000, 5000, 3000, 2000)):
                    await producer.send(topic, b"v%d" % i, timestamp_ms=base + ts)
            res = check(await admin.list_offsets({(topic, 0): base + 2500}))[(topic, 0)]
            assert (res.offset, res.timestamp) == (1, base + 5000)
            res = check(await admin.list_offsets({(topic, 0): base}))[(topic, 0)]
            assert (res.offset, res.timestamp) == (0, base + 1000)
            res = check(await admin.list_offsets({(topic, 0): "max_timestamp"}))[(topic, 0)]
            assert (res.offset, res.timestamp) == (1, base + 5000)

    async def test_admin_unsupported_api_is_reported_per_item(self, bootstrap):
        """A broker without an API yields UNSUPPORTED_VERSION values, not a crash."""
        async with KafkaClient(bootstrap) as client:
            conn = await client.connection(next(iter(client.cluster.brokers)))
            conn.api_versions.pop(33, None)  # pretend AlterConfigs is not there
            res = ConfigResource.topic("whatever")
            out = await Admin(client).alter_configs({res: {"retention.ms": "1"}})
            assert isinstance(out[res], UnsupportedVersionError)
