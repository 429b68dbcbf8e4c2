"""The node process: listeners, background jobs and graceful shutdown in one task group.

Every node keeps its metadata the same way: a KRaft quorum and its log. A node configured with
`controller.quorum.voters` joins that quorum (as a voter if it is a controller, an observer if it
is only a broker); a node without voters is a one-node cluster, the only voter of its own
quorum, reached over a loopback controller listener (BrokerConfig.single_node). Its voter
campaigns as it starts, so such a node serves within moments.

`run_node` opens storage (recovering logs in a worker thread), binds every listener, reports
readiness through `task_status.started()` with the bound addresses, and serves until
`NodeHandle.shutdown()` or cancellation. Shutdown stops accepting, closes idle connections,
lets requests in progress finish for up to `shutdown.timeout.ms`, then cancels what is left
and flushes and closes every log, so the next start has nothing to recover.
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Coroutine

import anyio
from anyio.abc import SocketAttribute, TaskGroup, TaskStatus

from core.broker.broker import Broker
from core.broker.connection import Connection
from core.broker.controller_channel import KRaftLink
from core.broker.metrics import BrokerMetrics
from core.config import BrokerConfig
from core.config.broker import Listener
from core.config.defs import ConfigError
from core.controller.acls import binding_of
from core.controller.image import SCRAM_MECHANISM_TYPES
from core.client.tls import TlsSettings
from core.broker.context import NULL_AUDIT
from core.security.audit import AuditEvent, AuditLog, now_ms
from core.security.authorizer import ANONYMOUS, AllowAll, Authorizer
from core.security.standard_authorizer import STANDARD_AUTHORIZER, StandardAuthorizer, parse_super_users
from core.security.sasl import SUPPORTED_MECHANISMS, SaslConfig, SaslSession, parse_jaas, plain_users
from core.security.scram import ScramCredential
from core.security.tls import HandshakeFailed, TlsListener

from . import faults, legacy_catalog
from .bootstrap import read_bootstrap
from .controller_apis import CONTROLLER_HANDLERS
from .lifecycle import BrokerLifecycle
from .quorum import ControllerServer, QuorumMember
from .storage import META_FILE, ensure_meta

log = logging.getLogger(__name__)


@dataclass
class NodeHandle:
    broker: Broker | None                     # the broker role (None on a controller-only node)
    config: BrokerConfig
    controller: ControllerServer | None = None   # the controller role
    quorum: QuorumMember | None = None        # this node's raft driver and image
    lifecycle: BrokerLifecycle | None = None  # the broker role: registration and heartbeats
    bound: dict[str, tuple[str, int]] = field(default_factory=dict)  # listener -> (host, port)
    cancel_scope: anyio.CancelScope | None = None
    listener_scopes: list[anyio.CancelScope] = field(default_factory=list)
    controller_scopes: list[anyio.CancelScope] = field(default_factory=list)   # on the raft thread
    stopped: anyio.Event = field(default_factory=anyio.Event)  # set once logs are closed
    serving: anyio.Event = field(default_factory=anyio.Event)  # set once the broker role serves clients
    metrics_port: int | None = None
    draining: bool = False

    def _servers(self) -> list:
        return [s for s in (self.broker, self.controller) if s is not None]

    async def shutdown(self) -> None:
        self.draining = True
        if self.broker is not None:
            self.broker.draining = True
        for scope in self.listener_scopes:
            scope.cancel()
        if self.lifecycle is not None:
            # Controlled shutdown: the controller moves our leaderships away first. Our own
            # controller role still serves meanwhile: on a one-node cluster (or wherever this
            # node is the active controller) it is the one that must grant it.
            granted = await self.lifecycle.shutdown(timeout_s=self.config["shutdown.timeout.ms"] / 2000)
            log.info("controlled shutdown %s", "granted" if granted else "not granted in time; stopping anyway")
        assert self.quorum is not None   # every node is in a quorum (run_node)
        on_raft_thread = self.quorum.driver.call_soon
        if self.controller is not None:
            self.controller.draining = True
        for scope in self.controller_scopes:
            on_raft_thread(scope.cancel)
        broker = self.broker
        if broker is not None:
            broker.groups.unload_all()  # parked joins and syncs answer NOT_COORDINATOR now
            broker.transactions.unload_all()
            for p in broker.all_partitions():
                p.wake_waiters()  # long polls answer now
        with anyio.move_on_after(self.config["shutdown.timeout.ms"] / 1000):
            async with anyio.create_task_group() as draining:
                if broker is not None:
                    broker.connections.close_when_idle()
                    draining.start_soon(broker.connections.drained)
                if self.controller is not None:
                    connections = self.controller.connections   # on the raft thread's loop
                    on_raft_thread(connections.close_when_idle)
                    draining.start_soon(self.quorum.driver.call, connections.drained)
        busy = sum(len(server.connections) for server in self._servers())
        if busy:
            log.warning("%d connections still busy after shutdown.timeout.ms; cancelling them", busy)
        if self.quorum is not None:
            # A leader hands over before it goes, so the others need not wait out a timeout.
            await self.quorum.driver.resign_and_flush(timeout_s=1.0)
        self.stop()

    def stop(self) -> None:
        if self.cancel_scope is not None:
            self.cancel_scope.cancel()

    def health(self) -> tuple[bool, str]:
        """Does this node serve? (ok, one line). Read on the metrics thread: plain attributes only."""
        if self.draining:
            return False, f"node {self.config.node_id} is shutting down"
        seen = []
        if self.quorum is not None:
            leader = self.quorum.leader_id
            if leader is None or leader < 0:
                return False, f"node {self.config.node_id}: the metadata quorum has no leader"
            seen.append(f"quorum leader {leader}")
        if self.lifecycle is not None:
            if self.lifecycle.broker_epoch < 0:
                return False, f"broker {self.config.node_id} is not registered with the controller"
            if self.lifecycle.fenced:
                return False, f"broker {self.config.node_id} is fenced"
            if not self.lifecycle.serving:
                return False, f"broker {self.config.node_id} is catching up with the metadata log"
            seen.append(f"broker {self.config.node_id} registered (epoch {self.lifecycle.broker_epoch}), "
                        f"unfenced and serving")
        return True, "healthy: " + "; ".join(seen)


async def _serve_listener(listener_cfg: Listener, tcp_listener, server, authorizer,
                          accepting: anyio.CancelScope, handlers=None, controller=None,
                          tls: TlsListener | None = None, sasl: SaslConfig | None = None,
                          audit=NULL_AUDIT) -> None:
    """Accept until `accepting` is cancelled; the connections live in their own task group
    outside that scope, so that they can drain after the listener has closed. On a TLS
    listener each connection first completes its handshake, which names its principal."""
    async def on_connection(stream):
        try:
            peer = stream.extra(SocketAttribute.remote_address)
            peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            sock = stream.extra(SocketAttribute.raw_socket)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except Exception:  # the socket may already be gone
            peer_text = "?"
        principal = ANONYMOUS
        if tls is not None:
            try:
                stream, principal = await tls.accept(stream)
            except HandshakeFailed as exc:
                server.metrics.bad_requests.labels("tls").inc()
                log.warning("%s on %s: %s; closing connection", peer_text, listener_cfg.name, exc)
                if audit.enabled:
                    audit.record(AuditEvent(now_ms(), "authentication", ANONYMOUS, peer_text, listener_cfg.name,
                                            "", "", "", "TLS", "FAILED", str(exc)))
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
                return
            if audit.enabled and principal != ANONYMOUS:   # a client certificate named who it is
                audit.record(AuditEvent(now_ms(), "authentication", principal, peer_text, listener_cfg.name,
                                        "", "", "", "TLS", "SUCCEEDED"))
        await Connection(server, authorizer, listener_cfg, stream, peer_text, handlers=handlers,
                         controller=controller, principal=principal,
                         sasl=SaslSession(sasl) if sasl is not None else None, audit=audit).run()

    async with anyio.create_task_group() as connections:
        async with tcp_listener:
            with accepting:
                await tcp_listener.serve(on_connection, task_group=connections)


def _tls_listeners(config: BrokerConfig) -> dict[str, TlsListener]:
    """Each SSL and SASL_SSL listener's TLS, built (keystore read, truststore loaded) before
    anything starts, so that a listener that cannot serve stops the node with one line naming
    the setting. No listener ever serves a protocol other than the one it is mapped to."""
    found = {}
    for listener in config.listeners:
        if listener.security_protocol in ("SSL", "SASL_SSL"):
            found[listener.name] = TlsListener.from_settings(TlsSettings(*config.tls_values(listener.name)))
    # And the node's own connections to other nodes, so that their settings fail here too.
    config.controller_client_tls, config.controller_client_sasl
    if "broker" in config.roles and not config.single_node:   # a one-node cluster has no peer to fetch from
        config.client_tls(config.inter_broker_listener_name)
        config.client_sasl(config.inter_broker_listener_name)
    return found


def _sasl_listeners(config: BrokerConfig, scram_secret: bytes) -> dict[str, SaslConfig]:
    """Each SASL listener's mechanisms and PLAIN users, checked before anything starts."""
    found = {}
    for listener in config.listeners:
        if not listener.security_protocol.startswith("SASL_"):
            continue
        mechanisms, jaas, where, max_size = config.sasl_values(listener.name)
        for name in mechanisms:
            if name not in SUPPORTED_MECHANISMS:
                raise ConfigError(f"sasl.enabled.mechanisms: {name} (listener {listener.name}) is not "
                                  f"supported; use {', '.join(SUPPORTED_MECHANISMS)}")
        if not mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms: listener {listener.name} is "
                              f"{listener.security_protocol} but enables no mechanism")
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            if not jaas:
                raise ConfigError(f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config: PLAIN is "
                                  f"enabled on listener {listener.name} but no users are configured "
                                  f"(PlainLoginModule required user_<name>=\"<password>\";)")
            users = plain_users(parse_jaas(jaas, where))
            if not users:
                raise ConfigError(f"{where}: PLAIN needs at least one user_<name>=\"<password>\" option")
        found[listener.name] = SaslConfig(tuple(mechanisms), users, scram_secret=scram_secret,
                                          max_receive_size=max_size, max_reauth_ms=config.reauth_ms(listener.name))
    return found


