"""Who may look at the console and who may act from it.

With security on (the pair's clusters take SASL), every page and API call but the login needs a
session, and a session needs a login that a cluster of the platform accepts: the console logs
in to it with the user's name and password over the same SCRAM the clients use, so the
console's users are the platform's SCRAM users, with no second list to keep in step. The
password is used for that one login and never kept.

Acting (failover, failback, a drill) needs more: a super user of the clusters (their
`super.users`, read from a broker's configuration) or a principal the DR configuration names in
`console.operators`. With security off nobody logs in and anyone who can reach the console may
act, as anyone who can reach the clusters may.

Sessions are random 256-bit tokens in an HttpOnly, SameSite=Strict cookie, kept in memory (a
restart logs everybody out) for SESSION_S. Requests that change something must also carry the
header X-Seaway-Console, which a page of another origin cannot send without the console's
consent (CORS), so a link or form elsewhere cannot act with someone's cookie.
"""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

import anyio

from core.client import Admin, KafkaClient
from core.client.admin import ConfigResource
from core.client.errors import KafkaError
from core.client.security import security_from_properties
from core.protocol.errors import ErrorCode

from ..config import ClusterAccess

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
COOKIE = "seaway_console"
SESSION_S = 8 * 3600.0
ACTION_HEADER = "x-seaway-console"
MAX_SESSIONS = 10_000
MAX_NAME = 255


@dataclass(frozen=True)
class Session:
    user: str
    expires: float
    may_act: bool

    @property
    def principal(self) -> str:
        return f"User:{self.user}"


class LoginRefused(Exception):
    """Wrong name or password (401)."""


class LoginUnavailable(Exception):
    """No cluster could check the login (503)."""


def secured(access: ClusterAccess) -> bool:
    return (access.properties.get("security.protocol") or "PLAINTEXT").strip().upper().startswith("SASL_")


def parse_super_users(value: str | None) -> set[str]:
    return {p.strip() for p in (value or "").split(";") if p.strip()}


async def check_login(sides: list[ClusterAccess], user: str, password: str, *, timeout_s: float = 5.0) -> set[str]:
    """Log in to the first cluster that answers as `user`; the clusters' super users on
    success (read with that login, or empty where it may not read them). LoginRefused for a
    wrong name or password, LoginUnavailable when no cluster answers."""
    errors = []
    ms = int(timeout_s * 1000)
    for side in sides:
        configured = (side.properties.get("sasl.mechanism") or "SCRAM-SHA-512").upper()
        # A user may have credentials for the other SCRAM mechanism only; a broker that does
        # not enable it refuses that attempt, which is then a wrong login too.
        mechanisms = [configured] + [m for m in SCRAM_MECHANISMS if m != configured]
        refused, errors_before = False, len(errors)
        for mechanism in mechanisms:
            props = {**side.properties, "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
            try:
                security = security_from_properties(props)
                async with KafkaClient(side.bootstrap, client_id="seaway-console-login", security=security,
                                       request_timeout_ms=ms, connect_timeout_ms=ms, default_api_timeout_ms=ms,
                                       reconnect_backoff_ms=100) as client:
                    admin = Admin(client)
                    with anyio.fail_after(timeout_s * 2):
                        brokers = (await admin.describe_cluster()).brokers
                        return await _super_users(admin, [b.node_id for b in brokers])
            except KafkaError as exc:
                if exc.code in (ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM):
                    refused = True
                    continue
                errors.append(f"{side.cluster}: {exc}")
                break
            except (OSError, TimeoutError) as exc:
                errors.append(f"{side.cluster}: {exc or type(exc).__name__}")
                break
        if refused and len(errors) == errors_before:
            raise LoginRefused("wrong user name or password")
    raise LoginUnavailable("no cluster could check the login: " + "; ".join(errors))


async def _super_users(admin: Admin, broker_ids: list[int]) -> set[str]:
    for broker in broker_ids[:1]:
        try:
            found = await admin.describe_configs([ConfigResource.broker(broker)])
        except KafkaError:
            return set()
        entries = found.get(ConfigResource.broker(broker))
        if isinstance(entries, dict) and "super.users" in entries:
            return parse_super_users(entries["super.users"].value)
    return set()


class Sessions:
    """Logged-in users by token; thread-safe (the HTTP server answers on many threads)."""

    def __init__(self, operators: list[str]):
        self.operators = set(operators)
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, user: str, super_users: set[str], now: float | None = None) -> tuple[str, Session]:
        now = time.time() if now is None else now
        principal = f"User:{user}"
        session = Session(user, now + SESSION_S, principal in super_users or principal in self.operators)
        token = secrets.token_urlsafe(32)
        with self._lock:
            if len(self._by_token) >= MAX_SESSIONS:
                self._expire(now)
                if len(self._by_token) >= MAX_SESSIONS:     # full of live sessions: the oldest goes
                    del self._by_token[min(self._by_token, key=lambda t: self._by_token[t].expires)]
            self._by_token[token] = session
        return token, session

    def get(self, token: str | None, now: float | None = None) -> Session | None:
        if not token:
            return None
        now = time.time() if now is None else now
        with self._lock:
            session = self._by_token.get(token)
            if session is not None and session.expires <= now:
                del self._by_token[token]
                return None
            return session

    def close(self, token: str | None) -> None:
        with self._lock:
            self._by_token.pop(token or "", None)

    def _expire(self, now: float) -> None:
        for token in [t for t, s in self._by_token.items() if s.expires <= now]:
            del self._by_token[token]
