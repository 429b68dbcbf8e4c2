"""The HTTP endpoint every Seaway process serves: Prometheus' /metrics and, where the process
can say whether it serves, /health (200 or 503 with a one-line reason). Container healthchecks
probe /health, so a probe costs no Python interpreter start. A process with more to serve (the
DR controller's API and console) answers other requests through `routes`."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

log = logging.getLogger("seaway.http")

MAX_BODY_BYTES = 64 * 1024      # what a route may be sent: JSON forms, never uploads
_REASONS = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 303: "See Other", 304: "Not Modified",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large", 415: "Unsupported Media Type",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]               # the first value of each parameter
    headers: dict[str, str]             # lower-case names
    body: bytes = b""
    remote: str = ""

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None


@dataclass
class Response:
    status: int
    content_type: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


Route = Callable[[Request], "Response | tuple[int, str, bytes] | None"]


def serve_http(registry, port: int, host: str, health: Callable[[], tuple[bool, str]] | None = None,
               routes: Route | None = None) -> int:
    """/metrics from `registry` and, with `health`, /health, in a daemon thread. Returns the
    bound port. The health function runs on that thread: it must only read plain attributes.
    `routes` answers other requests (a Response, or (status, content type, body)), or None
    to fall through to /metrics; it runs on that thread too, one thread per request."""
    metrics_app = make_wsgi_app(registry)

    def app(environ, start_response):
        if routes is not None:
            request = _request(environ)
            if isinstance(request, Response):
                answer: Response | tuple[int, str, bytes] | None = request
            else:
                try:
                    answer = routes(request)
                except Exception:   # noqa: BLE001 — one bad request must not end the server's thread quietly
                    log.exception("%s %s failed", request.method, request.path)
                    answer = Response(500, "application/json", b'{"error": "internal error; see the log"}\n')
            if answer is not None:
                if isinstance(answer, tuple):
                    answer = Response(*answer)
                start_response(f"{answer.status} {_REASONS.get(answer.status, 'Error')}",
                               [("Content-Type", answer.content_type), *answer.headers])
                return [answer.body]
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


def _request(environ) -> Request | Response:
    headers = {key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = environ["CONTENT_TYPE"]
    body = b""
    method = environ.get("REQUEST_METHOD", "GET")
    if method not in ("GET", "HEAD"):
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return Response(400, "application/json", b'{"error": "Content-Length is not a number"}\n')
        if length > MAX_BODY_BYTES:     # checked before reading: no allocation for what is refused
            return Response(413, "application/json",
                            f'{{"error": "the body is over {MAX_BODY_BYTES} bytes"}}\n'.encode())
        body = environ["wsgi.input"].read(length) if length > 0 else b""
    query = {key: values[0] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    return Request(method, environ.get("PATH_INFO") or "/", query, headers, body, environ.get("REMOTE_ADDR", ""))


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):   # noqa: A002 — scrapes and probes are not news
        pass
