"""What `dr status` shows of a pair's gateways (dr/gateway_probe.py): read from each gateway's
own /metrics (the real GatewayMetrics here), one line each, and never part of readiness."""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest
from prometheus_client import generate_latest

from core.gateway.metrics import GatewayMetrics
from dr.config import GatewayAccess
from dr.gateway_probe import describe, probe_gateways, served

PAIR = "eu-1~us-1"


def metrics_text(serving: str = "eu-1", epoch: int = 0, stale: bool = False, moving: bool = False,
                 pair: str = PAIR) -> str:
    m = GatewayMetrics(pair)
    m.serve("eu-1")
    m.serve(serving)
    m.epoch.set(epoch)
    m.decision_stale.set(1 if stale else 0)
    m.moving.set(1 if moving else 0)
    return generate_latest(m.registry).decode()


def seen(**fields) -> dict:
    return {"region": "eu", "bootstrap": "127.0.0.1:39092", "metrics_url": "http://127.0.0.1:39190/metrics",
            "reachable": True, "error": None, **fields}


def test_what_a_gateway_serves_comes_from_its_metrics():
    assert served(metrics_text(), PAIR) == {"serving": "eu-1", "epoch": 0, "stale": False, "moving": False}
    assert served(metrics_text("us-1", 3, stale=True, moving=True), PAIR) == {
        "serving": "us-1", "epoch": 3, "stale": True, "moving": True}
    assert served(metrics_text(pair="a~b"), PAIR) == {"error": "it serves no DR pair named eu-1~us-1"}


@pytest.mark.parametrize("fields, active, line", [
    ({"serving": "eu-1", "epoch": 3, "stale": False, "moving": False}, "eu-1",
     "gateway eu 127.0.0.1:39092: serving eu-1 (DR epoch 3)"),
    ({"serving": "eu-1", "epoch": 0, "stale": False, "moving": False}, None,
     "gateway eu 127.0.0.1:39092: serving eu-1 (no DR decision yet)"),
    ({"serving": "us-1", "epoch": 4, "stale": False, "moving": True}, "us-1",
     "gateway eu 127.0.0.1:39092: serving us-1 (DR epoch 4), moving its clients there"),
    ({"serving": "eu-1", "epoch": 3, "stale": True, "moving": False}, "us-1",
     "gateway eu 127.0.0.1:39092: serving eu-1, the last decision it learnt (DR epoch 3; it cannot read the decision)"),
    ({"serving": "eu-1", "epoch": 3, "stale": False, "moving": False}, "us-1",
     "gateway eu 127.0.0.1:39092: serving eu-1 (DR epoch 3); the topics are active in us-1"),
    ({"reachable": False, "serving": None, "error": "[Errno 111] Connection refused"}, "eu-1",
     "gateway eu 127.0.0.1:39092: unreachable ([Errno 111] Connection refused)"),
])
def test_one_line_per_gateway(fields, active, line):
    assert describe(seen(**fields), active) == line


class _Metrics(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):   # noqa: N802 — http.server's name
        self.send_response(200 if self.path == "/metrics" else 404)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_gateways_are_asked_over_http_and_one_that_does_not_answer_is_unreachable():
    _Metrics.body = metrics_text("us-1", 2).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            nobody = closed.getsockname()[1]        # bound, never listening: refused
            gateways = [GatewayAccess(region="eu", bootstrap="127.0.0.1:1",
                                      metrics=f"http://127.0.0.1:{server.server_port}/metrics"),
                        GatewayAccess(region="us", bootstrap="127.0.0.1:2", metrics=f"http://127.0.0.1:{nobody}/metrics"),
                        GatewayAccess(region="ap", bootstrap="127.0.0.1:3",
                                      metrics=f"http://127.0.0.1:{server.server_port}/elsewhere")]
            found = anyio.run(probe_gateways, gateways, PAIR)
    finally:
        server.shutdown()
        server.server_close()
    assert [(g["region"], g["reachable"], g["serving"], g["epoch"]) for g in found] == [
        ("eu", True, "us-1", 2), ("us", False, None, None), ("ap", False, None, None)]
    assert found[0]["metrics_url"].endswith("/metrics") and found[0]["bootstrap"] == "127.0.0.1:1"
    assert "refused" in found[1]["error"] and found[2]["error"] == "HTTP 404 Not Found"


def test_dr_status_shows_gateways_without_them_counting_for_readiness():
    from dr.cli import render_status
    pair = {"pair": PAIR, "active_region": "eu", "active_cluster": "eu-1", "active_for": {"eu": 1, "us": 0},
            "unsettled": [], "ready": True, "clusters": {},
            "rpo_at_risk": {"records": 0, "bytes": 0, "bytes_estimated": False, "seconds": 0.0},
            "checkpoints": {"age_seconds": None, "groups": [], "errors": {}}, "lag": [], "checks": [],
            "last_failover": None,
            "gateways": [seen(reachable=False, serving=None, error="timed out")]}
    text = render_status([pair])
    assert "READY to fail over" in text and "  gateway eu 127.0.0.1:39092: unreachable (timed out)" in text
