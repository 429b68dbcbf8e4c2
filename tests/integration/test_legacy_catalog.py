"""A data directory of an older standalone node (seaway-topics.json, producer-id-block) starts
as a one-node cluster with every topic, record, config and producer id it had
(core/node/legacy_catalog.py), once; a catalog that cannot be imported is a one-line error.

The old directory is written here as the old node wrote it: the catalog's JSON, partition logs
in Kafka's layout (core/log is unchanged) and the producer-id block file."""
from __future__ import annotations

import asyncio
import base64
import json
import struct
import uuid

import pytest
from crc32c import crc32c

from core.client import Admin, KafkaClient
from core.client.admin import ConfigResource
from core.log import Log, LogConfig
from core.protocol import messages as m
from core.protocol.records import build_batch
from tests.support.node import NodeError, SeawayNode

pytestmark = pytest.mark.integration

TOPIC_ID = uuid.uuid4().bytes
RECORDS = {0: 10, 1: 4, 2: 0}   # partition -> records written by the old node
OLD_NEXT_PRODUCER_ID = 5000


def write_old_directory(data_dir) -> None:
    data_dir.mkdir(parents=True)
    catalog = {"version": 1, "topics": [{
        "name": "old", "id": base64.urlsafe_b64encode(TOPIC_ID).decode(), "partitions": 3,
        "configs": {"retention.ms": "123456789", "max.message.bytes": "500000"}}]}
    (data_dir / "seaway-topics.json").write_text(json.dumps(catalog, indent=1))
    for index, count in RECORDS.items():
        log = Log.open(data_dir / f"old-{index}", LogConfig())
        if count:
            log.append(build_batch([(b"k%d" % i, b"old-%d-%d" % (index, i), [], 1_000 + i) for i in range(count)]))
        log.close()
    (data_dir / "producer-id-block").write_bytes(producer_id_block(OLD_NEXT_PRODUCER_ID))


def producer_id_block(next_block_start: int) -> bytes:
    """The old node's producer-id-block: magic, version 1, the next block's first id, crc32c."""
    head = struct.pack(">4sHq", b"SWPI", 1, next_block_start)
    return head + struct.pack(">I", crc32c(head))


async def describe(bootstrap: str):
    async with KafkaClient(bootstrap) as client:
        meta = await client.send_any(m.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                       include_topic_authorized_operations=False),
                                     version=12)
        configs = await Admin(client).describe_configs(ConfigResource.topic("old"))
        ends = {}
        for index in RECORDS:
            answer = await client.send_any(m.ListOffsetsRequest(
                replica_id=-1, isolation_level=0, topics=[m.ListOffsetsRequest.ListOffsetsTopic(
                    name="old", partitions=[m.ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=index, current_leader_epoch=-1, timestamp=-1)])]), version=7)
            ends[index] = answer.topics[0].partitions[0].offset
        pid = await client.send_any(m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                                            producer_id=-1, producer_epoch=-1), version=4)
    return meta, configs, ends, pid


def test_an_old_standalone_directory_is_imported_once_with_everything_it_had(tmp_path):
    node = SeawayNode(tmp_path)
    write_old_directory(node.data_dir)
    for start in ("import", "restart"):
        with node:
            meta, configs, ends, pid = asyncio.run(describe(node.bootstrap))
            topics = {t.name: t for t in meta.topics}
            assert set(topics) == {"old"}, start
            assert topics["old"].topic_id == TOPIC_ID
            assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
                    for p in sorted(topics["old"].partitions, key=lambda p: p.partition_index)] == \
                [(i, 1, [1], [1]) for i in range(3)]
            values = {name: value for name, value in next(iter(configs.values())).items()}
            assert values["retention.ms"].value == "123456789"
            assert values["max.message.bytes"].value == "500000"
            assert ends == RECORDS
            assert pid.error_code == 0 and pid.producer_id >= OLD_NEXT_PRODUCER_ID
        assert not (node.data_dir / "seaway-topics.json").exists()
        assert (node.data_dir / "seaway-topics.json.imported").exists()
    assert node.log_tail(400).count("topics to import into the metadata log") == 1


def test_a_catalog_that_cannot_be_read_is_a_one_line_error(tmp_path):
    node = SeawayNode(tmp_path)
    node.data_dir.mkdir(parents=True)
    (node.data_dir / "seaway-topics.json").write_text('{"topics": [{"name": "x"}')
    with pytest.raises(NodeError) as failed:
        node.start(timeout=30)
    errors = [line for line in str(failed.value).splitlines() if line.startswith("seaway: error:")]
    assert len(errors) == 1 and "seaway-topics.json cannot be imported" in errors[0], failed.value
    assert "Traceback" not in str(failed.value)


def test_a_damaged_producer_id_block_is_a_one_line_error(tmp_path):
    """Producer ids cannot safely continue after a block file that does not read back."""
    good = producer_id_block(OLD_NEXT_PRODUCER_ID)
    for damaged in (good[:-1], good + b"\0", bytes([good[0] ^ 1]) + good[1:], good[:8] + bytes([good[8] ^ 1]) + good[9:]):
        node = SeawayNode(tmp_path / f"n{len(damaged)}-{damaged[0]}-{damaged[8]}")
        node.data_dir.mkdir(parents=True)
        (node.data_dir / "seaway-topics.json").write_text('{"version": 1, "topics": []}')
        (node.data_dir / "producer-id-block").write_bytes(damaged)
        with pytest.raises(NodeError) as failed:
            node.start(timeout=30)
        errors = [line for line in str(failed.value).splitlines() if line.startswith("seaway: error:")]
        assert len(errors) == 1 and "producer-id-block is damaged" in errors[0], failed.value
        assert "Traceback" not in str(failed.value)


def test_a_node_of_a_quorum_refuses_a_catalog_and_says_what_to_do(tmp_path):
    node = SeawayNode(tmp_path, {"process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
                                 "controller.quorum.voters": "1@127.0.0.1:1", "cluster.id": "MkU3OEVBNTcwNTJENDM2Qk",
                                 "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:1"})
    node.data_dir.mkdir(parents=True)
    (node.data_dir / "seaway-topics.json").write_text('{"version": 1, "topics": []}')
    with pytest.raises(NodeError) as failed:
        node.start(timeout=30)
    errors = [line for line in str(failed.value).splitlines() if line.startswith("seaway: error:")]
    assert len(errors) == 1 and "without controller.quorum.voters" in errors[0], failed.value
