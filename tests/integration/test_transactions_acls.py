"""Transactions under ACLs (issue 23 item 6): a node with the StandardAuthorizer, ordinary users
logged in with SASL/SCRAM, and confluent-kafka's transactional producer finding out what the
ACLs let it do, where Kafka's KafkaApis checks:

    FindCoordinator (key type 1)          DESCRIBE on the transactional id (WRITE implies it)
    InitProducerId, EndTxn                WRITE on the transactional id
    AddPartitionsToTxn v0-3, Produce      WRITE on the transactional id and on each topic
    AddOffsetsToTxn, TxnOffsetCommit      WRITE on the transactional id and READ on the group
    ListTransactions                      lists only the ids the caller may DESCRIBE
    WriteTxnMarkers, AddPartitionsToTxn v4+ (broker to broker)   CLUSTER_ACTION on the cluster
        (Kafka 3.8+ also takes ALTER on the cluster for WriteTxnMarkers, KIP-1037: we do not yet,
        test_write_txn_markers_with_alter_on_the_cluster_appends_the_marker is an expected failure)

The super user is ANONYMOUS on the node's plaintext listener; it creates topics, users and ACLs,
and, with our own client (tests/support/txn_requests.py), the transaction states that the
wire-level tests need. Every test uses names of its own, so one node serves them all.
"""
from __future__ import annotations

import json
import time
import uuid

import anyio
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from core.client import KafkaClient
from core.client.connection import BrokerConnection
from core.client.security import ClientSecurity
from core.client.sasl import SaslCredentials
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.cli import seaway
from tests.support.groups import attach_log_on_failure
from tests.support.node import SeawayNode, free_port
from tests.support.txn_requests import add_partitions, coordinator, end_transaction, init_transactions, produce_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

USERS = ("alice", "bob", "ops")
TXN = ResourceType.TRANSACTIONAL_ID
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
W, R, D = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE


@pytest.fixture(scope="module")
def node(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("txn-acls")
    plain, sasl = free_port(), free_port()
    n = SeawayNode(tmp / "node", {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3"}, port=plain).start()
    try:
        attach_log_on_failure(request, "node", n)
        n.sasl = f"127.0.0.1:{sasl}"
        n.sasl_port = sasl
        admin = AdminClient({"bootstrap.servers": n.bootstrap})
        upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                f"{u}-secret".encode()) for u in USERS]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(20)
        n.configs = {}
        for user in USERS:
            path = tmp / f"{user}.properties"
            path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                            f"sasl.username={user}\nsasl.password={user}-secret\n")
            n.configs[user] = str(path)
        yield n
    finally:
        n.stop()


# ------------------------------------------------------------------ helpers

