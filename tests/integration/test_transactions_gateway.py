"""Transactional clients through `seaway gateway` while nothing moves (issue 23, part of item 5):
confluent-kafka's transactional producer and read_committed consumers bootstrapped at the
gateway, in front of a three-broker cluster, do what they do against the cluster itself.

The transaction coordinator of an id, like a group's, is some broker of the cluster: FindCoordinator
(key type 1) answers through the gateway must name the gateway's slot for it, and the
coordinator's APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and
TxnOffsetCommit to the group coordinator) must be offered and forwarded. Read_committed
consumers need nothing new: Fetch (aborted transactions, last stable offset) and ListOffsets
(isolation level) pass through as they are.

The gateway serves one cluster named twice, as tests/integration/test_gateway_security.py's
does: with no move, the second cluster of the pair is never asked anything but the decision.
"""
from __future__ import annotations

import time
import uuid

import anyio
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.errors import ErrorCode as E
from tests.support.cluster import KRaftCluster
from tests.support.gateway import GatewayProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}
# What a call may take on a working gateway, with room; a gateway that does not forward a
# transaction API makes librdkafka wait this long and then time out (not hang the suite).
API_TIMEOUT = 15
TXN_APIS = (ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
            ApiKey.TXN_OFFSET_COMMIT)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("txn-gateway")
    with KRaftCluster(tmp / "cluster", controllers=1, brokers=3, overrides=OVERRIDES) as cluster:
        cluster.admin_when_ready(brokers=3)
        (tmp / "gateway").mkdir()
        gateway = GatewayProcess(tmp / "gateway", "txn-a~txn-b",
                                 [("txn-a", cluster.bootstrap), ("txn-b", cluster.bootstrap)], slots=3).start()
        try:
            yield cluster, gateway
        finally:
            gateway.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(cluster, *names: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 3) for t in names]).values():
        future.result(20)
    deadline = time.monotonic() + 20
    while True:       # every partition has a leader, so producers through the gateway find one
        md = admin.list_topics(timeout=10).topics
        if all(t in md and len(md[t].partitions) == partitions and all(p.leader >= 0 for p in md[t].partitions.values())
               for t in names):
            return
        assert time.monotonic() < deadline, "topics without leaders"
        time.sleep(0.1)


def read_values(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int = 3,
                timeout: float = 20.0) -> list[str]:
    """Every value of the topic as a consumer at `bootstrap` reads it with `isolation`: until
    `expect` came, then one more second to see that nothing else does."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("audit"), "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
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


def gateway_request(gateway, request, version: int | None = None, api_key: int | None = None):
    host, port = gateway.bootstrap.split(",")[0].rsplit(":", 1)

    async def run():
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(run)


def cluster_request(cluster, request, version: int | None = None):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)

    async def run():
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            return await conn.send(request, version=version)
        finally:
            await conn.close()
    return anyio.run(run)


def find_coordinators(send, keys: list[str]) -> dict[str, tuple[int, int, str, int]]:
    """key -> (error, node id, host, port) of FindCoordinator v4 key type 1, asked until no key
    is COORDINATOR_NOT_AVAILABLE (the first asks create __transaction_state)."""
    deadline = time.monotonic() + 30
    while True:
        resp = send(m.FindCoordinatorRequest(key="", key_type=1, coordinator_keys=keys), 4)
        got = {c.key: (c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators}
        if all(code != E.COORDINATOR_NOT_AVAILABLE for code, *_ in got.values()):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def producer(gateway, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": tid})
    p.init_transactions(API_TIMEOUT)
    return p


# ------------------------------------------------------------------ the wire


def test_find_coordinator_for_transactional_ids_names_the_gateways_slots(setup):
    """Each id's coordinator, as the cluster names it (broker 101, 102 or 103), is named through
    the gateway as the slot that forwards to it (0, 1, 2: the brokers in id order), at that
    slot's address; several ids, so that more than one broker is named."""
    cluster, gateway = setup
    tids = [unique("coord") for _ in range(12)]
    direct = find_coordinators(lambda r, v: cluster_request(cluster, r, v), tids)
    assert {code for code, *_ in direct.values()} == {E.NONE}, direct
    assert len({node for _, node, *_ in direct.values()}) > 1, direct        # more than one broker
    slots = [addr.rsplit(":", 1) for addr in gateway.bootstrap.split(",")]
    assert len(slots) == 3, gateway.bootstrap
    brokers = sorted(node for node in cluster.nodes if node > 100)
    expected = {tid: (E.NONE, brokers.index(node), slots[brokers.index(node)][0], int(slots[brokers.index(node)][1]))
                for tid, (_, node, _, _) in direct.items()}
    assert find_coordinators(lambda r, v: gateway_request(gateway, r, v), tids) == expected


