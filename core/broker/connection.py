"""One client connection: frames in, requests dispatched in order, responses out.

Kafka answers a connection's requests strictly in the order they arrived, and clients rely
on that (they match responses by correlation id but expect order). So each connection
handles one request at a time; pipelined requests wait in the socket buffer.

Bad input is answered the way Kafka answers it. A size prefix over socket.request.max.bytes,
an unknown API key, an unsupported version (except ApiVersions, which gets
UNSUPPORTED_VERSION and our version list so the client can pick again) and a body that does
not parse all close the connection, after one log line.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

import anyio
from anyio.abc import ByteStream

from core.protocol import messages as m
from core.protocol.codegen import Writer
from core.protocol.errors import DecodeError, EncodeError, ErrorCode
from core.protocol.framing import FrameReader, FrameTooLarge

from core.protocol.envelope import decode_address, decode_principal
from core.security.authorizer import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType
from core.security.sasl import SaslSession
from core.security.sasl import State as SaslState

from core.security.audit import AuditEvent, now_ms

from .context import NULL_AUDIT, RequestContext
from .handlers import HANDLERS
from .handlers.api_versions import api_versions_response

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
RECEIVE_SIZE = 1 << 20
# A TLS ClientHello starts 0x16 0x03: read as a size prefix, 0x1603xxxx, far over any limit.
_TLS_HANDSHAKE_RECORD = 0x1603


# What an Envelope may not carry: itself, and authentication (the carrying connection's own).
_NOT_ENVELOPED = frozenset({m.ApiKey.ENVELOPE, m.ApiKey.SASL_HANDSHAKE, m.ApiKey.SASL_AUTHENTICATE,
                            m.ApiKey.API_VERSIONS})


class CloseConnection(Exception):
    """Raised inside dispatch to drop the connection, as Kafka would."""


def encode_response(api_key: int, version: int, correlation_id: int, header_version: int,
                    response) -> list:
    w = Writer()
    w.buf += b"\x00\x00\x00\x00"  # size, patched below
    m.RESPONSE_HEADER.encode_into(header_version, m.ResponseHeader(correlation_id=correlation_id), w)
    m.API[api_key].response.encode_into(version, response, w)
    parts = w.finish()
    total = sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts) - 4
    _SIZE.pack_into(parts[0], 0, total)  # parts[0] is the writer's own bytearray
    return parts


def _transport_writer(stream):
    """For a plain TCP stream, a writer of a response's parts straight to its asyncio
    transport (one writev), waiting only while the transport is paused, as anyio's `send`
    does; None where the stream is not one (then each part goes through `send`).

    Why: anyio's `send` yields to the event loop after every write even when nothing waits,
    and every request pays for it: 35 µs of node CPU per trivial request against 26 µs this
    way (tests/benchmarks/bench_request_floor.py). It reads two attributes anyio does not document, the
    transport and its protocol's write event; an anyio without them gets the ordinary path."""
    transport = getattr(stream, "_transport", None)
    protocol: Any = getattr(stream, "_protocol", None)
    if transport is None or not isinstance(getattr(protocol, "write_event", None), asyncio.Event):
        return None

    async def write(parts: list) -> None:
        if transport.is_closing() or getattr(protocol, "exception", None) is not None \
                or not protocol.write_event.is_set():
            for part in parts:        # anyio's path: it raises, or waits for the transport
                await stream.send(part)
            return
        transport.writelines(parts)
        if not protocol.write_event.is_set():     # paused: the peer reads slower than we write
            await protocol.write_event.wait()
    return write