def login(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow(rtype, name: str, op, user: str = "alice", pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)


def grant(node, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for future in admin.create_acls(list(bindings)).values():
        assert future.result(20) is None


def topics(node, *names: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in names]).values():
        future.result(20)


_PRODUCERS: list[Producer] = []


@pytest.fixture(autouse=True)
def close_producers():
    """Each test's producers closed after it, so none keeps calling a stopped node."""
    yield
    while _PRODUCERS:
        try:
            _PRODUCERS.pop().close()
        except KafkaException:      # a producer in a fatal state says so again
            pass


def producer(node, tid: str, user: str = "alice") -> Producer:
    p = Producer({"bootstrap.servers": node.sasl, "transactional.id": tid, **login(user)})
    _PRODUCERS.append(p)
    return p


def init_error(node, tid: str, user: str = "alice") -> tuple[KafkaError, float]:
    """init_transactions(30) that must fail: the error, and how long it took."""
    p = producer(node, tid, user)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(30)
    return raised.value.args[0], time.monotonic() - started


def read_values(node, topic: str, isolation: str, expect: int, user: str = "alice", group: str = "readers",
                timeout: float = 20.0) -> list[str]:
    """Every value of partition 0 a consumer logged in as `user` reads with `isolation`: until
    `expect` came, then one more second to see that nothing else does."""
    c = Consumer({"bootstrap.servers": node.sasl, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": isolation, **login(user)})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[str] = []
    deadline, quiet_until = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                assert not msg.error(), msg.error()
                got.append(msg.value().decode())
                continue
            if len(got) >= expect:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return sorted(got)


def as_user(node, user: str, request, api_key: int | None = None, version: int | None = None):
    """One request on a new SASL connection logged in as `user`: the decoded answer."""
    async def run():
        conn = BrokerConnection("127.0.0.1", node.sasl_port,
                                sasl=SaslCredentials("SCRAM-SHA-256", user, f"{user}-secret"))
        await conn.connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(run)


def open_transaction(node, tid: str, partitions: list[tuple[str, int]], records: int = 2) -> tuple[int, int]:
    """As the super user: an Ongoing transaction of `tid` holding `partitions`, `records`
    records written to the first. (producer id, epoch)."""
    async def run():
        async with KafkaClient(node.bootstrap) as client:
            conn = await coordinator(client, tid)
            pid, epoch = await init_transactions(conn, tid)
            assert set((await add_partitions(conn, tid, pid, epoch, partitions)).values()) == {E.NONE}
            topic, index = partitions[0]          # one node: the coordinator leads every partition
            written = await produce_batch(conn, topic, index, pid, epoch, 0, records, transactional_id=tid)
            assert (written.error_code, written.base_offset) == (E.NONE, 0), written
            return pid, epoch
    return anyio.run(run)


def end_as_super(node, tid: str, pid: int, epoch: int, *, commit: bool) -> None:
    async def run():
        async with KafkaClient(node.bootstrap) as client:
            conn = await coordinator(client, tid)
            assert await end_transaction(conn, tid, pid, epoch, commit=commit) == E.NONE
    anyio.run(run)


def as_super(node, request, api_key: int | None = None, version: int | None = None):
    async def run():
        conn = await BrokerConnection("127.0.0.1", node.port).connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(run)


def offsets(node, topic: str, partition: int = 0) -> tuple[int, int]:
    """(high watermark, last stable offset): ListOffsets latest, read_uncommitted and read_committed."""
    L = m.ListOffsetsRequest
    out = []
    for isolation in (0, 1):
        resp = as_super(node, L(replica_id=-1, isolation_level=isolation, timeout_ms=5000, topics=[
            L.ListOffsetsTopic(name=topic, partitions=[
                L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])]))
        p = resp.topics[0].partitions[0]
        assert p.error_code == E.NONE, p
        out.append(p.offset)
    return out[0], out[1]


def described_partitions(node, tid: str) -> dict[str, list[int]]:
    """The partitions of `tid`'s transaction, as its coordinator describes them to the super user."""
    async def run():
        async with KafkaClient(node.bootstrap) as client:
            conn = await coordinator(client, tid)
            resp = await conn.send(m.DescribeTransactionsRequest(transactional_ids=[tid]))
            [state] = resp.transaction_states
            assert state.error_code == E.NONE, state
            return {t.topic: sorted(t.partitions) for t in state.topics}
    return anyio.run(run)


def markers_request(producers: list[tuple[int, int]], partitions: list[tuple[str, int]], *, commit: bool):
    WM = m.WriteTxnMarkersRequest
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    return WM(markers=[WM.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                                            coordinator_epoch=0,
                                            topics=[WM.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                                                    for t, ps in by_topic.items()])
                       for pid, epoch in producers])


def marker_codes(resp) -> dict[tuple[int, str, int], int]:
    return {(mk.producer_id, t.name, p.partition_index): p.error_code
            for mk in resp.markers for t in mk.topics for p in t.partitions}


# ------------------------------------------------------------------ confluent-kafka


@pytest.mark.parametrize("grants", [(), (D,), (R,)], ids=["no-acl", "describe-only", "read-only"])
def test_init_transactions_without_write_on_the_transactional_id_is_fatal(node, grants):
    """No ACL: FindCoordinator refuses (it needs DESCRIBE). DESCRIBE (or READ, which implies
    it): the coordinator is found and InitProducerId refuses (it needs WRITE). Either way a
    fatal error, at once, not a timeout."""
    tid = unique("denied")
    if grants:
        grant(node, *(allow(TXN, tid, op) for op in grants))
    err, took = init_error(node, tid)
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err
    assert err.fatal(), err
    assert took < 10, f"init_transactions took {took:.1f}s to fail"


def test_write_on_the_id_and_the_topic_commits_and_read_committed_sees_only_the_commits(node):
    """WRITE on the transactional id alone (DESCRIBE, which FindCoordinator checks, is implied),
    WRITE on the topic alone, and no IDEMPOTENT_WRITE on the cluster: the transactions run."""
    tid, topic = unique("billing"), unique("invoices")
    topics(node, topic)
    grant(node, allow(TXN, tid, W), allow(TOPIC, topic, W), allow(TOPIC, topic, R), allow(GROUP, "readers", R))
    p = producer(node, tid)
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"committed-{i}", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, value=f"aborted-{i}", partition=0)
    p.flush(10)                        # in the log, not only buffered
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value="committed-3", partition=0)
    p.commit_transaction(30)
    committed = [f"committed-{i}" for i in range(4)]
    assert read_values(node, topic, "read_committed", 4) == committed
    assert read_values(node, topic, "read_uncommitted", 6) == sorted(committed + ["aborted-0", "aborted-1"])
    # 6 records and 3 markers; nothing open
    assert offsets(node, topic) == (9, 9)


