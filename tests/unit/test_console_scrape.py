"""dr/console/scrape.py: what the console scrapes of a `regions up` platform and how, over
real sockets: real /metrics endpoints (core/metrics_http.py), one that is down, one that
answers too much, and one that never answers. Each costs only its own `up`."""
from __future__ import annotations

import socket
import threading

import anyio
from prometheus_client import CollectorRegistry, Counter

from core.metrics_http import serve_http
from dr.console.scrape import Target, scrape, targets_from_platform
from dr.console.series import SeriesStore

PLATFORM = {
    "clusters": {"eu-west-1": {"region": "eu-west", "metrics": ["http://127.0.0.1:19094/metrics",
                                                               "http://127.0.0.1:19194/metrics"]}},
    "mirror_metrics": "http://127.0.0.1:19500/metrics",
    "gateways": [{"pair": "eu-west-1~us-east-1", "region": "eu-west", "metrics": "http://127.0.0.1:31190/metrics"}],
}


def test_a_platforms_targets_are_labelled_as_the_compose_prometheus_labels_them():
    targets = targets_from_platform(PLATFORM)
    assert [(t.url.split(":")[2], t.labels) for t in targets] == [
        ("19094/metrics", {"job": "seaway-nodes", "instance": "127.0.0.1:19094", "region": "eu-west",
                           "cluster": "eu-west-1"}),
        ("19194/metrics", {"job": "seaway-nodes", "instance": "127.0.0.1:19194", "region": "eu-west",
                           "cluster": "eu-west-1"}),
        ("19500/metrics", {"job": "seaway-mirror", "instance": "127.0.0.1:19500"}),
        ("31190/metrics", {"job": "seaway-gateway", "instance": "127.0.0.1:31190", "region": "eu-west",
                           "pair": "eu-west-1~us-east-1"}),
    ]
    assert targets_from_platform({}) == []


def serve_once(answer: bytes) -> int:
    """A listener that answers every connection with `answer` (None: never answers)."""
    server = socket.create_server(("127.0.0.1", 0))

    def run():
        while True:
            conn, _ = server.accept()
            conn.recv(65536)
            if answer:
                conn.sendall(answer)
                conn.close()
    threading.Thread(target=run, daemon=True).start()
    return server.getsockname()[1]


def test_each_target_costs_only_its_own_up():
    registry = CollectorRegistry()
    Counter("seaway_requests", "Requests", ["api"], registry=registry).labels("Produce").inc(3)
    good = serve_http(registry, 0, "127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = s.getsockname()[1]
    huge = serve_once(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * (17 * 1024 * 1024))
    silent = serve_once(b"")
    refused = serve_once(b"HTTP/1.0 404 Not Found\r\n\r\nno")
    targets = [Target(f"http://127.0.0.1:{port}/metrics", {"job": "j", "instance": name})
               for name, port in (("good", good), ("down", down), ("huge", huge), ("silent", silent),
                                  ("notfound", refused))]
    store = SeriesStore({"seaway_requests"})
    errors = anyio.run(lambda: scrape(targets, store, at=100.0, timeout_s=1.0))
    up = {s.label("instance"): s.points[-1][1] for s in store.points("up")}
    assert up == {"good": 1.0, "down": 0.0, "huge": 0.0, "silent": 0.0, "notfound": 0.0}
    assert errors[targets[0].url] is None
    assert "over 16777216 bytes" in errors[targets[2].url]
    assert "no answer within 1 s" in errors[targets[3].url]
    assert "404" in errors[targets[4].url]
    [requests] = store.points("seaway_requests_total")
    assert requests.points == [(100.0, 3.0)] and requests.label("api") == "Produce"


def serve_reset() -> int:
    """An endpoint that accepts, reads the request and resets the connection (RST): a process
    killed in the middle of answering."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def run():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()
        listener.close()
    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1]


def test_a_connection_reset_mid_answer_is_that_targets_failed_scrape_not_the_consoles():
    registry = CollectorRegistry()
    good = serve_http(registry, 0, "127.0.0.1")
    targets = [Target(f"http://127.0.0.1:{serve_reset()}/metrics", {"instance": "reset"}),
               Target(f"http://127.0.0.1:{good}/metrics", {"instance": "good"})]
    store = SeriesStore(set())
    errors = anyio.run(lambda: scrape(targets, store, at=1.0, timeout_s=2.0))
    assert "connection reset" in errors[targets[0].url] and errors[targets[1].url] is None
    assert {s.label("instance"): s.points[-1][1] for s in store.points("up")} == {"reset": 0.0, "good": 1.0}