def test_the_gateway_offers_the_transaction_apis(setup):
    """ApiVersions through the gateway lists the coordinator's APIs with the cluster's versions:
    a client that does not see AddPartitionsToTxn, EndTxn... cannot run a transaction
    (librdkafka: "AddPartitionsToTxnRequest (KIP-98) not supported by broker")."""
    cluster, gateway = setup
    own = {k.api_key: (k.min_version, k.max_version)
           for k in cluster_request(cluster, m.ApiVersionsRequest(client_software_name="t",
                                                                  client_software_version="1"), 3).api_keys}
    through = {k.api_key: (k.min_version, k.max_version)
               for k in gateway_request(gateway, m.ApiVersionsRequest(client_software_name="t",
                                                                      client_software_version="1"), 3).api_keys}
    assert {ApiKey(k).name: through.get(k) for k in TXN_APIS} == {ApiKey(k).name: own[k] for k in TXN_APIS}


# ------------------------------------------------------------------ confluent-kafka


def test_read_committed_through_the_gateway_sees_only_committed_records(setup):
    """The producer writes to the cluster itself; consumers read through the gateway. An open
    transaction holds read_committed back (the later plain record too) until it commits; an
    aborted one is never shown to read_committed, and is to read_uncommitted."""
    cluster, gateway = setup
    topic = unique("ledger")
    create(cluster, topic, partitions=1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": unique("direct")})
    p.init_transactions(API_TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value="aborted")
    p.flush(10)
    p.abort_transaction(API_TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value="open")
    p.flush(10)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce(topic, value="plain")
    assert plain.flush(10) == 0
    assert read_values(gateway.bootstrap, topic, "read_committed", 0, partitions=1, timeout=3) == []
    assert read_values(gateway.bootstrap, topic, "read_uncommitted", 3, partitions=1) == ["aborted", "open", "plain"]
    p.commit_transaction(API_TIMEOUT)
    assert read_values(gateway.bootstrap, topic, "read_committed", 2, partitions=1) == ["open", "plain"]


def test_commit_and_abort_through_the_gateway(setup):
    """A transactional producer bootstrapped at the gateway: init, a committed transaction over
    three partitions, an aborted one, another committed one; consumers through the gateway see
    only the committed records with read_committed, everything with read_uncommitted."""
    cluster, gateway = setup
    topic = unique("orders")
    create(cluster, topic)
    p = producer(gateway, unique("gw"))
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"c1-{i}", partition=i % 3)
    p.commit_transaction(API_TIMEOUT)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"a-{i}", partition=i % 3)
    assert p.flush(API_TIMEOUT) == 0                 # in the log, not only buffered
    p.abort_transaction(API_TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value="c2-0", partition=2)
    p.commit_transaction(API_TIMEOUT)
    committed = sorted([f"c1-{i}" for i in range(6)] + ["c2-0"])
    assert read_values(gateway.bootstrap, topic, "read_committed", 7) == committed
    assert read_values(gateway.bootstrap, topic, "read_uncommitted", 10) == sorted(committed + ["a-0", "a-1", "a-2"])
    assert read_values(cluster.bootstrap, topic, "read_committed", 7) == committed      # the cluster agrees


def test_send_offsets_to_transaction_through_the_gateway(setup):
    """Consume-transform-produce with producer and consumer both at the gateway: the offsets
    sent in a committed transaction become the group's, those of an aborted one do not, and a
    second producer with the same id fences the first through the gateway too."""
    cluster, gateway = setup
    source, sink, group, tid = unique("in"), unique("out"), unique("ctp"), unique("ctp")
    create(cluster, source, sink, partitions=1)
    feeder = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(8):
        feeder.produce(source, value=f"in-{i}")
    assert feeder.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    p = producer(gateway, tid)

    def transform(n: int, commit: bool) -> None:
        msgs = []
        deadline = time.monotonic() + 30
        while len(msgs) < n:
            assert time.monotonic() < deadline, f"read {len(msgs)} of {n}"
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                msgs.append(msg)
        p.begin_transaction()
        for msg in msgs:
            p.produce(sink, value=msg.value().decode().replace("in", "out"))
        p.send_offsets_to_transaction([TopicPartition(source, 0, msgs[-1].offset() + 1)],
                                      consumer.consumer_group_metadata(), API_TIMEOUT)
        if commit:
            p.commit_transaction(API_TIMEOUT)
        else:
            p.abort_transaction(API_TIMEOUT)

    try:
        transform(3, commit=True)
        assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == 3
        transform(2, commit=False)
        assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == 3     # the abort took it back
        consumer.seek(TopicPartition(source, 0, 3))
        transform(5, commit=True)
        assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == 8
    finally:
        consumer.close()
    # the group's offset as the cluster itself has it
    direct = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    assert direct.committed([TopicPartition(source, 0)], 10)[0].offset == 8
    direct.close()
    assert read_values(gateway.bootstrap, sink, "read_committed", 8, partitions=1) == [f"out-{i}" for i in range(8)]

    # A second producer with the id, through the gateway, fences the first.
    second = producer(gateway, tid)
    second.begin_transaction()
    second.produce(sink, value="winner")
    second.commit_transaction(API_TIMEOUT)
    with pytest.raises(KafkaException) as raised:
        p.begin_transaction()
        p.produce(sink, value="zombie")
        p.commit_transaction(API_TIMEOUT)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), raised.value
    assert read_values(gateway.bootstrap, sink, "read_committed", 9, partitions=1) == sorted(
        [f"out-{i}" for i in range(8)] + ["winner"])