def test_without_write_on_the_topic_the_transaction_fails_and_can_be_aborted(node):
    """DESCRIBE on `locked` (so the producer learns its leader) but no WRITE: AddPartitionsToTxn
    answers TOPIC_AUTHORIZATION_FAILED, an abortable error. The abort takes back what the
    transaction wrote elsewhere, and the same producer then commits a transaction.

    The transaction has written to `writable` first: librdkafka counts a refused
    AddPartitionsToTxn as sent and so sends EndTxn on abort, and a coordinator whose
    transaction never started (Empty) answers that INVALID_TXN_STATE, fatal to librdkafka,
    on Kafka too (its TransactionCoordinator.endTransaction; librdkafka issue #4849)."""
    tid, locked, writable = unique("shipping"), unique("locked"), unique("open")
    topics(node, locked, writable)
    grant(node, allow(TXN, tid, W), allow(TOPIC, locked, D), allow(TOPIC, writable, W), allow(TOPIC, writable, R),
          allow(GROUP, "readers", R))
    p = producer(node, tid)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(writable, value="aborted-with-it", partition=0)
    assert p.flush(10) == 0                     # in the log: the transaction is Ongoing
    refused: list = []
    p.produce(locked, value="never", partition=0, on_delivery=lambda err, msg: refused.append(err))
    with pytest.raises(KafkaException) as raised:
        p.commit_transaction(30)
    err = raised.value.args[0]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert err.txn_requires_abort() and not err.fatal(), err
    p.abort_transaction(30)
    assert len(refused) == 1 and refused[0] is not None, refused       # never delivered
    p.begin_transaction()
    p.produce(writable, value="shipped", partition=0)
    p.commit_transaction(30)
    assert read_values(node, writable, "read_committed", 1) == ["shipped"]
    assert read_values(node, writable, "read_uncommitted", 2) == ["aborted-with-it", "shipped"]
    assert offsets(node, locked) == (0, 0)          # nothing reached the locked topic


def test_send_offsets_without_read_on_the_group_is_group_authorization_failed(node):
    """AddOffsetsToTxn needs READ on the group: GROUP_AUTHORIZATION_FAILED, abortable. With READ
    granted, the same producer's next transaction commits the offsets for the group."""
    tid, source, sink, group = unique("ctp"), unique("orders"), unique("invoices"), unique("billing")
    topics(node, source, sink)
    grant(node, allow(TXN, tid, W), allow(TOPIC, sink, W), allow(TOPIC, source, R))
    # The group's metadata, from a consumer that never joins it (generation -1, as a group of
    # one that assigns its partitions itself).
    holder = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
    metadata = holder.consumer_group_metadata()
    p = producer(node, tid)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(sink, value="invoice-0", partition=0)
    with pytest.raises(KafkaException) as raised:
        p.send_offsets_to_transaction([TopicPartition(source, 0, 1)], metadata, 30)
    err = raised.value.args[0]
    assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    assert err.txn_requires_abort() and not err.fatal(), err
    p.abort_transaction(30)

    grant(node, allow(GROUP, group, R))
    p.begin_transaction()
    p.produce(sink, value="invoice-1", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, 1)], metadata, 30)
    p.commit_transaction(30)
    [committed] = holder.committed([TopicPartition(source, 0)], 10)
    holder.close()
    assert committed.offset == 1


