"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the server's side, as Kafka speaks it.

The exchange, two tokens each way:

    client-first   n,,n=alice,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final   c=biws,r=<client nonce><server nonce>,p=<proof, base64>
    server-final   v=<server signature, base64>

The server keeps no password, only a credential: the salt, the iteration count, StoredKey =
H(ClientKey) and ServerKey, where SaltedPassword = PBKDF2(password, salt, iterations),
ClientKey = HMAC(SaltedPassword, "Client Key") and ServerKey = HMAC(SaltedPassword,
"Server Key"). The client proves it knows ClientKey: proof = ClientKey XOR
HMAC(StoredKey, AuthMessage), so the server recovers ClientKey and compares H(ClientKey) with
StoredKey in constant time.

What this checks that broken servers have not (each has a test naming it):
- the nonce of client-final is the one the server sent (CVE-2024-56128: Kafka before 3.7.2
  accepted any nonce, so a recorded exchange could be replayed). One other form is accepted:
  librdkafka before 2.6.1 (Debian's kcat among its users) sends its own nonce once more in
  front (librdkafka PR 4895). That form still carries the server's fresh nonce whole, so a
  replayed exchange fails all the same; Kafka 3.8.1 and 3.9 accept it too (by a suffix
  check), Kafka 4 refuses it;
- the channel-binding field repeats the GS2 header of client-first, and channel binding
  ("p=") is refused, since the server offers none;
- an authorization id (a=) must name the authenticating user;
- an unknown user is not told apart from a wrong password: the exchange goes on with a
  credential made up from the user name, and fails at the proof like a wrong password does.

Kafka's token authentication extension (tokenauth=true, delegation tokens) is refused.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Callable

from core.client.sasl import SCRAM_DIGESTS, salted_password, scram_keys

MECHANISMS = SCRAM_DIGESTS    # mechanism -> hashlib name
MIN_ITERATIONS = 4096          # Kafka's ScramMechanism minimum
MAX_ITERATIONS = 16384         # and maximum, which AlterUserScramCredentials enforces
DEFAULT_ITERATIONS = 4096
NONCE_BYTES = 24


class ScramError(Exception):
    """The exchange failed; the message is safe to give the client."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def make_credential(mechanism: str, password: str | bytes, *, salt: bytes | None = None,
                    iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """What the server stores for `password` (a random salt unless one is given)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
    salt = os.urandom(32) if salt is None else salt
    secret = password.encode() if isinstance(password, str) else password
    _, stored_key, server_key = scram_keys(mechanism, salted_password(mechanism, secret, salt, iterations))
    return ScramCredential(salt, stored_key, server_key, iterations)


def _random_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)   # letters and digits, as Kafka's ScramFormatter makes them


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"Authentication failed: malformed SCRAM {what} message")
        pairs.append((part[0], part[2:]))
    return pairs


def _sasl_name(text: str) -> str:
    """RFC 5802's saslname: "=2C" is a comma, "=3D" an equals sign; any other "=" is invalid."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            code = text[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise ScramError("Authentication failed: malformed user name in SCRAM message")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class ScramServer:
    """One exchange. `evaluate(token)` answers each client token; after the second the user
    is authenticated (`username` set) or ScramError was raised. `lookup(user)` gives the stored
    credential for this mechanism, None if there is none. `secret` keys the made-up
    credentials of unknown users, so that they look the same on every attempt."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], secret: bytes,
                 *, server_nonce: Callable[[], str] | None = None):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.lookup = lookup
        self.secret = secret
        self._server_nonce = server_nonce or _random_nonce
        self.username: str | None = None
        self.complete = False
        self._step = 0
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._client_nonce = ""
        self._credential: ScramCredential | None = None
        self._user = ""
        self._user_known = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Authentication failed: SCRAM message is not UTF-8") from None
        if self._step == 0:
            self._step = 1
            return self._client_first(message).encode()
        if self._step == 1:
            self._step = 2
            return self._client_final(message).encode()
        raise ScramError("Authentication failed: unexpected SCRAM message after the exchange ended")

    def _client_first(self, message: str) -> str:
        parts = message.split(",", 2)
        if len(parts) != 3:
            raise ScramError("Authentication failed: malformed SCRAM client-first message")
        flag, authzid, bare = parts
        if flag.startswith("p="):
            raise ScramError("Authentication failed: channel binding is not supported")
        if flag not in ("n", "y"):
            raise ScramError("Authentication failed: malformed SCRAM client-first message")
        fields = bare.split(",")
        attributes = _attributes(",".join(fields[:2]), "client-first")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise ScramError("Authentication failed: malformed SCRAM client-first message")
        user = _sasl_name(attributes[0][1])
        client_nonce = attributes[1][1]
        if not user or not client_nonce:
            raise ScramError("Authentication failed: empty user name or nonce")
        # Kafka's SCRAM extensions (key=value after the nonce): only tokenauth means anything.
        if any(f.lower() == "tokenauth=true" for f in fields[2:]):
            raise ScramError("Authentication failed: token authentication is not supported")
        if authzid:
            if not authzid.startswith("a=") or _sasl_name(authzid[2:]) != user:
                raise ScramError("Authentication failed: authorization id must be the user name")
        credential = self.lookup(user)
        self._user_known = credential is not None
        self._credential = credential or self._made_up(user)
        self._user = user
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._client_nonce = client_nonce
        self._nonce = client_nonce + self._server_nonce()
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first

    def _made_up(self, user: str) -> ScramCredential:
        """A credential no password matches, the same for a user on every attempt."""
        digest = self.digest
        salt = _hmac(digest, self.secret, b"salt:" + user.encode())[:32]
        return ScramCredential(salt, _hmac(digest, self.secret, b"stored:" + user.encode()),
                               _hmac(digest, self.secret, b"server:" + user.encode()), DEFAULT_ITERATIONS)

    def _client_final(self, message: str) -> str:
        attributes = _attributes(message, "client-final")
        if len(attributes) < 3 or attributes[0][0] != "c" or attributes[1][0] != "r" \
                or attributes[-1][0] != "p":
            raise ScramError("Authentication failed: malformed SCRAM client-final message")
        channel_binding, nonce, proof_b64 = attributes[0][1], attributes[1][1], attributes[-1][1]
        try:
            binding = base64.b64decode(channel_binding, validate=True).decode()
            proof = base64.b64decode(proof_b64, validate=True)
        except (ValueError, UnicodeDecodeError):
            raise ScramError("Authentication failed: malformed SCRAM client-final message") from None
        if binding != self._gs2_header:
            raise ScramError("Authentication failed: channel binding does not match the first message")
        if not (hmac.compare_digest(nonce.encode(), self._nonce.encode())
                or hmac.compare_digest(nonce.encode(), (self._client_nonce + self._nonce).encode())):
            raise ScramError("Authentication failed: nonce does not match the server's")
        credential = self._credential
        assert credential is not None   # set by the first message
        without_proof = message[:message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self.digest, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        matches = hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), credential.stored_key)
        if not (matches and self._user_known):
            raise ScramError("Authentication failed: Invalid user credentials")
        self.username = self._user
        self.complete = True
        signature = _hmac(self.digest, credential.server_key, auth_message)
        return "v=" + base64.b64encode(signature).decode()


def keys_from_salted_password(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from SaltedPassword, which AlterUserScramCredentials carries (the
    client salts and hashes; the password never reaches the cluster)."""
    _, stored_key, server_key = scram_keys(mechanism, salted)
    return stored_key, server_key