def _authorizer(config: BrokerConfig, quorum: QuorumMember) -> Authorizer:
    """AllowAll, or with authorizer.class.name the ACL authorizer over this node's image."""
    name = config["authorizer.class.name"]
    if not name:
        return AllowAll()
    if name not in STANDARD_AUTHORIZER:
        raise ConfigError(f"authorizer.class.name: {name} is not {STANDARD_AUTHORIZER[0]}")
    super_users = parse_super_users(config["super.users"])
    if config.internal_principal is not None:
        super_users |= {config.internal_principal}
    return StandardAuthorizer(lambda: quorum.loader.image.acls,
                              super_users=super_users,
                              allow_if_no_acl=config["allow.everyone.if.no.acl.found"], binding_of=binding_of)


def _audit_log(config: BrokerConfig):
    """The audit log of audit.log.file, or the one that records nothing."""
    path = config["audit.log.file"]
    if not path:
        return NULL_AUDIT
    log.info("audit log: %s (rotates at %d bytes, %d kept)", path, config["audit.log.max.bytes"],
             config["audit.log.backups"])
    return AuditLog(path, max_bytes=config["audit.log.max.bytes"], backups=config["audit.log.backups"])


_SCRAM_TYPES = {name: code for code, name in SCRAM_MECHANISM_TYPES.items()}


