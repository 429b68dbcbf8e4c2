"""BrokerLifecycle: a broker's registration with the active controller and its heartbeats.

Kafka's BrokerLifecycleManager, as a small loop:

    register (BrokerRegistration: cluster id, this process's incarnation id, listeners, rack)
      -> broker epoch
    heartbeat every broker.heartbeat.interval.ms (BrokerHeartbeat: epoch, the metadata offset
    this broker has applied, want_fence = not caught up yet, want_shut_down at shutdown)
      -> is_fenced / is_caught_up / should_shut_down

The controller unfences a broker once its heartbeat reports a metadata offset at or past its
registration record; it fences one whose heartbeats stop for broker.session.timeout.ms. The
active controller is whoever leads the quorum (the loader knows, from the Raft driver); its
address is its controller.quorum.voters entry. NOT_CONTROLLER, a lost connection or a timeout
mean: find the leader again and retry. STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED mean the
controller no longer knows this registration (it was replaced or the log was rebuilt):
register again.

Controlled shutdown: `shutdown()` sends heartbeats with want_shut_down until the controller
answers should_shut_down (it has moved leadership away), bounded by the caller's timeout.

Registering, unfencing and controlled shutdown each wait on the quorum: on a leader, an active
controller, or metadata this broker has yet to apply. So while in one of them the lifecycle
does not wait out its backoff or heartbeat interval: it tries again as soon as the Raft node
reports a leader change or a commit (Kafka heartbeats every 10 ms while a broker starts). A
one-node cluster registers and is unfenced within milliseconds of electing itself.

`run()` runs on the raft thread (core/raft/thread.py), so that a busy data plane never delays a
heartbeat past broker.session.timeout.ms; the node's main loop waits on `registered`,
`unfenced` and `shutdown_granted` (events that cross threads) and reads the plain attributes.
`shutdown()` is called from the main loop.
"""
from __future__ import annotations

import asyncio
import logging
import uuid

import anyio

from core.client.connection import BrokerConnection
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.raft.thread import ThreadSafeEvent

log = logging.getLogger(__name__)

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
RETRY_BACKOFF_S = 0.1
FENCED_HEARTBEAT_S = 0.25   # the longest wait between heartbeats while fenced or shutting down
_REREGISTER = (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED)


