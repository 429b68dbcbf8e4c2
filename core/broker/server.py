"""The node process: listeners, background jobs and graceful shutdown in one task group.

`run_node` opens storage (recovering logs in a worker thread), binds every listener, reports
readiness through `task_status.started()` with the bound addresses, and serves until
`NodeHandle.shutdown()` or cancellation. Shutdown stops accepting, closes idle connections,
lets requests in progress finish for up to `shutdown.timeout.ms`, then cancels what is left
and flushes and closes every log, so the next start has nothing to recover.
"""
from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, TaskStatus

from core.config import BrokerConfig
from core.config.broker import Listener
from core.security.authorizer import AllowAll

from .broker import Broker
from .connection import Connection

log = logging.getLogger(__name__)


@dataclass
class NodeHandle:
    broker: Broker
    bound: dict[str, tuple[str, int]] = field(default_factory=dict)  # listener -> (host, port)
    cancel_scope: anyio.CancelScope | None = None
    listener_scopes: list[anyio.CancelScope] = field(default_factory=list)
    stopped: anyio.Event = field(default_factory=anyio.Event)  # set once logs are closed
    metrics_port: int | None = None

    async def shutdown(self) -> None:
        broker = self.broker
        broker.draining = True
        for scope in self.listener_scopes:
            scope.cancel()
        broker.groups.unload_all()  # parked joins and syncs answer NOT_COORDINATOR now
        for conn in list(broker.connections):
            conn.close_when_idle()
        for p in broker.all_partitions():
            p.wake_waiters()  # long polls answer now
        with anyio.move_on_after(broker.config["shutdown.timeout.ms"] / 1000):
            while broker.connections:
                await anyio.sleep(0.01)
        if broker.connections:
            log.warning("%d connections still busy after shutdown.timeout.ms; cancelling them",
                        len(broker.connections))
        self.stop()

    def stop(self) -> None:
        if self.cancel_scope is not None:
            self.cancel_scope.cancel()


async def _serve_listener(listener_cfg: Listener, tcp_listener, broker: Broker, authorizer,
                          accepting: anyio.CancelScope) -> None:
    """Accept until `accepting` is cancelled; the connections live in their own task group
    outside that scope, so that they can drain after the listener has closed."""
    async def on_connection(stream):
        try:
            peer = stream.extra(SocketAttribute.remote_address)
            peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            sock = stream.extra(SocketAttribute.raw_socket)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except Exception:  # the socket may already be gone
            peer_text = "?"
        await Connection(broker, authorizer, listener_cfg, stream, peer_text).run()

    async with anyio.create_task_group() as connections:
        async with tcp_listener:
            with accepting:
                await tcp_listener.serve(on_connection, task_group=connections)


def _fix_advertised(config: BrokerConfig, bound: dict[str, tuple[str, int]]) -> None:
    """A listener on port 0 is advertised with the port the OS chose."""
    fixed = []
    for adv in config.advertised_listeners:
        if adv.port == 0 and adv.name in bound:
            adv = Listener(adv.name, adv.host, bound[adv.name][1], adv.security_protocol)
        fixed.append(adv)
    config.advertised_listeners = fixed


async def run_node(config: BrokerConfig, *, task_status: TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
    broker = Broker(config)
    await anyio.to_thread.run_sync(broker.open)
    authorizer = AllowAll()
    handle = NodeHandle(broker)
    if config["metrics.port"] is not None:
        handle.metrics_port = broker.metrics.serve(config["metrics.port"], config.listeners[0].host or "0.0.0.0")
        log.info("metrics on http://%s:%d/metrics", config.listeners[0].host or "0.0.0.0", handle.metrics_port)
    try:
        async with anyio.create_task_group() as tg:
            handle.cancel_scope = tg.cancel_scope
            for lc in config.listeners:
                tcp = await anyio.create_tcp_listener(local_host=lc.host or None, local_port=lc.port,
                                                      reuse_port=False)
                addr = tcp.extra(SocketAttribute.local_address)
                handle.bound[lc.name] = (addr[0], addr[1])
                scope = anyio.CancelScope()
                handle.listener_scopes.append(scope)
                tg.start_soon(_serve_listener, lc, tcp, broker, authorizer, scope)
            _fix_advertised(config, handle.bound)
            tg.start_soon(broker.run_flush_scheduler)
            tg.start_soon(broker.run_retention)
            tg.start_soon(broker.run_producer_snapshots)
            tg.start_soon(broker.run_cleaner)
            tg.start_soon(broker.groups.run_writer)
            tg.start_soon(broker.groups.run_timers)
            tg.start_soon(broker.groups.run_expiry)
            log.info("node %d of cluster %s listening on %s", broker.node_id, broker.cluster_id,
                     ", ".join(f"{n}://{h}:{p}" for n, (h, p) in handle.bound.items()))
            task_status.started(handle)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(broker.close)
            log.info("node %d stopped; logs flushed and closed", broker.node_id)
            handle.stopped.set()
