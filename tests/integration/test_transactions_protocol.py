"""Transactions at the wire, request by request, against a real node: bad requests get Kafka's
error code and change nothing (issue 23, item 10), and the partition-side rules hold (KIP-890
verification, markers fenced by epochs, the last stable offset in Fetch and ListOffsets).
"""
from __future__ import annotations

import uuid

import anyio
import pytest

from core.client import Admin, KafkaClient
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.clients import create_topic
from tests.support.groups import attach_log_on_failure
from tests.support.node import SeawayNode
from tests.support.txn_requests import (add_partitions, coordinator, end_transaction, init_transactions,
                                        produce_batch)

pytestmark = pytest.mark.integration

NODE_CONFIG = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
               "transaction.max.timeout.ms": "60000"}


@pytest.fixture(scope="module")
def node(tmp_path_factory, request):
    with SeawayNode(tmp_path_factory.mktemp("txn_protocol"), NODE_CONFIG) as n:
        attach_log_on_failure(request, "node", n)
        yield n


@pytest.fixture
def topic(node):
    name = f"tp-{uuid.uuid4().hex[:8]}"
    create_topic(node.bootstrap, name, 2)
    return name


def run(fn):
    return anyio.run(fn)


async def _ends(conn, topic: str, isolation: int = 0) -> dict[int, int]:
    R = m.ListOffsetsRequest
    resp = await conn.send(R(replica_id=-1, isolation_level=isolation, topics=[R.ListOffsetsTopic(
        name=topic, partitions=[R.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in (0, 1)])]))
    return {p.partition_index: p.offset for p in resp.topics[0].partitions}


async def _init(conn, tid: str, timeout_ms: int, version: int = 4, pid: int = -1, epoch: int = -1):
    return await conn.send(m.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                                   producer_id=pid, producer_epoch=epoch), version=version)


def test_init_producer_id_refusals(node):
    async def go():
        async with KafkaClient(node.bootstrap) as client:
            tid = f"bad-{uuid.uuid4().hex[:6]}"
            conn = await coordinator(client, tid)
            assert (await _init(conn, tid, 60_001)).error_code == E.INVALID_TRANSACTION_TIMEOUT
            assert (await _init(conn, tid, 0)).error_code == E.INVALID_TRANSACTION_TIMEOUT
            assert (await _init(conn, "", 1000)).error_code == E.INVALID_REQUEST
            # none of them created the id: its first real InitProducerId starts at epoch 0
            pid, epoch = await init_transactions(conn, tid)
            assert epoch == 0
            # KIP-360: a producer naming an epoch it never had is fenced; PRODUCER_FENCED is
            # INVALID_PRODUCER_EPOCH to clients older than v4
            assert (await _init(conn, tid, 1000, 4, pid, epoch + 5)).error_code == E.PRODUCER_FENCED
            assert (await _init(conn, tid, 1000, 3, pid, epoch + 5)).error_code == E.INVALID_PRODUCER_EPOCH
            assert await init_transactions(conn, tid, producer_id=pid, producer_epoch=epoch) == (pid, epoch + 1)
    run(go)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_a_transactional_id_too_long_to_store_closes_the_connection_as_kafka_does(node):
    """Kafka's generated readers refuse strings over 32767 bytes, compact or not: the request
    does not parse, and the broker closes the connection. Nothing is created."""
    import socket
    import struct
    tid = "y" * 40_000
    header = struct.pack(">hhih", 22, 4, 7, 4) + b"test" + b"\x00"
    body = _uvarint(len(tid) + 1) + tid.encode() + struct.pack(">iqh", 1000, -1, -1) + b"\x00"
    frame = header + body
    host, port = node.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert sock.recv(4) == b""            # closed, no answer

    async def go():
        async with KafkaClient(node.bootstrap) as client:
            conn = await coordinator(client, "y" * 100)
            assert (await _init(conn, "y" * 100, 1000)).error_code == E.NONE   # the node is fine
    run(go)


