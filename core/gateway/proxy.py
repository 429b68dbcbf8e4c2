"""`seaway gateway`'s sockets: client connections on the gateway's slots, each forwarding to
the brokers its slot stands for, in whichever cluster the DR pair's decision makes active.

Theory of operation
-------------------
The gateway listens on one port per slot (core/gateway/endpoints.py). A client connection
on slot k forwards to broker k of a cluster (the cluster's brokers in id order), over a
broker connection of its own per cluster, opened when first needed: a connection's
requests, its SASL exchange included, stay one stream end to end, as if the client spoke to
the broker. What cluster a request goes to is routing.py's decision, from the view the
decision record gives (follower.py). The one exception: a Produce goes to the cluster this
connection's unanswered Produce requests went to, if any (`_unanswered_produce_cluster`
says why).

Requests pass through as the bytes the client sent, correlation id and all; a broker
connection answers in order, so each answer goes to the oldest request waiting on it.
Only answers that name brokers (Metadata, FindCoordinator, DescribeCluster) and ApiVersions
are decoded and rewritten, and Produce and Fetch are offered only in versions whose answers
name none; records are never decoded. Because one client connection may have requests
waiting on two clusters and on the gateway itself, its answers are queued in request order
and written as the oldest completes: clients rely on a connection answering in order.

A broker connection that fails under waiting requests closes the client connection, as the
broker's own failure would: every client retries on a new connection (and re-reads
Metadata), and an idempotent producer resends with the same sequences. A broker that cannot
be reached at all is another matter: nothing was delivered to it, so the client's requests
wait ("parked") and are sent again, to whichever cluster is active by then, until it answers
or UNREACHABLE_MAX_S has passed. That is what carries clients through an unplanned failover
with their connections open: closing them would not make the client reconnect anywhere
better (its one address is the gateway's), and some clients raise an error to the
application for a connection closed as soon as it was accepted (kafka-python's consumer)
where a broker that is down would only have refused it. When the gateway
moves to the other cluster, connections to the cluster it left close once their last
answer is delivered.

Bad input is answered as a broker answers it: a size prefix over the request limit, a
request too short for its header, an API the gateway does not forward, or a version it does
not speak close the connection (ApiVersions at an unknown version gets UNSUPPORTED_VERSION
and the gateway's versions, KIP-511), and other clients are not affected.
"""
from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from core.client import KafkaClient
from core.client.security import PLAINTEXT, ClientSecurity
from core.client.tls import certificate_subject
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.envelope import encode_address, encode_principal
from core.protocol.dr import Decision
from core.protocol.errors import DecodeError, EncodeError, ErrorCode
from core.protocol.framing import FrameReader, FrameTooLarge
from core.protocol.varint import read_uvarint
from core.security.authorizer import ANONYMOUS

from . import routing
from .endpoints import (FORWARDED_APIS, Address, SlotMap, gateway_versions, pair_cluster_id, rewrite_api_versions,
                        rewrite_describe_cluster, rewrite_find_coordinator, rewrite_metadata)
from .follower import DecisionFollower
from .link import BrokerLink
from .metrics import GatewayMetrics
from .routing import Answer, Forward, HoldJoin, RequestHead, View
from .secure import SaslRelay, SecureUpstream

log = logging.getLogger("seaway.gateway")

DEFAULT_MAX_REQUEST_BYTES = 104_857_600     # Kafka's socket.request.max.bytes
MAX_RESPONSE_BYTES = 2**31 - 1               # a frame only grows as its bytes arrive
DRAINING_MAX_S = 300.0                       # longer than any drain the controller waits for
CONNECT_TIMEOUT_S = 10.0
# Requests for a broker that cannot be reached wait for it (or for a move) this long, trying
# again after 0.25 s, 0.5 s, ... 2 s, before the client's connection is closed.
UNREACHABLE_MAX_S = 120.0
RETRY_MIN_S, RETRY_MAX_S = 0.25, 2.0

Rewrite = Callable[[bytearray], 'bytes | bytearray']

# A fault hook for the tests: the requests of one socket read are handed on this many
# milliseconds apart, not at once, so that a move of the gateway lands between a producer's
# pipelined requests far more often than it would by chance (tests/integration/test_gateway.py).
SPACE_FRAMES_ENV = "SEAWAY_GATEWAY_SPACE_FRAMES_MS"

_REWRITES: dict[int, Callable[[Any, SlotMap], Any]] = {
    ApiKey.METADATA: rewrite_metadata,
    ApiKey.FIND_COORDINATOR: rewrite_find_coordinator,
    ApiKey.DESCRIBE_CLUSTER: rewrite_describe_cluster,
}


