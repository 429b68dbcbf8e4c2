"""A node says whether it serves: GET /health on its metrics port (what container healthchecks
probe) and `seaway health` over the Kafka protocol. Both must say no while the node cannot
serve, not merely while its port is closed."""
from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.support.node import REPO, SeawayNode, free_port

pytestmark = pytest.mark.integration


def get_health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def seaway(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_a_serving_node_is_healthy_and_says_why(tmp_path):
    metrics = free_port()
    with SeawayNode(tmp_path, {"metrics.port": str(metrics)}) as node:
        status, text = get_health(metrics)
        # A one-node cluster: its own quorum's leader, and its broker registered with itself.
        assert (status, text) == (200, "healthy: quorum leader 1; broker 1 registered (epoch 2), unfenced and serving")
        ok = seaway("health", "--bootstrap-server", node.bootstrap, "--node-id", "1")
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith("healthy: broker 1 registered and unfenced")
        # The metrics are still served beside it.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as response:
            assert b"seaway_requests_total" in response.read()

        wrong = seaway("health", "--bootstrap-server", node.bootstrap, "--node-id", "9")
        assert wrong.returncode == 1
        assert wrong.stderr.strip() == ("seaway: error: unhealthy: broker 9 is not registered and "
                                        "unfenced (the cluster has [1])")


def test_health_without_an_address_is_a_usage_error_and_a_closed_port_is_unhealthy():
    usage = seaway("health")
    assert usage.returncode == 2
    assert usage.stderr.strip() == "seaway: error: health: give --bootstrap-server, --controller or both"
    closed = seaway("health", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "3")
    assert closed.returncode == 1
    assert closed.stderr.startswith("seaway: error: unhealthy: 127.0.0.1:")
    assert "Traceback" not in closed.stderr
    two = seaway("health", "--bootstrap-server", "127.0.0.1:1,127.0.0.1:2")
    assert two.returncode == 2 and "is not one HOST:PORT" in two.stderr


def test_a_voter_whose_quorum_has_no_leader_is_unhealthy(tmp_path):
    """One voter of three started alone can never elect a leader: its port is open, it answers
    requests, and it must still report that it does not serve."""
    metrics, controller, client = free_port(), free_port(), free_port()
    voters = f"1@127.0.0.1:{controller},2@127.0.0.1:{free_port()},3@127.0.0.1:{free_port()}"
    node = SeawayNode(tmp_path, {
        "process.roles": "broker,controller", "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
        "metrics.port": str(metrics)}, port=client)
    formatted = seaway("storage", "format", "--config", str(node.config_path),
                       "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg")
    assert formatted.returncode == 0, formatted.stderr
    with node:
        status, text = get_health(metrics)
        assert status == 503
        assert text == "node 1: the metadata quorum has no leader"
        answer = seaway("health", "--controller", f"127.0.0.1:{controller}")
        assert answer.returncode == 1
        assert "the quorum has no leader" in answer.stderr
