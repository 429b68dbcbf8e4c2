"""Transactions with real clients against a real node: what a transactional producer can do,
and what read_committed and read_uncommitted consumers are shown, as Kafka shows them.

confluent-kafka (librdkafka) produces in transactions to several partitions, commits and aborts,
sends its consumed offsets in the transaction, and is fenced by a second producer with the
same transactional.id; a transaction left open past its timeout is aborted by the coordinator.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.support.clients import CLIENTS, create_topic
from tests.support.groups import attach_log_on_failure
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration

NODE_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    # the coordinator looks for transactions past their timeout this often (Kafka: 10 s)
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory, request):
    with SeawayNode(tmp_path_factory.mktemp("txn_clients"), NODE_CONFIG) as n:
        attach_log_on_failure(request, "node", n)
        yield n


def _topic(node, partitions: int = 3) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(node.bootstrap, name, partitions)
    return name


def _producer(node, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(30)
    return p


def _read_all(node, topic: str, isolation: str, expect: int, timeout: float = 20.0) -> list[str]:
    """Every value in the topic, as a consumer with `isolation` sees it; reads until `expect`
    values came and then one more second, to see that nothing else comes."""
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    c.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value().decode())
                continue
            if len(got) >= expect:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return sorted(got)


def test_committed_and_aborted_transactions_across_partitions(node):
    topic = _topic(node)
    p = _producer(node, f"tx-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    for i in range(9):
        p.produce(topic, value=f"c1-{i}", partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"a-{i}", partition=i % 3)
    p.flush(10)                      # the aborted records are in the log, not just buffered
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value="c2-0", partition=1)
    p.commit_transaction(30)
    committed = sorted([f"c1-{i}" for i in range(9)] + ["c2-0"])
    assert _read_all(node, topic, "read_committed", len(committed)) == committed
    assert _read_all(node, topic, "read_uncommitted", 16) == sorted(committed + [f"a-{i}" for i in range(6)])


def test_open_transaction_is_invisible_to_read_committed_until_it_commits(node):
    topic = _topic(node, 1)
    p = _producer(node, f"tx-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    p.produce(topic, value="early")
    p.flush(10)
    other = Producer({"bootstrap.servers": node.bootstrap})
    other.produce(topic, value="plain")        # after the open transaction's first record
    other.flush(10)
    # read_committed stops at the open transaction: not even the later plain record shows
    assert _read_all(node, topic, "read_committed", 0, timeout=4) == []
    assert _read_all(node, topic, "read_uncommitted", 2) == ["early", "plain"]
    p.commit_transaction(30)
    assert _read_all(node, topic, "read_committed", 2) == ["early", "plain"]


def test_offsets_sent_in_a_transaction_commit_and_abort_with_it(node):
    source, sink = _topic(node, 1), _topic(node, 1)
    feeder = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(10):
        feeder.produce(source, value=f"in-{i}")
    feeder.flush(10)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    p = _producer(node, f"ctp-{uuid.uuid4().hex[:6]}")

    def transform(n: int, commit: bool) -> None:
        msgs = []
        while len(msgs) < n:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                msgs.append(m)
        p.begin_transaction()
        for m in msgs:
            p.produce(sink, value=m.value().decode().replace("in", "out"))
        p.send_offsets_to_transaction([TopicPartition(source, 0, msgs[-1].offset() + 1)],
                                      consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    transform(4, commit=True)
    assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == 4
    transform(3, commit=False)
    # the aborted transaction's offset never became the group's
    assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == 4
    consumer.close()
    assert _read_all(node, sink, "read_committed", 4) == [f"out-{i}" for i in range(4)]


def test_a_second_producer_with_the_same_id_fences_the_first(node):
    topic = _topic(node, 1)
    tid = f"fence-{uuid.uuid4().hex[:6]}"
    first = _producer(node, tid)
    first.begin_transaction()
    first.produce(topic, value="zombie")
    first.flush(10)
    second = _producer(node, tid)         # aborts the first one's open transaction
    second.begin_transaction()
    second.produce(topic, value="winner")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        first.produce(topic, value="late")
        first.commit_transaction(10)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    assert _read_all(node, topic, "read_committed", 1) == ["winner"]


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(node):
    topic = _topic(node, 1)
    p = _producer(node, f"slow-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic, value="too-slow")
    p.flush(10)
    time.sleep(3.0)                      # timeout + the coordinator's check interval, generously
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert _read_all(node, topic, "read_uncommitted", 1) == ["too-slow"]
    assert _read_all(node, topic, "read_committed", 0, timeout=3) == []


def _kafka_python_transactions(node, topic: str, tid: str, plan: list[tuple[list[str], bool]]) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id=tid)
    try:
        p.init_transactions()
        for values, commit in plan:
            p.begin_transaction()
            for i, v in enumerate(values):
                p.send(topic, value=v.encode(), partition=i % 2)
            if commit:
                p.commit_transaction()
            else:
                p.flush()
                p.abort_transaction()
    finally:
        p.close(timeout=10)


def _kafkajs_transactions(node, topic: str, tid: str, plan: list[tuple[list[str], bool]]) -> None:
    import base64
    CLIENTS["kafkajs"].run({"action": "transactions", "brokers": [node.bootstrap], "topic": topic,
                            "transactional_id": tid, "transactions": [
                                {"commit": commit, "records": [{"value": base64.b64encode(v.encode()).decode(),
                                                                "partition": i % 2} for i, v in enumerate(values)]}
                                for values, commit in plan]}, 60)


ISOLATION = {"confluent": "isolation.level", "kafka-python": "isolation_level", "kafkajs": "isolation_level",
             "kcat": "isolation.level"}


@pytest.mark.parametrize("producer", ["kafka-python", "kafkajs"])
def test_each_client_family_writes_and_reads_transactions_as_kafka_shows_them(node, producer):
    """Transactions written by kafka-python or kafkajs; every family's consumer reads them in
    both isolation levels and sees exactly what Kafka would show it."""
    topic = _topic(node, 2)
    plan = [([f"{producer}-c1-{i}" for i in range(4)], True),
            ([f"{producer}-a-{i}" for i in range(3)], False),
            ([f"{producer}-c2-{i}" for i in range(2)], True)]
    tid = f"{producer}-{uuid.uuid4().hex[:6]}"
    (_kafka_python_transactions if producer == "kafka-python" else _kafkajs_transactions)(node, topic, tid, plan)
    committed = sorted(v for values, commit in plan if commit for v in values)
    everything = sorted(v for values, _ in plan for v in values)
    for name, key in ISOLATION.items():
        client = CLIENTS[name]
        for level, want in (("read_committed", committed), ("read_uncommitted", everything)):
            # the aborted records lie before the last committed ones in each partition: a
            # reader that showed them would fill its count with them
            got = client.consume(node.bootstrap, topic, [0, 1], count=len(want), config={key: level})
            assert sorted(r.value.decode() for r in got) == want, (name, level)
