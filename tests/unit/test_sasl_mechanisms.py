"""SASL without sockets: SCRAM against RFC 7677's worked example and every tampering a server
must catch (each CVE named), PLAIN's rules, and the session's order of requests."""
from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.config.defs import ConfigError
from core.protocol.errors import ErrorCode
from core.security import sasl as sasl_module
from core.security.sasl import (AuthenticationFailed, PlainServer, SaslConfig, SaslSession, State, parse_jaas,
                                plain_users)
from core.security.scram import ScramError, ScramServer, make_credential

# --- SCRAM: RFC 7677 section 3 ----------------------------------------------------------------

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
PENCIL = make_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)


def rfc_server(users=None):
    users = {"user": PENCIL} if users is None else users
    return ScramServer("SCRAM-SHA-256", users.get, b"secret", server_nonce=lambda: RFC_SERVER_NONCE)


def test_scram_sha_256_matches_rfc_7677():
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def client_final(server_first: bytes, password: str, *, mechanism="SCRAM-SHA-256", gs2=b"n,,",
                 client_first_bare=b"n=user,r=rOprNGfwEbeRWgbNEkqO", nonce: bytes | None = None,
                 binding: bytes | None = None) -> bytes:
    """A client's final message for `server_first`, computed as RFC 5802 says (the tests bend
    one field at a time)."""
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored = hashlib.new(digest, client_key).digest()
    without_proof = b"c=" + base64.b64encode(binding if binding is not None else gs2) + b",r=" + \
        (nonce if nonce is not None else fields["r"].encode())
    auth = client_first_bare + b"," + server_first + b"," + without_proof
    signature = hmac.new(stored, auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return without_proof + b",p=" + base64.b64encode(proof)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_with_the_right_password_only(mechanism):
    credential = make_credential(mechanism, "s3cret")
    for password, ok in (("s3cret", True), ("s3cret!", False), ("", False)):
        server = ScramServer(mechanism, {"user": credential}.get, b"k")
        first = server.evaluate(b"n,,n=user,r=abc")
        if ok:
            assert server.evaluate(client_final(first, password, mechanism=mechanism,
                                                client_first_bare=b"n=user,r=abc")).startswith(b"v=")
        else:
            with pytest.raises(ScramError, match="Invalid user credentials"):
                server.evaluate(client_final(first, password, mechanism=mechanism, client_first_bare=b"n=user,r=abc"))


def test_an_unknown_user_looks_like_a_wrong_password():
    """The first answer of an unknown user has a salt and iteration count like a real one's,
    the same on every attempt, and the exchange fails only at the proof."""
    answers = []
    for _ in range(2):
        server = rfc_server(users={})
        first = server.evaluate(b"n,,n=nobody,r=abc")
        answers.append(first.split(b",")[1:])
        with pytest.raises(ScramError, match="Invalid user credentials"):
            server.evaluate(client_final(first, "pencil", client_first_bare=b"n=nobody,r=abc"))
    assert answers[0] == answers[1] and answers[0][1] == b"i=4096"


def test_cve_2024_56128_a_client_final_with_another_nonce_is_refused():
    """Kafka before 3.7.2 did not compare client-final's nonce with the one it sent."""
    server = rfc_server()
    first = server.evaluate(RFC_CLIENT_FIRST)
    tampered = client_final(first, "pencil", nonce=b"rOprNGfwEbeRWgbNEkqOsomethingelse")
    with pytest.raises(ScramError, match="nonce does not match"):
        server.evaluate(tampered)


def test_librdkafka_before_2_6_1_doubling_its_nonce_is_accepted_but_nothing_else():
    """librdkafka < 2.6.1 sends client nonce + (client nonce + server nonce) (its PR 4895)."""
    server = rfc_server()
    first = server.evaluate(RFC_CLIENT_FIRST)
    doubled = b"rOprNGfwEbeRWgbNEkqO" + first.split(b",")[0][2:]
    assert server.evaluate(client_final(first, "pencil", nonce=doubled)).startswith(b"v=")
    for other in (b"xyz" + first.split(b",")[0][2:], first.split(b",")[0][2:] + b"x",
                  first.split(b",")[0][2:-1], b"rOprNGfwEbeRWgbNEkqO" * 2):
        server = rfc_server()
        first = server.evaluate(RFC_CLIENT_FIRST)
        with pytest.raises(ScramError, match="nonce does not match"):
            server.evaluate(client_final(first, "pencil", nonce=other))


@pytest.mark.parametrize("case,client_first,final_kwargs,message", [
    ("channel binding asked for", b"p=tls-unique,,n=user,r=abc", {}, "channel binding is not supported"),
    ("binding field differs", b"n,,n=user,r=abc", {"binding": b"y,,"}, "channel binding does not match"),
    ("authzid of another user", b"n,a=admin,n=user,r=abc", {}, "authorization id must be the user name"),
    ("token authentication", b"n,,n=user,r=abc,tokenauth=true", {}, "token authentication is not supported"),
    ("no nonce", b"n,,n=user", {}, "malformed"),
    ("bad saslname escape", b"n,,n=us=er,r=abc", {}, "malformed user name"),
    ("not SCRAM at all", b"hello", {}, "malformed"),
])
def test_scram_refuses_bent_messages(case, client_first, final_kwargs, message):
    server = rfc_server()
    with pytest.raises(ScramError, match=message):
        first = server.evaluate(client_first)
        bare = client_first.split(b",", 2)[2]
        server.evaluate(client_final(first, "pencil", client_first_bare=bare, **final_kwargs))


def test_an_authzid_naming_the_user_is_accepted():
    server = rfc_server()
    first = server.evaluate(b"n,a=user,n=user,r=abc")
    assert server.evaluate(client_final(first, "pencil", gs2=b"n,a=user,", client_first_bare=b"n=user,r=abc"))
    assert server.complete


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_scram_answers_any_bytes_with_scram_errors_only(first, final):
    server = rfc_server()
    try:
        server.evaluate(first)
        server.evaluate(final)
    except ScramError:
        return
    assert server.complete   # only a correct exchange gets through, and random bytes are not one


# --- PLAIN -------------------------------------------------------------------------------------

@pytest.mark.parametrize("token,error", [
    (b"\x00alice\x00alice-secret", None),
    (b"alice\x00alice\x00alice-secret", None),
    (b"\x00alice\x00wrong", "Invalid username or password"),
    (b"\x00mallory\x00alice-secret", "Invalid username or password"),
    (b"bob\x00alice\x00alice-secret", "authorization id that is different from username"),   # CVE-2017-12610
    (b"\x00\x00alice-secret", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"alice-secret", "authzid"),
    (b"\x00alice\x00alice-secret\x00extra", "authzid"),
])
def test_plain_follows_rfc_4616_and_kafka(token, error):
    server = PlainServer({"alice": "alice-secret", "bob": "bob-secret"})
    if error is None:
        assert server.evaluate(token) == b"" and server.username == "alice"
    else:
        with pytest.raises(AuthenticationFailed, match=error):
            server.evaluate(token)
        assert not server.complete


def test_cve_2021_38153_plain_compares_passwords_in_constant_time(monkeypatch):
    """Kafka compared passwords with equals(), which returns at the first differing byte. Both
    a known and an unknown user go through hmac.compare_digest."""
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(sasl_module.hmac, "compare_digest", lambda a, b: calls.append(len(a)) or real(a, b))
    for token in (b"\x00alice\x00guess", b"\x00nobody\x00guess"):
        with pytest.raises(AuthenticationFailed):
            PlainServer({"alice": "alice-secret"}).evaluate(token)
    assert calls == [5, 5]


# --- the session -------------------------------------------------------------------------------

def session(*mechanisms):
    return SaslSession(SaslConfig(mechanisms or ("PLAIN",), {"alice": "pw"}))


def test_only_api_versions_and_the_handshake_come_before_authentication():
    s = session()
    assert s.allows(18) and s.allows(17) and not s.allows(36) and not s.allows(0) and not s.allows(3)
    assert s.handshake(1, "PLAIN") == (ErrorCode.NONE, ["PLAIN"], False)
    assert s.allows(36) and not s.allows(17) and not s.allows(18) and not s.allows(0)
    answer = s.authenticate(b"\x00alice\x00pw")
    assert answer.error == ErrorCode.NONE and s.authenticated and s.principal == "User:alice"
    assert s.allows(0) and s.allows(3)


def test_an_unknown_mechanism_is_refused_with_the_list_and_closes():
    s = session("PLAIN", "SCRAM-SHA-512")
    assert s.handshake(1, "GSSAPI") == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["PLAIN", "SCRAM-SHA-512"], True)
    assert s.state is State.FAILED