@dataclass
class GatewayConfig:
    pair: str
    clusters: dict[str, str]            # name -> bootstrap; the first is served until a decision says otherwise
    host: str = "127.0.0.1"
    ports: list[int] = field(default_factory=lambda: [0])    # one per slot; 0 picks a free port
    advertised_host: str | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    stale_after_s: float = 10.0
    # Clients: TLS on the gateway's ports, and the SASL mechanisms they may log in with
    # (relayed to the cluster, secure.py). The gateway's own TLS and login towards brokers:
    # with a login, every client request goes inside an Envelope naming the client.
    listener_ssl: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    upstream: ClientSecurity = PLAINTEXT

    @property
    def envelopes(self) -> bool:
        return self.upstream.sasl is not None


class Reply:
    """One client request's answer, in the connection's queue."""
    __slots__ = ("head", "data", "cluster")

    def __init__(self, head: RequestHead):
        self.head = head
        self.data: bytes | bytearray | memoryview | None = None
        self.cluster: str | None = None     # where the request went (None: not sent to a broker yet)

    def fill(self, frame: bytes | bytearray | memoryview, rewrite: "Rewrite | None") -> Exception | None:
        """Take the broker's answer, rewritten if it names brokers. An answer that cannot be
        rewritten must not reach the client with a broker's own address in it: then the
        error, and nothing is taken."""
        try:
            self.data = frame if rewrite is None else rewrite(bytearray(frame))
        except (DecodeError, EncodeError) as exc:
            return exc
        return None


@dataclass
class Held:
    conn: "ClientConnection"
    reply: Reply
    head: RequestHead
    frame: bytearray
    body_at: int
    join: Any


class Gateway:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics | None = None):
        if len(config.clusters) != 2:
            raise ValueError("a gateway serves one DR pair: give its two clusters")
        self.config = config
        first, second = config.clusters
        self.clusters = (first, second)
        self.metrics = metrics or GatewayMetrics(config.pair)
        self.view = View(self.clusters[0])
        self.cluster_id = pair_cluster_id(config.pair)
        self.follower = DecisionFollower(config.pair, config.clusters, self._decided,
                                         stale_after_s=config.stale_after_s,
                                         client_factory=lambda bootstrap: KafkaClient(
                                             bootstrap, client_id="seaway-gateway", allow_auto_create_topics=False,
                                             request_timeout_ms=5000, security=config.upstream))
        self.addresses: list[Address] = []
        self.connections: set[ClientConnection] = set()
        self.held: list[Held] = []
        self._slot_maps: dict[str, tuple[tuple[int, ...], SlotMap]] = {}
        self._move_started: float | None = None
        self.decision: Decision | None = None
        self.space_frames_s = float(os.environ.get(SPACE_FRAMES_ENV) or 0) / 1000
        self.metrics.serve(self.view.active)

    # ------------------------------------------------------------------ serving

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        loop = asyncio.get_running_loop()
        servers = []
        try:
            for slot, port in enumerate(self.config.ports):
                servers.append(await loop.create_server(self._protocol_factory(slot), self.config.host, port,
                                                        reuse_address=True, ssl=self.config.listener_ssl))
            advertised = self.config.advertised_host or self.config.host
            self.addresses = [Address(advertised, s.sockets[0].getsockname()[1]) for s in servers]
            async with anyio.create_task_group() as tg:
                await tg.start(self.follower.run)
                tg.start_soon(self._watch_staleness)
                tg.start_soon(self._watch_draining)
                await self._until_brokers_known()
                task_status.started(self.addresses)
                await anyio.sleep_forever()
        finally:
            for s in servers:
                s.close()
            for conn in list(self.connections):
                conn.abort()

    def _protocol_factory(self, slot: int) -> Callable[[], "ClientConnection"]:
        return lambda: ClientConnection(self, slot)

    async def _until_brokers_known(self, timeout_s: float = 30.0) -> None:
        """Clients are accepted from the start, but the first should not find no broker."""
        with anyio.move_on_after(timeout_s):
            while not self.follower.sources[self.view.active].brokers:
                await anyio.sleep(0.05)

    async def _watch_draining(self) -> None:
        """A controller that fenced the old side and then died, or could not say that it
        rolled the failover back, would leave consumers held for good: after DRAINING_MAX_S
        they join where they were (the next decision moves them again)."""
        while True:
            await anyio.sleep(1.0)
            view = self.view
            if view.draining and self._move_started is not None \
                    and time.monotonic() - self._move_started > DRAINING_MAX_S:
                log.warning("pair %s: still draining after %.0fs with no new decision; consumers join on %s again",
                            self.config.pair, DRAINING_MAX_S, view.active)
                self.apply(View(view.active, None, view.epoch))

    async def _watch_staleness(self) -> None:
        while True:
            self.metrics.decision_stale.set(1 if self.follower.stale else 0)
            age = self.follower.seconds_since_answer()
            self.metrics.decision_age.set(age if age != float("inf") else -1)
            await anyio.sleep(1.0)

    # ------------------------------------------------------------------ the decision

    def _decided(self, decision: Decision) -> None:
        self.decision = decision
        new = routing.view_of(decision, self.clusters, self.view)
        if new != self.view:
            self.apply(new)

    def apply(self, new: View) -> None:
        old, self.view = self.view, new
        self.metrics.epoch.set(new.epoch)
        self.metrics.moving.set(1 if new.moving else 0)
        if (new.moving and not old.moving or old.active != new.active) and self._move_started is None:
            self._move_started = time.monotonic()
        if new.draining and not old.draining:
            log.info("pair %s: %s is fenced (DR epoch %d): consumers leave their groups there and wait",
                     self.config.pair, new.active, new.epoch)
        if old.active != new.active:
            self.metrics.moves.inc()
            self.metrics.serve(new.active)
            log.info("pair %s: moving clients from %s to %s (DR epoch %d%s)", self.config.pair, old.active,
                     new.active, new.epoch, ", consumers join once it serves" if new.moving else "")
        keep = {new.active} | ({new.previous} if new.previous else set())
        for conn in list(self.connections):
            conn.retire_upstreams(keep)
            if conn.parked is not None and old.active != new.active:
                conn.retry_parked()
        if not new.moving:
            if self._move_started is not None:
                self.metrics.move_seconds.observe(time.monotonic() - self._move_started)
                self._move_started = None
            held, self.held = self.held, []
            for h in held:
                h.conn.release(h)
            if held:
                log.info("pair %s: %d waiting consumer(s) join on %s", self.config.pair, len(held), new.active)

    # ------------------------------------------------------------------ brokers

    def slot_map(self, cluster: str) -> SlotMap:
        ids = tuple(sorted(self.follower.sources[cluster].brokers))
        cached = self._slot_maps.get(cluster)
        if cached is None or cached[0] != ids:
            cached = self._slot_maps[cluster] = (ids, SlotMap(self.addresses, list(ids), self.cluster_id))
        return cached[1]

    def broker_for(self, cluster: str, slot: int) -> tuple[str, int] | None:
        """The broker slot `slot` forwards to in `cluster` (a slot beyond its brokers: the
        broker it wraps to, so a stale leader id still reaches a broker that redirects)."""
        brokers = self.follower.sources[cluster].brokers
        if not brokers:
            return None
        ids = sorted(brokers)
        return brokers[ids[slot % len(ids)]]


