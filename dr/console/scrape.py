"""What the console scrapes when no Prometheus is configured: the platform's /metrics endpoints
(platform.json's nodes, mirror and gateways), labelled as the compose platform's Prometheus
labels them, so that the shipped alert rules and the console's charts read the same series
either way.

Each scrape records `up` (1 answered, 0 not), as Prometheus does: a target that stops answering
is itself a series the rules watch (SeawayNodeDown). Scrapes of all targets run at once, each
bounded by a timeout and a size limit, so one hung or oversized endpoint costs its own `up`
and nothing else.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio

from .series import SeriesStore

MAX_SCRAPE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Target:
    url: str
    labels: dict[str, str] = field(default_factory=dict)


def targets_from_platform(platform: dict) -> list[Target]:
    """The scrape targets of a `regions up` platform (its platform.json)."""
    targets = []
    for cluster, c in sorted(platform.get("clusters", {}).items()):
        for url in c.get("metrics", []):
            targets.append(Target(url, {"job": "seaway-nodes", "instance": urlsplit(url).netloc,
                                        "region": c.get("region", ""), "cluster": cluster}))
    if platform.get("mirror_metrics"):
        url = platform["mirror_metrics"]
        targets.append(Target(url, {"job": "seaway-mirror", "instance": urlsplit(url).netloc}))
    for g in platform.get("gateways", []):
        if g.get("metrics"):
            targets.append(Target(g["metrics"], {"job": "seaway-gateway", "instance": urlsplit(g["metrics"]).netloc,
                                                 "region": g.get("region", ""), "pair": g.get("pair", "")}))
    return targets


class ScrapeError(Exception):
    pass


async def fetch(url: str, *, timeout_s: float = 2.0, max_bytes: int = MAX_SCRAPE_BYTES) -> str:
    """GET an http:// URL; ScrapeError for anything but a 200 answer within the limits."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ScrapeError(f"{url}: only http:// URLs are scraped")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        with anyio.fail_after(timeout_s):
            async with await anyio.connect_tcp(parts.hostname, parts.port or 80) as stream:
                await stream.send(f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\n"
                                  "Accept: text/plain\r\n\r\n".encode())
                body = bytearray()
                while True:
                    try:
                        chunk = await stream.receive(65536)
                    except anyio.EndOfStream:
                        break
                    body += chunk
                    if len(body) > max_bytes + 65536:
                        raise ScrapeError(f"{url}: answer over {max_bytes} bytes")
    except TimeoutError:
        raise ScrapeError(f"{url}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise ScrapeError(f"{url}: {exc}") from None
    except anyio.BrokenResourceError as exc:    # reset by the peer mid-answer (a process killed)
        raise ScrapeError(f"{url}: connection reset ({exc.__cause__ or exc})") from None
    head, _, payload = bytes(body).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0]
    status = status_line.split()
    if len(status) < 2 or status[1] != b"200":
        raise ScrapeError(f"{url}: answered {status_line.decode(errors='replace')!r}")
    if len(payload) > max_bytes:
        raise ScrapeError(f"{url}: answer over {max_bytes} bytes")
    return payload.decode(errors="replace")


async def scrape(targets: list[Target], store: SeriesStore, *, at: float | None = None,
                 timeout_s: float = 2.0) -> dict[str, str | None]:
    """Scrape every target at once into `store` at `at` (now by default); url -> the error
    that made its `up` 0, or None."""
    at = time.time() if at is None else at
    errors: dict[str, str | None] = {}

    async def one(target: Target) -> None:
        try:
            text = await fetch(target.url, timeout_s=timeout_s)
            store.ingest(at, text, target.labels)
        except (ScrapeError, ValueError) as exc:
            errors[target.url] = str(exc)
            store.mark_target_stale(at, target.labels)
            store.record(at, "up", target.labels, 0.0)
            return
        errors[target.url] = None
        store.record(at, "up", target.labels, 1.0)

    async with anyio.create_task_group() as tg:
        for target in targets:
            tg.start_soon(one, target)
    return errors