def test_coordinator_requests_with_the_wrong_producer_change_nothing(node, topic):
    async def go():
        async with KafkaClient(node.bootstrap) as client:
            tid = f"wrong-{uuid.uuid4().hex[:6]}"
            conn = await coordinator(client, tid)
            pid, epoch = await init_transactions(conn, tid)
            # an id the coordinator never gave this transactional id
            assert await add_partitions(conn, tid, pid + 1000, epoch, [(topic, 0)]) == {(topic, 0): E.INVALID_PRODUCER_ID_MAPPING}
            assert await add_partitions(conn, f"never-{tid}", pid, epoch, [(topic, 0)]) == \
                {(topic, 0): E.INVALID_PRODUCER_ID_MAPPING}
            # a stale epoch
            assert await add_partitions(conn, tid, pid, epoch + 1, [(topic, 0)]) == {(topic, 0): E.PRODUCER_FENCED}
            # a topic that does not exist: nothing is added, the others are not attempted
            assert await add_partitions(conn, tid, pid, epoch, [(topic, 0), ("no-such-topic", 0)]) == \
                {(topic, 0): E.OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
            # EndTxn of a transaction never begun
            assert await end_transaction(conn, tid, pid, epoch, commit=True) == E.INVALID_TXN_STATE
            assert await end_transaction(conn, tid, pid, epoch + 3, commit=False) == E.PRODUCER_FENCED
            # and the transaction can still be used normally: nothing above changed it
            assert await add_partitions(conn, tid, pid, epoch, [(topic, 1)]) == {(topic, 1): E.NONE}
            assert await end_transaction(conn, tid, pid, epoch, commit=False) == E.NONE
    run(go)


def test_a_write_to_a_partition_not_in_the_transaction_is_refused_and_not_appended(node, topic):
    """KIP-890 part 1: the leader verifies with the coordinator before a transaction's first
    write to a partition."""
    async def go():
        async with KafkaClient(node.bootstrap) as client:
            tid = f"verify-{uuid.uuid4().hex[:6]}"
            conn = await coordinator(client, tid)
            pid, epoch = await init_transactions(conn, tid)
            await client.refresh_metadata([topic])
            leader = await client.connection(client.leader_for(topic, 0))
            before = await _ends(leader, topic)
            answer = await produce_batch(leader, topic, 0, pid, epoch, 0, 3, transactional_id=tid)
            assert answer.error_code == E.INVALID_TXN_STATE
            assert await _ends(leader, topic) == before
            # added, the same batch goes in
            assert await add_partitions(conn, tid, pid, epoch, [(topic, 0)]) == {(topic, 0): E.NONE}
            answer = await produce_batch(leader, topic, 0, pid, epoch, 0, 3, transactional_id=tid)
            assert (answer.error_code, answer.base_offset) == (E.NONE, before[0])
            # transactional records without the request's transactional id
            answer = await produce_batch(leader, topic, 1, pid, epoch, 0, 1, transactional_id=None)
            assert answer.error_code == E.NONE   # not transactional: produce_batch marks none
            await end_transaction(conn, tid, pid, epoch, commit=False)
    run(go)


def test_read_committed_ends_at_the_open_transaction_and_moves_on_with_its_marker(node, topic):
    async def go():
        async with KafkaClient(node.bootstrap) as client:
            tid = f"lso-{uuid.uuid4().hex[:6]}"
            conn = await coordinator(client, tid)
            pid, epoch = await init_transactions(conn, tid)
            await client.refresh_metadata([topic])
            leader = await client.connection(client.leader_for(topic, 0))
            start = (await _ends(leader, topic))[0]
            await add_partitions(conn, tid, pid, epoch, [(topic, 0)])
            await produce_batch(leader, topic, 0, pid, epoch, 0, 4, transactional_id=tid)
            assert (await _ends(leader, topic, 0))[0] == start + 4
            assert (await _ends(leader, topic, 1))[0] == start          # the open transaction's start
            assert await end_transaction(conn, tid, pid, epoch, commit=False) == E.NONE
            with anyio.fail_after(10):
                while (await _ends(leader, topic, 1))[0] != start + 5:   # 4 records and the marker
                    await anyio.sleep(0.05)
            F = m.FetchRequest
            resp = await leader.send(F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                       isolation_level=1, topics=[F.FetchTopic(topic=topic, partitions=[
                                           F.FetchPartition(partition=0, fetch_offset=start,
                                                            partition_max_bytes=1 << 20)])]), version=11)
            part = resp.responses[0].partitions[0]
            assert part.last_stable_offset == start + 5
            assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, start)]
    run(go)


