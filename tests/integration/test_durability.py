"""Acknowledged records survive a graceful restart and kill -9; a torn tail is cut off.

The workload is confluent-kafka (librdkafka) with acks=all. Every delivery report gives a
(partition, offset) for a unique value; after the fault, a fresh consumer reads each
partition from the start and the checker demands that every acknowledged value sits at
exactly the offset it was acknowledged at.
"""
from __future__ import annotations

import random
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from core.protocol.records import HEADER_SIZE, LOG_OVERHEAD, build_batch
from tests.support.clients import create_topic
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration

PARTITIONS = 3


def produce_stream(bootstrap: str, topic: str, stop: threading.Event, acked: dict, *, max_records: int = 200_000):
    """Produce unique values until `stop`; fills acked[(partition, offset)] = value."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 10_000, "retries": 0, "socket.timeout.ms": 5000})

    def report(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()

    i = 0
    while not stop.is_set() and i < max_records:
        try:
            producer.produce(topic, value=b"value-%08d" % i, key=b"k%d" % (i % 97), on_delivery=report)
            i += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(15)
    return i


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability-checker",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    ends = {}
    for p in range(PARTITIONS):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        got[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()
    for p in got:
        assert len(got[p]) == ends[p], f"partition {p}: read {len(got[p])} of {ends[p]} records"
    return got


def check_acked(acked: dict, got: dict) -> None:
    assert acked, "the workload got no acknowledgements at all"
    for p, recs in got.items():
        offsets = [o for o, _ in recs]
        assert offsets == list(range(len(recs))), f"partition {p}: offsets are not contiguous from 0"
    stored = {(p, o): v for p, recs in got.items() for o, v in recs}
    missing = [(k, v) for k, v in acked.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or moved, e.g. {missing[:3]}"


def run_workload_then(node: SeawayNode, topic: str, fault, seconds: float = 2.0) -> dict:
    acked: dict = {}
    stop = threading.Event()
    t = threading.Thread(target=produce_stream, args=(node.bootstrap, topic, stop, acked))
    t.start()
    time.sleep(seconds)
    fault()
    stop.set()
    t.join(60)
    assert not t.is_alive()
    return acked


def test_graceful_restart_keeps_every_acknowledged_record(tmp_path):
    with SeawayNode(tmp_path) as node:
        create_topic(node.bootstrap, "graceful", PARTITIONS)
        acked = run_workload_then(node, "graceful", lambda: None, seconds=1.5)
        assert node.stop() == 0, node.log_tail()
        node.start()
        check_acked(acked, read_all(node.bootstrap, "graceful"))
        assert "truncated" not in node.log_path.read_text(), "a clean shutdown must leave nothing to repair"


def test_kill_9_keeps_every_acknowledged_record(tmp_path):
    with SeawayNode(tmp_path) as node:
        create_topic(node.bootstrap, "killed", PARTITIONS)
        acked = run_workload_then(node, "killed", node.kill, seconds=2.0)
        node.start()
        check_acked(acked, read_all(node.bootstrap, "killed"))
    # The restarted one-node cluster took its broker id back at once: its controller knew the
    # old incarnation died with the process, rather than waiting out broker.session.timeout.ms.
    assert "DUPLICATE_BROKER_REGISTRATION" not in node.log_path.read_text(), node.log_tail()


def _active_segment(data_dir: Path, topic: str, partition: int) -> Path:
    return sorted((data_dir / f"{topic}-{partition}").glob("*.log"))[-1]


def _batch_ends(path: Path) -> list[int]:
    data = path.read_bytes()
    pos, ends = 0, []
    while pos + HEADER_SIZE <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        pos += LOG_OVERHEAD + length
        ends.append(pos)
    return ends


@pytest.mark.parametrize("damage", ["torn_batch", "garbage", "zeros"])
def test_kill_9_with_flush_policy_then_torn_tail_is_truncated(tmp_path, damage):
    """flush.messages=1: every ack follows an fsync. After kill -9 the tail beyond the last
    acknowledged batch is damaged as a torn write would leave it; recovery must cut exactly
    the damage, keep every acknowledged record, and carry on at the right offset."""
    rng = random.Random(damage)
    with SeawayNode(tmp_path, {"log.flush.interval.messages": "1"}) as node:
        create_topic(node.bootstrap, "torn", PARTITIONS)
        acked = run_workload_then(node, "torn", node.kill, seconds=1.5)
        seg = _active_segment(node.data_dir, "torn", 0)
        size_before = seg.stat().st_size
        with open(seg, "ab") as f:
            if damage == "torn_batch":
                whole = build_batch([(b"k", b"x" * 500, [], 1)], base_offset=10**9)
                f.write(whole[: rng.randrange(HEADER_SIZE, len(whole) - 1)])
            elif damage == "garbage":
                f.write(rng.randbytes(700))
            else:
                f.write(b"\x00" * 4096)
        node.start()
        got = read_all(node.bootstrap, "torn")
        check_acked(acked, got)
        assert seg.stat().st_size == size_before, "recovery must cut exactly the damaged tail"
        assert _batch_ends(seg)[-1] == size_before
        assert "recovery truncated" in node.log_path.read_text()
        next_offset = len(got[0])
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
        offsets = []
        producer.produce("torn", value=b"after", partition=0,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
        producer.flush(10)
        assert offsets == [next_offset]


@pytest.mark.parametrize("fault", ["graceful", "kill-9"])
@pytest.mark.parametrize("client_name", ["confluent", "kafka-python", "kcat", "kafkajs"])
def test_every_client_reads_back_what_it_wrote_across_a_restart(tmp_path, client_name, fault):
    from tests.support.clients import CLIENTS, Record, by_partition
    client = CLIENTS[client_name]
    with SeawayNode(tmp_path) as node:
        create_topic(node.bootstrap, "restart", PARTITIONS)
        sent = [Record(key=b"k%d" % i, value=b"value-%d" % i, headers=[("n", b"%d" % i)], partition=i % PARTITIONS,
                       timestamp=1_700_000_000_000 + i if client.sets_timestamps else None) for i in range(30)]
        client.produce(node.bootstrap, "restart", sent)
        if fault == "graceful":
            assert node.stop() == 0
        else:
            node.kill()
        node.start()
        got = client.consume(node.bootstrap, "restart", range(PARTITIONS), count=len(sent), timeout=20)
        want, have = by_partition(sent), by_partition(got)
        for p in range(PARTITIONS):
            assert [r.offset for r in have[p]] == list(range(len(want[p])))
            assert [(r.key, r.value, r.headers) for r in have[p]] == [(r.key, r.value, r.headers) for r in want[p]]
            if client.sets_timestamps:
                assert [r.timestamp for r in have[p]] == [r.timestamp for r in want[p]]
