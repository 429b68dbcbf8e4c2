"""The HTTP endpoint every Seaway process serves: Prometheus' /metrics and, where the process
can say whether it serves, /health (200 or 503 with a one-line reason). Container healthchecks
probe /health, so a probe costs no Python interpreter start."""
from __future__ import annotations

import threading
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

Route = Callable[[str], "tuple[int, str, bytes] | None"]
_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}


def serve_http(registry, port: int, host: str, health: Callable[[], tuple[bool, str]] | None = None,
               routes: Route | None = None) -> int:
    """/metrics from `registry` and, with `health`, /health, in a daemon thread. Returns the
    bound port. The health function runs on that thread: it must only read plain attributes.
    `routes` answers other paths (status, content type, body), or None to fall through to
    /metrics; it runs on that thread too."""
    metrics_app = make_wsgi_app(registry)

    def app(environ, start_response):
        if routes is not None:
            answer = routes(environ.get("PATH_INFO") or "/")
            if answer is not None:
                status, content_type, body = answer
                start_response(f"{status} {_REASONS.get(status, 'Error')}", [("Content-Type", content_type)])
                return [body]
        if health is not None and environ.get("PATH_INFO") == "/health":
            try:
                ok, text = health()
            except Exception as exc:  # noqa: BLE001 — a probe that cannot tell is a failed probe
                ok, text = False, f"health check failed: {exc}"
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [text.encode() + b"\n"]
        return metrics_app(environ, start_response)

    httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd.server_address[1]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):   # noqa: A002 — scrapes and probes are not news
        pass
