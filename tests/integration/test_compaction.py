"""Compacted topics: the cleaner keeps the last value of every key, offsets stay consistent,
and records without a key are refused, with a real node and real clients."""
from __future__ import annotations

import time

import pytest

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch
from tests.support.clients import CLIENTS, Record
from tests.support.node import SeawayNode
from tests.support.wire import call, produce

pytestmark = pytest.mark.integration


def create_compacted(node, name: str) -> None:
    configs = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": "0"}
    req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs=[
            m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
        timeout_ms=5000)
    assert call(node, 19, 7, req).topics[0].error_code == 0


def test_compaction_keeps_the_last_value_of_every_key(tmp_path):
    with SeawayNode(tmp_path, {"log.cleaner.backoff.ms": "200"}) as node:
        create_compacted(node, "table")
        keys = [b"key-%d" % k for k in range(10)]
        sent = [Record(key=keys[i % 10], value=b"value-%d-" % i + b"x" * 100, partition=0) for i in range(300)]
        sent += [Record(key=keys[0], value=None, partition=0), Record(key=keys[1], value=None, partition=0)]
        client = CLIENTS["confluent"]
        client.produce(node.bootstrap, "table", sent, config={"batch.size": 2000, "linger.ms": 0})
        latest = {}
        for r in sent:
            latest[r.key] = r.value

        deadline = time.monotonic() + 30
        while True:
            got = client.consume(node.bootstrap, "table", {0: 0}, count=len(sent), timeout=3)
            if len(got) < len(sent) / 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(got) < len(sent) / 2, "the cleaner never compacted the topic"
        offsets = [r.offset for r in got]
        assert offsets == sorted(set(offsets)), "offsets must stay increasing, with gaps"
        seen = {}
        for r in got:
            seen[r.key] = r.value
        for key in keys[2:]:
            assert seen[key] == latest[key], f"{key!r} lost its latest value"
        for key in keys[:2]:
            assert seen.get(key) is None, "a deleted key must not come back with an old value"
        assert got[-1].offset == len(sent) - 1, "the newest record is never cleaned away"
        assert "compacted" in node.log_path.read_text()


def test_compacted_topic_refuses_records_without_a_key(tmp_path):
    with SeawayNode(tmp_path) as node:
        create_compacted(node, "keyed")
        assert produce(node, "keyed", build_batch([(None, b"v", [], 1)])).error_code == ErrorCode.INVALID_RECORD
        assert produce(node, "keyed", build_batch([(b"k", b"v", [], 1)])).error_code == 0


def _compacted_table(node, name: str, rounds: int = 30, keys: int = 10) -> tuple[list[Record], dict]:
    create_compacted(node, name)
    sent = [Record(key=b"key-%d" % (i % keys), value=b"value-%d-" % i + b"x" * 100, partition=0)
            for i in range(rounds * keys)]
    CLIENTS["confluent"].produce(node.bootstrap, name, sent, config={"batch.size": 2000, "linger.ms": 0})
    latest = {r.key: r.value for r in sent}
    return sent, latest


def _wait_compacted(node, name: str, total: int, client: str = "confluent") -> list[Record]:
    """Read until the cleaner has removed over half the records and has nothing left to do:
    two reads in a row see the same records."""
    deadline = time.monotonic() + 30
    previous = None
    while True:
        got = CLIENTS[client].consume(node.bootstrap, name, {0: 0}, count=total, timeout=3)
        shape = [(r.offset, r.key, r.value) for r in got]
        if len(got) < total / 2 and shape == previous:
            return got
        previous = shape
        assert time.monotonic() < deadline, "the cleaner never compacted the topic (or never settled)"
        time.sleep(0.5)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_reads_from_inside_a_compacted_gap_resume_at_the_next_survivor(tmp_path, client):
    """A consumer whose position (or committed offset) points at a record the cleaner removed
    continues with the next record that is still there: never an error, never an earlier one."""
    with SeawayNode(tmp_path, {"log.cleaner.backoff.ms": "200"}) as node:
        sent, latest = _compacted_table(node, "gaps")
        survivors = _wait_compacted(node, "gaps", len(sent), client)
        kept = [r.offset for r in survivors]
        removed = sorted(set(range(len(sent))) - set(kept))
        assert removed, "nothing was cleaned"
        for start in removed[:: max(1, len(removed) // 8)]:
            got = CLIENTS[client].consume(node.bootstrap, "gaps", {0: start}, count=1, timeout=10)
            expected = min(o for o in kept if o > start)
            assert got and got[0].offset == expected, f"from {start}: got {got[:1]}, expected offset {expected}"
        # a record keeps its offset through cleaning: what is read at an offset is what was
        # produced there
        assert all((r.key, r.value) == (sent[r.offset].key, sent[r.offset].value) for r in survivors)
        assert {r.key: r.value for r in survivors} == latest


def test_appends_during_cleaning_are_kept(tmp_path):
    """Producing while the cleaner works: every key still ends with its latest value, and the
    offsets the producer was given are the offsets the records are read back at."""
    with SeawayNode(tmp_path, {"log.cleaner.backoff.ms": "50"}) as node:
        create_compacted(node, "busy")
        client = CLIENTS["confluent"]
        acked: list[Record] = []
        for round_ in range(20):
            batch = [Record(key=b"k%d" % (i % 25), value=b"r%d-%d-" % (round_, i) + b"y" * 200, partition=0)
                     for i in range(50)]
            acked += client.produce(node.bootstrap, "busy", batch, config={"batch.size": 4000, "linger.ms": 0})
            time.sleep(0.05)
        latest = {}
        for r in acked:
            latest[r.key] = r
        got = _wait_compacted(node, "busy", len(acked))
        by_key = {}
        for r in got:
            by_key[r.key] = r
        for key, want in latest.items():
            assert by_key[key].value == want.value and by_key[key].offset == want.offset