class ClientConnection(asyncio.Protocol):
    def __init__(self, gateway: Gateway, slot: int):
        self.gw = gateway
        self.slot = slot
        self.reader = FrameReader(gateway.config.max_request_bytes)
        self.queue: deque[Reply] = deque()
        self.upstreams: dict[str, Upstream | SecureUpstream] = {}
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._paused_upstreams = False
        # Who the client is: None until it has logged in, where the gateway asks for SASL.
        self.principal: str | None = None if gateway.config.sasl_mechanisms else ANONYMOUS
        self.principal_bytes = encode_principal(ANONYMOUS)
        self.address_bytes = b""
        self.sasl: SaslRelay | None = None
        self.sasl_upstream: Upstream | None = None
        self.close_after_flush = False
        # Requests waiting for a broker that could not be reached (None: none are): each
        # request's frame and its place in the queue (None for one that gets no answer).
        self.parked: list[tuple[bytes | bytearray, Reply | None]] | None = None
        self.unreachable_since: float | None = None
        self._retry_after = RETRY_MIN_S
        self._retry_timer: asyncio.TimerHandle | None = None
        # When the client's SASL session ends (the cluster's connections.max.reauth.ms, as
        # the broker's answer gave it; None: never): it must have logged in again by then.
        self.session_expires: float | None = None
        self._spaced: deque[bytearray] | None = deque() if gateway.space_frames_s else None
        self._spacing: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.address_bytes = encode_address(peer[0]) if peer else b""
        der = transport.get_extra_info("ssl_object").getpeercert(binary_form=True) \
            if transport.get_extra_info("ssl_object") is not None else None
        if der and not self.gw.config.sasl_mechanisms:
            # mTLS without SASL: the certificate's subject is the principal, as on a broker.
            self._logged_in(f"User:{certificate_subject(der)}")
        elif self.principal is not None:
            self._logged_in(self.principal)
        self.gw.connections.add(self)
        self.gw.metrics.connections.inc()
        self.gw.metrics.connections_total.inc()

    def data_received(self, data: bytes) -> None:
        self.gw.metrics.bytes_in.inc(len(data))
        try:
            frames = self.reader.feed(data)
        except FrameTooLarge as exc:
            log.warning("%s: request %s; closing connection", self.peer, exc)
            self.gw.metrics.request("?", "refused")
            self.abort()
            return
        if self._spaced is not None:
            self._spaced.extend(frames)
            if self._spacing is None and self._spaced:
                self._hand_on_spaced()
            return
        for frame in frames:
            if self.closed:
                return
            self._request(frame)

    def _hand_on_spaced(self) -> None:
        """The test fault hook's pace (SPACE_FRAMES_ENV): one request, then a pause."""
        self._spacing = None
        if self.closed or not self._spaced:
            return
        self._request(self._spaced.popleft())
        if self._spaced:
            self._spacing = asyncio.get_running_loop().call_later(self.gw.space_frames_s, self._hand_on_spaced)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._close()

    def pause_writing(self) -> None:
        self._paused_upstreams = True
        for up in self.upstreams.values():
            up.pause_reading()

    def resume_writing(self) -> None:
        self._paused_upstreams = False
        for up in self.upstreams.values():
            up.resume_reading()

    # -------------------------------------------------------------- requests

    def _request(self, frame: bytearray) -> None:
        head = routing.request_head(frame)
        if head is None:
            return self._refuse(f"{len(frame)}-byte frame is too short for a request header")
        api = m.API.get(head.api_key)
        if api is None or head.api_key not in FORWARDED_APIS:
            return self._refuse(f"API key {head.api_key} is not served through the gateway")
        if not api.supports(head.version) or head.version > gateway_versions()[head.api_key][1]:
            if head.api_key == ApiKey.API_VERSIONS:
                return self._answer_now(head, _unsupported_api_versions(head))
            return self._refuse(f"{api.name} v{head.version} is not supported")
        if head.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE) and self.gw.config.sasl_mechanisms:
            return self._sasl_step(head, frame)
        if self.session_expires is not None and time.monotonic() >= self.session_expires:
            # As a broker does: the first request after the session ended closes the
            # connection, so a client that did not log in again keeps no access it lost.
            return self._refuse(f"SASL session of {self.principal} expired (connections.max.reauth.ms) "
                                "without re-authentication")
        if self.principal is None and head.api_key != ApiKey.API_VERSIONS:
            return self._refuse(f"{api.name} before SASL authentication completed")
        if self.gw.config.envelopes and head.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            return self._refuse("SASL on a gateway port that does not offer it")
        view = self.gw.view
        fetch = None
        if view.moving and head.api_key in (ApiKey.FETCH, ApiKey.JOIN_GROUP):
            try:
                _, fetch, body_at = routing.decode_request(head, frame)
            except DecodeError as exc:
                return self._refuse(f"malformed {api.name} v{head.version} request: {exc}")
        r = routing.route(head.api_key, view, max_wait_ms=getattr(fetch, "max_wait_ms", 0))
        if isinstance(r, Forward):
            self.gw.metrics.request(api.name, "forwarded")
            cluster = r.cluster
            if head.api_key == ApiKey.PRODUCE:
                reply = None if _acks(head, frame) == 0 else Reply(head)
                cluster = self._unanswered_produce_cluster() or cluster
            else:
                reply = Reply(head)
            self._forward(cluster, frame, reply)
        elif isinstance(r, Answer):
            self.gw.metrics.request(api.name, "answered")
            reply = Reply(head)
            self.queue.append(reply)
            if head.api_key == ApiKey.FETCH:
                loop = asyncio.get_running_loop()
                loop.call_later(r.delay_s, self._complete, reply, routing.empty_fetch_answer(head, fetch))
            else:
                self._complete(reply, routing.rebalance_answer(head))
        elif isinstance(r, HoldJoin):
            self.gw.metrics.request(api.name, "held")
            reply = Reply(head)
            self.queue.append(reply)
            leave = routing.leave_request(fetch)
            if leave is not None:
                self._send_own(r.leave, ApiKey.LEAVE_GROUP, *leave)
            self.gw.held.append(Held(self, reply, head, frame, body_at, fetch))

    # -------------------------------------------------------------- SASL (secure.py)

    def _sasl_step(self, head: RequestHead, frame: bytearray) -> None:
        """A SaslHandshake or SaslAuthenticate: relayed to a broker of the active cluster."""
        try:
            _, request, _ = routing.decode_request(head, frame)
        except DecodeError as exc:
            return self._refuse(f"malformed SASL request: {exc}")
        if head.api_key == ApiKey.SASL_HANDSHAKE:
            if head.version < 1:
                return self._refuse("SaslHandshake v0 (unframed tokens) is not relayed; clients use v1")
            if request.mechanism not in self.gw.config.sasl_mechanisms:
                self.close_after_flush = True
                body = m.SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                               mechanisms=list(self.gw.config.sasl_mechanisms))
                return self._answer_now(head, routing.encode_response(head.api_key, head.version,
                                                                      head.correlation_id, body))
            if self.sasl_upstream is not None:
                self.sasl_upstream.retire()
            address = self.gw.broker_for(self.gw.view.active, self.slot)
            if address is None:
                return self._refuse(f"no broker of {self.gw.view.active} is known to log in with")
            self.sasl = SaslRelay.for_mechanism(request.mechanism)
            self.sasl_upstream = Upstream(self, self.gw.view.active, *address,
                                          ssl_context=self.gw.config.upstream.ssl_context)
            reply = Reply(head)
            self.queue.append(reply)
            self.sasl_upstream.send(frame, reply, None)
            return None
        relay, up = self.sasl, self.sasl_upstream
        if relay is None or up is None:
            return self._refuse("SaslAuthenticate without a SaslHandshake")
        relay.note_token(bytes(request.auth_bytes))
        reply = Reply(head)
        self.queue.append(reply)

        def inspect(answer: bytearray) -> bytearray:
            correlation_id, body = routing.decode_response(head.api_key, head.version, answer)
            if relay.note_answer(body.error_code):
                up.retire()
                principal = f"User:{relay.username}"
                if self.principal is not None and principal != self.principal:
                    # Kafka's rule for re-authentication (KIP-368): same principal or out.
                    log.info("%s: re-authentication as %s refused: logged in as %s", self.peer, principal,
                             self.principal)
                    self.close_after_flush = True
                    refused = m.SaslAuthenticateResponse(
                        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                        error_message=f"Cannot change principals during re-authentication from "
                                      f"{self.principal.replace(':', '.', 1)}: {principal.replace(':', '.', 1)}",
                        auth_bytes=b"", session_lifetime_ms=0)
                    return routing.encode_response(head.api_key, head.version, correlation_id, refused)
                self._logged_in(principal)
                lifetime_ms = getattr(body, "session_lifetime_ms", 0)
                self.session_expires = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
            elif relay.failed:
                log.info("%s: SASL %s login as %s refused by %s", self.peer, relay.mechanism, relay.username,
                         up.cluster)
                self.close_after_flush = True
                up.retire()
            return answer
        up.send(frame, reply, inspect)
        return None

    def _logged_in(self, principal: str) -> None:
        self.principal = principal
        self.principal_bytes = encode_principal(principal)

    def release(self, held: Held) -> None:
        """A JoinGroup held during a move goes to the cluster now served, as a new member's."""
        if self.closed:
            return
        routing.join_as_new_member(held.join)
        frame = routing.encode_request_body(held.head, held.frame, held.body_at, held.join)
        self._forward(self.gw.view.active, frame, held.reply, queued=True)

    def _unanswered_produce_cluster(self) -> str | None:
        """The cluster this connection's unanswered Produce requests went to, if any: the
        next Produce goes there too, whatever the view says now. A producer pipelines its
        requests and relies on their order: if R1 and R2 were on their way to the cluster
        being left (which refuses them, retriably) and R3 went to the other, R3 would arrive
        first with a gap before its sequence, and a client told that R3 is written counts
        R1 and R2 written too (librdkafka does). Sent to the same cluster, R3 fails as they
        do and the client retries the three in order, wherever the gateway sends them then."""
        for reply in reversed(self.queue):
            if reply.data is None and reply.cluster is not None and reply.head.api_key == ApiKey.PRODUCE:
                return reply.cluster
        return None

    def _forward(self, cluster: str, frame: bytes | bytearray, reply: Reply | None, queued: bool = False) -> None:
        if reply is not None and not queued:
            self.queue.append(reply)
        if self.parked is not None:
            # Behind requests that wait for a broker: in order, or a producer's sequences
            # would arrive out of order.
            self.parked.append((frame, reply))
            return
        up = self._upstream(cluster)
        if up is None:
            return
        rewrite = None
        if reply is not None:
            reply.cluster = cluster
            head = reply.head
            if head.api_key == ApiKey.API_VERSIONS:
                rewrite = _api_versions_rewriter(head)
            elif head.api_key in _REWRITES:
                rewrite = _endpoint_rewriter(head, self.gw, cluster)

        up.send(frame, reply, rewrite)

    def _send_own(self, cluster: str, api_key: int, version: int, body: Any) -> None:
        """A request of the gateway's own on this connection's broker connection (its answer
        is read and dropped)."""
        up = self._upstream(cluster)
        if up is None:
            return
        frame = routing.encode_request(api_key, version, -1, "seaway-gateway", body)
        up.send(frame, None, None, expect_answer=True)

    def _upstream(self, cluster: str) -> "Upstream | SecureUpstream | None":
        up = self.upstreams.get(cluster)
        if up is None:
            address = self.gw.broker_for(cluster, self.slot)
            if address is None:
                log.warning("%s: no broker of %s is known yet; closing connection", self.peer, cluster)
                self.gw.metrics.upstream_failures.labels(self.gw.config.pair, cluster).inc()
                self.abort()
                return None
            if self.gw.config.envelopes:
                up = self.upstreams[cluster] = SecureUpstream(self, cluster, *address, self.gw.config.upstream)
            else:
                up = self.upstreams[cluster] = Upstream(self, cluster, *address,
                                                        ssl_context=self.gw.config.upstream.ssl_context)
            if self._paused_upstreams:
                up.pause_reading()
        return up

    def retire_upstreams(self, keep: set[str]) -> None:
        for cluster in [c for c in self.upstreams if c not in keep]:
            self.upstreams.pop(cluster).retire()

    # -------------------------------------------------------------- brokers that cannot be reached

    def upstream_unreachable(self, up: "BrokerLink", unsent: list[tuple[bytes | bytearray, Reply | None, bool]],
                             exc: BaseException) -> None:
        """`up` could not connect, so none of `unsent` (frame, reply, whether the gateway's own
        request) reached a broker: they wait, and go again later (see the module's notes)."""
        if up is self.sasl_upstream:
            # A login goes to a broker on a connection of its own, never parked into another.
            self.upstream_failed(up, exc)
            return
        if self.upstreams.get(up.cluster) is up:
            del self.upstreams[up.cluster]
        up.close()
        if self.closed:
            return
        self.gw.metrics.upstream_failures.labels(self.gw.config.pair, up.cluster).inc()
        now = time.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = now
            log.info("%s: broker %s:%d of %s cannot be reached (%s); requests wait for it, or for a move",
                     self.peer, up.host, up.port, up.cluster, exc)
        if now - self.unreachable_since > UNREACHABLE_MAX_S:
            log.warning("%s: no broker reached for %.0f s; closing the client's connection", self.peer,
                        now - self.unreachable_since)
            self.abort()
            return
        # The gateway's own requests (a LeaveGroup for the cluster it moves from) are dropped.
        waiting = [(frame, reply) for frame, reply, own in unsent if not own]
        self.parked = waiting + (self.parked or [])
        if self._retry_timer is None:
            self._retry_timer = asyncio.get_running_loop().call_later(self._retry_after, self.retry_parked)
            self._retry_after = min(self._retry_after * 2, RETRY_MAX_S)

    def reached(self) -> None:
        """A broker connection is up: the next broker that cannot be reached starts anew."""
        self.unreachable_since = None
        self._retry_after = RETRY_MIN_S

    def retry_parked(self) -> None:
        """Send the waiting requests again, to the cluster active now (also called at once
        when the gateway moves)."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        parked, self.parked = self.parked, None
        if self.closed or not parked:
            return
        for frame, reply in parked:
            self._forward(self.gw.view.active, frame, reply, queued=True)

    # -------------------------------------------------------------- answers

    def _answer_now(self, head: RequestHead, data: bytearray) -> None:
        reply = Reply(head)
        self.queue.append(reply)
        self._complete(reply, data)

    def _complete(self, reply: Reply, data: bytes | bytearray) -> None:
        reply.data = data
        self.flush()

    def is_next(self, reply: Reply) -> bool:
        """Whether `reply` may be written now, as its bytes arrive (Upstream.data_received)."""
        return not self.closed and self.transport is not None and bool(self.queue) and self.queue[0] is reply

    def write(self, data: bytes | memoryview) -> None:
        """Bytes of answers passed through, in the connection's order."""
        if not self.closed and self.transport is not None:
            self.transport.write(data)
            self.gw.metrics.bytes_out.inc(len(data))

    def passed_through(self, reply: Reply) -> None:
        """`reply`, the queue's head, has been written whole: the next may go."""
        if self.queue and self.queue[0] is reply:
            self.queue.popleft()

    def flush(self) -> None:
        if self.closed or self.transport is None:
            return
        queue, write = self.queue, self.transport.write
        out = 0
        while queue and queue[0].data is not None:
            data = queue.popleft().data
            assert data is not None
            write(routing.size_prefix(len(data)))
            write(data)
            out += len(data) + 4
        if out:
            self.gw.metrics.bytes_out.inc(out)
        if self.close_after_flush and not queue:
            # After a refused login the broker closes; so does the gateway, once the client
            # has its answer.
            self.transport.close()
            self._close()

    # -------------------------------------------------------------- closing

    def _refuse(self, why: str) -> None:
        log.warning("%s: %s; closing connection", self.peer, why)
        self.gw.metrics.request("?", "refused")
        self.abort()

    def upstream_failed(self, up: "BrokerLink", exc: BaseException | None) -> None:
        log.info("%s: broker %s:%d of %s failed (%s); closing the client's connection", self.peer, up.host,
                 up.port, up.cluster, exc or "closed")
        self.gw.metrics.upstream_failures.labels(self.gw.config.pair, up.cluster).inc()
        self.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if self._spacing is not None:
            self._spacing.cancel()
            self._spacing = None
        self.parked = None
        self.gw.connections.discard(self)
        self.gw.metrics.connections.dec()
        self.gw.held = [h for h in self.gw.held if h.conn is not self]
        for up in list(self.upstreams.values()):
            up.close()
        self.upstreams.clear()
        if self.sasl_upstream is not None:
            self.sasl_upstream.close()