class Connection:
    """`server` is what owns the connection: the Broker on client listeners, the controller
    on controller listeners (config, metrics, the open connections and the draining flag);
    `handlers` is that listener's request table."""

    def __init__(self, server, authorizer, listener, stream: ByteStream, peer: str, *,
                 handlers=None, controller=None, principal: str = ANONYMOUS,
                 sasl: SaslSession | None = None, audit=NULL_AUDIT):
        self.broker = server
        self.handlers = HANDLERS if handlers is None else handlers
        self.controller = controller
        self.authorizer = authorizer
        self.listener = listener
        self.stream = stream
        self.peer = peer
        self.principal = principal   # from the TLS certificate; User:ANONYMOUS on PLAINTEXT
        # SASL listeners: the authentication in progress (the principal comes from it); None
        # once it has succeeded, until the client re-authenticates (KIP-368)
        self.sasl = sasl
        self.audit = audit
        self.sasl_config = sasl.config if sasl is not None else None
        self.mechanism: str | None = None
        self.session_expires: float | None = None   # time.monotonic(); None: never
        self._close_after_send = False
        self.max_request = server.config["socket.request.max.bytes"]
        self.max_idle = server.config["connections.max.idle.ms"] / 1000
        # The connection's one cancel scope, cancelled only while it waits for a request:
        # by shutdown, or by the idle timer (_check_idle).
        self._scope = anyio.CancelScope()
        self._waiting = False
        self._idle_closed = False
        self._last_active = 0.0     # the event loop's clock at the last request or response

    def close_when_idle(self) -> None:
        """Shutdown: close now if waiting for a request, else after the current one."""
        if self._waiting:
            self._scope.cancel()

    def _check_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """The idle timer (connections.max.idle.ms): one per connection, armed for when it
        would have been idle that long and armed again while it has not been. Why not a
        deadline on each wait for a request: a cancel scope and a timer made and dropped per
        request was about 3% of a node's CPU under transactional load."""
        now = loop.time()
        due = self._last_active + self.max_idle
        if now < due:
            self._idle_timer = loop.call_at(due, self._check_idle, loop)
        elif self._waiting:
            self._idle_closed = True
            self._scope.cancel()
        else:   # inside a request: it counts as activity once answered
            self._idle_timer = loop.call_at(now + self.max_idle, self._check_idle, loop)

    async def run(self) -> None:
        # Until a SASL client has authenticated, frames are capped at sasl.server.max.receive.size
        # (CVE-2022-34917): an unauthenticated client must not make us buffer 100 MiB.
        reader = FrameReader(self.sasl.config.max_receive_size if self.sasl is not None else self.max_request)
        send_parts = getattr(self.stream, "send_parts", None) or _transport_writer(self.stream)
        self.broker.connections.add(self)
        self.broker.metrics.connections.inc()
        loop = asyncio.get_running_loop()
        self._last_active = loop.time()
        self._idle_timer = loop.call_at(self._last_active + self.max_idle, self._check_idle, loop)
        try:
            with self._scope:
                await self._serve_requests(reader, send_parts, loop)
            if self._scope.cancelled_caught and self._idle_closed and not self.broker.draining:
                log.info("%s: idle for connections.max.idle.ms; closing connection", self.peer)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass
        finally:
            self._idle_timer.cancel()
            self.broker.connections.discard(self)
            self.broker.metrics.connections.dec()
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _serve_requests(self, reader: FrameReader, send_parts, loop: asyncio.AbstractEventLoop) -> None:
        while not self.broker.draining:
            try:
                self._waiting = True
                try:
                    data = await self.stream.receive(RECEIVE_SIZE)
                finally:
                    self._waiting = False
                if self._scope.cancel_called:
                    return   # closed as the bytes came: no request starts in a cancelled scope
                self._last_active = loop.time()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                if reader.pending:
                    log.info("%s: connection closed inside a frame (%d bytes pending)", self.peer, reader.pending)
                return
            try:
                frames = reader.feed(data)
            except FrameTooLarge as exc:
                self.broker.metrics.bad_requests.labels("size").inc()
                if exc.size >> 16 == _TLS_HANDSHAKE_RECORD:
                    log.warning("%s: sent a TLS handshake to %s listener %s; closing connection",
                                self.peer, self.listener.security_protocol, self.listener.name)
                    return
                log.warning("%s: request size %d is outside 0..socket.request.max.bytes (%d); "
                            "closing connection", self.peer, exc.size, exc.limit)
                return
            for frame in frames:
                parts: list | None
                try:
                    if self.sasl is not None and self.sasl.state is SaslState.RAW_TOKENS:
                        parts = self._raw_sasl_token(frame)
                    else:
                        parts = await self.dispatch(frame)
                except CloseConnection:
                    return
                if self.sasl is not None and self.sasl.authenticated:
                    # Done: the connection takes its principal and the ordinary frame limit,
                    # and is from here on like any other.
                    reader.max_frame_size = self.max_request
                    self._authenticated(self.sasl)
                    self.sasl = None
                # Parts go out separately: joining would copy fetched log data once more.
                # A TLS stream encrypts them all, then sends once (a copy it makes anyway);
                # a plain one writes them in one writev (_transport_writer).
                if parts and send_parts is not None:
                    await send_parts(parts)
                else:
                    for part in parts or ():
                        await self.stream.send(part)
                self._last_active = loop.time()
                if self.broker.draining or self._close_after_send:
                    return

    async def dispatch(self, frame: bytearray) -> list | None:
        bad = self.broker.metrics.bad_requests
        if len(frame) < 8:
            bad.labels("short").inc()
            log.warning("%s: %d-byte frame is too short for a request header; closing connection",
                        self.peer, len(frame))
            raise CloseConnection
        api_key, version = _KEY_VERSION.unpack_from(frame)
        api = m.API.get(api_key)
        if api is None or api_key not in self.handlers:
            bad.labels("unknown_api").inc()
            log.warning("%s: unknown API key %d; closing connection", self.peer, api_key)
            raise CloseConnection
        (correlation_id,) = _SIZE.unpack_from(frame, 4)
        if self.sasl is None and self.sasl_config is not None:
            if api_key == m.ApiKey.SASL_HANDSHAKE:
                self.sasl = SaslSession(self.sasl_config, reauth_of=(self.mechanism or "", self.principal))
            elif self.session_expires is not None and time.monotonic() >= self.session_expires:
                # Kafka closes at the first request after the session ends, and so do we:
                # a client that did not re-authenticate keeps no access it may have lost.
                bad.labels("session_expired").inc()
                log.info("%s: SASL session of %s expired (connections.max.reauth.ms) without "
                         "re-authentication; closing connection", self.peer, self.principal)
                raise CloseConnection
        if self.sasl is not None and not self.sasl.authenticated and not self.sasl.allows(api_key):
            bad.labels("unauthenticated").inc()
            log.warning("%s: %s before SASL authentication completed (%s); closing connection",
                        self.peer, api.name, self.sasl.state.value)
            raise CloseConnection
        if not api.supports(version):
            if api_key == m.ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 with our ranges so the client can retry with one of them.
                resp = api_versions_response(ErrorCode.UNSUPPORTED_VERSION, self.handlers)
                return encode_response(m.ApiKey.API_VERSIONS, 0, correlation_id, 0, resp)
            bad.labels("unsupported_version").inc()
            log.warning("%s: %s version %d is not supported (%d-%d); closing connection",
                        self.peer, api.name, version, api.min_version, api.max_version)
            raise CloseConnection
        header, request = self._decode(frame, api, version)
        if self.sasl is not None and not self.sasl.authenticated and api_key != m.ApiKey.API_VERSIONS:
            return self._sasl_step(api_key, version, correlation_id, api, request)
        if api_key == m.ApiKey.ENVELOPE:
            return await self._envelope(version, correlation_id, request)
        return await self._serve(api_key, version, correlation_id, api, header.client_id, request,
                                 self.principal, self.peer)

    def _decode(self, frame: bytearray, api, version: int):
        """(header, request); CloseConnection for a request that does not parse."""
        try:
            header, body_at = m.REQUEST_HEADER.decode(api.request_header_version(version), frame, whole=False)
            assert isinstance(header, m.RequestHeader)   # the class of REQUEST_HEADER
            # Kafka reads a request's fields and ignores what follows them, and librdkafka
            # 2.x relies on it (its admin Metadata v12 ends with 3 extra bytes), so do we.
            request, end = api.request.decode(version, frame, body_at, whole=False)
            if end != len(frame):
                log.debug("%s: %s v%d request has %d trailing bytes; ignored as Kafka does",
                          self.peer, api.name, version, len(frame) - end)
        except DecodeError as exc:
            self.broker.metrics.bad_requests.labels("malformed").inc()
            log.warning("%s: malformed %s v%d request: %s; closing connection", self.peer, api.name, version, exc)
            raise CloseConnection from None
        return header, request

    async def _serve(self, api_key: int, version: int, correlation_id: int, api, client_id, request,
                     principal: str, peer: str) -> list | None:
        """Handle a decoded request as `principal` at `peer`: the connection's own, or the
        client's an Envelope names."""
        ctx = RequestContext(self.broker, self.authorizer, self.listener, peer, api_key, version,
                             correlation_id, client_id, principal=principal,
                             controller=self.controller, handlers=self.handlers, audit=self.audit)
        requests, latency = self.broker.metrics.for_api(api.name)
        requests.inc()
        started = time.perf_counter()
        try:
            response = await self.handlers[api_key](ctx, request)
        except CloseConnection:
            raise
        except Exception:
            log.exception("%s: %s v%d failed", self.peer, api.name, version)
            raise CloseConnection from None
        latency.observe(time.perf_counter() - started)
        if response is None:
            if ctx.close_after_response:
                raise CloseConnection
            return None
        try:
            return encode_response(api_key, version, correlation_id, api.response_header_version(version), response)
        except EncodeError:
            log.exception("%s: cannot encode %s v%d response", self.peer, api.name, version)
            raise CloseConnection from None

    # ------------------------------------------------------------------ Envelope

    async def _envelope(self, version: int, correlation_id: int, request) -> list:
        """A request a trusted proxy forwards for a client (handlers/envelope.py has the rules)."""
        def answer(code: int, data=None) -> list:
            return encode_response(m.ApiKey.ENVELOPE, version, correlation_id, 1,
                                   m.EnvelopeResponse(response_data=data, error_code=code))
        host = self.peer.rsplit(":", 1)[0].strip("[]")
        if not self.authorizer.authorize(self.principal, Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                         CLUSTER_NAME, host):
            self.broker.metrics.bad_requests.labels("envelope").inc()
            log.warning("%s: Envelope from %s, who may not ClusterAction on the cluster; refused",
                        self.peer, self.principal)
            return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        try:
            principal = decode_principal(request.request_principal or b"")
            peer = f"{decode_address(request.client_host_address)}:0"
        except DecodeError as exc:
            log.warning("%s: Envelope with an unreadable principal or address: %s", self.peer, exc)
            return answer(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE)
        inner = bytearray(request.request_data)
        if len(inner) < 8:
            return answer(ErrorCode.INVALID_REQUEST)
        api_key, inner_version = _KEY_VERSION.unpack_from(inner)
        (inner_correlation,) = _SIZE.unpack_from(inner, 4)
        api = m.API.get(api_key)
        if api is None or api_key not in self.handlers or api_key in _NOT_ENVELOPED or not api.supports(inner_version):
            log.warning("%s: Envelope around API key %d v%d, which it may not carry", self.peer, api_key,
                        inner_version)
            return answer(ErrorCode.INVALID_REQUEST)
        try:
            header, inner_request = self._decode(inner, api, inner_version)
            parts = await self._serve(api_key, inner_version, inner_correlation, api, header.client_id,
                                      inner_request, principal, peer)
        except CloseConnection:
            # What would close a client's own connection must not close the proxy's, which
            # carries other clients too: the envelope says so instead.
            return answer(ErrorCode.INVALID_REQUEST)
        if parts is None:
            return answer(ErrorCode.NONE)       # acks=0: no answer for the client
        data = b"".join(parts)[4:]              # the inner frame, without its size prefix
        return answer(ErrorCode.NONE, data)

    # ------------------------------------------------------------------ SASL

    def _sasl_step(self, api_key: int, version: int, correlation_id: int, api, request) -> list:
        """SaslHandshake or SaslAuthenticate while the client authenticates (the session
        said it may send it now)."""
        sasl = self.sasl
        assert sasl is not None
        response: m.SaslHandshakeResponse | m.SaslAuthenticateResponse
        if api_key == m.ApiKey.SASL_HANDSHAKE:
            error, mechanisms, close = sasl.handshake(version, request.mechanism)
            response = m.SaslHandshakeResponse(error_code=error, mechanisms=mechanisms)
            if error:
                log.warning("%s: SASL mechanism %r is not enabled on %s (%s); closing connection",
                            self.peer, request.mechanism, self.listener.name, ", ".join(mechanisms))
        else:
            answer = sasl.authenticate(bytes(request.auth_bytes))
            response = m.SaslAuthenticateResponse(error_code=answer.error, error_message=answer.message,
                                                  auth_bytes=answer.token,
                                                  session_lifetime_ms=answer.session_lifetime_ms)
            close = answer.close_after
            self._log_authentication(answer)
        self._close_after_send = close
        return encode_response(api_key, version, correlation_id, api.response_header_version(version), response)

    def _raw_sasl_token(self, frame: bytearray) -> list:
        """After a v0 SaslHandshake the client sends bare tokens; each reply is a bare,
        size-prefixed token too, and a failure just closes (Kafka's legacy framing)."""
        sasl = self.sasl
        assert sasl is not None
        answer = sasl.authenticate(bytes(frame))
        self._log_authentication(answer)
        if answer.error:
            raise CloseConnection
        return [_SIZE.pack(len(answer.token)) + answer.token]

    def _log_authentication(self, answer) -> None:
        sasl = self.sasl
        assert sasl is not None
        what = "re-authentication" if sasl.reauthenticating else "authentication"
        if self.audit.enabled and (answer.error or sasl.authenticated):
            # A failed login names no principal but the one it claimed, which may not exist.
            self.audit.record(AuditEvent(
                now_ms(), "authentication", sasl.principal or self.principal, self.peer, self.listener.name,
                "SaslAuthenticate", "", "", f"SASL/{sasl.mechanism_name}",
                "FAILED" if answer.error else "SUCCEEDED",
                answer.message if answer.error else ("re-authenticated" if sasl.reauthenticating else None)))
        if answer.error:
            self.broker.metrics.bad_requests.labels("authentication").inc()
            self.broker.metrics.authentications.labels(
                self.listener.name, "reauthentication_failed" if sasl.reauthenticating else "failed").inc()
            log.warning("%s: SASL %s %s failed on %s: %s", self.peer, sasl.mechanism_name, what,
                        self.listener.name, answer.message)
        elif sasl.authenticated:
            self.broker.metrics.authentications.labels(
                self.listener.name, "reauthenticated" if sasl.reauthenticating else "succeeded").inc()
            log.log(logging.DEBUG if sasl.reauthenticating else logging.INFO,
                    "%s: %s as %s (SASL %s) on %s", self.peer,
                    "re-authenticated" if sasl.reauthenticating else "authenticated",
                    sasl.principal, sasl.mechanism_name, self.listener.name)

    def _authenticated(self, sasl: SaslSession) -> None:
        """A (re-)authentication succeeded: the connection takes its principal, mechanism and
        the session's end (KIP-368)."""
        self.principal = sasl.principal or self.principal
        self.mechanism = sasl.mechanism_name
        lifetime = sasl.session_lifetime_ms
        self.session_expires = time.monotonic() + lifetime / 1000 if lifetime > 0 else None

