"""DescribeProducers, DescribeTransactions and ListTransactions (KIP-664, KIP-994) answered by a
real node in process, with a test clock, and the admin client's methods over them: every field
of the answers, the errors Kafka gives (unknown id, unknown state filter, unknown topic or
partition, an illegal topic name, a coordinator loading its partitions) and, on a SASL
listener with ACLs, what a principal without DESCRIBE or READ gets.

Transaction states are made with the coordinator's own requests (tests/support/txn_requests.py);
`seaway transactions` end to end is tests/integration/test_transactions_admin.py."""
from __future__ import annotations

import anyio
import pytest

from core.client import Admin, KafkaClient
from core.client.txn_admin import ProducerState, TransactionDescription, TransactionListing
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E, KafkaError
from tests.support.inprocess import Clock, bootstrap, create_topic, running_node
from tests.support.txn_requests import (add_partitions, coordinator, end_transaction, idempotent_producer,
                                        init_transactions, produce_batch)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

PROPS = {"transaction.state.log.num.partitions": "2", "auto.create.topics.enable": "false"}
START = 1_000_000
DT = m.DescribeTransactionsRequest
LT = m.ListTransactionsRequest
DP = m.DescribeProducersRequest


def described(resp) -> list[tuple]:
    return [(s.transactional_id, s.error_code, s.transaction_state, s.transaction_timeout_ms,
             s.transaction_start_time_ms, s.producer_id, s.producer_epoch,
             [(t.topic, list(t.partitions)) for t in s.topics]) for s in resp.transaction_states]


def listed(resp) -> tuple:
    return (resp.error_code, list(resp.unknown_state_filters),
            [(s.transactional_id, s.producer_id, s.transaction_state) for s in resp.transaction_states])


def producers(resp) -> list[tuple]:
    return [(t.name, p.partition_index, p.error_code, p.error_message,
             [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
               s.current_txn_start_offset) for s in p.active_producers])
            for t in resp.topics for p in t.partitions]


async def test_describe_and_list_transactions(tmp_path, anyio_backend):
    clock = Clock(START)
    async with running_node(tmp_path, PROPS, clock=clock) as node:
        await create_topic(node, "t", 2)
        await create_topic(node, "u", 1)
        async with KafkaClient(bootstrap(node)) as client:
            conn = await coordinator(client, "tx-a")
            pid_a, epoch_a = await init_transactions(conn, "tx-a", timeout_ms=60_000)
            pid_b, epoch_b = await init_transactions(conn, "tx-b", timeout_ms=30_000)
            assert (epoch_a, epoch_b) == (0, 0) and pid_a != pid_b
            clock.now = START + 1_000
            assert await add_partitions(conn, "tx-a", pid_a, epoch_a, [("u", 0), ("t", 1), ("t", 0)]) == {
                ("u", 0): 0, ("t", 1): 0, ("t", 0): 0}
            clock.now = START + 6_000

            resp = await conn.send(DT(transactional_ids=["tx-a", "tx-b", "nope", ""]))
            assert described(resp) == [
                ("tx-a", 0, "Ongoing", 60_000, START + 1_000, pid_a, 0, [("t", [0, 1]), ("u", [0])]),
                ("tx-b", 0, "Empty", 30_000, -1, pid_b, 0, []),
                ("nope", E.TRANSACTIONAL_ID_NOT_FOUND, "", 0, 0, 0, 0, []),
                ("", E.INVALID_REQUEST, "", 0, 0, 0, 0, [])]

            everything = (0, [], [("tx-a", pid_a, "Ongoing"), ("tx-b", pid_b, "Empty")])
            assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[]), version=0)) == everything
            assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[], duration_filter=-1))) \
                == everything
            # state names are Kafka's, case-sensitive; the unknown ones come back
            assert listed(await conn.send(LT(state_filters=["Ongoing", "Bogus", "ongoing", "Bogus"],
                                             producer_id_filters=[]))) \
                == (0, ["Bogus", "ongoing"], [("tx-a", pid_a, "Ongoing")])
            assert listed(await conn.send(LT(state_filters=["Bogus"], producer_id_filters=[]))) == (0, ["Bogus"], [])
            assert listed(await conn.send(LT(state_filters=["Empty", "Ongoing"], producer_id_filters=[pid_b]))) \
                == (0, [], [("tx-b", pid_b, "Empty")])
            assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[12345]))) == (0, [], [])
            # v1: transactions running longer than the duration (5 s so far)
            assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[], duration_filter=4_000),
                                          version=1)) == (0, [], [("tx-a", pid_a, "Ongoing")])
            assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[], duration_filter=9_000),
                                          version=1)) == (0, [], [])
            # v0 has no duration filter: the field is not even sent
            assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[], duration_filter=9_000),
                                          version=0)) == everything

            # the admin client's view of the same
            admin = Admin(client)
            assert await admin.describe_transactions(["tx-a", "tx-b"]) == {
                "tx-a": TransactionDescription(1, "Ongoing", pid_a, 0, 60_000, START + 1_000,
                                               (("t", 0), ("t", 1), ("u", 0))),
                "tx-b": TransactionDescription(1, "Empty", pid_b, 0, 30_000, None, ())}
            missing = (await admin.describe_transactions(["nope"]))["nope"]
            assert isinstance(missing, KafkaError) and missing.code == E.TRANSACTIONAL_ID_NOT_FOUND
            assert await admin.list_transactions() == [TransactionListing("tx-a", pid_a, "Ongoing", 1),
                                                       TransactionListing("tx-b", pid_b, "Empty", 1)]
            assert await admin.list_transactions(states=["empty"]) == [TransactionListing("tx-b", pid_b, "Empty", 1)]
            assert await admin.list_transactions(producer_ids=[pid_a], duration_ms=1_000) == [
                TransactionListing("tx-a", pid_a, "Ongoing", 1)]
            with pytest.raises(ValueError, match="unknown transaction state 'Bogus'"):
                await admin.list_transactions(states=["Bogus"])

            # the abort is PrepareAbort until every marker is written, then CompleteAbort
            assert await end_transaction(conn, "tx-a", pid_a, epoch_a, commit=False) == 0
            for _ in range(200):
                state = (await admin.describe_transactions(["tx-a"]))["tx-a"]
                if state.state == "CompleteAbort":
                    break
                await anyio.sleep(0.02)
            assert state == TransactionDescription(1, "CompleteAbort", pid_a, 0, 60_000, START + 1_000, ())
            assert listed(await conn.send(LT(state_filters=["CompleteAbort"], producer_id_filters=[]))) \
                == (0, [], [("tx-a", pid_a, "CompleteAbort")])

            # while a __transaction_state partition loads, the coordinator says so
            txn = node.broker.transactions.coordinator
            home = txn.partition_of("tx-b")
            txn.begin_loading(home)
            try:
                assert listed(await conn.send(LT(state_filters=[], producer_id_filters=[]))) \
                    == (E.COORDINATOR_LOAD_IN_PROGRESS, [], [])
                assert described(await conn.send(DT(transactional_ids=["tx-b"])))[0][1] \
                    == E.COORDINATOR_LOAD_IN_PROGRESS
            finally:
                txn.loading.discard(home)
            # and a partition it does not lead is NOT_COORDINATOR
            epoch = txn.epochs.pop(home)
            try:
                assert described(await conn.send(DT(transactional_ids=["tx-b"])))[0][1] == E.NOT_COORDINATOR
            finally:
                txn.epochs[home] = epoch