class Upstream(BrokerLink, asyncio.Protocol):
    """A client connection's connection to one broker."""

    def __init__(self, owner: ClientConnection, cluster: str, host: str, port: int, *,
                 ssl_context: ssl.SSLContext | None = None):
        self.owner = owner
        self.ssl_context = ssl_context
        self.cluster = cluster
        self.host, self.port = host, port
        self.waiting: deque[tuple[Reply | None, Rewrite | None]] = deque()
        self.transport: asyncio.Transport | None = None
        # Requests sent before the connection is up: (frame, reply, the gateway's own); their
        # rewrites wait in `waiting` already.
        self.backlog: list[tuple[bytes | bytearray, Reply | None, bool]] | None = []
        self.retiring = False
        self.closed = False
        self._paused = False
        # The answer being received: its size prefix so far, the bytes still to come (-1
        # between answers), whom it is for, and either the frame being assembled (an answer
        # to rewrite, or one that must wait its turn) or None (passed through, or dropped).
        self._prefix = bytearray()
        self._left = -1
        self._reply: Reply | None = None
        self._rewrite: Rewrite | None = None
        self._frame: bytearray | None = None
        self._through = False
        self._task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.create_connection(
                lambda: self, self.host, self.port, ssl=self.ssl_context,
                server_hostname=self.host if self.ssl_context else None), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            if self.closed or self.transport is not None:
                return
            unsent, self.backlog = self.backlog or [], None
            self.waiting.clear()
            self.owner.upstream_unreachable(self, unsent, exc)

    def send(self, frame: bytes | bytearray, reply: Reply | None, rewrite: Rewrite | None, *,
             expect_answer: bool | None = None) -> None:
        if self.closed:
            self.owner.upstream_failed(self, None)
            return
        if reply is not None or expect_answer:
            self.waiting.append((reply, rewrite))
        if self.backlog is not None:
            self.backlog.append((frame, reply, bool(expect_answer) and reply is None))
        else:
            assert self.transport is not None
            self.transport.write(routing.size_prefix(len(frame)))
            self.transport.write(frame)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.closed:
            transport.abort()
            return
        backlog, self.backlog = self.backlog or [], None
        self.owner.reached()
        for frame, *_ in backlog:
            transport.write(routing.size_prefix(len(frame)))
            transport.write(frame)
        if self._paused:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        """Answers are passed through as they arrive (cut-through) when nothing needs
        rewriting in them and they are next in the client's queue: a 50 MB Fetch answer then
        costs the client no wait for its last byte before its first is written on, and no copy
        in Python. Consecutive such answers in one read go out in one write, size prefixes and
        all, since the broker framed them exactly as the client expects. Other answers are
        assembled and queued (Reply.fill)."""
        view = memoryview(data)
        i, n = 0, len(view)
        # Bytes passed through and not yet written: view[out_from:out_to] (a size prefix still
        # incomplete at the end of the read is not among them).
        out_from = out_to = -1
        while i < n:
            if self._left < 0:
                start = i
                take = min(4 - len(self._prefix), n - i)
                self._prefix += view[i:i + take]
                i += take
                if len(self._prefix) < 4:
                    break
                size = int.from_bytes(self._prefix, "big", signed=True)
                self._prefix.clear()
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    self._failed(FrameTooLarge(size, MAX_RESPONSE_BYTES))
                    return
                if not self.waiting:
                    self._failed(RuntimeError("an answer to no request"))
                    return
                reply, rewrite = self._reply, self._rewrite = self.waiting.popleft()
                self._left = size
                self._through = reply is not None and rewrite is None and self.owner.is_next(reply)
                if self._through:
                    self._frame = None
                    if out_from < 0:
                        if take == 4:
                            out_from = start
                        else:       # the prefix came in pieces: it is written whole
                            self.owner.write(routing.size_prefix(size))
                else:
                    if out_from >= 0:
                        self.owner.write(view[out_from:out_to])
                        out_from = -1
                    # Grown as its bytes arrive, not allocated from a size prefix.
                    self._frame = bytearray() if reply is not None else None
            take = min(self._left, n - i)
            if self._through and out_from < 0:
                out_from = i
            if self._frame is not None:
                self._frame += view[i:i + take]
            i += take
            out_to = i
            self._left -= take
            if self._left == 0 and not self._answer_received():
                return
        if out_from >= 0:
            self.owner.write(view[out_from:out_to])
        self.owner.flush()
        if self.retiring and not self.busy():
            self.close()

    def _answer_received(self) -> bool:
        """The answer being received is complete: False if it failed the connection."""
        reply, rewrite, frame, through = self._reply, self._rewrite, self._frame, self._through
        self._left, self._reply, self._rewrite, self._frame, self._through = -1, None, None, None, False
        if reply is None:
            return True         # the gateway's own request's answer: dropped
        if through:
            self.owner.passed_through(reply)
            return True
        assert frame is not None
        if (error := reply.fill(frame, rewrite)) is not None:
            self._failed(error)
            return False
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.closed:
            self._failed(exc)

    def pause_writing(self) -> None:
        if self.owner.transport is not None:
            self.owner.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.owner.transport is not None and not self.owner.closed:
            self.owner.transport.resume_reading()

    def pause_reading(self) -> None:
        self._paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        self._paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def busy(self) -> bool:
        return bool(self.waiting) or self._left >= 0

    def shut(self) -> None:
        self.waiting.clear()
        self._left, self._reply, self._frame = -1, None, None
        if self.transport is not None:
            self.transport.abort()
        elif not self._task.done():
            self._task.cancel()