def _scram_credential(quorum: QuorumMember, mechanism: str, user: str) -> ScramCredential | None:
    """A user's SCRAM credential from the metadata this node has loaded (the image is
    immutable and swapped whole, so reading it from either loop is safe)."""
    entry = quorum.loader.image.scram.get((user, _SCRAM_TYPES[mechanism]))
    if entry is None:
        return None
    return ScramCredential(entry.salt, entry.stored_key, entry.server_key, entry.iterations)


def _fix_advertised(config: BrokerConfig, bound: dict[str, tuple[str, int]]) -> None:
    """A listener on port 0 is advertised with the port the OS chose; so is a one-node
    cluster's own voter, whose controller listener always takes the port the OS gives."""
    if config.single_node:
        config.quorum_voters[config.node_id] = bound[config.controller_listener_names[0]]
    fixed = []
    for adv in config.advertised_listeners:
        if adv.port == 0 and adv.name in bound:
            adv = Listener(adv.name, adv.host, bound[adv.name][1], adv.security_protocol)
        fixed.append(adv)
    config.advertised_listeners = fixed


# A listener's accept loop, ready to start in a task group.
_Serve = Callable[[], Coroutine[Any, Any, None]]


async def run_node(config: BrokerConfig, *, clock=None,
                   task_status: TaskStatus[NodeHandle] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run the roles of `process.roles` (both, on a one-node cluster). `clock` (epoch ms) is
    the broker's, for tests that move time by hand (retention, offset expiry)."""
    tls = _tls_listeners(config)   # first: a listener that cannot serve stops the node here
    sasl = _sasl_listeners(config, os.urandom(32))
    metrics = BrokerMetrics()
    broker: Broker | None = None
    controller: ControllerServer | None = None
    lifecycle: BrokerLifecycle | None = None
    kraft: KRaftLink | None = None
    cluster_id = await anyio.to_thread.run_sync(_storage_identity, config)
    bootstrap = await anyio.to_thread.run_sync(legacy_catalog.bootstrap_records, config)
    bootstrap += await anyio.to_thread.run_sync(read_bootstrap, config.metadata_log_dir)
    quorum = QuorumMember(config, cluster_id)
    for sasl_config in sasl.values():
        sasl_config.scram_lookup = partial(_scram_credential, quorum)
    if "controller" in config.roles:
        controller = ControllerServer(config, quorum, metrics, bootstrap=bootstrap)
    metrics.watch_quorum(quorum, controller.runner.controller if controller is not None else None)
    if "broker" in config.roles:
        broker = Broker(config, metrics=metrics, **({"clock": clock} if clock is not None else {}))
        broker.cluster_id = cluster_id
        await anyio.to_thread.run_sync(broker.open)
        lifecycle = BrokerLifecycle(config, quorum, listeners=config.advertised_listeners)
        broker.kraft = kraft = KRaftLink(broker, quorum, lifecycle)
    authorizer = _authorizer(config, quorum)
    audit = _audit_log(config)
    handle = NodeHandle(broker, config=config, controller=controller, quorum=quorum, lifecycle=lifecycle)
    if config["metrics.port"] is not None:
        handle.metrics_port = metrics.serve(config["metrics.port"], config.listeners[0].host or "0.0.0.0",
                                            health=handle.health)
        log.info("metrics on http://%s:%d/metrics", config.listeners[0].host or "0.0.0.0", handle.metrics_port)
    try:
        async with anyio.create_task_group() as tg:
            handle.cancel_scope = tg.cancel_scope
            # The raft thread: the driver, and below the controller role and the broker's
            # heartbeats, which must keep their deadlines whatever this loop is doing.
            raft_thread = quorum.driver
            await tg.start(raft_thread.run)
            tg.start_soon(quorum.run_snapshots)
            if controller is not None:
                raft_thread.start_soon(controller.runner.run)
            broker_listeners: list[_Serve] = []
            for lc in config.listeners:
                scope = anyio.CancelScope()
                controller_listener = config.is_controller_listener(lc.name)
                if controller_listener:
                    if controller is None:
                        continue
                    # Made on the raft thread: an anyio listener belongs to the loop it was made on.
                    tcp = await raft_thread.call(anyio.create_tcp_listener, local_host=lc.host or None,
                                                 local_port=lc.port, reuse_port=False)
                    handle.controller_scopes.append(scope)
                    serve = partial(_serve_listener, lc, tcp, controller, authorizer, scope,
                                    CONTROLLER_HANDLERS, controller, tls.get(lc.name), sasl.get(lc.name), audit)
                else:
                    tcp = await anyio.create_tcp_listener(local_host=lc.host or None, local_port=lc.port,
                                                          reuse_port=False)
                    handle.listener_scopes.append(scope)
                    serve = partial(_serve_listener, lc, tcp, broker, authorizer, scope, None, controller,
                                    tls.get(lc.name), sasl.get(lc.name), audit)
                addr = tcp.extra(SocketAttribute.local_address)
                assert isinstance(addr, tuple)   # a TCP listener's (host, port, ...)
                handle.bound[lc.name] = (addr[0], addr[1])
                if controller_listener:
                    raft_thread.start_soon(serve)
                else:
                    broker_listeners.append(serve)
            _fix_advertised(config, handle.bound)
            if broker is not None:
                assert lifecycle is not None and kraft is not None   # made with the broker role
                lifecycle.listeners = config.advertised_listeners
                tg.start_soon(kraft.sync.run)
                tg.start_soon(kraft.sync.heap.run)
                tg.start_soon(kraft.replicas.run)
                tg.start_soon(broker.groups.run_topic_creator)
                raft_thread.start_soon(lifecycle.run)
                tg.start_soon(_serve_when_caught_up, tg, broker, lifecycle, broker_listeners, handle.serving)
                tg.start_soon(broker.run_flush_scheduler)
                tg.start_soon(broker.run_retention)
                tg.start_soon(broker.run_producer_snapshots)
                tg.start_soon(broker.run_cleaner)
                tg.start_soon(broker.groups.run_writer)
                tg.start_soon(broker.groups.run_timers)
                tg.start_soon(broker.groups.run_expiry)
                tg.start_soon(broker.transactions.run)
            if faults.busy_data_plane_armed():
                tg.start_soon(faults.busy_data_plane)
            log.info("node %d (%s) of cluster %s listening on %s", config.node_id,
                     ",".join(sorted(config.roles)), cluster_id,
                     ", ".join(f"{n}://{h}:{p}" for n, (h, p) in handle.bound.items()))
            task_status.started(handle)
    finally:
        with anyio.CancelScope(shield=True):
            if broker is not None:
                await anyio.to_thread.run_sync(broker.close)
                assert kraft is not None   # made with the broker role
                await anyio.to_thread.run_sync(kraft.replicas.close)
            await anyio.to_thread.run_sync(audit.close)
            log.info("node %d stopped; logs flushed and closed", config.node_id)
            handle.stopped.set()


async def _serve_when_caught_up(tg: TaskGroup, broker: Broker, lifecycle: BrokerLifecycle,
                                listeners: list[_Serve], serving: anyio.Event) -> None:
    """A KRaft broker's client listeners are bound at once (their ports go into the broker's
    registration) but accept only once the broker has caught up with the metadata log and the
    controller has unfenced it, as Kafka enables request processing only then: a client that
    connects earlier waits in the accept backlog instead of being told the cluster is empty."""
    log.info("broker %d: waiting to catch up with the metadata log and be unfenced", broker.node_id)
    await lifecycle.unfenced.wait()
    kraft = broker.kraft
    assert kraft is not None   # set by run_node before this starts
    sync = kraft.sync
    target = kraft.quorum.loader.next_offset
    await sync.wait_synced(lambda: sync.synced_offset >= target, timeout_s=float("inf"))
    for serve in listeners:
        tg.start_soon(serve)
    lifecycle.serving = True
    serving.set()
    log.info("broker %d is serving clients", broker.node_id)
    # Whatever an old topic catalog held is in the metadata log by now (the controller writes
    # it before it registers any broker), so the catalog can be put aside.
    await anyio.to_thread.run_sync(legacy_catalog.retire, broker.config)


def _storage_identity(config: BrokerConfig) -> str:
    """The cluster id this node's storage was formatted with. Every node of a quorum must
    agree on it, so (as Kafka does) a node of a quorum never invents one: its directories must
    have been formatted (`seaway storage format`) or cluster.id must be set. A one-node cluster
    is its own quorum: it formats its directories itself on first start."""
    dirs = list(config.log_dirs)
    if config.metadata_log_dir not in dirs:
        dirs.append(config.metadata_log_dir)
    if (not config.single_node and config["cluster.id"] is None
            and not any((d / META_FILE).exists() for d in dirs)):
        raise ConfigError(f"log.dirs: {dirs[0]} is not formatted; run `seaway storage format` "
                          f"with the cluster id first (or set cluster.id)")
    return ensure_meta(dirs, config.node_id, config["cluster.id"])
