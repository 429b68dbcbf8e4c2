"""Per-record produce errors (KIP-467) with a real node and real clients: only the invalid
records are reported invalid, the rest of their batch fails because of them (librdkafka's
_INVALID_DIFFERENT_RECORD), and nothing of a rejected batch is appended."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch
from tests.support.clients import CLIENTS, Record
from tests.support.node import SeawayNode
from tests.support.wire import call, produce

pytestmark = pytest.mark.integration

HOUR = 3_600_000


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("node")) as n:
        admin = AdminClient({"bootstrap.servers": n.bootstrap})
        for f in admin.create_topics([
                NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
                NewTopic("compacted-js", 1, 1, config={"cleanup.policy": "compact"}),
                NewTopic("compacted-one-by-one", 1, 1, config={"cleanup.policy": "compact"}),
                NewTopic("bounded", 1, 1, config={"message.timestamp.before.max.ms": str(HOUR),
                                                  "message.timestamp.after.max.ms": str(HOUR)}),
                NewTopic("compacted-wire", 1, 1, config={"cleanup.policy": "compact"})]).values():
            f.result(15)
        yield n


def _end_offset(node, topic: str) -> int:
    return CLIENTS["kafkajs"].offsets(node.bootstrap, topic)[0][1]


def _produce_confluent(node, topic: str, records: list[tuple[bytes | None, int | None]], linger_ms: int,
                       one_at_a_time: bool = False) -> list[int]:
    """Each record's delivery error code (0 when appended), in the order produced."""
    codes: dict[int, int] = {}
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": linger_ms, "retries": 0, "log_level": 3})
    for i, (key, ts) in enumerate(records):
        p.produce(topic, b"value-%d" % i, key=key, partition=0, timestamp=ts or 0,
                  on_delivery=lambda err, msg, i=i: codes.__setitem__(i, err.code() if err else 0))
        if one_at_a_time:
            assert p.flush(15) == 0
    assert p.flush(15) == 0
    return [codes[i] for i in range(len(records))]


def test_confluent_one_batch_on_a_compacted_topic(node):
    codes = _produce_confluent(node, "compacted", [(b"a", None), (None, None), (b"b", None), (None, None)],
                               linger_ms=500)
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD]
    assert _end_offset(node, "compacted") == 0, "a rejected batch appends nothing"


def test_confluent_one_record_per_batch_only_the_keyless_fail(node):
    codes = _produce_confluent(node, "compacted-one-by-one", [(b"a", None), (None, None), (b"b", None)],
                               linger_ms=0, one_at_a_time=True)
    assert codes == [0, KafkaError.INVALID_RECORD, 0]
    assert _end_offset(node, "compacted-one-by-one") == 2


def test_confluent_timestamps_out_of_bounds(node):
    now = int(time.time() * 1000)
    codes = _produce_confluent(node, "bounded", [(None, now), (None, now - 2 * HOUR), (None, now)], linger_ms=500)
    # librdkafka applies the record list to INVALID_RECORD only: for INVALID_TIMESTAMP the whole
    # batch fails with the partition's code, as it does against Kafka
    assert codes == [KafkaError.INVALID_TIMESTAMP] * 3
    assert _end_offset(node, "bounded") == 0
    assert _produce_confluent(node, "bounded", [(None, now + HOUR - 60_000), (None, now - HOUR + 60_000)],
                              linger_ms=500) == [0, 0]
    assert _end_offset(node, "bounded") == 2


def test_the_wire_answer_lists_the_bad_records(node):
    now = int(time.time() * 1000)
    batch = build_batch([(b"k0", b"v", [], now), (None, b"v", [], now), (b"k2", b"v", [], now), (None, b"v", [], now)])
    answer = produce(node, "compacted-wire", batch, version=9)
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    assert all("without a key" in e.batch_index_error_message for e in answer.record_errors)
    assert answer.error_message and "2 record(s) rejected" in answer.error_message
    assert answer.base_offset == -1 and answer.log_start_offset == 0
    older = produce(node, "compacted-wire", batch, version=7)   # no record_errors before v8
    assert older.error_code == ErrorCode.INVALID_RECORD
    req = m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(
        name="compacted-wire", partitions=[m.ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, timestamp=-1)])])
    assert call(node, 2, 5, req).topics[0].partitions[0].offset == 0


def test_kafkajs_is_refused_with_invalid_record(node):
    records = [Record(key=b"a", value=b"1", partition=0), Record(key=None, value=b"2", partition=0),
               Record(key=b"b", value=b"3", partition=0)]
    with pytest.raises(RuntimeError) as failed:
        CLIENTS["kafkajs"].produce(node.bootstrap, "compacted-js", records)
    assert "INVALID_RECORD" in str(failed.value)
    assert _end_offset(node, "compacted-js") == 0
    CLIENTS["kafkajs"].produce(node.bootstrap, "compacted-js", [records[0], records[2]])
    assert _end_offset(node, "compacted-js") == 2