def test_a_failed_authentication_answers_then_closes():
    s = session()
    s.handshake(1, "PLAIN")
    answer = s.authenticate(b"\x00alice\x00nope")
    assert answer.error == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.close_after
    assert "Invalid username or password" in answer.message and not s.authenticated


def test_a_v0_handshake_switches_to_bare_tokens():
    s = session()
    s.handshake(0, "PLAIN")
    assert s.state is State.RAW_TOKENS and not s.allows(36)
    assert s.authenticate(b"\x00alice\x00pw").error == ErrorCode.NONE and s.authenticated


# --- re-authentication (KIP-368) ----------------------------------------------------------------

REAUTH_CONFIG = SaslConfig(("PLAIN", "SCRAM-SHA-256"), {"alice": "pw", "bob": "pw2"},
                           max_reauth_ms={"PLAIN": 60_000, "SCRAM-SHA-256": 0})


def test_a_completed_authentication_carries_the_mechanisms_session_lifetime():
    s = SaslSession(REAUTH_CONFIG)
    s.handshake(1, "PLAIN")
    answer = s.authenticate(b"\x00alice\x00pw")
    assert answer.session_lifetime_ms == 60_000 == s.session_lifetime_ms
    plain_only = SaslSession(SaslConfig(("PLAIN",), {"alice": "pw"}))
    plain_only.handshake(1, "PLAIN")
    assert plain_only.authenticate(b"\x00alice\x00pw").session_lifetime_ms == 0


