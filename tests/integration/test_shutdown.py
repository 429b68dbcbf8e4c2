"""SIGTERM drains: requests in progress are answered, idle connections closed, logs closed
cleanly, all within shutdown.timeout.ms."""
from __future__ import annotations

import signal
import socket
import threading
import time

import pytest

from core.protocol import messages as m
from tests.support.node import SeawayNode
from tests.support.wire import call, create_topic, frame, read_frame

pytestmark = pytest.mark.integration


def test_sigterm_answers_a_long_poll_and_exits_cleanly(tmp_path):
    with SeawayNode(tmp_path, {"shutdown.timeout.ms": "20000"}) as node:
        create_topic(node, "quiet")
        idle = socket.create_connection(("127.0.0.1", node.port))  # an idle client
        poll = socket.create_connection(("127.0.0.1", node.port), timeout=30)
        req = m.FetchRequest(max_wait_ms=30_000, min_bytes=1, max_bytes=1000, topics=[
            m.FetchRequest.FetchTopic(topic="quiet", partitions=[
                m.FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000)])])
        poll.sendall(frame(1, 12, req))
        time.sleep(0.5)  # the fetch is now parked in its long poll
        answer: list = []
        reader = threading.Thread(target=lambda: answer.append(read_frame(poll)))
        reader.start()
        t0 = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(15) == 0, node.log_tail()
        elapsed = time.monotonic() - t0
        reader.join(5)
        assert answer and answer[0] is not None, "the long poll in progress must be answered"
        _, pos = m.RESPONSE_HEADER.decode(1, answer[0], whole=False)
        assert m.API[1].response.decode(12, answer[0], pos).responses[0].partitions[0].error_code == 0
        assert elapsed < 10, f"drain took {elapsed:.1f}s although nothing was busy"
        assert idle.recv(1) == b"", "idle connections are closed"
        idle.close()
        poll.close()
        assert "logs flushed and closed" in node.log_path.read_text()
        node.start()
        assert "truncated" not in node.log_path.read_text()
        assert call(node, 18, 3, m.ApiVersionsRequest()).error_code == 0