def test_markers_from_a_fenced_coordinator_or_producer_epoch_are_refused(node, topic):
    async def go():
        async with KafkaClient(node.bootstrap) as client:
            tid = f"marker-{uuid.uuid4().hex[:6]}"
            conn = await coordinator(client, tid)
            await init_transactions(conn, tid)
            pid, epoch = await init_transactions(conn, tid)     # epoch 1: one below it exists
            await client.refresh_metadata([topic])
            leader = await client.connection(client.leader_for(topic, 0))
            await add_partitions(conn, tid, pid, epoch, [(topic, 0)])
            await produce_batch(leader, topic, 0, pid, epoch, 0, 1, transactional_id=tid)
            assert await end_transaction(conn, tid, pid, epoch, commit=True) == E.NONE
            with anyio.fail_after(10):
                while (await _ends(leader, topic, 1))[0] != (await _ends(leader, topic, 0))[0]:
                    await anyio.sleep(0.05)
            before = await _ends(leader, topic)
            W = m.WriteTxnMarkersRequest

            async def marker(producer_epoch: int, coordinator_epoch: int) -> int:
                resp = await leader.send(W(markers=[W.WritableTxnMarker(
                    producer_id=pid, producer_epoch=producer_epoch, transaction_result=False,
                    coordinator_epoch=coordinator_epoch,
                    topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]))
                return resp.markers[0].topics[0].partitions[0].error_code

            assert await marker(epoch - 1, 1_000) == E.INVALID_PRODUCER_EPOCH
            assert await marker(epoch, -5) == E.TRANSACTION_COORDINATOR_FENCED
            assert await _ends(leader, topic) == before
    run(go)


async def _group_coordinator(client, group: str):
    """A connection to the group's coordinator (the first lookup creates __consumer_offsets)."""
    conn = await client.connection(await client.any_node())
    F = m.FindCoordinatorRequest
    with anyio.fail_after(20):
        while True:
            found = await conn.send(F(key=group, key_type=0), version=3)
            if found.error_code == E.NONE:
                return await client.connection(found.node_id)
            await anyio.sleep(0.1)


async def _txn_offsets(client, conn, tid: str, pid: int, epoch: int, group: str, topic: str, offset: int) -> int:
    """AddOffsetsToTxn to the transaction's coordinator, then TxnOffsetCommit to the group's,
    as a producer's send_offsets_to_transaction does."""
    A, T = m.AddOffsetsToTxnRequest, m.TxnOffsetCommitRequest
    with anyio.fail_after(20):
        while True:
            added = await conn.send(A(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group))
            if added.error_code != E.CONCURRENT_TRANSACTIONS:
                break
            await anyio.sleep(0.05)
    assert added.error_code == E.NONE, added
    coord = await _group_coordinator(client, group)
    resp = await coord.send(T(transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                              topics=[T.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                                  T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                    committed_metadata="")])]))
    return resp.topics[0].partitions[0].error_code


