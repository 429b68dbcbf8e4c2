"""Idempotent producers: a batch retried after its response was lost is not written twice.

Raw protocol cases pin down each verdict; a librdkafka producer with enable.idempotence=true
then goes through a proxy that swallows responses and cuts the connection, and the log must
hold every record exactly once, in order.
"""
from __future__ import annotations


import pytest
from confluent_kafka import Producer

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch
from tests.support.clients import CLIENTS
from tests.support.node import SeawayNode, free_port
from tests.support.proxy import KafkaProxy
from tests.support.wire import call, create_topic, produce

pytestmark = pytest.mark.integration


def init_producer_id(node) -> tuple[int, int]:
    resp = call(node, 22, 4, m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000))
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def batch(pid: int, epoch: int, seq: int, n: int = 2, tag: bytes = b"v") -> bytes:
    return build_batch([(None, tag + b"%d" % i, [], 1000 + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def test_verdicts_and_state_across_restarts(tmp_path):
    with SeawayNode(tmp_path) as node:
        create_topic(node, "idem")
        pid, epoch = init_producer_id(node)
        pid2, _ = init_producer_id(node)
        assert pid2 != pid
        first = produce(node, "idem", batch(pid, epoch, 0))
        assert (first.error_code, first.base_offset) == (0, 0)
        again = produce(node, "idem", batch(pid, epoch, 0))
        assert (again.error_code, again.base_offset) == (0, 0), "a retried batch keeps its first offset"
        assert produce(node, "idem", batch(pid, epoch, 2)).base_offset == 2
        gap = produce(node, "idem", batch(pid, epoch, 7))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(node, "idem", batch(pid, epoch + 1, 0)).base_offset == 4  # a bumped epoch restarts at 0
        stale = produce(node, "idem", batch(pid, epoch, 4))
        assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH

        node.kill()  # no snapshot at the end: state comes back by scanning batch headers
        node.start()
        assert produce(node, "idem", batch(pid, epoch + 1, 0)).base_offset == 4
        assert produce(node, "idem", batch(pid, epoch + 1, 2)).base_offset == 6
        assert node.stop() == 0  # snapshot written on a clean stop
        assert list(node.data_dir.glob("idem-0/*.snapshot"))
        node.start()
        assert produce(node, "idem", batch(pid, epoch + 1, 2)).base_offset == 6
        assert produce(node, "idem", batch(pid, epoch + 1, 4)).base_offset == 8
        pid3, _ = init_producer_id(node)
        assert pid3 not in (pid, pid2), "producer ids are never handed out twice, restarts included"


def test_librdkafka_idempotence_writes_no_duplicate_when_responses_are_lost(tmp_path):
    proxy_port = free_port()
    with SeawayNode(tmp_path, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}) as node:
        create_topic(node, "exactly-once")
        with KafkaProxy(node.port, port=proxy_port) as proxy:
            producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy_port}", "enable.idempotence": True,
                                 "linger.ms": 5, "socket.timeout.ms": 2000, "message.timeout.ms": 60000,
                                 "retry.backoff.ms": 50})
            acked: list[bytes] = []
            errors: list = []

            def report(err, msg):
                (errors if err else acked).append(err or msg.value())

            total = 3000
            for i in range(total):
                producer.produce("exactly-once", value=b"%06d" % i, partition=0, on_delivery=report)
                if i == total // 3:
                    producer.flush(10)
                    proxy.drop_responses = True  # the node appends; the client never hears
                if i == total // 2:
                    producer.poll(0.5)
                    proxy.cut_all()
                    proxy.drop_responses = False
                producer.poll(0)
            assert producer.flush(60) == 0
            assert not errors, errors[:3]
            assert len(acked) == total
            # Metadata names the proxy as the broker, so the reader goes through it too.
            got = CLIENTS["confluent"].consume(node.bootstrap, "exactly-once", {0: 0}, count=total, timeout=30)
            beyond = CLIENTS["confluent"].consume(node.bootstrap, "exactly-once", {0: total}, count=1, timeout=2)
        assert beyond == [], "the log holds more records than were produced"
        values = [r.value for r in got]
        assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicates in the log"
        assert values == [b"%06d" % i for i in range(total)]
        assert any(key == 0 and v >= 7 for key, v in proxy.requests), "requests went through the proxy"


def test_clean_stop_snapshots_every_partition_so_restart_scans_nothing(tmp_path):
    with SeawayNode(tmp_path) as node:
        create_topic(node, "plain", partitions=2)
        produce(node, "plain", build_batch([(None, b"v", [], 1)] * 3), partition=1)
        assert node.stop() == 0
        for p, end in ((0, 0), (1, 3)):
            snaps = sorted(x.name for x in (node.data_dir / f"plain-{p}").glob("*.snapshot"))
            assert snaps == [f"{end:020d}.snapshot"], snaps