async def test_describe_producers_and_abort(tmp_path, anyio_backend):
    clock = Clock(START)
    async with running_node(tmp_path, PROPS, clock=clock) as node:
        await create_topic(node, "t", 2)
        async with KafkaClient(bootstrap(node)) as client:
            conn = await coordinator(client, "tx-a")
            # an idempotent producer: two batches (sequences 0-2, 3-4) on t-0
            idem, _ = await idempotent_producer(conn)
            clock.now = START + 10
            assert (await produce_batch(conn, "t", 0, idem, 0, 0, 3)).error_code == 0
            clock.now = START + 20
            assert (await produce_batch(conn, "t", 0, idem, 0, 3, 2)).error_code == 0
            # a transactional one, whose transaction starts at offset 5 of t-0
            pid, epoch = await init_transactions(conn, "tx-a")
            assert await add_partitions(conn, "tx-a", pid, epoch, [("t", 0)]) == {("t", 0): 0}
            clock.now = START + 30
            written = await produce_batch(conn, "t", 0, pid, epoch, 0, 2, transactional_id="tx-a")
            assert (written.error_code, written.base_offset) == (0, 5)

            resp = await conn.send(DP(topics=[DP.TopicRequest(name="t", partition_indexes=[0, 1, 7]),
                                              DP.TopicRequest(name="nope", partition_indexes=[0]),
                                              DP.TopicRequest(name="bad/name", partition_indexes=[0])]))
            first, second = sorted([(idem, 0, 4, START + 20, -1, -1), (pid, epoch, 1, START + 30, -1, 5)])
            assert producers(resp) == [
                ("t", 0, 0, None, [first, second]),
                ("t", 1, 0, None, []),
                ("t", 7, E.UNKNOWN_TOPIC_OR_PARTITION, None, []),
                ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", []),
                ("bad/name", 0, E.INVALID_TOPIC_EXCEPTION,
                 "Topic name is invalid: 'bad/name' contains one or more characters other than ASCII "
                 "alphanumerics, '.', '_' and '-'", [])]

            admin = Admin(client)
            found = await admin.describe_producers([("t", 0), ("t", 1), ("t", 7), ("nope", 0)])
            assert found[("t", 0)] == sorted([ProducerState(idem, 0, 4, START + 20, None, None),
                                              ProducerState(pid, epoch, 1, START + 30, None, 5)],
                                             key=lambda s: s.producer_id)
            assert found[("t", 1)] == []
            assert [found[tp].code for tp in (("t", 7), ("nope", 0))] == [E.UNKNOWN_TOPIC_OR_PARTITION] * 2
            assert (await admin.describe_producers([("t", 1)], broker_id=1)) == {("t", 1): []}

            # kafka-transactions abort: an ABORT marker straight to the leader, the coordinator aside
            with pytest.raises(KafkaError) as stale:
                await admin.abort_transaction("t", 0, pid, epoch - 1, 0)
            assert stale.value.code == E.INVALID_PRODUCER_EPOCH
            clock.now = START + 40
            await admin.abort_transaction("t", 0, pid, epoch, 3)
            after = (await admin.describe_producers([("t", 0)]))[("t", 0)]
            assert ProducerState(pid, epoch, 1, START + 40, 3, None) in after
            with pytest.raises(KafkaError) as fenced:
                await admin.abort_transaction("t", 0, pid, epoch, 2)
            assert fenced.value.code == E.TRANSACTION_COORDINATOR_FENCED
            with pytest.raises(KafkaError) as unknown:
                await admin.abort_transaction("t", 9, pid, epoch, 3)
            assert unknown.value.code == E.UNKNOWN_TOPIC_OR_PARTITION


