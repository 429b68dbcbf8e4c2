"""Limits and admin edge cases found in review, each against a real node process."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch, iter_batch_headers
from tests.support.node import REPO, SeawayNode
from tests.support.wire import call, connect, create_topic, produce, roundtrip

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("limits"), {"fetch.max.bytes": "50000",
                                                        "connections.max.idle.ms": "1500"}) as n:
        yield n


def end_offsets(node, topic: str, partitions: int) -> list[int]:
    req = m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
        m.ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(partitions)])])
    parts = call(node, 2, 7, req).topics[0].partitions
    assert all(p.error_code == 0 for p in parts), parts
    return [p.offset for p in sorted(parts, key=lambda p: p.partition_index)]


def delete_topic(node, name: str) -> int:
    resp = call(node, 20, 6, m.DeleteTopicsRequest(topics=[m.DeleteTopicsRequest.DeleteTopicState(name=name)],
                                                   timeout_ms=5000))
    return resp.responses[0].error_code


def test_topic_deleted_and_created_again_starts_empty_and_keeps_new_writes(tmp_path):
    with SeawayNode(tmp_path) as n:
        create_topic(n, "again", partitions=40)
        for p in range(40):
            assert produce(n, "again", build_batch([(None, b"old", [], 1)]), partition=p).error_code == 0
        assert delete_topic(n, "again") == 0
        create_topic(n, "again", partitions=40)
        assert end_offsets(n, "again", 40) == [0] * 40, "old records came back"
        for p in range(40):
            assert produce(n, "again", build_batch([(None, b"new", [], 1)]), partition=p).error_code == 0
        n.stop()
        n.start()
        assert end_offsets(n, "again", 40) == [1] * 40
        assert not [d for d in n.data_dir.iterdir() if d.name.endswith("-delete")]


def test_orphan_partition_directories_are_swept_at_start(tmp_path):
    with SeawayNode(tmp_path) as n:
        create_topic(n, "kept")
        n.stop()
        (n.data_dir / "ghost-0").mkdir()
        (n.data_dir / "kept-0.abc-delete").mkdir()
        n.start()
        names = {d.name for d in n.data_dir.iterdir() if d.is_dir()}
        assert names == {"kept-0", "__cluster_metadata-0"}   # the metadata log lives there too


def test_min_insync_replicas_is_capped_at_the_replication_factor(node):
    """Kafka 3.7+ (KAFKA-15583, Partition.effectiveMinIsr): min.insync.replicas above the
    replication factor counts as the replication factor, so acks=all on a one-replica topic is
    answered once the leader has the records (the ISR of 1 is then the whole assignment)."""
    req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name="misr", num_partitions=1, replication_factor=1,
        configs=[m.CreateTopicsRequest.CreatableTopicConfig(name="min.insync.replicas", value="2")])], timeout_ms=5000)
    assert call(node, 19, 7, req).topics[0].error_code == 0
    assert produce(node, "misr", build_batch([(None, b"v", [], 1)])).error_code == ErrorCode.NONE
    acks1 = m.ProduceRequest(acks=1, timeout_ms=5000, topic_data=[m.ProduceRequest.TopicProduceData(
        name="misr", partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=build_batch([(None, b"v", [], 1)]))])])
    assert call(node, 0, 9, acks1).responses[0].partition_responses[0].error_code == 0


def test_client_control_batches_and_empty_records_are_invalid(node):
    create_topic(node, "ctl")
    control = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1)], control=True,
                          transactional=True, producer_id=1, producer_epoch=0)
    # A marker is transactional: without the request's transactional id Kafka refuses the whole
    # request for that first (KafkaApis.handleProduceRequest); with one, the batch itself.
    assert produce(node, "ctl", control).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with_id = m.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id="tx", topic_data=[
        m.ProduceRequest.TopicProduceData(name="ctl", partition_data=[
            m.ProduceRequest.PartitionProduceData(index=0, records=control)])])
    assert call(node, 0, 9, with_id).responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD
    assert produce(node, "ctl", b"").error_code == ErrorCode.INVALID_RECORD


def test_fetch_max_bytes_caps_what_a_client_asks_for(node):
    create_topic(node, "capped")
    for _ in range(20):
        produce(node, "capped", build_batch([(None, b"x" * 1000, [], 1)] * 10))
    req = m.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=2**31 - 1, topics=[m.FetchRequest.FetchTopic(
        topic="capped", partitions=[m.FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                    partition_max_bytes=2**31 - 1)])])
    data = bytes(call(node, 1, 12, req).responses[0].partitions[0].records)
    assert 0 < len(data) <= 50_000
    assert len(list(iter_batch_headers(data))) >= 1


def test_idle_connections_are_closed_after_connections_max_idle_ms(node):
    s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    t0 = time.monotonic()
    assert s.recv(1) == b""
    assert 1.0 <= time.monotonic() - t0 < 8
    s.close()


def test_a_connection_in_use_outlives_connections_max_idle_ms_and_closes_once_quiet(node):
    """The idle clock restarts with every request: a request every 0.5 s for 4 s keeps the
    connection open well past the 1.5 s limit, and it closes 1.5 s after the last one."""
    s = connect(node)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4:
        assert roundtrip(s, 18, 3, m.ApiVersionsRequest(client_software_name="idle-test",
                                                        client_software_version="1")).error_code == 0
        time.sleep(0.5)
    quiet = time.monotonic()
    s.settimeout(10)
    assert s.recv(1) == b""
    assert 1.0 <= time.monotonic() - quiet < 8
    s.close()


def test_unusable_log_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    cfg = tmp_path / "node.properties"
    cfg.write_text(f"log.dirs={blocker}/data\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    proc = subprocess.run([sys.executable, "-m", "core.cli", "node", "--config", str(cfg)], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("seaway: error:")]
    assert len(errors) == 1 and "file-not-dir" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_compact_only_topic_keeps_records_past_retention_and_refuses_delete_records(tmp_path):
    with SeawayNode(tmp_path, {"log.retention.check.interval.ms": "200"}) as n:
        req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
            name="compacted", num_partitions=1, replication_factor=1, configs=[
                m.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in
                {"cleanup.policy": "compact", "retention.ms": "100", "segment.ms": "50"}.items()])], timeout_ms=5000)
        assert call(n, 19, 7, req).topics[0].error_code == 0
        for _ in range(5):
            produce(n, "compacted", build_batch([(b"k", b"v", [], 1)]))
            time.sleep(0.1)
        time.sleep(1.0)  # several retention passes, each segment long past retention.ms
        start = call(n, 2, 7, m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(
            name="compacted", partitions=[m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-2)])]))
        assert start.topics[0].partitions[0].offset == 0, "retention must not delete from a compact-only topic"
        dr = call(n, 21, 2, m.DeleteRecordsRequest(timeout_ms=5000, topics=[m.DeleteRecordsRequest.DeleteRecordsTopic(
            name="compacted", partitions=[m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)])]))
        assert dr.topics[0].partitions[0].error_code == ErrorCode.POLICY_VIOLATION


def test_partitions_spread_over_log_dirs_and_survive_restart(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    with SeawayNode(tmp_path / "node", {"log.dirs": ",".join(map(str, dirs))}) as n:
        create_topic(n, "spread", partitions=4)
        for p in range(4):
            produce(n, "spread", build_batch([(None, b"v", [], 1)]), partition=p)
        placed = {d.name: sorted(e.name for e in d.iterdir() if e.is_dir() and e.name.startswith("spread-"))
                  for d in dirs}
        assert sorted(len(v) for v in placed.values()) == [2, 2], placed
        assert all((d / "meta.properties").exists() for d in dirs)
        n.stop()
        n.start()
        assert end_offsets(n, "spread", 4) == [1, 1, 1, 1]
