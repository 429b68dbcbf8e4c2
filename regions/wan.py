"""WAN emulation between regions that share one machine: user-space TCP proxies with latency
and bandwidth (this machine has no netem).

Theory of operation
-------------------
A region pair's link is two `WanPipe`s, one per direction. A pipe is a sans-IO model of a
serializer in front of a wire: a chunk of n bytes handed to it at time `now` starts leaving
when the serializer is free, takes n*8/bandwidth seconds to leave (serialization delay) and
reaches the far end `latency_s` later (propagation delay):

    departure = max(now, free_at) + nbytes * 8 / bandwidth_bps
    arrival   = departure + latency_s
    free_at   = departure

Every connection between the same two regions in the same direction is handed the same pipe,
so they queue behind each other and share its bandwidth, as flows on a real WAN link do; an
idle pipe (free_at in the past) sends the next chunk at once. Arrival times never decrease, so
each connection's bytes, and its EOF (a zero-byte chunk), arrive in the order they were sent.
With no bandwidth limit only the propagation delay is left.

`WanProxy` is the I/O around the pipes. Per connection and direction a reader takes chunks of
at most 64 KiB off the source socket, asks the pipe for their arrival time and queues them; a
writer sleeps until each chunk's arrival time and writes it to the destination. Backpressure:
the reader stops reading while the direction holds more than its limit of bytes that have not
been delivered, so a fast sender is slowed by TCP flow control, as the real sender would be
by its window, and memory stays bounded. Chunks pass as whole bytes objects, never per byte.

A proxy's queued EOF is passed on (half-close) once the data before it has arrived; an error
on either side closes both. If the upstream refuses, the client's connection is closed at
once. cut() models an outage: every connection is reset (RST) and new ones are reset on
arrival until heal(). close() or cancellation closes the listener, then every connection.

Not modelled: loss, jitter, and the connection handshake (a connect completes at once; its
first bytes still take the one-way latency).
"""
from __future__ import annotations

import logging
import math
import socket
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
MIN_QUEUED_BYTES = 256 * 1024
# Without a bandwidth there is no bandwidth-delay product to size the queue by; this bounds a
# single stream to about UNLIMITED_QUEUED_BYTES / latency, as a TCP window would.
UNLIMITED_QUEUED_BYTES = 8 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0
_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class WanPipe:
    """One direction of a region pair's link. Pure: the caller supplies the clock."""

    def __init__(self, latency_s: float, bandwidth_bps: float | None = None) -> None:
        if not (isinstance(latency_s, (int, float)) and math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"latency_s must be a finite number >= 0, got {latency_s!r}")
        if bandwidth_bps is not None and not (
                isinstance(bandwidth_bps, (int, float)) and math.isfinite(bandwidth_bps) and bandwidth_bps > 0):
            raise ValueError(f"bandwidth_bps must be a finite number > 0 or None, got {bandwidth_bps!r}")
        self.latency_s = float(latency_s)
        self.bandwidth_bps = None if bandwidth_bps is None else float(bandwidth_bps)
        self.free_at = -math.inf

    def schedule(self, now: float, nbytes: int) -> float:
        """Hand `nbytes` to the pipe at `now`; return when they have all reached the far end."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
        departure = max(now, self.free_at)
        if self.bandwidth_bps is not None:
            departure += nbytes * 8 / self.bandwidth_bps
        self.free_at = departure
        return departure + self.latency_s

    def queue_limit(self) -> int:
        """Undelivered bytes a proxy lets one connection hold in this direction: the bytes in
        flight (bandwidth x latency) plus a backlog, so that the serializer never runs dry."""
        if self.bandwidth_bps is None:
            return UNLIMITED_QUEUED_BYTES
        return MIN_QUEUED_BYTES + int(self.bandwidth_bps * self.latency_s / 8)

    def __repr__(self) -> str:
        bandwidth = "unlimited" if self.bandwidth_bps is None else f"{self.bandwidth_bps:g} bit/s"
        return f"WanPipe(latency_s={self.latency_s:g}, {bandwidth})"


class _Flight:
    """One direction of one connection: chunks scheduled on the pipe and not yet delivered.
    A chunk of None is the EOF."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: deque[tuple[float, bytes | None]] = deque()
        self.queued_bytes = 0
        self._changed = anyio.Event()

    def put(self, arrival: float, data: bytes | None) -> None:
        self.chunks.append((arrival, data))
        self.queued_bytes += len(data) if data else 0
        self._wake()

    def delivered(self) -> None:
        _, data = self.chunks.popleft()
        self.queued_bytes -= len(data) if data else 0
        self._wake()

    async def changed(self) -> None:
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


