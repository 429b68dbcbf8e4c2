"""One TCP connection to one broker: framing, correlation ids, pipelining, versions.

Theory of operation
-------------------
Every Kafka frame is a 4-byte big-endian size and that many bytes. A broker answers the
requests of one connection strictly in the order they arrived, so many requests may be in
flight at once (pipelining): we keep the pending ones in an insertion-ordered dict keyed by
correlation id, and each response must match the oldest pending request. A response that
does not is a broken peer, and the connection is closed (as the Java client does).

Reading uses asyncio's BufferedProtocol so that the kernel copies straight into our
buffers: small frames are parsed out of one reusable scratch buffer; a frame bigger than half
of it (a large fetch response) gets its own exactly-sized buffer, filled in place, so it is
never copied. A size prefix outside 4..max_response_size closes the connection before any
allocation: a hostile or confused peer cannot make us allocate more than that bound.

Writing encodes the header and body into a list of buffers (record sets stay separate
buffers, see codegen.Writer) and hands them to `transport.writelines`, so record bytes are
not copied into one big frame. When the transport's buffer is full, senders wait.

With an ssl_context the connection is TLS (asyncio's own, so frames are read as above from
the decrypted stream); a certificate the context does not accept fails connect() with a
KafkaConnectionError that gives OpenSSL's reason.

On connect we send ApiVersions (v3 first, KIP-511). A broker that does not know v3 answers
UNSUPPORTED_VERSION in a v0 body listing its own range; we retry with the highest version it
lists (or v0). Afterwards each request goes out in the highest version both sides support.

A request that gets no answer within its timeout closes the connection: later responses on
it would be out of step, and Kafka's own clients do the same. Closing, for whatever reason,
fails every pending request with a KafkaConnectionError (or RequestTimedOutError) that says
which broker and why.
"""
from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import struct
import time
from typing import Any, Callable

from core.protocol import messages as m
from core.protocol.codegen import Writer
from core.protocol.errors import DecodeError, EncodeError, ErrorCode, KafkaError

from .sasl import SaslCredentials, authenticate
from .errors import (KafkaConnectionError, ProtocolError, RequestTimedOutError,
                     UnsupportedVersionError)

log = logging.getLogger(__name__)

__all__ = ["BrokerConnection", "DEFAULT_MAX_RESPONSE_SIZE", "API_KEY_OF", "CLIENT_SOFTWARE_VERSION"]

DEFAULT_MAX_RESPONSE_SIZE = 100 * 1024 * 1024
CLIENT_SOFTWARE_NAME = "seaway"
CLIENT_SOFTWARE_VERSION = "0.1.0"

_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_SCRATCH_SIZE = 256 * 1024
_COMPACT_BELOW = _SCRATCH_SIZE // 2
_MAX_NO_REPLY = 1024
_SASL_KEYS = (m.ApiKey.SASL_HANDSHAKE, m.ApiKey.SASL_AUTHENTICATE)

#: request class -> API key, so callers can pass a request without naming its key.
API_KEY_OF: dict[type, int] = {api.request.cls: key for key, api in m.API.items()}


def not_kafka(first: bytes) -> str | None:
    """What answered, when the first bytes back cannot begin a Kafka response (whose size
    prefix they failed to be): a one-line reason naming what was expected instead, or None."""
    if first.startswith(b"HTTP/") or first[:5].lower() in (b"<!doc", b"<html"):
        return ("an HTTP server answered, not a Kafka listener (a metrics, console or other web port? "
                "the bootstrap address is the broker's listener)")
    if len(first) >= 2 and first[0] in (0x15, 0x16) and first[1] == 0x03:
        return ("a TLS server answered, not a plaintext Kafka listener (connect with security.protocol=SSL "
                "or SASL_SSL: --command-config)")
    if first.startswith(b"SSH-"):
        return "an SSH server answered, not a Kafka listener"
    return None


