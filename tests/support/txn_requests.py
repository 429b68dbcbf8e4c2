"""Transaction states made with the coordinator's own requests, sent with our client
(`BrokerConnection.send`), for tests of the tools that look at transactions:

    async with KafkaClient(bootstrap) as client:
        conn = await coordinator(client, "tx-a")              # FindCoordinator key type 1
        pid, epoch = await init_transactions(conn, "tx-a")    # InitProducerId: Empty
        await add_partitions(conn, "tx-a", pid, epoch, [("t", 0)])   # AddPartitionsToTxn v3: Ongoing
        await produce_batch(conn, "t", 0, pid, epoch, 0, transactional_id="tx-a")
        await end_transaction(conn, "tx-a", pid, epoch, commit=False)     # EndTxn: PrepareAbort...

Every call retries the answers a client retries (the coordinator's topic being created,
CONCURRENT_TRANSACTIONS while a write is in flight) and returns or asserts the rest.
"""
from __future__ import annotations

import anyio

from core.client import BrokerConnection, KafkaClient
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch

TRANSACTION_KEY = 1
_RETRY = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})


async def _retrying(send, code_of, timeout_s: float = 30.0):
    with anyio.fail_after(timeout_s):
        while True:
            resp = await send()
            if code_of(resp) not in _RETRY:
                return resp
            await anyio.sleep(0.05)


async def coordinator(client: KafkaClient, transactional_id: str) -> BrokerConnection:
    """A connection to the id's coordinator, once it has one (the first lookup has
    __transaction_state created)."""
    conn = await client.connection(await client.any_node())
    resp = await _retrying(lambda: conn.send(m.FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY,
                                                                      coordinator_keys=[transactional_id]),
                                             version=4),
                           lambda r: r.coordinators[0].error_code)
    found = resp.coordinators[0]
    assert found.error_code == ErrorCode.NONE, found
    await client.refresh_metadata([])
    return await client.connection(found.node_id)


async def init_transactions(conn: BrokerConnection, transactional_id: str, timeout_ms: int = 60_000,
                            producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
    """InitProducerId with the transactional id: (producer id, epoch)."""
    resp = await _retrying(lambda: conn.send(m.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=timeout_ms, producer_id=producer_id,
        producer_epoch=producer_epoch)), lambda r: r.error_code)
    assert resp.error_code == ErrorCode.NONE, resp
    return resp.producer_id, resp.producer_epoch


async def idempotent_producer(conn: BrokerConnection) -> tuple[int, int]:
    """InitProducerId without a transactional id: (producer id, epoch 0)."""
    resp = await conn.send(m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1,
                                                   producer_id=-1, producer_epoch=-1))
    assert resp.error_code == ErrorCode.NONE, resp
    return resp.producer_id, resp.producer_epoch


async def add_partitions(conn: BrokerConnection, transactional_id: str, producer_id: int, producer_epoch: int,
                         partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v3 (a producer's request): each partition's error code."""
    R = m.AddPartitionsToTxnRequest
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)

    def codes(resp) -> dict[tuple[str, int], int]:
        return {(t.name, p.partition_index): p.partition_error_code
                for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}

    resp = await _retrying(lambda: conn.send(R(
        transactions=[], v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()]),
        version=3), lambda r: max(codes(r).values(), key=lambda c: c in _RETRY))
    return codes(resp)


async def end_transaction(conn: BrokerConnection, transactional_id: str, producer_id: int, producer_epoch: int,
                          *, commit: bool) -> int:
    resp = await _retrying(lambda: conn.send(m.EndTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        committed=commit)), lambda r: r.error_code)
    return resp.error_code


async def produce_batch(conn: BrokerConnection, topic: str, partition: int, producer_id: int, producer_epoch: int,
                        base_sequence: int, count: int = 1, *, transactional_id: str | None = None,
                        timestamp_ms: int = 1_000) -> "m.ProduceResponse":
    """One batch of `count` records (transactional if `transactional_id`), acks=-1; the
    partition's answer (error_code, base_offset)."""
    batch = build_batch([(b"k", f"v{i}".encode(), None, timestamp_ms) for i in range(count)],
                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                        transactional=transactional_id is not None)
    R = m.ProduceRequest
    resp = await conn.send(R(transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=partition, records=batch)])]))
    return resp.responses[0].partition_responses[0]