def test_a_prefixed_acl_on_transactional_ids(node):
    """WRITE on the PREFIXED pattern "app-": alice's "app-1" runs; "app" is outside the prefix,
    and bob has no ACL of his own for "app-1"."""
    topic = unique("apps")
    topics(node, topic)
    grant(node, allow(TXN, "app-", W, pattern=ResourcePatternType.PREFIXED), allow(TOPIC, topic, W),
          allow(TOPIC, topic, R), allow(GROUP, "readers", R))
    p = producer(node, "app-1")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value="from-app-1", partition=0)
    p.commit_transaction(30)
    assert read_values(node, topic, "read_committed", 1) == ["from-app-1"]
    err, _ = init_error(node, "app")
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err
    err, _ = init_error(node, "app-1", user="bob")
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err


# ------------------------------------------------------------------ the CLI


def test_transactions_list_shows_only_the_ids_the_user_may_describe(node):
    suffix = uuid.uuid4().hex[:8]
    seen, hidden = f"seen-{suffix}", f"hidden-{suffix}"

    async def make():
        async with KafkaClient(node.bootstrap) as client:
            return {tid: (await init_transactions(await coordinator(client, tid), tid))[0] for tid in (seen, hidden)}
    pids = anyio.run(make)
    grant(node, allow(TXN, seen, D, user="bob"))

    def listed(*login_args: str) -> list[dict]:
        rows = json.loads(seaway("transactions", *login_args, "list", "--output", "json").stdout)
        return [r for r in rows if r["transactional_id"].endswith(suffix)]

    def row(tid):
        return {"transactional_id": tid, "coordinator": 1, "producer_id": pids[tid], "state": "Empty"}

    assert listed("--bootstrap-server", node.bootstrap) == [row(hidden), row(seen)]      # the super user
    as_bob = ("--bootstrap-server", node.sasl, "--command-config", node.configs["bob"])
    assert listed(*as_bob) == [row(seen)]
    refused = seaway("transactions", *as_bob, "describe", "--transactional-id", hidden, check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr == (f"seaway: error: transactional id '{hidden}': TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "
                              "not authorized to describe this transactional id\n"), refused.stderr


# ------------------------------------------------------------------ the wire


def test_the_producers_requests_check_the_id_the_topics_and_the_group(node):
    """What librdkafka reports above, answer by answer, from our client logged in as alice:
    AddPartitionsToTxn refuses the whole request when one topic is not writable (the others
    OPERATION_NOT_ATTEMPTED); transactional Produce needs WRITE on the id and on the topic;
    EndTxn WRITE on the id; TxnOffsetCommit READ on the group, then READ on each topic."""
    tid, other = unique("wire"), unique("wire-other")
    locked, writable, group = unique("locked"), unique("open"), unique("wire-group")
    topics(node, locked, writable)
    grant(node, allow(TXN, tid, W), allow(TXN, other, D), allow(TOPIC, locked, D), allow(TOPIC, writable, W))
    TOC = m.TxnOffsetCommitRequest

    def txn_offset_commit(pid, epoch):
        return TOC(transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
                   member_id="", group_instance_id=None, topics=[
                       TOC.TxnOffsetCommitRequestTopic(name=t, partitions=[TOC.TxnOffsetCommitRequestPartition(
                           partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])
                       for t in (writable, locked)])

    def offset_codes(resp):
        return {t.name: p.error_code for t in resp.topics for p in t.partitions}

    async def run():
        security = ClientSecurity(sasl=SaslCredentials("SCRAM-SHA-256", "alice", "alice-secret"))
        async with KafkaClient(node.sasl, security=security) as client:
            conn = await coordinator(client, tid)
            pid, epoch = await init_transactions(conn, tid)
            assert await add_partitions(conn, tid, pid, epoch, [(locked, 0), (writable, 0)]) == {
                (locked, 0): E.TOPIC_AUTHORIZATION_FAILED, (writable, 0): E.OPERATION_NOT_ATTEMPTED}
            assert await add_partitions(conn, tid, pid, epoch, [(writable, 0)]) == {(writable, 0): E.NONE}
            produced = await produce_batch(conn, locked, 0, pid, epoch, 0, transactional_id=tid)
            assert produced.error_code == E.TOPIC_AUTHORIZATION_FAILED, produced
            produced = await produce_batch(conn, writable, 0, pid, epoch, 0, transactional_id=other)
            assert produced.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, produced
            produced = await produce_batch(conn, writable, 0, pid, epoch, 0, transactional_id=tid)
            assert (produced.error_code, produced.base_offset) == (E.NONE, 0), produced
            # AddOffsetsToTxn and TxnOffsetCommit without READ on the group
            added = await conn.send(m.AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid,
                                                             producer_epoch=epoch, group_id=group))
            assert added.error_code == E.GROUP_AUTHORIZATION_FAILED
            committed = await conn.send(txn_offset_commit(pid, epoch))
            assert offset_codes(committed) == {writable: E.GROUP_AUTHORIZATION_FAILED,
                                               locked: E.GROUP_AUTHORIZATION_FAILED}
            # EndTxn for an id alice may only describe
            ended = await conn.send(m.EndTxnRequest(transactional_id=other, producer_id=pid, producer_epoch=epoch,
                                                    committed=True))
            assert ended.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return pid, epoch

    pid, epoch = anyio.run(run)
    grant(node, allow(GROUP, group, R), allow(TOPIC, writable, R))

    async def offsets_with_the_group():
        security = ClientSecurity(sasl=SaslCredentials("SCRAM-SHA-256", "alice", "alice-secret"))
        async with KafkaClient(node.sasl, security=security) as client:
            conn = await coordinator(client, tid)
            added = await conn.send(m.AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid,
                                                             producer_epoch=epoch, group_id=group))
            assert added.error_code == E.NONE
            # one node: the group's coordinator is this connection's broker too
            committed = await conn.send(txn_offset_commit(pid, epoch))
            assert offset_codes(committed) == {writable: E.NONE, locked: E.TOPIC_AUTHORIZATION_FAILED}
            assert await end_transaction(conn, tid, pid, epoch, commit=True) == E.NONE

    anyio.run(offsets_with_the_group)
    deadline = time.monotonic() + 10
    while offsets(node, writable) != (2, 2):          # the record and the commit marker
        assert time.monotonic() < deadline, offsets(node, writable)
        time.sleep(0.05)
    assert offsets(node, locked) == (0, 0)


