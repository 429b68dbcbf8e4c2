"""SASL on a listener: the server's side of SaslHandshake and SaslAuthenticate, with no I/O.

Theory of operation
-------------------
A connection to a SASL_PLAINTEXT or SASL_SSL listener starts unauthenticated, and until it is
authenticated only three requests are served: ApiVersions, SaslHandshake and SaslAuthenticate
(Kafka's SaslServerAuthenticator). Anything else closes the connection. So do frames larger
than `sasl.server.max.receive.size` (CVE-2022-34917: an unauthenticated client must not make
the broker allocate 100 MiB) and a second handshake.

    HANDSHAKE --SaslHandshake(mechanism)--> AUTHENTICATE --SaslAuthenticate...--> COMPLETE
        |  unknown mechanism: UNSUPPORTED_SASL_MECHANISM, then close       |
        |                                              failure: SASL_AUTHENTICATION_FAILED, then close
        v0 handshake: the tokens then come as bare size-prefixed frames (RAW_TOKENS), not
        as SaslAuthenticate requests; a failure just closes.

`SaslSession` is that machine for one connection: the connection feeds it requests and writes
what it answers; `close_after` says the connection must close once the answer is out.

Re-authentication (KIP-368): with `connections.max.reauth.ms` set, a successful
SaslAuthenticate tells the client its session's lifetime, and the connection closes at the
first request after that time unless the client has authenticated again. A client does so
with a new SaslHandshake on the authenticated connection; the connection then starts a new
session with `reauth_of` (the mechanism and principal it holds), and while it runs only
SaslAuthenticate is served, as during the first authentication. The new session must use the
same mechanism and prove the same principal, or it fails with SASL_AUTHENTICATION_FAILED and
the connection closes (Kafka's messages, so clients log what they would from Kafka). A v0
client (no SaslAuthenticate) cannot re-authenticate; its connection closes at expiry.
Mechanisms are small objects with `evaluate(token) -> reply` that raise AuthenticationFailed;
PLAIN (users from the listener's JAAS config) and SCRAM-SHA-256/512 (credentials from the
metadata log, core/security/scram.py).

A failure's message never says whether the user exists ("Invalid username or password"), and
passwords are compared in constant time (CVE-2021-38153).
"""
from __future__ import annotations

import enum
import hmac
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from core.client.sasl import JAAS_OPTION, jaas_unescape
from core.protocol.errors import ErrorCode

from .scram import MECHANISMS as SCRAM_MECHANISMS
from .scram import ScramCredential, ScramError, ScramServer

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


class AuthenticationFailed(Exception):
    """The client did not prove who it is; the message is safe to send back."""


class Mechanism(Protocol):
    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None: ...

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """PLAIN (RFC 4616): one token, `authzid NUL authcid NUL password`."""

    def __init__(self, users: Mapping[str, str]):
        self.users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Authentication failed: PLAIN message must be authzid\\0username\\0password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: PLAIN message is not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            # CVE-2017-12610: an authorization id other than the user would let one user act
            # as another.
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id "
                                       "that is different from username")
        expected = self.users.get(user)
        # Compare against something even for an unknown user, so the time taken says nothing.
        matches = hmac.compare_digest(password.encode(), (expected or "\x00" * len(password)).encode())
        if expected is None or not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.username = user
        self.complete = True
        return b""


class _ScramMechanism:
    def __init__(self, server: ScramServer):
        self.server = server

    @property
    def complete(self) -> bool:
        return self.server.complete

    @property
    def username(self) -> str | None:
        return self.server.username

    def evaluate(self, token: bytes) -> bytes:
        try:
            return self.server.evaluate(token)
        except ScramError as exc:
            raise AuthenticationFailed(str(exc)) from None