class BrokerLifecycle:
    def __init__(self, config, quorum, *, listeners):
        self.config = config
        self.quorum = quorum
        self.listeners = listeners          # the advertised (non-controller) listeners
        self.incarnation_id = uuid.uuid4().bytes
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self.serving = False                # client listeners accept (set by the node once unfenced and caught up)
        self.want_shutdown = False
        self.shutdown_granted = ThreadSafeEvent()
        self.registered = ThreadSafeEvent()
        self.unfenced = ThreadSafeEvent()
        self._conn: BrokerConnection | None = None
        self._conn_target = -1
        self._wake = anyio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None   # run()'s, where _wake belongs
        quorum.driver.add_local_listener(_QuorumProgress(self))   # called on run()'s thread
        # The metadata offset a heartbeat reports is the broker's loader's, on the main loop,
        # which applies a commit after the raft thread hears of it: wake on that too, or a
        # heartbeat woken by the commit could still report the offset before it.
        quorum.loader.publishers.append(self._metadata_applied)

    @property
    def waiting_on_quorum(self) -> bool:
        return self.broker_epoch < 0 or self.fenced or self.want_shutdown

    def quorum_progressed(self) -> None:
        """The raft thread's Raft node changed leader or committed (called on that thread)."""
        if self.waiting_on_quorum and self._loop is not None:
            self._wake.set()

    def _metadata_applied(self, before, after, next_offset: int) -> None:
        """The broker's loader applied records (called on the main loop)."""
        loop = self._loop
        if self.waiting_on_quorum and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.quorum_progressed)
            except RuntimeError:   # run()'s loop closed meanwhile: nobody to wake
                pass

    @property
    def interval_s(self) -> float:
        return self.config["broker.heartbeat.interval.ms"] / 1000

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    if self.broker_epoch < 0:
                        await self._register()
                    else:
                        await self._heartbeat()
                        if self.shutdown_granted.is_set():
                            return
                        await self._sleep_until_next()
                except (KafkaError, OSError) as exc:
                    log.debug("broker %d: controller request failed: %s", self.config.node_id, exc)
                    await self._drop_connection()
                    await self._sleep(RETRY_BACKOFF_S)
        finally:
            with anyio.CancelScope(shield=True):
                await self._drop_connection()

    async def _sleep_until_next(self) -> None:
        # Heartbeat sooner while fenced or shutting down: both wait on the controller's answer.
        fast = self.fenced or self.want_shutdown
        await self._sleep(min(self.interval_s, FENCED_HEARTBEAT_S) if fast else self.interval_s)

    async def _sleep(self, seconds: float) -> None:
        """Up to `seconds`, or until woken (shutdown, or the quorum moved while we wait on it)."""
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        self._wake = anyio.Event()

    async def _controller(self) -> BrokerConnection:
        leader = self.quorum.leader_id
        if leader < 0 or leader not in self.config.quorum_voters:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no active controller known yet")
        if self._conn is not None and not self._conn.closed and self._conn_target == leader:
            return self._conn
        await self._drop_connection()
        host, port = self.config.quorum_voters[leader]
        conn = BrokerConnection(host, port, node_id=leader, client_id=f"broker-{self.config.node_id}",
                                request_timeout_ms=self.config["controller.quorum.request.timeout.ms"],
                                connect_timeout_ms=self.config["controller.quorum.request.timeout.ms"],
                                local_address=self.config["client.local.address"],
                                ssl_context=self.config.controller_client_tls,
                                sasl=self.config.controller_client_sasl)
        await conn.connect()
        self._conn, self._conn_target = conn, leader
        return conn

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _register(self) -> None:
        conn = await self._controller()
        R = m.BrokerRegistrationRequest
        request = R(
            broker_id=self.config.node_id, cluster_id=self.quorum.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[R.Listener(name=li.name, host=li.host, port=li.port,
                                  security_protocol=SECURITY_PROTOCOL_IDS[li.security_protocol])
                       for li in self.listeners],
            features=[], rack=self.config["broker.rack"], log_dirs=[],
            previous_broker_epoch=-1)
        response = await conn.send(request, m.ApiKey.BROKER_REGISTRATION)
        code = ErrorCode(response.error_code)
        if code == ErrorCode.NOT_CONTROLLER:
            raise KafkaError(code, "asked a controller that is not active")
        if code != ErrorCode.NONE:
            # INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION, ...: keep trying, loudly;
            # a duplicate clears once the other incarnation's session expires.
            log.warning("broker %d: registration refused: %s", self.config.node_id, code.name)
            await anyio.sleep(self.interval_s)
            return
        self.broker_epoch = response.broker_epoch
        self.fenced = True
        self.registered.set()
        log.info("broker %d registered with controller %d: broker epoch %d",
                 self.config.node_id, self._conn_target, self.broker_epoch)

    async def _heartbeat(self) -> None:
        conn = await self._controller()
        applied = self.quorum.loader.next_offset - 1
        request = m.BrokerHeartbeatRequest(
            broker_id=self.config.node_id, broker_epoch=self.broker_epoch,
            current_metadata_offset=applied, want_fence=False, want_shut_down=self.want_shutdown)
        response = await conn.send(request, m.ApiKey.BROKER_HEARTBEAT)
        code = ErrorCode(response.error_code)
        if code in _REREGISTER:
            log.warning("broker %d: controller says %s; registering again", self.config.node_id, code.name)
            self.broker_epoch = -1
            return
        if code != ErrorCode.NONE:
            raise KafkaError(code, f"heartbeat answered {code.name}")
        self.caught_up = bool(response.is_caught_up)
        was_fenced, self.fenced = self.fenced, bool(response.is_fenced)
        if was_fenced and not self.fenced:
            log.info("broker %d is unfenced", self.config.node_id)
            self.unfenced.set()
        elif self.fenced and not was_fenced:
            log.warning("broker %d was fenced by the controller", self.config.node_id)
            self.unfenced = ThreadSafeEvent()
        if response.should_shut_down:
            self.shutdown_granted.set()

    async def shutdown(self, timeout_s: float) -> bool:
        """Controlled shutdown: True once the controller agreed (leadership moved away)."""
        if self.broker_epoch < 0:
            return False
        self.want_shutdown = True
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(lambda: self._wake.set())
            except RuntimeError:   # run()'s loop closed meanwhile: nobody to wake
                pass
        with anyio.move_on_after(timeout_s):
            await self.shutdown_granted.wait()
        return self.shutdown_granted.is_set()


class _QuorumProgress:
    """A Raft listener on the raft thread that wakes the lifecycle when the quorum moves."""

    def __init__(self, lifecycle: BrokerLifecycle):
        self.lifecycle = lifecycle

    def handle_snapshot(self, snapshot) -> None:
        self.lifecycle.quorum_progressed()

    def handle_commit(self, entries, high_watermark: int) -> None:
        self.lifecycle.quorum_progressed()

    def handle_leader_change(self, leader) -> None:
        self.lifecycle.quorum_progressed()
