"""Fetch sessions (KIP-227) on a real node: raw protocol for the broker's rules, then the
clients that use sessions (librdkafka, kafka-python, our own) reading through them.

The session's rules are in core/broker/fetch_session.py; here each rule is one request and
the answer a broken implementation would get wrong.
"""
from __future__ import annotations

import threading
import time
import urllib.request

import pytest

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch, iter_batch_headers
from tests.support.node import SeawayNode, free_port
from tests.support.wire import call, create_topic, produce

pytestmark = pytest.mark.integration

F = m.FetchRequest


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    port = free_port()
    with SeawayNode(tmp_path_factory.mktemp("sessions"), {"metrics.port": str(port)}) as n:
        n.metrics_port = port
        yield n


def fetch(node, session_id: int, epoch: int, parts=(), *, forgotten=(), max_wait_ms=0, min_bytes=1,
          version=12, topic_ids=None):
    """parts: (topic, partition, offset); forgotten: (topic, partition). With topic_ids
    (version 13+), topics are named by id."""
    topics: dict[str, list] = {}
    for topic, p, offset in parts:
        topics.setdefault(topic, []).append(F.FetchPartition(partition=p, fetch_offset=offset,
                                                             partition_max_bytes=1 << 20))
    gone: dict[str, list] = {}
    for topic, p in forgotten:
        gone.setdefault(topic, []).append(p)
    name = (lambda t: "") if topic_ids else (lambda t: t)
    tid = (lambda t: topic_ids[t]) if topic_ids else (lambda t: bytes(16))
    req = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=10**7,
            session_id=session_id, session_epoch=epoch,
            topics=[F.FetchTopic(topic=name(t), topic_id=tid(t), partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[F.ForgottenTopic(topic=name(t), topic_id=tid(t), partitions=ps)
                                   for t, ps in gone.items()])
    return call(node, 1, version, req)


def answered(resp) -> dict[int, object]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


def batch(n: int = 3) -> bytes:
    return build_batch([(None, b"v" * 50, [], 1000 + i) for i in range(n)])


def record_count(records) -> int:
    data = bytes(records) if not isinstance(records, list) else b"".join(records)
    return sum(h.last_offset_delta + 1 for h in iter_batch_headers(data))


def open_session(node, topic: str, partitions: int):
    resp = fetch(node, 0, 0, [(topic, p, 0) for p in range(partitions)])
    assert resp.error_code == 0 and resp.session_id != 0
    assert sorted(answered(resp)) == list(range(partitions)), "a full answer names every partition"
    return resp.session_id


def metric(node, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def test_an_idle_incremental_fetch_waits_and_names_nothing(node):
    create_topic(node, "s-idle", partitions=4)
    sid = open_session(node, "s-idle", 4)
    t0 = time.monotonic()
    resp = fetch(node, sid, 1, max_wait_ms=800)
    assert time.monotonic() - t0 >= 0.6, "an incremental fetch with nothing new must long-poll"
    assert resp.error_code == 0 and resp.session_id == sid
    assert answered(resp) == {}


def test_new_records_wake_the_session_and_only_their_partition_is_answered(node):
    create_topic(node, "s-wake", partitions=4)
    sid = open_session(node, "s-wake", 4)
    timer = threading.Timer(0.4, lambda: produce(node, "s-wake", batch(3), partition=2))
    timer.start()
    t0 = time.monotonic()
    resp = fetch(node, sid, 1, max_wait_ms=20_000)
    timer.join()
    assert time.monotonic() - t0 < 10, "the append to a session partition must end the long poll"
    parts = answered(resp)
    assert sorted(parts) == [2]
    assert record_count(parts[2].records) == 3 and parts[2].high_watermark == 3
    # The fetcher moves on: named at its new position, nothing new, the answer is empty.
    resp = fetch(node, sid, 2, [("s-wake", 2, 3)])
    assert answered(resp) == {}


def test_a_partition_not_moved_on_is_answered_again_from_the_remembered_offset(node):
    create_topic(node, "s-again", partitions=2)
    sid = open_session(node, "s-again", 2)
    produce(node, "s-again", batch(2), partition=1)
    first = answered(fetch(node, sid, 1))
    assert record_count(first[1].records) == 2
    again = answered(fetch(node, sid, 2))
    assert sorted(again) == [1] and record_count(again[1].records) == 2


def test_a_high_watermark_change_alone_is_answered_once(node):
    create_topic(node, "s-hw", partitions=2)
    sid = open_session(node, "s-hw", 2)
    produce(node, "s-hw", batch(1), partition=0)
    parts = answered(fetch(node, sid, 1, [("s-hw", 0, 1)]))
    # Named at the log end: no records, but the high watermark moved since the full answer.
    assert sorted(parts) == [0] and parts[0].high_watermark == 1 and record_count(parts[0].records) == 0
    assert answered(fetch(node, sid, 2)) == {}


def test_a_forgotten_partition_is_not_answered(node):
    create_topic(node, "s-forget", partitions=2)
    sid = open_session(node, "s-forget", 2)
    fetch(node, sid, 1, forgotten=[("s-forget", 0)])
    produce(node, "s-forget", batch(1), partition=0)
    produce(node, "s-forget", batch(1), partition=1)
    parts = answered(fetch(node, sid, 2))
    assert sorted(parts) == [1]


def test_a_partition_added_to_the_session_is_served(node):
    create_topic(node, "s-add", partitions=3)
    resp = fetch(node, 0, 0, [("s-add", 0, 0)])
    sid = resp.session_id
    produce(node, "s-add", batch(4), partition=2)
    parts = answered(fetch(node, sid, 1, [("s-add", 2, 0)]))
    assert sorted(parts) == [2] and record_count(parts[2].records) == 4


@pytest.mark.parametrize("session_id, epoch, error", [
    (123456, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
    (None, 5, ErrorCode.INVALID_FETCH_SESSION_EPOCH),     # expects 1
    (None, -5, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
])
def test_session_errors(node, session_id, epoch, error):
    create_topic(node, "s-err", partitions=1)
    sid = open_session(node, "s-err", 1)
    resp = fetch(node, session_id or sid, epoch)
    assert (resp.error_code, resp.session_id, resp.responses) == (error, 0, [])
    # A refused request does not move the session on: epoch 1 still works.
    if session_id is None:
        assert fetch(node, sid, 1).error_code == 0


def test_epoch_minus_one_closes_the_session(node):
    create_topic(node, "s-close", partitions=1)
    sid = open_session(node, "s-close", 1)
    resp = fetch(node, sid, -1, [("s-close", 0, 0)])
    assert resp.error_code == 0 and resp.session_id == 0
    assert fetch(node, sid, 1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_session_opened_by_names_refuses_topic_ids(node):
    create_topic(node, "s-ids", partitions=1)
    sid = open_session(node, "s-ids", 1)
    md = call(node, 3, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="s-ids")]))
    topic_id = md.topics[0].topic_id
    resp = fetch(node, sid, 1, version=13, topic_ids={"s-ids": topic_id})
    assert resp.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # By id from the start, the session works at v13.
    resp = fetch(node, 0, 0, [("s-ids", 0, 0)], version=13, topic_ids={"s-ids": topic_id})
    assert resp.session_id != 0 and resp.responses[0].topic_id == topic_id
    produce(node, "s-ids", batch(2))
    parts = answered(fetch(node, resp.session_id, 1, version=13, topic_ids={"s-ids": topic_id}))
    assert record_count(parts[0].records) == 2


def test_a_deleted_topic_is_reported_to_its_session(node):
    create_topic(node, "s-del", partitions=1)
    sid = open_session(node, "s-del", 1)
    call(node, 20, 4, m.DeleteTopicsRequest(topic_names=["s-del"], timeout_ms=5000))
    parts = answered(fetch(node, sid, 1, max_wait_ms=5000))
    assert parts[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_the_cache_metrics_count_sessions_and_partitions(node):
    create_topic(node, "s-metric", partitions=5)
    before = metric(node, "seaway_fetch_session_partitions")
    open_session(node, "s-metric", 5)
    assert metric(node, "seaway_fetch_session_partitions") == before + 5
    assert metric(node, "seaway_fetch_sessions") >= 1


def test_a_full_cache_answers_session_id_zero_and_still_serves(tmp_path):
    with SeawayNode(tmp_path, {"max.incremental.fetch.session.cache.slots": "1"}) as small:
        create_topic(small, "full", partitions=2)
        produce(small, "full", batch(2))
        assert fetch(small, 0, 0, [("full", 0, 0), ("full", 1, 0)]).session_id != 0
        resp = fetch(small, 0, 0, [("full", 0, 0)])   # smaller, same class: no room
        assert resp.session_id == 0 and resp.error_code == 0
        assert record_count(answered(resp)[0].records) == 2


# --- clients that use sessions ---------------------------------------------------------------

N_PARTITIONS = 6


def _produce_rounds(bootstrap: str, topic: str, rounds: int, per_round: int, pause: float) -> list[bytes]:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent = []
    for r in range(rounds):
        for i in range(per_round):
            value = f"{r}-{i}".encode()
            p.produce(topic, value, partition=(r + i) % N_PARTITIONS)
            sent.append(value)
        p.flush(30)
        time.sleep(pause)
    return sent


def test_confluent_kafka_reads_everything_through_a_session(node):
    from confluent_kafka import Consumer
    create_topic(node, "s-rdkafka", partitions=N_PARTITIONS)
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "s-rdkafka", "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 200})
    c.subscribe(["s-rdkafka"])
    got: list[bytes] = []
    got_sent: list[bytes] = []
    producer = threading.Thread(target=lambda: got_sent.extend(
        _produce_rounds(node.bootstrap, "s-rdkafka", 10, 7, 0.3)))
    producer.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (producer.is_alive() or len(got) < len(got_sent)):
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    producer.join()
    sessions = metric(node, "seaway_fetch_sessions")
    c.close()
    assert sorted(got) == sorted(got_sent) and len(got) == 70
    assert sessions >= 1, "librdkafka should have opened a fetch session"


def test_kafka_python_reads_everything_through_a_session(node):
    from kafka import KafkaConsumer
    create_topic(node, "s-kpy", partitions=N_PARTITIONS)
    before = metric(node, "seaway_fetch_session_partitions")
    c = KafkaConsumer("s-kpy", bootstrap_servers=node.bootstrap, group_id="s-kpy", auto_offset_reset="earliest",
                      fetch_max_wait_ms=200, consumer_timeout_ms=1000)
    sent: list[bytes] = []
    producer = threading.Thread(target=lambda: sent.extend(_produce_rounds(node.bootstrap, "s-kpy", 10, 7, 0.3)))
    producer.start()
    got: list[bytes] = []
    peak = before
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (producer.is_alive() or len(got) < len(sent)):
        for records in c.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
        peak = max(peak, metric(node, "seaway_fetch_session_partitions"))
    producer.join()
    c.close()
    assert sorted(got) == sorted(sent) and len(got) == 70
    assert peak >= before + N_PARTITIONS, "kafka-python should have put its partitions in a session"


def test_clients_recover_when_the_broker_forgets_their_session(tmp_path):
    """A restarted broker has no sessions: the client's next incremental fetch gets
    FETCH_SESSION_ID_NOT_FOUND, and it must start a new session and lose nothing."""
    from confluent_kafka import Consumer, Producer
    with SeawayNode(tmp_path) as n:
        create_topic(n, "s-restart", partitions=3)
        p = Producer({"bootstrap.servers": n.bootstrap})
        c = Consumer({"bootstrap.servers": n.bootstrap, "group.id": "s-restart", "auto.offset.reset": "earliest",
                      "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 500})
        c.subscribe(["s-restart"])
        got = []

        def drain(expected: int, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while len(got) < expected and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg.value())

        for i in range(30):
            p.produce("s-restart", str(i).encode(), partition=i % 3)
        p.flush(30)
        drain(30, 30)
        n.stop()
        n.start()
        for i in range(30, 60):
            p.produce("s-restart", str(i).encode(), partition=i % 3)
        p.flush(60)
        drain(60, 60)
        c.close()
        assert sorted(int(v) for v in got) == list(range(60))