# ------------------------------------------------------------------ rewriting answers


def _endpoint_rewriter(head: RequestHead, gw: Gateway, cluster: str) -> Rewrite:
    rewrite = _REWRITES[head.api_key]

    def rewritten(frame: bytearray) -> bytes | bytearray:
        correlation_id, body = routing.decode_response(head.api_key, head.version, frame)
        body = rewrite(body, gw.slot_map(cluster))
        return routing.encode_response(head.api_key, head.version, correlation_id, body)
    return rewritten


def _api_versions_rewriter(head: RequestHead) -> Rewrite:
    def rewritten(frame: bytearray) -> bytes | bytearray:
        # Every version starts with the error code after the correlation id; an error answer
        # (UNSUPPORTED_VERSION comes in v0 whatever was asked) passes as the broker wrote it.
        if len(frame) < 6 or int.from_bytes(frame[4:6], "big", signed=True) != 0:
            return frame
        correlation_id, body = routing.decode_response(head.api_key, head.version, frame)
        return routing.encode_response(head.api_key, head.version, correlation_id, rewrite_api_versions(body))
    return rewritten


def _unsupported_api_versions(head: RequestHead) -> bytearray:
    R = m.ApiVersionsResponse
    keys = [R.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(gateway_versions().items())]
    return routing.encode_response(ApiKey.API_VERSIONS, 0, head.correlation_id,
                                   R(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys))


def _acks(head: RequestHead, frame: bytearray) -> int:
    """A Produce request's acks, read without decoding its records (acks=0 gets no answer)."""
    try:
        _, at = m.REQUEST_HEADER.decode(m.API[ApiKey.PRODUCE].request_header_version(head.version), frame, whole=False)
        flexible = m.API[ApiKey.PRODUCE].is_flexible(head.version)
        # transactional_id: a nullable (compact) string, then acks int16.
        if flexible:
            length, at = read_uvarint(frame, at)
            at += max(length - 1, 0)
        else:
            length = int.from_bytes(frame[at:at + 2], "big", signed=True)
            at += 2 + max(length, 0)
        return int.from_bytes(frame[at:at + 2], "big", signed=True)
    except (DecodeError, IndexError):
        return -1