# ------------------------------------------------------------------ the wire: broker-to-broker requests


def test_write_txn_markers_from_an_ordinary_user_is_refused_per_partition(node):
    """alice may do anything with the topic and the transactional id, but WriteTxnMarkers is
    the coordinator's: CLUSTER_AUTHORIZATION_FAILED for every partition of every marker, and
    no marker is appended (the open transaction still holds the last stable offset)."""
    tid, topic = unique("held"), unique("markers")
    topics(node, topic, partitions=2)
    grant(node, allow(TXN, tid, W), allow(TOPIC, topic, AclOperation.ALL),
          allow(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE))
    pid, epoch = open_transaction(node, tid, [(topic, 0), (topic, 1)])
    assert offsets(node, topic) == (2, 0)
    for commit in (True, False):
        resp = as_user(node, "alice", markers_request([(pid, epoch), (pid + 1, 0)], [(topic, 0), (topic, 1)],
                                                      commit=commit), version=1)
        assert marker_codes(resp) == {(p, topic, i): E.CLUSTER_AUTHORIZATION_FAILED
                                      for p in (pid, pid + 1) for i in (0, 1)}
    assert offsets(node, topic) == (2, 0)               # no marker: the transaction still holds the LSO
    assert offsets(node, topic, 1) == (0, 0)
    # The coordinator's own markers do get there: the measure above would have seen them.
    end_as_super(node, tid, pid, epoch, commit=False)
    deadline = time.monotonic() + 10
    while offsets(node, topic) != (3, 3):
        assert time.monotonic() < deadline, offsets(node, topic)
        time.sleep(0.05)