@dataclass
class SaslConfig:
    """A listener's SASL: its mechanisms, PLAIN's users and where SCRAM credentials come from."""
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    scram_lookup: Callable[[str, str], ScramCredential | None] = lambda mechanism, user: None
    scram_secret: bytes = b""
    max_receive_size: int = 524_288
    # connections.max.reauth.ms per mechanism; 0 or absent: sessions never expire
    max_reauth_ms: Mapping[str, int] = field(default_factory=dict)

    def new_mechanism(self, name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(self.plain_users)
        return _ScramMechanism(ScramServer(name, lambda user: self.scram_lookup(name, user), self.scram_secret))


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw tokens"          # after a v0 handshake
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass
class Answer:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    token: bytes = b""
    close_after: bool = False
    session_lifetime_ms: int = 0       # set on the answer that completes authentication


class SaslSession:
    """One authentication (or, with `reauth_of=(mechanism, principal)`, one
    re-authentication) of one connection."""

    def __init__(self, config: SaslConfig, reauth_of: tuple[str, str] | None = None):
        self.config = config
        self.state = State.HANDSHAKE
        self.mechanism_name: str | None = None
        self._mechanism: Mechanism | None = None
        self.principal: str | None = None
        self.reauth_of = reauth_of
        self._refusal: str | None = None   # re-authentication with another mechanism fails at its token
        self.session_lifetime_ms = 0

    @property
    def authenticated(self) -> bool:
        return self.state is State.COMPLETE

    def allows(self, api_key: int) -> bool:
        """May a request with this key be served now? (ApiVersions, SaslHandshake before
        authentication, SaslAuthenticate after a v1 handshake; anything once authenticated.)"""
        if self.state is State.COMPLETE:
            return True
        if api_key == 18:
            return self.state is State.HANDSHAKE
        if api_key == 17:
            return self.state is State.HANDSHAKE
        if api_key == 36:
            return self.state is State.AUTHENTICATE
        return False

    def handshake(self, version: int, mechanism: str) -> tuple[ErrorCode, list[str], bool]:
        """SaslHandshake: (error, enabled mechanisms, close after answering)."""
        enabled = list(self.config.mechanisms)
        if self.state is not State.HANDSHAKE:
            self.state = State.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE, enabled, True
        if mechanism not in enabled:
            self.state = State.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled, True
        if self.reauth_of is not None:
            if version < 1:
                # Bare tokens cannot follow requests on a live connection.
                self.state = State.FAILED
                return ErrorCode.ILLEGAL_SASL_STATE, enabled, True
            if mechanism != self.reauth_of[0]:
                # As Kafka: the handshake succeeds and the next token fails, so the client
                # sees the reason in SaslAuthenticate's error message.
                self._refusal = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                 f"re-authentication of mechanism '{self.reauth_of[0]}'")
        self.mechanism_name = mechanism
        self._mechanism = self.config.new_mechanism(mechanism)
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKENS
        return ErrorCode.NONE, enabled, False

    def authenticate(self, token: bytes) -> Answer:
        """One client token, from SaslAuthenticate or (after a v0 handshake) a bare frame."""
        if self.state not in (State.AUTHENTICATE, State.RAW_TOKENS) or self._mechanism is None:
            self.state = State.FAILED
            return Answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake", close_after=True)
        try:
            if self._refusal is not None:
                raise AuthenticationFailed(self._refusal)
            reply = self._mechanism.evaluate(token)
        except AuthenticationFailed as exc:
            return self._fail(str(exc))
        if not self._mechanism.complete:
            return Answer(token=reply)
        principal = f"User:{self._mechanism.username}"
        if self.reauth_of is not None and principal != self.reauth_of[1]:
            return self._fail(f"Cannot change principals during re-authentication from "
                              f"{self.reauth_of[1].replace(':', '.', 1)}: {principal.replace(':', '.', 1)}")
        self.principal = principal
        self.state = State.COMPLETE
        self.session_lifetime_ms = self.config.max_reauth_ms.get(self.mechanism_name or "", 0)
        return Answer(token=reply, session_lifetime_ms=self.session_lifetime_ms)

    @property
    def reauthenticating(self) -> bool:
        return self.reauth_of is not None

    def _fail(self, message: str) -> Answer:
        self.state = State.FAILED
        return Answer(ErrorCode.SASL_AUTHENTICATION_FAILED, message, close_after=True)


# ------------------------------------------------------------------------------- JAAS

_JAAS = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;?\s*$", re.S)


def parse_jaas(text: str, setting: str) -> dict[str, str]:
    """The options of a one-module JAAS config, as Kafka's sasl.jaas.config holds it:
    `org.apache...PlainLoginModule required username="admin" user_alice="secret";`."""
    from core.config.defs import ConfigError
    m = _JAAS.match(text or "")
    if m is None:
        raise ConfigError(f"{setting}: not a JAAS login module line (LoginModule required key=\"value\" ...;)")
    options: dict[str, str] = {}
    rest = m.group(3)
    pos = 0
    while pos < len(rest):
        o = JAAS_OPTION.match(rest, pos)
        if o is None:
            raise ConfigError(f"{setting}: cannot read the option at {rest[pos:pos + 30]!r} "
                              f"(options are key=\"value\")")
        options[o.group(1)] = jaas_unescape(o.group(2))
        pos = o.end()
    return options


def plain_users(options: Mapping[str, str]) -> dict[str, str]:
    """PlainLoginModule's user_<name>="<password>" options."""
    return {key[len("user_"):]: value for key, value in options.items() if key.startswith("user_")}
