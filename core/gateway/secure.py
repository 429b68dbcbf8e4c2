"""The gateway in front of a secured DR pair: clients authenticate to it as to a broker, and
each of their requests reaches the cluster as theirs, never as the gateway's.

Theory of operation
-------------------
*Authentication.* The gateway keeps no credentials of its clients. A client's SASL exchange
(SaslHandshake v1, then SaslAuthenticate) is relayed, frame by frame, to a broker of the
active cluster over a connection of its own, TLS as the gateway's own connections are but
not logged in: the broker checks the password or the SCRAM proof against its credentials,
exactly as if the client had come to it (a wrong password gets the broker's answer, and the
broker's session lifetime, KIP-368, reaches the client as it is). When the broker accepts
the last step (one for PLAIN, two for SCRAM), the client's principal is `User:<the name it
logged in with>`, and the relay connection closes. The pair's clusters share their users
(`dr status` checks it), so a client logged in through one cluster is the same principal on
the other after a move; nothing has to happen again.

*Authorization.* The gateway's own connections to brokers log in as the gateway
(`--command-config`), and every client request goes inside an Envelope (KIP-590) naming the
client's principal and address (core/protocol/envelope.py): the broker authorizes it as the
client, by the client's ACLs, on the cluster that serves it. The gateway's principal needs
ClusterAction on the cluster (to send envelopes) and Read and Describe on `__seaway_dr` (to
follow the controller); given nothing else, it can do nothing else, and a client gains no
right by coming through it. ApiVersions is answered by the gateway (what both it and the
active cluster speak), since an envelope may not carry it.

*Bytes.* The envelope is written around the client's frame without copying it, and the
answer's response data is cut out of the envelope's answer without decoding it; only the
answers the gateway rewrites anyway (Metadata, FindCoordinator, DescribeCluster) are decoded.
An envelope the broker refuses (the gateway may not send envelopes, or sent one it should
not) closes the client's connection, with a log line naming the cause: an operator's
mistake, never the client's.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

from core.client.connection import BrokerConnection
from core.client.errors import KafkaConnectionError
from core.client.security import ClientSecurity
from core.protocol.api_keys import ApiKey
from core.protocol.envelope import envelope_request_parts, envelope_response_data
from core.protocol.errors import DecodeError

from .link import BrokerLink

if TYPE_CHECKING:
    from .proxy import ClientConnection, Reply, Rewrite

log = logging.getLogger("seaway.gateway")

SCRAM_STEPS = 2
_SIZE = struct.Struct(">i")


def username_of(mechanism: str, token: bytes) -> str | None:
    """The user a client's first SASL token logs in as (PLAIN: authzid NUL user NUL password;
    SCRAM: the client-first message's n=), or None if it names none."""
    try:
        if mechanism == "PLAIN":
            parts = token.split(b"\x00")
            return parts[1].decode() if len(parts) == 3 and parts[1] else None
        if mechanism.startswith("SCRAM-"):
            bare = token.decode().split(",", 2)[2]          # after the GS2 header "n,,"
            for attr in bare.split(","):
                if attr.startswith("n="):
                    return attr[2:].replace("=2C", ",").replace("=3D", "=") or None
    except (UnicodeDecodeError, IndexError):
        return None
    return None


