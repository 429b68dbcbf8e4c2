"""TLS on a listener: the broker's typed `ssl.*` settings, the server context, and its reload.

The settings and the stores are Kafka's (see core/client/tls.py, which a listener shares with
Seaway's clients). A listener adds `ssl.client.auth` (none, requested or required: mTLS) and
`ssl.principal.mapping.rules`. Any of them can be set for one listener alone as
`listener.name.<listener>.ssl.*`, as in Kafka.

A listener's context is held by a `ReloadingContext`, which looks at its files' stamps at most
once a second when a connection arrives and rebuilds the context when one changed, so that a
rotated certificate is served without a restart. A rebuild that fails (a half-written file)
keeps the old context and logs one line.
"""
from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from core.client.tls import (TlsError, TlsSettings, apply_protocols, certificate_subject, load_keystore,
                             load_truststore)
from core.config.defs import ConfigError

from .authorizer import ANONYMOUS
from .principal_mapping import NoMatchingRule, PrincipalMapper
from .tls_stream import TlsStream

log = logging.getLogger(__name__)
RELOAD_CHECK_S = 1.0



def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context; a ConfigError naming the key when the settings cannot serve."""
    if not settings.has_keystore:
        raise ConfigError(f"{settings.key('ssl.keystore.location')}: a TLS listener needs a keystore "
                          f"(its certificate and private key); none is set")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        apply_protocols(ctx, settings)
        load_keystore(ctx, settings)
        auth = settings["ssl.client.auth"]
        if auth != "none":
            if not settings.has_truststore:
                raise TlsError(f"{settings.key('ssl.truststore.location')}: ssl.client.auth={auth} needs "
                               f"a truststore to check client certificates against; none is set")
            load_truststore(ctx, settings)
            ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    except TlsError as exc:
        raise ConfigError(str(exc)) from None
    return ctx


# ------------------------------------------------------------------------------- reloading

def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class ReloadingContext:
    """A listener's server context, rebuilt when its keystore or truststore file changes."""
    settings: TlsSettings
    context: ssl.SSLContext = field(init=False)
    _stamps: list[tuple[int, int, int] | None] = field(init=False)
    _checked: float = field(init=False, default=0.0)
    reloads: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._stamps = [_stamp(p) for p in self.settings.files()]
        self.context = server_context(self.settings)
        self._checked = time.monotonic()

    def current(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return self.context
        self._checked = now
        stamps = [_stamp(p) for p in self.settings.files()]
        if stamps == self._stamps:
            return self.context
        try:
            context = server_context(self.settings)
        except ConfigError as exc:
            # A file caught halfway through being replaced: try again at the next check.
            log.error("TLS files changed but cannot be loaded (%s); still serving the previous "
                      "certificate", exc)
            return self.context
        self._stamps = stamps
        self.context = context
        self.reloads += 1
        log.info("TLS keystore or truststore changed on disk; new connections use it")
        return context




# ------------------------------------------------------------------------------- accepting

HANDSHAKE_TIMEOUT_S = 10.0


class HandshakeFailed(Exception):
    """A client that did not complete TLS, or whose certificate maps to no principal: one line
    for the log, and the connection is closed."""


@dataclass
class TlsListener:
    """What a TLS listener does with each accepted connection: the handshake, then the
    principal its certificate names (`User:ANONYMOUS` without one)."""
    contexts: ReloadingContext
    mapper: PrincipalMapper

    @classmethod
    def from_settings(cls, settings: TlsSettings) -> "TlsListener":
        return cls(ReloadingContext(settings), PrincipalMapper(settings["ssl.principal.mapping.rules"]))

    async def accept(self, stream: anyio.abc.ByteStream) -> tuple[TlsStream, str]:
        tls = TlsStream(stream, self.contexts.current())
        try:
            with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
                await tls.handshake()
        except TimeoutError:
            raise HandshakeFailed(f"no TLS handshake within {HANDSHAKE_TIMEOUT_S:.0f} s") from None
        except ssl.SSLError as exc:
            raise HandshakeFailed(f"TLS handshake failed: {exc.reason or exc}") from None
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            raise HandshakeFailed("closed during the TLS handshake") from None
        der = tls.peer_certificate
        if der is None:
            return tls, ANONYMOUS
        subject = certificate_subject(der)
        try:
            return tls, f"User:{self.mapper.name_of(subject)}"
        except NoMatchingRule as exc:
            await tls.aclose()
            raise HandshakeFailed(f"authentication failed: {exc}") from None