USERS = ("admin", "alice")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{u}-secret"' for u in USERS) + ";")
SECURE = {**PROPS, "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0",
          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
          "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
          "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
          "super.users": "User:ANONYMOUS"}   # the plaintext listener sets up; alice logs in on SASL


def alice_client(node) -> KafkaClient:
    from core.client.security import security_from_properties
    host, port = node.bound["SASL"]
    return KafkaClient(f"{host}:{port}", security=security_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
        "sasl.password": "alice-secret"}))


async def test_what_a_principal_without_acls_sees(tmp_path, anyio_backend):
    from core.client.acl_admin import AclAdmin, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
    async with running_node(tmp_path, SECURE) as node:
        await create_topic(node, "t", 1)
        await create_topic(node, "u", 1)
        async with KafkaClient(bootstrap(node)) as client:
            conn = await coordinator(client, "tx-a")
            pid, epoch = await init_transactions(conn, "tx-a")
            await init_transactions(conn, "tx-b")
            assert await add_partitions(conn, "tx-a", pid, epoch, [("t", 0), ("u", 0)]) == {("t", 0): 0, ("u", 0): 0}
            async with alice_client(node) as as_alice:
                alice = await as_alice.connection(await as_alice.any_node())
                assert described(await alice.send(DT(transactional_ids=["tx-a", "nope"]))) == [
                    ("tx-a", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", 0, 0, 0, 0, []),
                    ("nope", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", 0, 0, 0, 0, [])]
                assert listed(await alice.send(LT(state_filters=[], producer_id_filters=[]))) == (0, [], [])
                assert producers(await alice.send(DP(topics=[DP.TopicRequest(name="t", partition_indexes=[0]),
                                                             DP.TopicRequest(name="nope", partition_indexes=[0])]))) \
                    == [("t", 0, E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", []),
                        ("nope", 0, E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", [])]
                with pytest.raises(KafkaError) as hidden:    # Metadata does not show her the topic's leader
                    await Admin(as_alice).abort_transaction("t", 0, pid, epoch, 0)
                assert hidden.value.code == E.TOPIC_AUTHORIZATION_FAILED

                # DESCRIBE on tx-a and on topic t (not u), READ on t
                def acl(rtype, name, op):
                    return AclBinding(rtype, name, PatternType.LITERAL, "User:alice", "*", op, AclPermission.ALLOW)
                created = await AclAdmin(client).create_acls([
                    acl(ResourceType.TRANSACTIONAL_ID, "tx-a", AclOperation.DESCRIBE),
                    acl(ResourceType.TOPIC, "t", AclOperation.DESCRIBE),
                    acl(ResourceType.TOPIC, "t", AclOperation.READ)])
                assert created == [None, None, None]
                for _ in range(100):   # the ACLs reach the broker's image
                    resp = await alice.send(DT(transactional_ids=["tx-a", "tx-b"]))
                    if resp.transaction_states[0].error_code == 0:
                        break
                    await anyio.sleep(0.05)
                assert described(resp) == [
                    ("tx-a", 0, "Ongoing", 60_000, resp.transaction_states[0].transaction_start_time_ms, pid, epoch,
                     [("t", [0])]),                                     # u is left out
                    ("tx-b", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", 0, 0, 0, 0, [])]
                assert listed(await alice.send(LT(state_filters=[], producer_id_filters=[]))) \
                    == (0, [], [("tx-a", pid, "Ongoing")])
                assert producers(await alice.send(DP(topics=[DP.TopicRequest(name="t", partition_indexes=[0])]))) \
                    == [("t", 0, 0, None, [])]
                with pytest.raises(KafkaError) as denied:    # markers need CLUSTER_ACTION
                    await Admin(as_alice).abort_transaction("t", 0, pid, epoch, 0)
                assert denied.value.code == E.CLUSTER_AUTHORIZATION_FAILED