class SecureUpstream(BrokerLink):
    """A client connection's connection to one broker, logged in as the gateway: each client
    request goes inside an Envelope naming the client."""

    def __init__(self, owner: "ClientConnection", cluster: str, host: str, port: int, security: ClientSecurity):
        self.owner = owner
        self.cluster = cluster
        self.host, self.port = host, port
        self.conn = BrokerConnection(host, port, client_id="seaway-gateway", ssl_context=security.ssl_context,
                                     sasl=security.sasl)
        self.ready = False
        self.closed = False
        self.retiring = False
        self.waiting = 0
        # Requests that wait for the login: (frame, reply, rewrite, the gateway's own).
        self.backlog: deque[tuple[bytes | bytearray, Reply | None, Rewrite | None, bool]] = deque()
        self._task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        await self._then_send_backlog(self.conn.connect(), connecting=True)

    async def _then_send_backlog(self, step: Any, connecting: bool = False) -> None:
        """Log in (or renew the login), then send what waited for it, in order."""
        try:
            await step
        except KafkaConnectionError as exc:
            if connecting and not self.closed:
                # Nothing reached the broker: the requests wait (proxy.py's notes).
                unsent = [(frame, reply, own) for frame, reply, _, own in self.backlog]
                self.backlog.clear()
                self.owner.upstream_unreachable(self, unsent, exc)
            else:
                self._failed(exc)
            return
        except Exception as exc:   # noqa: BLE001 — any other failure to log in closes the client's connection
            self._failed(exc)
            return
        if connecting:
            self.owner.reached()
        self.ready = True
        while self.backlog and not self.closed and self.ready:
            frame, reply, rewrite, _ = self.backlog.popleft()
            self._send_now(frame, reply, rewrite)

    def send(self, frame: bytes | bytearray, reply: "Reply | None", rewrite: "Rewrite | None",
             *, expect_answer: bool | None = None) -> None:
        if self.closed:
            self.owner.upstream_failed(self, None)
            return
        if self.ready and self.conn.reauthentication_due():
            # The gateway's own session ends soon (the cluster's connections.max.reauth.ms):
            # renewed before anything more is sent, or the broker closes the connection.
            self.ready = False
            self._task = asyncio.get_running_loop().create_task(self._then_send_backlog(self.conn.reauthenticate()))
        if not self.ready:
            self.backlog.append((frame, reply, rewrite, bool(expect_answer) and reply is None))
        else:
            self._send_now(frame, reply, rewrite)

    def _send_now(self, frame: bytes | bytearray, reply: "Reply | None", rewrite: "Rewrite | None") -> None:
        owner = self.owner
        plain = reply is not None and reply.head.api_key == ApiKey.API_VERSIONS
        try:
            if plain:
                # An envelope may not carry ApiVersions, and its answer is the same for every
                # principal: sent as the gateway's own, under the connection's correlation id.
                future = self.conn.send_frame(lambda cid: [_SIZE.pack(len(frame)), _request_with_correlation(frame, cid)])
            else:
                future = self.conn.send_frame(lambda cid: envelope_request_parts(
                    cid, "seaway-gateway", frame, owner.principal_bytes, owner.address_bytes))
        except Exception as exc:   # noqa: BLE001 — the connection went away meanwhile
            self._failed(exc)
            return
        self.waiting += 1
        future.add_done_callback(lambda f: self._answered(f, reply, rewrite, plain))

    def _answered(self, future: "asyncio.Future[Any]", reply: "Reply | None", rewrite: "Rewrite | None",
                  plain: bool) -> None:
        self.waiting -= 1
        if self.closed:
            return
        if future.cancelled() or future.exception() is not None:
            self._failed(None if future.cancelled() else future.exception())
            return
        data: bytes | bytearray | memoryview | None
        if plain:
            assert reply is not None
            error, data = 0, _answer_with_correlation(future.result(), reply.head.correlation_id)
        else:
            try:
                error, data = envelope_response_data(future.result())
            except DecodeError as exc:
                self._failed(exc)
                return
        if error:
            log.error("%s: %s:%d refused the gateway's envelope (error %d): the gateway's principal needs "
                      "ClusterAction on the cluster", self.owner.peer, self.host, self.port, error)
            self._failed(RuntimeError(f"envelope refused with error {error}"))
            return
        if reply is not None:
            if data is None:
                self._failed(RuntimeError("an envelope without the answer the client waits for"))
                return
            if (failure := reply.fill(data, rewrite)) is not None:
                self._failed(failure)
                return
            self.owner.flush()
        if self.retiring and not self.waiting:
            self.close()

    def pause_reading(self) -> None:
        transport = getattr(self.conn, "_transport", None)
        if transport is not None:
            transport.pause_reading()

    def resume_reading(self) -> None:
        transport = getattr(self.conn, "_transport", None)
        if transport is not None and not self.closed:
            transport.resume_reading()

    def busy(self) -> bool:
        return bool(self.waiting or self.backlog)

    def shut(self) -> None:
        self.backlog.clear()
        if not self._task.done():
            self._task.cancel()
        self.conn.close_nowait()


def _request_with_correlation(frame: bytes | bytearray, correlation_id: int) -> bytearray:
    """A copy of a request frame under another correlation id (after API key and version)."""
    out = bytearray(frame)
    _SIZE.pack_into(out, 4, correlation_id)
    return out


def _answer_with_correlation(frame: bytes | bytearray, correlation_id: int) -> bytearray:
    """A copy of an answer frame under another correlation id (its first field)."""
    out = bytearray(frame)
    _SIZE.pack_into(out, 0, correlation_id)
    return out


class SaslRelay:
    """One client's SASL exchange, relayed to a broker (see the module's notes)."""

    def __init__(self, mechanism: str, steps: int):
        self.mechanism = mechanism
        self.steps = steps              # SaslAuthenticate answers that complete the exchange
        self.accepted = 0
        self.username: str | None = None
        self.failed = False

    @classmethod
    def for_mechanism(cls, mechanism: str) -> "SaslRelay":
        return cls(mechanism, SCRAM_STEPS if mechanism.startswith("SCRAM-") else 1)

    def note_token(self, token: bytes) -> None:
        if self.username is None:
            self.username = username_of(self.mechanism, token)

    def note_answer(self, error_code: int) -> bool:
        """Whether the exchange is now complete and accepted."""
        if error_code:
            self.failed = True
            return False
        self.accepted += 1
        return self.accepted >= self.steps and self.username is not None