async def _committed(client, group: str, topic: str, require_stable: bool = False) -> tuple[int, int]:
    """(offset, error) of the group's partition 0, from its coordinator."""
    coord = await _group_coordinator(client, group)
    OF = m.OffsetFetchRequest
    resp = await coord.send(OF(group_id=group, require_stable=require_stable, topics=[
        OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), version=7)
    p = resp.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def test_transactional_offsets_commit_abort_and_survive_a_restart(tmp_path):
    """The group's offsets change only with the commit marker, and a restarted coordinator
    (reading __consumer_offsets back) agrees: committed stays, aborted never was, and one
    still undecided is pending (require_stable: UNSTABLE_OFFSET_COMMIT) until it is decided."""
    config = dict(NODE_CONFIG, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic, group = "paid", "billing"
    with SeawayNode(tmp_path / "node", config) as node:
        create_topic(node.bootstrap, topic, 1)

        async def before():
            async with KafkaClient(node.bootstrap) as client:
                conn = await coordinator(client, "offsets-tx")
                pid, epoch = await init_transactions(conn, "offsets-tx", timeout_ms=5000)
                assert await _txn_offsets(client, conn, "offsets-tx", pid, epoch, group, topic, 7) == E.NONE
                assert await _committed(client, group, topic) == (-1, E.NONE)
                assert await _committed(client, group, topic, require_stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
                assert await end_transaction(conn, "offsets-tx", pid, epoch, commit=True) == E.NONE
                with anyio.fail_after(10):
                    while await _committed(client, group, topic) != (7, E.NONE):
                        await anyio.sleep(0.05)
                assert await _txn_offsets(client, conn, "offsets-tx", pid, epoch, group, topic, 9) == E.NONE
                assert await end_transaction(conn, "offsets-tx", pid, epoch, commit=False) == E.NONE
                await anyio.sleep(1)
                assert await _committed(client, group, topic) == (7, E.NONE)
                # left open across the restart
                assert await _txn_offsets(client, conn, "offsets-tx", pid, epoch, group, topic, 11) == E.NONE
        run(before)
        node.kill()
        node.start()

        async def after():
            async with KafkaClient(node.bootstrap) as client:
                assert await _committed(client, group, topic) == (7, E.NONE)
                assert (await _committed(client, group, topic, require_stable=True))[1] in (
                    E.UNSTABLE_OFFSET_COMMIT, E.NONE)   # NONE once the timeout has aborted it
                with anyio.fail_after(20):   # the 5 s timeout aborts it: 11 never becomes the offset
                    while await _committed(client, group, topic, require_stable=True) != (7, E.NONE):
                        await anyio.sleep(0.2)
        run(after)


def test_fence_producers_aborts_the_open_transaction_and_fences_its_producer(node, topic):
    """Admin.fence_producers (Kafka's fenceProducers, KIP-618): the id's epoch is bumped, its
    open transaction aborted (the LSO moves past its records, which read_committed never
    shows), and the producer that held it is fenced. An id no coordinator knows yet is simply
    initialised, as in Kafka."""
    async def go():
        async with KafkaClient(node.bootstrap) as client:
            tid = f"fence-{uuid.uuid4().hex[:6]}"
            conn = await coordinator(client, tid)
            pid, epoch = await init_transactions(conn, tid)
            assert await add_partitions(conn, tid, pid, epoch, [(topic, 0)]) == {(topic, 0): 0}
            await client.refresh_metadata([topic])
            leader = await client.connection(client.leader_for(topic, 0))
            written = await produce_batch(leader, topic, 0, pid, epoch, 0, 3, transactional_id=tid)
            assert written.error_code == 0
            assert (await _ends(leader, topic, isolation=1))[0] == written.base_offset, "held by the open transaction"

            fenced = await Admin(client).fence_producers([tid, f"{tid}-new"])
            # two bumps, as in Kafka: the abort's (PrepareEpochFence) and the retried request's
            assert fenced[tid] == (pid, epoch + 2), fenced
            assert not isinstance(fenced[f"{tid}-new"], Exception), fenced

            end = (await _ends(leader, topic))[0]
            assert end == written.base_offset + 4, "three records and the abort marker"
            assert (await _ends(leader, topic, isolation=1))[0] == end
            assert await end_transaction(conn, tid, pid, epoch, commit=True) == E.PRODUCER_FENCED
            late = await produce_batch(leader, topic, 0, pid, epoch, 3, 1, transactional_id=tid)
            assert late.error_code in (E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED), late
    run(go)


def test_the_mirror_copies_source_transactions_into_a_replica_as_they_are_and_no_one_else_may(node, topic):
    """A DR link's copy (core/broker/handlers/produce.py, mirror/txn_gate.py): the mirror copying
    from `src` writes a source producer's transactional batches into a replica of `src` without
    a transactional id or verification, and the source's markers as they are; the replica then
    behaves as the source did (the LSO held by the open copy, the commit showing it, the abort
    listing it). A marker or transactional batch from anyone else, or into anything else, is
    refused as Kafka refuses a transactional write without a transactional id; a malformed
    copy is INVALID_RECORD; a copied marker from an older coordinator epoch is refused like any."""
    from core.broker.transactions.markers import marker_batch
    from core.protocol.dr import REPLICA_OF, mirror_client_id
    from core.protocol.records import build_batch
    from core.protocol.txn_markers import TxnShape

    replica = f"replica-{uuid.uuid4().hex[:6]}"
    create_topic(node.bootstrap, replica, 1, config={REPLICA_OF: "src"})
    pid, shape = 7_000_001, TxnShape(1_000, (("orders", 2),))

    def data(seq: int, n: int):
        return build_batch([(b"k", f"v{seq + i}".encode(), None, 1_000) for i in range(n)], producer_id=pid,
                           producer_epoch=0, base_sequence=seq, transactional=True)

    async def send(conn, where: str, records) -> tuple[int, int]:
        R = m.ProduceRequest
        resp = await conn.send(R(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[R.TopicProduceData(
            name=where, partition_data=[R.PartitionProduceData(index=0, records=records)])]))
        part = resp.responses[0].partition_responses[0]
        return part.error_code, part.base_offset

    async def go():
        async with KafkaClient(node.bootstrap, client_id=mirror_client_id("src")) as mirror, \
                KafkaClient(node.bootstrap, client_id="app") as app:
            await mirror.refresh_metadata([replica, topic])
            conn = await mirror.connection(mirror.leader_for(replica, 0))
            code, start = await send(conn, replica, data(0, 3))
            assert code == E.NONE
            assert (await _ends(conn, replica, isolation=0))[0] == start + 3
            assert (await _ends(conn, replica, isolation=1))[0] == start, "held by the copied open transaction"
            assert (await send(conn, replica, marker_batch(pid, 0, 4, True, 1_000, shape)))[0] == E.NONE
            assert (await _ends(conn, replica, isolation=1))[0] == start + 4

            assert (await send(conn, replica, data(3, 2)))[0] == E.NONE
            assert (await send(conn, replica, marker_batch(pid, 0, 3, True, 1_000)))[0] == \
                E.TRANSACTION_COORDINATOR_FENCED
            assert (await send(conn, replica, marker_batch(pid, 0, 4, False, 1_000)))[0] == E.NONE
            F = m.FetchRequest
            resp = await conn.send(F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=1,
                                     topics=[F.FetchTopic(topic=replica, partitions=[F.FetchPartition(
                                         partition=0, fetch_offset=start, partition_max_bytes=1 << 20)])]), version=11)
            part = resp.responses[0].partitions[0]
            assert part.last_stable_offset == start + 7
            assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, start + 4)]

            before = (await _ends(conn, replica))[0]
            # Kafka's order: a transactional batch without the request's transactional id is
            # refused before anything looks at it (KafkaApis), a marker included.
            assert (await send(conn, topic, marker_batch(pid, 0, 4, True, 1_000)))[0] == \
                E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "the mirror, into a topic that is no replica of its source"
            assert (await send(conn, replica, marker_batch(pid, 0, 4, True, 1_000) + data(7, 1)))[0] == \
                E.INVALID_RECORD, "a marker and a data batch in one entry"
            plain = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x04", None, 1)], producer_id=pid,
                                producer_epoch=0, control=True)
            assert (await send(conn, replica, plain))[0] == E.INVALID_RECORD, "not transactional"
            await app.refresh_metadata([replica])
            app_conn = await app.connection(app.leader_for(replica, 0))
            assert (await send(app_conn, replica, marker_batch(pid, 0, 4, True, 1_000)))[0] == \
                E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert (await send(app_conn, replica, data(7, 1)))[0] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert (await _ends(conn, replica))[0] == before, "nothing refused was appended"
    run(go)


