"""The quorum keeps its deadlines while the data plane is saturated (core/raft/thread.py).

Every node's main loop (client listeners, replication, groups) is made to spin in Python for
5 s out of every 6 (the SEAWAY_FAULT_BUSY_DATA_PLANE hook, core/node/faults.py): longer than
the quorum's fetch timeout (2 s) and than broker.session.timeout.ms (set to 4 s here). With the
quorum, the controller and the broker heartbeats on the main loop, this cluster elects a new
controller and fences its brokers; on the raft thread it must do neither, and the controller
listener must keep answering within a second while the broker listeners visibly stall.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest
from confluent_kafka.admin import NewTopic

from core.protocol import messages as m
from tests.support.cluster import KRaftCluster
from tests.support.wire import frame, read_frame

pytestmark = pytest.mark.integration

BUSY_MS, PERIOD_MS = 5000, 6000
WINDOW_S = 30


def _slowest_broker_answer(port: int, stop: threading.Event, seen: list[float]) -> None:
    """ApiVersions on a broker listener, again and again: how long the data plane kept it."""
    body = m.API[18].request.encode(0, m.ApiVersionsRequest())
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        while not stop.is_set():
            start = time.monotonic()
            sock.sendall(frame(18, 0, body))
            assert read_frame(sock) is not None
            seen.append(time.monotonic() - start)
            time.sleep(0.1)


def test_a_spinning_data_plane_costs_no_election_and_no_broker_its_session(tmp_path, monkeypatch):
    plan = tmp_path / "busy-data-plane"
    monkeypatch.setenv("SEAWAY_FAULT_BUSY_DATA_PLANE", str(plan))
    overrides = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"}
    with KRaftCluster(tmp_path / "cluster", combined=3, overrides=overrides) as cluster:
        admin = cluster.admin_when_ready()
        _, epoch = cluster.wait_for_leader()
        admin.create_topics([NewTopic("busy", 6, 3)])["busy"].result(60)
        marks = {i: n.log_path.stat().st_size for i, n in cluster.nodes.items()}

        plan.write_text(f"{BUSY_MS} {PERIOD_MS}")
        stop, broker_answers = threading.Event(), []
        prober = threading.Thread(target=_slowest_broker_answer,
                                  args=(cluster.nodes[1].port, stop, broker_answers), daemon=True)
        prober.start()
        controller_answers, epochs = [], set()
        deadline = time.monotonic() + WINDOW_S
        try:
            while time.monotonic() < deadline:
                start = time.monotonic()
                d = cluster.describe(timeout=10)
                controller_answers.append(time.monotonic() - start)
                assert d is not None and d.leader_id >= 0, "the quorum lost its leader"
                epochs.add(d.leader_epoch)
                time.sleep(0.2)
        finally:
            plan.unlink()
            stop.set()
            prober.join(timeout=30)

        logs = {i: n.log_path.read_text(errors="replace")[marks[i]:] for i, n in cluster.nodes.items()}
        # The fault was real: every node spun, and a broker listener waited out a spin.
        assert all("the data plane's loop spins" in text for text in logs.values())
        assert max(broker_answers) > 2.0, f"the broker listener never stalled: {max(broker_answers):.2f} s"
        # ... and the quorum did not notice.
        assert epochs == {epoch}, f"elections while the data plane spun: epochs {sorted(epochs)}"
        assert max(controller_answers) < 1.5, \
            f"DescribeQuorum took {max(controller_answers):.2f} s while the data plane spun"
        for i, text in logs.items():
            assert "sessions timed out" not in text, f"node {i} fenced brokers:\n{text[-3000:]}"
            assert "was fenced by the controller" not in text, f"node {i} was fenced:\n{text[-3000:]}"
        # The cluster serves again once the spinning stops.
        admin.create_topics([NewTopic("after", 3, 3)])["after"].result(60)