def test_add_partitions_to_txn_v4_from_an_ordinary_user_is_cluster_authorization_failed(node):
    """The broker's form (v4: a batch of transactions, VerifyOnly or not) needs CLUSTER_ACTION:
    the whole answer is CLUSTER_AUTHORIZATION_FAILED with no results, and nothing joins the
    transaction, though alice may add the same partition with the producer's form (v3)."""
    tid, topic = unique("verify"), unique("parts")
    topics(node, topic, partitions=2)
    grant(node, allow(TXN, tid, W), allow(TOPIC, topic, W))
    pid, epoch = open_transaction(node, tid, [(topic, 0)])
    A = m.AddPartitionsToTxnRequest
    for verify_only in (False, True):
        resp = as_user(node, "alice", A(transactions=[A.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
            topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[1])])],
            v3_and_below_transactional_id="", v3_and_below_producer_id=0, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[]), version=4)
        assert (resp.error_code, resp.results_by_transaction) == (E.CLUSTER_AUTHORIZATION_FAILED, []), resp
    assert described_partitions(node, tid) == {topic: [0]}

    resp = as_user(node, "alice", A(transactions=[], v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                    v3_and_below_producer_epoch=epoch,
                                    v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[1])]),
                   version=3)
    assert [(t.name, p.partition_index, p.partition_error_code) for t in resp.results_by_topic_v3_and_below
            for p in t.results_by_partition] == [(topic, 1, E.NONE)]
    assert described_partitions(node, tid) == {topic: [0, 1]}
    end_as_super(node, tid, pid, epoch, commit=False)


def test_write_txn_markers_with_alter_on_the_cluster_appends_the_marker(node):
    """KIP-1037 (Kafka 3.8, KafkaApis.handleWriteTxnMarkersRequest): ALTER on the cluster is
    enough to write markers, so that an operator's `kafka-transactions abort` (Admin
    abortTransaction, which sends WriteTxnMarkers to the partition's leader) needs no
    CLUSTER_ACTION, the brokers' own permission."""
    tid, topic = unique("ops"), unique("hanging")
    topics(node, topic)
    grant(node, allow(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER, user="ops"))
    pid, epoch = open_transaction(node, tid, [(topic, 0)])
    try:
        resp = as_user(node, "ops", markers_request([(pid, epoch)], [(topic, 0)], commit=False), version=1)
        assert marker_codes(resp) == {(pid, topic, 0): E.NONE}
        assert offsets(node, topic) == (3, 3)
    finally:
        end_as_super(node, tid, pid, epoch, commit=False)


def test_find_coordinator_for_a_transactional_id_needs_describe(node):
    """Key type 1: DESCRIBE on the id (or WRITE, which implies it), per key in v4+; the other
    keys of the batch are answered."""
    described, written, denied = unique("fc-d"), unique("fc-w"), unique("fc-x")
    grant(node, allow(TXN, described, D), allow(TXN, written, W))
    resp = as_user(node, "alice", m.FindCoordinatorRequest(key="", key_type=1,
                                                           coordinator_keys=[described, written, denied]), version=4)
    got = {c.key: (c.error_code, c.node_id) for c in resp.coordinators}
    assert got == {described: (E.NONE, 1), written: (E.NONE, 1), denied: (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)}
    resp = as_user(node, "alice", m.FindCoordinatorRequest(key=denied, key_type=1, coordinator_keys=[]), version=3)
    assert (resp.error_code, resp.node_id) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