def test_a_dr_links_copy_of_batches_it_copied_before_is_answered_as_a_duplicate(node):
    """producer_state.py, `dr_copy`: a restarted DR link sends again what it had not recorded;
    a batch older than the five the replica keeps per producer is DUPLICATE_SEQUENCE_NUMBER
    (the copier drops it), not OUT_OF_ORDER (which had the copier write it again under its own
    producer id: a duplicate on the replica)."""
    from core.protocol.dr import REPLICA_OF, mirror_client_id
    from core.protocol.records import build_batch

    replica = f"replica-{uuid.uuid4().hex[:6]}"
    create_topic(node.bootstrap, replica, 1, config={REPLICA_OF: "src"})

    async def go():
        async with KafkaClient(node.bootstrap, client_id=mirror_client_id("src")) as mirror:
            await mirror.refresh_metadata([replica])
            conn = await mirror.connection(mirror.leader_for(replica, 0))
            R = m.ProduceRequest

            async def send(seq: int):
                batch = build_batch([(b"k", f"v{seq}".encode(), None, 1_000)], producer_id=7_000_002,
                                    producer_epoch=0, base_sequence=seq)
                resp = await conn.send(R(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
                    R.TopicProduceData(name=replica, partition_data=[R.PartitionProduceData(index=0, records=batch)])]))
                part = resp.responses[0].partition_responses[0]
                return part.error_code, part.base_offset

            offsets = [await send(seq) for seq in range(8)]
            assert [code for code, _ in offsets] == [E.NONE] * 8
            end = (await _ends(conn, replica))[0]
            assert (await send(1))[0] == E.DUPLICATE_SEQUENCE_NUMBER
            assert await send(6) == (E.NONE, offsets[6][1]), "one of the five kept: its offset, as ever"
            assert (await _ends(conn, replica))[0] == end
    run(go)