# (case, handshake version, mechanism, token, error, message fragment)
REAUTH_CASES = [
    ("same user, same mechanism", 1, "PLAIN", b"\x00alice\x00pw", ErrorCode.NONE, None),
    ("another user", 1, "PLAIN", b"\x00bob\x00pw2", ErrorCode.SASL_AUTHENTICATION_FAILED,
     "Cannot change principals during re-authentication from User.alice: User.bob"),
    ("another mechanism", 1, "SCRAM-SHA-256", b"n,,n=alice,r=abc", ErrorCode.SASL_AUTHENTICATION_FAILED,
     "not supported for re-authentication of mechanism 'PLAIN'"),
    ("wrong password", 1, "PLAIN", b"\x00alice\x00nope", ErrorCode.SASL_AUTHENTICATION_FAILED,
     "Invalid username or password"),
]


@pytest.mark.parametrize("case,version,mechanism,token,error,message", REAUTH_CASES, ids=[c[0] for c in REAUTH_CASES])
def test_re_authentication_must_prove_the_same_principal_with_the_same_mechanism(case, version, mechanism, token,
                                                                                 error, message):
    s = SaslSession(REAUTH_CONFIG, reauth_of=("PLAIN", "User:alice"))
    assert s.reauthenticating
    assert s.handshake(version, mechanism)[0] == ErrorCode.NONE
    assert not s.allows(0) and s.allows(36)   # nothing else is served while it runs
    answer = s.authenticate(token)
    assert answer.error == error
    if error:
        assert answer.close_after and not s.authenticated and message in answer.message
    else:
        assert s.authenticated and s.principal == "User:alice" and answer.session_lifetime_ms == 60_000


def test_re_authentication_cannot_switch_to_bare_tokens():
    s = SaslSession(REAUTH_CONFIG, reauth_of=("PLAIN", "User:alice"))
    error, _, close = s.handshake(0, "PLAIN")
    assert error == ErrorCode.ILLEGAL_SASL_STATE and close


# --- JAAS ------------------------------------------------------------------------------------

def test_jaas_lines_are_read_as_kafka_writes_them():
    options = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                         'username="admin" password="a\\"b" user_admin="admin-secret" user_alice="x y";', "k")
    assert options["password"] == 'a"b'
    assert plain_users(options) == {"admin": "admin-secret", "alice": "x y"}
    for bad in ("", "PlainLoginModule", 'PlainLoginModule required user_a=unquoted;'):
        with pytest.raises(ConfigError, match="^k: "):
            parse_jaas(bad, "k")