@dataclass(eq=False)
class _Connection:
    scope: anyio.CancelScope
    streams: list[SocketStream] = field(default_factory=list)
    flights: list[_Flight] = field(default_factory=list)

    def reset(self) -> None:
        """Drop the connection as a broken link would: both peers get a RST, not a FIN."""
        for stream in self.streams:
            _reset_on_close(stream)
        self.scope.cancel()


def _stop_reading(stream: SocketStream) -> None:
    """anyio's asyncio streams keep reading into an unbounded buffer after a receive() that
    found data waiting; pausing after every receive() leaves at most one socket read (256 KiB)
    buffered there, as trio's streams do by themselves. The next receive() resumes reading."""
    transport = getattr(stream, "_transport", None)
    if transport is not None and not transport.is_closing():
        transport.pause_reading()


def _reset_on_close(stream: SocketStream) -> None:
    try:
        stream.extra(SocketAttribute.raw_socket).setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except (OSError, anyio.TypedAttributeLookupError):
        pass  # already closed: nothing left to reset


class WanProxy:
    """Listens on (listen_host, listen_port) and forwards every connection to the upstream;
    client->upstream bytes cross `forward_pipe`, upstream->client bytes `backward_pipe`.
    Proxies carrying traffic between the same regions must share the same pipe objects."""

    def __init__(self, upstream_host: str, upstream_port: int, *, forward_pipe: WanPipe,
                 backward_pipe: WanPipe, listen_host: str = "127.0.0.1", listen_port: int = 0,
                 max_queued_bytes: int | None = None) -> None:
        if max_queued_bytes is not None and max_queued_bytes <= 0:
            raise ValueError(f"max_queued_bytes must be > 0, got {max_queued_bytes!r}")
        self.upstream = (upstream_host, upstream_port)
        self.forward_pipe = forward_pipe
        self.backward_pipe = backward_pipe
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.max_queued_bytes = max_queued_bytes
        self.port: int | None = None        # the bound port, once serve() has started
        self.is_cut = False
        self._connections: set[_Connection] = set()
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def queued_bytes(self) -> int:
        """Bytes read from one side and not yet written to the other, over all connections."""
        return sum(f.queued_bytes for c in self._connections for f in c.flights)

    async def serve(self, *, task_status: TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        """Accept and forward until close() or cancellation; reports the bound port through
        `task_status.started(port)`. Leaving closes the listener and every connection."""
        listener = await anyio.create_tcp_listener(local_host=self.listen_host, local_port=self.listen_port,
                                                   reuse_port=False)
        async with anyio.create_task_group() as connections:
            # The listener closes before the connections do: a client that sees its connection
            # closed by close() finds the port closed too.
            async with listener:
                self.port = listener.extra(SocketAttribute.local_port)
                with anyio.CancelScope() as self._scope:
                    if self._closed:
                        self._scope.cancel()
                    task_status.started(self.port)
                    await listener.serve(self._handle, task_group=connections)
            connections.cancel_scope.cancel()

    def close(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()

    def cut(self) -> None:
        """Reset every connection and every new one until heal(): a region outage."""
        self.is_cut = True
        for connection in list(self._connections):
            connection.reset()

    def heal(self) -> None:
        self.is_cut = False

    async def _handle(self, client: SocketStream) -> None:
        connection = _Connection(anyio.CancelScope(), [client])
        self._connections.add(connection)
        try:
            async with client:
                _stop_reading(client)  # until the upstream is there to take the bytes
                if self.is_cut:
                    connection.reset()
                    return
                with connection.scope:
                    await self._forward(connection, client)
        finally:
            self._connections.discard(connection)

    async def _forward(self, connection: _Connection, client: SocketStream) -> None:
        try:
            with anyio.fail_after(CONNECT_TIMEOUT_S):
                upstream = await anyio.connect_tcp(*self.upstream)
        except (OSError, TimeoutError) as exc:
            # Closing the client at once is the closest we can get to passing the refusal on.
            log.debug("upstream %s:%d unreachable: %s", *self.upstream, exc)
            return
        async with upstream:
            _stop_reading(upstream)
            connection.streams.append(upstream)
            if self.is_cut:  # cut() ran while we were connecting
                connection.reset()
                return
            async with anyio.create_task_group() as tg:
                for src, dst, pipe in ((client, upstream, self.forward_pipe),
                                       (upstream, client, self.backward_pipe)):
                    flight = _Flight(self.max_queued_bytes or pipe.queue_limit())
                    connection.flights.append(flight)
                    tg.start_soon(self._read, src, pipe, flight, tg.cancel_scope)
                    tg.start_soon(self._write, dst, flight, tg.cancel_scope)

    @staticmethod
    async def _read(src: SocketStream, pipe: WanPipe, flight: _Flight, on_error: anyio.CancelScope) -> None:
        try:
            while True:
                while flight.queued_bytes >= flight.limit:
                    await flight.changed()
                try:
                    data: bytes | None = await src.receive(CHUNK_BYTES)
                except anyio.EndOfStream:
                    data = None
                _stop_reading(src)
                flight.put(pipe.schedule(anyio.current_time(), len(data) if data else 0), data)
                if data is None:
                    return
        except _STREAM_ERRORS:
            on_error.cancel()

    @staticmethod
    async def _write(dst: SocketStream, flight: _Flight, on_error: anyio.CancelScope) -> None:
        try:
            while True:
                while not flight.chunks:
                    await flight.changed()
                arrival, data = flight.chunks[0]
                await anyio.sleep_until(arrival)
                if data is None:
                    await dst.send_eof()
                    return
                await dst.send(data)  # returns once the bytes are in the kernel (no write buffer)
                flight.delivered()
        except _STREAM_ERRORS:
            on_error.cancel()


async def run_proxies(proxies: Sequence[WanProxy], *, task_status: TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve every proxy in one task group; reports their bound ports, in order, once all
    listen. Returns when all are closed; cancellation closes them all."""
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(proxy.serve) for proxy in proxies]
        task_status.started(ports)


# ---------------------------------------------------------------------------- `regions wan`

@dataclass(frozen=True)
class ProxySpec:
    """`PORT=HOST:PORT@CLIENT>SERVER`: clients in region CLIENT reach HOST:PORT in SERVER."""
    listen_port: int
    upstream_host: str
    upstream_port: int
    client_region: str
    server_region: str


def parse_link(text: str) -> tuple[str, str, float, float | None]:
    """`A,B,LATENCY_MS,MBIT` -> (a, b, latency_s, bandwidth_bps or None); ValueError names the part."""
    parts = text.split(",")
    if len(parts) != 4 or not parts[0] or not parts[1] or parts[0] == parts[1]:
        raise ValueError(f"--link: {text!r} is not A,B,LATENCY_MS,MBIT with two different regions")
    try:
        latency_ms = float(parts[2])
    except ValueError:
        raise ValueError(f"--link: latency {parts[2]!r} in {text!r} is not a number") from None
    if not (math.isfinite(latency_ms) and 0 <= latency_ms <= 60_000):
        raise ValueError(f"--link: latency {parts[2]!r} in {text!r} is not between 0 and 60000 ms")
    bandwidth = None
    if parts[3] != "unlimited":
        try:
            mbit = float(parts[3])
        except ValueError:
            raise ValueError(f"--link: bandwidth {parts[3]!r} in {text!r} is not a number or 'unlimited'") from None
        if not (math.isfinite(mbit) and mbit > 0):
            raise ValueError(f"--link: bandwidth {parts[3]!r} in {text!r} is not > 0")
        bandwidth = mbit * 1e6
    return parts[0], parts[1], latency_ms / 1000, bandwidth


def parse_proxy(text: str) -> ProxySpec:
    try:
        listen, rest = text.split("=", 1)
        upstream, regions = rest.rsplit("@", 1)
        client, server = regions.split(">", 1)
        host, port = upstream.rsplit(":", 1)
        spec = ProxySpec(int(listen), host, int(port), client, server)
    except ValueError:
        raise ValueError(f"--proxy: {text!r} is not PORT=HOST:PORT@CLIENT>SERVER") from None
    for value in (spec.listen_port, spec.upstream_port):
        if not 1 <= value <= 65535:
            raise ValueError(f"--proxy: port {value} in {text!r} is not between 1 and 65535")
    if not (host and client and server) or client == server:
        raise ValueError(f"--proxy: {text!r} needs a host and two different regions")
    return spec


def wan_proxies(links: Sequence[tuple[str, str, float, float | None]], specs: Sequence[ProxySpec],
                listen_host: str = "0.0.0.0") -> list[WanProxy]:
    """One pipe per direction of each region pair, shared by every proxy of that pair (as the
    supervisor does); ValueError if a proxy joins two regions no link names."""
    pipes: dict[tuple[str, str], WanPipe] = {}
    for a, b, latency_s, bandwidth in links:
        pipes[(a, b)] = WanPipe(latency_s, bandwidth)
        pipes[(b, a)] = WanPipe(latency_s, bandwidth)
    proxies = []
    for spec in specs:
        forward = pipes.get((spec.client_region, spec.server_region))
        if forward is None:
            raise ValueError(f"--proxy: no --link joins {spec.client_region} and {spec.server_region}")
        proxies.append(WanProxy(spec.upstream_host, spec.upstream_port, listen_host=listen_host,
                                listen_port=spec.listen_port, forward_pipe=forward,
                                backward_pipe=pipes[(spec.server_region, spec.client_region)]))
    return proxies


async def serve_wan(specs: Sequence[ProxySpec], proxies: Sequence[WanProxy], listen_host: str = "0.0.0.0",
                    metrics_port: int | None = None) -> None:
    """Run the proxies (from wan_proxies) until SIGTERM or SIGINT; with `metrics_port`, serve
    /metrics (connections and queued bytes per direction) and /health (every proxy listening)."""
    import signal
    async with anyio.create_task_group() as tg:
        await tg.start(run_proxies, proxies)
        for spec in specs:
            log.info("WAN %s>%s: %s:%d -> %s:%d", spec.client_region, spec.server_region, listen_host,
                     spec.listen_port, spec.upstream_host, spec.upstream_port)
        if metrics_port is not None:
            from prometheus_client import CollectorRegistry

            from core.metrics_http import serve_http
            registry = CollectorRegistry()
            registry.register(_WanCollector(specs, proxies))

            def health() -> tuple[bool, str]:
                listening = sum(p.port is not None for p in proxies)
                return listening == len(proxies), f"{listening} of {len(proxies)} WAN proxies listening"
            port = serve_http(registry, metrics_port, listen_host, health)
            log.info("metrics on http://%s:%d/metrics (health on /health)", listen_host, port)
        print(f"regions wan: {len(proxies)} proxies listening", flush=True)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        for proxy in proxies:
            proxy.close()


class _WanCollector:
    """Per direction of each region pair: open connections and bytes in flight, read on scrape."""

    def __init__(self, specs: Sequence[ProxySpec], proxies: Sequence[WanProxy]):
        self.pairs = list(zip(specs, proxies))

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily
        labels = ["client_region", "server_region"]
        connections = GaugeMetricFamily("seaway_wan_connections", "Open connections through the WAN",
                                        labels=labels)
        queued = GaugeMetricFamily("seaway_wan_queued_bytes", "Bytes read from one side of the WAN and "
                                   "not yet delivered to the other", labels=labels)
        totals: dict[tuple[str, str], list[int]] = {}
        for spec, proxy in self.pairs:
            t = totals.setdefault((spec.client_region, spec.server_region), [0, 0])
            t[0] += proxy.open_connections
            t[1] += proxy.queued_bytes
        for key, (conns, nbytes) in sorted(totals.items()):
            connections.add_metric(list(key), conns)
            queued.add_metric(list(key), nbytes)
        yield connections
        yield queued
