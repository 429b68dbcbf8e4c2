"""The client's side of SASL: PLAIN and SCRAM-SHA-256/512 over SaslHandshake v1 and
SaslAuthenticate, as librdkafka and the Java client speak them.

`SaslCredentials` says who to be; `authenticate(connection)` runs the exchange on a connection
that has just negotiated versions, and raises KafkaError(SASL_AUTHENTICATION_FAILED) with the
broker's message when the broker says no, or when a SCRAM server's final message does not
prove that it knows the credential (a server that does not is not trusted either).

Credentials come from Kafka client properties: `sasl.mechanism` (librdkafka also spells it
`sasl.mechanisms`) with `sasl.username` and `sasl.password`, or a Java-style
`sasl.jaas.config` line with username="..." password="..." options.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Mapping

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# One key="value" option of a JAAS line; a backslash escapes the next character.
JAAS_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')


def jaas_unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword: PBKDF2 with the mechanism's hash (RFC 5802)."""
    return hashlib.pbkdf2_hmac(SCRAM_DIGESTS[mechanism], password, salt, iterations)


def scram_keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from SaltedPassword: what a client proves and what a
    server stores (core/security/scram.py) are derived here, once, for both sides."""
    digest = SCRAM_DIGESTS[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return client_key, hashlib.new(digest, client_key).digest(), hmac.new(salted, b"Server Key", digest).digest()
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class SaslSettingsError(ValueError):
    """Client properties that cannot authenticate: one line naming the key."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = ""

    def __repr__(self) -> str:   # never print the password
        return f"SaslCredentials({self.mechanism}, {self.username!r})"

    @classmethod
    def from_properties(cls, props: Mapping[str, str], where: str = "") -> "SaslCredentials":
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise SaslSettingsError(f"{where}sasl.mechanism: {mechanism} is not one of {', '.join(MECHANISMS)}")
        username, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas and username is None:
            options = {k: jaas_unescape(v) for k, v in JAAS_OPTION.findall(jaas)}
            username, password = options.get("username"), options.get("password")
        if not username:
            raise SaslSettingsError(f"{where}sasl.username: {mechanism} needs a user name "
                                    f"(sasl.username, or username=\"...\" in sasl.jaas.config)")
        if not password:
            raise SaslSettingsError(f"{where}sasl.password: {mechanism} needs a password")
        return cls(mechanism, username, password)


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class _ScramClient:
    def __init__(self, credentials: SaslCredentials):
        self.credentials = credentials
        self.digest = SCRAM_DIGESTS[credentials.mechanism]
        self.nonce = secrets.token_hex(24)
        self.first_bare = f"n={_saslname(credentials.username)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        except (KeyError, ValueError):
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                             f"SCRAM: the broker's first message is malformed: {text[:80]!r}") from None
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, "SCRAM: the broker's nonce does not extend ours")
        if not 4096 <= iterations <= 1_000_000:
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"SCRAM: {iterations} iterations is not sane")
        mechanism = self.credentials.mechanism
        salted = salted_password(mechanism, self.credentials.password.encode(), salt, iterations)
        client_key, stored_key, server_key = scram_keys(mechanism, salted)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self.first_bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored_key, auth, self.digest).digest()))
        self._server_signature = hmac.new(server_key, auth, self.digest).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        try:
            signature = base64.b64decode(text[2:], validate=True) if text.startswith("v=") else b""
        except ValueError:
            signature = b""
        if not hmac.compare_digest(signature, self._server_signature):
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                             "SCRAM: the broker did not prove that it knows the credential")


async def authenticate(connection, credentials: SaslCredentials) -> int:
    """SaslHandshake v1 then SaslAuthenticate, on a connection whose versions are known; the
    session's lifetime in ms that the broker gave (KIP-368; 0: it never expires)."""
    shake = await connection.send(m.SaslHandshakeRequest(mechanism=credentials.mechanism),
                                  api_key=SASL_HANDSHAKE, version=1)
    if shake.error_code:
        raise KafkaError(shake.error_code, f"{connection} does not offer SASL {credentials.mechanism} "
                                           f"(it offers {', '.join(shake.mechanisms) or 'nothing'})")

    lifetime_ms = 0

    async def exchange(token: bytes) -> bytes:
        nonlocal lifetime_ms
        answer = await connection.send(m.SaslAuthenticateRequest(auth_bytes=token), api_key=SASL_AUTHENTICATE)
        if answer.error_code:
            raise KafkaError(answer.error_code, answer.error_message or "SASL authentication failed")
        lifetime_ms = answer.session_lifetime_ms
        return bytes(answer.auth_bytes)

    if credentials.mechanism == "PLAIN":
        await exchange(f"\x00{credentials.username}\x00{credentials.password}".encode())
        return lifetime_ms
    scram = _ScramClient(credentials)
    server_first = await exchange(scram.first())
    scram.verify(await exchange(scram.final(server_first)))
    return lifetime_ms