class _FrameProtocol(asyncio.BufferedProtocol):
    """Cuts the byte stream into frames and hands each to the connection."""

    def __init__(self, conn: "BrokerConnection", max_size: int):
        self.conn = conn
        self.max_size = max_size
        self.transport: asyncio.Transport | None = None
        self.scratch = bytearray(_SCRATCH_SIZE)
        self.view = memoryview(self.scratch)
        self.start = 0  # unparsed bytes are scratch[start:end]
        self.end = 0
        self.frame: bytearray | None = None  # a big frame being filled in place
        self.frame_view: memoryview | None = None
        self.filled = 0
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.lost = asyncio.get_running_loop().create_future()

    # -- asyncio callbacks

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int):
        if self.frame_view is not None:
            return self.frame_view[self.filled:]
        if self.start and len(self.scratch) - self.end < _COMPACT_BELOW:
            # Only a partial frame smaller than half the scratch stays here (bigger ones move
            # to their own buffer), so moving it to the front always frees at least half.
            pending = self.end - self.start
            self.scratch[:pending] = self.scratch[self.start:self.end]
            self.start, self.end = 0, pending
        return self.view[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.frame is not None:
            self.filled += nbytes
            if self.filled == len(self.frame):
                frame = self.frame
                assert self.frame_view is not None   # set with the frame
                self.frame_view.release()
                self.frame = self.frame_view = None
                self.conn._on_frame(frame)
            return
        self.end += nbytes
        self._parse()

    def _parse(self) -> None:
        buf, view = self.scratch, self.view
        start, end = self.start, self.end
        while end - start >= 4 and not self.conn.closed:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 4 or size > self.max_size:
                if not self.conn.answered and (what := not_kafka(bytes(view[start:end]))):
                    self.conn._fail(KafkaConnectionError(f"{self.conn}: {what}"))
                    return
                self.conn._fail(ProtocolError(
                    f"{self.conn}: response size prefix {size} is outside 4..{self.max_size} "
                    f"(max_response_size); closing the connection"))
                return
            total = 4 + size
            if end - start >= total:
                frame = bytes(view[start + 4:start + total])
                start += total
                self.start = start
                self.conn._on_frame(frame)
                continue
            if total > _COMPACT_BELOW:
                # A big frame: give it its own buffer and let the kernel fill it in place.
                have = end - start - 4
                self.frame = bytearray(size)
                self.frame[:have] = view[start + 4:end]
                self.frame_view = memoryview(self.frame)
                self.filled = have
                start = end = 0
            break
        if start == end:
            start = end = 0
        self.start, self.end = start, end

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def eof_received(self) -> bool:
        return False  # let the transport close; connection_lost reports it

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()  # wake writers; they will see the connection closed
        if not self.lost.done():
            self.lost.set_result(None)
        reason = f"lost: {exc}" if exc else "closed by the broker"
        if not self.conn.answered and self.conn.in_flight and exc is None and self.conn.ssl_context is None:
            # Nothing came back but a close: not Kafka, or a Kafka listener that expects TLS.
            reason = ("closed before any answer: not a Kafka listener, or one that expects TLS "
                      "(security.protocol=SSL or SASL_SSL)")
        self.conn._fail(KafkaConnectionError(f"connection to {self.conn} {reason}"))


class BrokerConnection:
    """A connection to one broker. Create, `await connect()`, then `await send(request)`."""

    def __init__(self, host: str, port: int, *, node_id: int = -1, client_id: str | None = "seaway",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
                 on_close: Callable[["BrokerConnection"], None] | None = None,
                 local_address: str | None = None, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None):
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_response_size = max_response_size
        self.on_close = on_close
        # The IP our end binds to (client.local.address): on a multi-homed host it picks the
        # interface; a fault-injection proxy tells nodes apart by it. None: the kernel picks.
        self.local_address = local_address
        # TLS (security.protocol SSL): the server's certificate is checked against the
        # context's trust, and its name against `host` unless the context says otherwise.
        self.ssl_context = ssl_context
        self.sasl = sasl   # SASL_PLAINTEXT / SASL_SSL: authenticate right after ApiVersions
        # KIP-368: when the broker bounds the session, authenticate again before it ends (at
        # 85-95% of it, as Kafka's clients do, so a fleet does not re-authenticate at once)
        self._reauth_at: float | None = None
        self._reauth: asyncio.Future | None = None
        #: api key -> (min, max) versions the broker advertised
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.api_versions_version = -1  # the ApiVersions version the broker accepted
        self.closed = False
        self.answered = False        # a frame came back: whatever is there speaks Kafka
        self.close_error: KafkaError | None = None
        self._proto: _FrameProtocol | None = None
        self._transport: asyncio.Transport | None = None
        # correlation id -> future of the raw response frame; dict order is send order
        self._pending: dict[int, asyncio.Future] = {}
        self._next_correlation_id = 0
        # correlation ids of requests sent without expecting a response, in send order
        self._no_reply: dict[int, None] = {}

    def __str__(self) -> str:
        node = f"node {self.node_id} " if self.node_id >= 0 else ""
        return f"{node}{self.host}:{self.port}"

    __repr__ = __str__

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------ connect / close

    async def connect(self) -> "BrokerConnection":
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                transport, proto = await loop.create_connection(
                    lambda: _FrameProtocol(self, self.max_response_size), self.host, self.port,
                    local_addr=(self.local_address, 0) if self.local_address else None,
                    ssl=self.ssl_context, server_hostname=self.host if self.ssl_context else None)
        except (OSError, TimeoutError) as exc:
            self.closed = True
            if isinstance(exc, ConnectionRefusedError):
                raise KafkaConnectionError(f"cannot connect to {self}: nothing listens there "
                                           f"(connection refused)") from None
            raise KafkaConnectionError(f"cannot connect to {self}: {exc or 'timed out'}") from None
        self._transport, self._proto = transport, proto
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # requests are whole frames written at once; don't let Nagle hold them back
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        try:
            await self._negotiate_versions()
            if self.sasl is not None:
                self._session_started(await authenticate(self, self.sasl))
        except BaseException as exc:
            self._fail(exc if isinstance(exc, KafkaError)
                       else KafkaConnectionError(f"connection to {self} aborted during ApiVersions"))
            raise
        return self

    async def _negotiate_versions(self) -> None:
        api = m.API[m.ApiKey.API_VERSIONS]
        version = min(3, api.max_version)
        request = m.ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                       client_software_version=CLIENT_SOFTWARE_VERSION)
        while True:
            frame = await self._roundtrip(m.ApiKey.API_VERSIONS, version, request, self.request_timeout_ms)
            # ApiVersions always answers with response header v0 (KIP-511): 4 bytes.
            if len(frame) < 6:
                raise ProtocolError(f"{self}: ApiVersions response of {len(frame)} bytes is too short")
            (code,) = _I16.unpack_from(frame, 4)
            if code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
                # The body is in v0 form and lists the broker's ApiVersions range.
                resp = self._decode(api, 0, frame, 4)
                theirs = next((k.max_version for k in resp.api_keys if k.api_key == m.ApiKey.API_VERSIONS), 0)
                version = min(theirs, version - 1, api.max_version)
                version = max(version, 0)
                continue
            resp = self._decode(api, version, frame, 4)
            if resp.error_code:
                raise KafkaError(resp.error_code, f"ApiVersions v{version} refused by {self}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            self.api_versions_version = version
            return

    async def close(self) -> None:
        """Close the connection; pending requests fail with KafkaConnectionError."""
        self._fail(KafkaConnectionError(f"connection to {self} closed by the client"))
        if self._proto is not None and not self._proto.lost.done():
            try:  # give the transport a moment to flush and report the close
                async with asyncio.timeout(1):
                    await asyncio.shield(self._proto.lost)
            except TimeoutError:
                if self._transport is not None:
                    self._transport.abort()

    def close_nowait(self) -> None:
        """Close without waiting for the transport to report it; pending requests fail."""
        self._fail(KafkaConnectionError(f"connection to {self} closed by the client"))

    def _fail(self, error: BaseException) -> None:
        """Close for `error` (once) and fail every pending request with it."""
        if self.closed:
            return
        self.closed = True
        self.close_error = error if isinstance(error, KafkaError) else KafkaConnectionError(str(error))
        if self._transport is not None:
            self._transport.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(self.close_error)
        log.debug("%s closed: %s", self, error)
        if self.on_close is not None:
            try:
                self.on_close(self)
            except Exception:  # a callback bug must not break the close
                log.exception("%s: on_close callback failed", self)

    # ------------------------------------------------------------------ versions

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version of `api_key` both we and the broker speak (capped at
        `max_version`); UnsupportedVersionError if there is none."""
        api = m.API[api_key]
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersionError(f"{self} does not support {api.name} (key {api_key})")
        high = min(api.max_version, theirs[1])
        if max_version is not None:
            high = min(high, max_version)
        low = max(api.min_version, theirs[0])
        if high < low:
            raise UnsupportedVersionError(
                f"no common {api.name} version: we speak {api.min_version}-{api.max_version}"
                f"{f' (capped at {max_version})' if max_version is not None else ''}, "
                f"{self} speaks {theirs[0]}-{theirs[1]}")
        return high

    def supports(self, api_key: int, min_version: int = 0) -> bool:
        try:
            return self.version_for(api_key) >= min_version
        except UnsupportedVersionError:
            return False

    # ------------------------------------------------------------------ requests

    async def send(self, request, api_key: int | None = None, *, version: int | None = None,
                   timeout_ms: float | None = None, expect_response: bool = True) -> Any:
        """Send `request` and return the decoded response.

        `version` defaults to the highest common one. `timeout_ms` defaults to the
        connection's request timeout. With `expect_response=False` (Produce with acks=0) the
        call returns None once the request is written.
        """
        if api_key is None:
            api_key = API_KEY_OF[type(request)]
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at and api_key not in _SASL_KEYS:
            await self._reauthenticate()
        api = m.API[api_key]
        if version is None:
            version = self.version_for(api_key)
        if timeout_ms is None:
            timeout_ms = self.request_timeout_ms
        frame = await self._roundtrip(api_key, version, request, timeout_ms, expect_response)
        if frame is None:
            return None
        try:
            _, pos = m.RESPONSE_HEADER.decode(api.response_header_version(version), frame, whole=False)
        except DecodeError as exc:
            raise ProtocolError(f"malformed response header from {self}: {exc}") from None
        return self._decode(api, version, frame, pos)

    def send_frame(self, build: Callable[[int], list]) -> "asyncio.Future[Any]":
        """Write the request frame `build(correlation_id)` returns (its parts, size prefix
        included) and return the future of its answer frame, undecoded (without its size
        prefix). For a proxy that forwards bytes it does not decode (the gateway); no
        timeout of its own: the request's sender has one."""
        if self.closed or self._transport is None:
            raise self.close_error or KafkaConnectionError(f"{self} is not connected")
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = fut
        self._transport.writelines(build(correlation_id))
        return fut

    def reauthentication_due(self) -> bool:
        """Whether the SASL session must be renewed before the next request: send() does it
        by itself; a caller of send_frame() awaits reauthenticate() first."""
        return self._reauth_at is not None and time.monotonic() >= self._reauth_at

    async def reauthenticate(self) -> None:
        await self._reauthenticate()

    def _session_started(self, lifetime_ms: int) -> None:
        self._reauth_at = (time.monotonic() + lifetime_ms / 1000 * random.uniform(0.85, 0.95)
                           if lifetime_ms > 0 else None)

    async def _reauthenticate(self) -> None:
        """Authenticate again on this connection (KIP-368). Requests already written are
        answered first, in order; new ones wait until it is done, because a broker serves
        nothing but SaslAuthenticate while a re-authentication runs."""
        if self._reauth is None:
            self._reauth = asyncio.ensure_future(self._run_reauthentication())
        await asyncio.shield(self._reauth)

    async def _run_reauthentication(self) -> None:
        assert self.sasl is not None
        try:
            self._session_started(await authenticate(self, self.sasl))
        except BaseException as exc:
            error = exc if isinstance(exc, KafkaError) else KafkaConnectionError(
                f"re-authentication with {self} failed: {exc}")
            self._fail(error)
            raise error from None
        finally:
            self._reauth = None

    def _decode(self, api, version: int, frame, pos: int):
        try:
            return api.response.decode(version, frame, pos)
        except DecodeError as exc:
            raise ProtocolError(f"malformed {api.name} v{version} response from {self}: {exc}") from None

    async def _roundtrip(self, api_key: int, version: int, request, timeout_ms: float,
                         expect_response: bool = True):
        if self.closed or self._transport is None:
            raise self.close_error or KafkaConnectionError(f"{self} is not connected")
        api = m.API[api_key]
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        w = Writer()
        w.buf += b"\x00\x00\x00\x00"  # size prefix, patched below
        header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                                 correlation_id=correlation_id, client_id=self.client_id)
        try:
            m.REQUEST_HEADER.encode_into(api.request_header_version(version), header, w)
            api.request.encode_into(version, request, w)
        except EncodeError as exc:
            raise ProtocolError(f"cannot encode {api.name} v{version}: {exc}") from None
        parts = w.finish()
        size = sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts) - 4
        first = bytearray(parts[0])
        _SIZE.pack_into(first, 0, size)
        parts[0] = first
        fut = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = fut
        else:
            self._no_reply[correlation_id] = None
            if len(self._no_reply) > _MAX_NO_REPLY:  # a Kafka broker never answers: forget the oldest
                del self._no_reply[next(iter(self._no_reply))]
        self._transport.writelines(parts)
        proto = self._proto
        assert proto is not None   # set with the transport
        if not proto.can_write.is_set():
            await proto.can_write.wait()
            if self.closed and fut is None:
                raise self.close_error
        if fut is None:
            return None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                # If the caller is cancelled, fut is cancelled but stays pending in the dict,
                # so the response that still arrives is matched and dropped in order.
                return await fut
        except TimeoutError:
            error = RequestTimedOutError(
                f"{api.name} v{version} to {self} got no response within {timeout_ms:.0f} ms")
            self._fail(error)
            raise error from None

    def _on_frame(self, frame) -> None:
        self.answered = True
        if len(frame) < 4:  # checked by the framer; kept for safety
            self._fail(ProtocolError(f"{self}: response frame too short"))
            return
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        oldest = next(iter(self._pending), None)
        if oldest != correlation_id and correlation_id in self._no_reply:
            # Kafka sends nothing back for acks=0 Produce; some brokers (tansu 0.6) answer
            # anyway. Those answers are in order too, so drop them and move on.
            while self._no_reply:
                done = next(iter(self._no_reply))
                del self._no_reply[done]
                if done == correlation_id:
                    break
            return
        if oldest != correlation_id:
            self._fail(ProtocolError(
                f"{self}: response correlation id {correlation_id} does not match the oldest "
                f"pending request ({oldest}); closing the connection"))
            return
        fut = self._pending.pop(correlation_id)
        if self._no_reply:
            # No-reply requests sent before this one were not answered and never will be.
            for cid in [c for c in self._no_reply if c < correlation_id]:
                del self._no_reply[cid]
        if not fut.done():  # done: the caller was cancelled or timed out; drop the answer
            fut.set_result(frame)
