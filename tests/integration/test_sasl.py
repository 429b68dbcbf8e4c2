"""SASL listeners with real clients: PLAIN over SASL_PLAINTEXT and SASL_SSL with each client
family, and every way in that should fail (each CVE named) failing cleanly while the node
keeps serving.

One node, four listeners:

    PLAIN     PLAINTEXT (setup, and SASL requests where there is no SASL)
    SASL      SASL_PLAINTEXT, PLAIN and both SCRAM mechanisms
    SASLTLS   SASL_SSL, PLAIN and both SCRAM mechanisms
    TINY      SASL_PLAINTEXT, PLAIN, sasl.server.max.receive.size=1024
    REAUTH    SASL_PLAINTEXT, PLAIN and SCRAM-SHA-256, sessions of 1.5 s (KIP-368)
"""
from __future__ import annotations

import asyncio
import socket
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.ca import CertificateAuthority
from tests.support import wire
from tests.support.clients import CLIENTS, Record, create_topic, unique_topic
from tests.support.node import SeawayNode, free_port, start_failure

pytestmark = pytest.mark.timeout(300)

REAUTH_MS = 1500
USERS = {"alice": "alice-secret", "bob": "bob-secret"}             # PLAIN, from the JAAS line
SCRAM_USERS = {"carol": "carol-secret", "dave": "dave-secret"}      # SCRAM, in the metadata log
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sasl-pki")
    authority = CertificateAuthority(directory / "ca")
    issued = authority.issue("server")
    authority.keystore = directory / "server.pem"
    authority.keystore.write_bytes(issued.key.read_bytes() + issued.cert.read_bytes())
    return authority


@pytest.fixture(scope="module")
def node(tmp_path_factory, ca):
    ports = {name: free_port() for name in ("PLAIN", "SASL", "SASLTLS", "TINY", "REAUTH")}
    props = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT,SASLTLS:SASL_SSL,TINY:SASL_PLAINTEXT,"
                                          "REAUTH:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAIN",
        "ssl.keystore.location": str(ca.keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasltls.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": JAAS,
        "listener.name.tiny.sasl.server.max.receive.size": "1024",
        "listener.name.reauth.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "metrics.port": str(free_port()),
    }
    n = SeawayNode(tmp_path_factory.mktemp("sasl-node"), props, port=ports["PLAIN"]).start()
    n.ports = ports
    n.metrics_port = int(props["metrics.port"])
    yield n
    n.stop()


def address(node, listener: str) -> str:
    return f"127.0.0.1:{node.ports[listener]}"


def sasl_config(client: str, ca, *, user="alice", password=None, tls=False, mechanism="PLAIN") -> dict:
    password = {**USERS, **SCRAM_USERS}.get(user, "x") if password is None else password
    if client == "kafkajs":
        return {"sasl": {"mechanism": mechanism.lower(), "username": user, "password": password},
                **({"ssl": {"ca": str(ca.cert_path)}} if tls else {})}
    if client == "kafka-python":
        return {"security_protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                "sasl_plain_username": user, "sasl_plain_password": password,
                **({"ssl_cafile": str(ca.cert_path)} if tls else {})}
    return {"security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password,
            **({"ssl.ca.location": str(ca.cert_path)} if tls else {})}


def mark(node) -> int:
    return node.log_path.stat().st_size


def wait_for_log(node, since: int, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = node.log_path.read_bytes()[since:].decode(errors="replace")
        if text in seen:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged:\n{node.log_path.read_bytes()[since:].decode(errors='replace')[-3000:]}")


def cannot_produce(bootstrap: str, config: dict) -> bool:
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 4000, "log_level": 0, **config})
    producer.produce("sasl-refused", b"x", on_delivery=lambda err, msg: failed.append(err) if err else None)
    producer.flush(10)
    return bool(failed)


def assert_still_serves(node, ca) -> None:
    topic = unique_topic("sasl-after")
    client = CLIENTS["confluent"]
    config = sasl_config("confluent", ca, user="bob")
    client.produce(address(node, "SASL"), topic, [Record(value=b"after", partition=0)], config=config)
    got = client.consume(address(node, "SASL"), topic, {0: 0}, count=1, config=config)
    assert [r.value for r in got] == [b"after"]


# --- what should work ----------------------------------------------------------------------------

@pytest.mark.parametrize("listener", ["SASL", "SASLTLS"])
@pytest.mark.parametrize("client_name", ["confluent", "kafka-python", "kcat", "kafkajs"])
def test_each_client_authenticates_with_plain(node, ca, client_name, listener):
    client = CLIENTS[client_name]
    config = sasl_config(client_name, ca, tls=listener == "SASLTLS")
    topic = unique_topic(f"sasl-{client_name}")
    create_topic(address(node, "PLAIN"), topic, partitions=1)
    records = [Record(key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(20)]
    client.produce(address(node, listener), topic, records, config=config)
    got = client.consume(address(node, listener), topic, {0: 0}, count=20, config=config)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]


@pytest.fixture(scope="module")
def scram_users(node):
    """carol (SCRAM-SHA-256, 8192 iterations) and dave (SCRAM-SHA-512), made with
    AlterUserScramCredentials as an operator's AdminClient would."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    admin = AdminClient({"bootstrap.servers": address(node, "PLAIN")})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-secret"),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-secret")])
    for future in futures.values():
        assert future.result(timeout=30) is None
    return admin


@pytest.mark.parametrize("listener", ["SASL", "SASLTLS"])
@pytest.mark.parametrize("user,mechanism", [("carol", "SCRAM-SHA-256"), ("dave", "SCRAM-SHA-512")])
@pytest.mark.parametrize("client_name", ["confluent", "kafka-python", "kcat", "kafkajs"])
def test_each_client_authenticates_with_scram(node, ca, scram_users, client_name, user, mechanism, listener):
    client = CLIENTS[client_name]
    config = sasl_config(client_name, ca, user=user, mechanism=mechanism, tls=listener == "SASLTLS")
    topic = unique_topic(f"scram-{client_name}")
    create_topic(address(node, "PLAIN"), topic, partitions=1)
    records = [Record(value=b"s%d" % i, partition=0) for i in range(10)]
    client.produce(address(node, listener), topic, records, config=config)
    got = client.consume(address(node, listener), topic, {0: 0}, count=10, config=config)
    assert [r.value for r in got] == [r.value for r in records]


def test_scram_credentials_are_described_without_secrets_and_can_be_deleted(node, ca, scram_users):
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion
    described = scram_users.describe_user_scram_credentials().result(timeout=20)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "carol": [(ScramMechanism.SCRAM_SHA_256, 8192)], "dave": [(ScramMechanism.SCRAM_SHA_512, 4096)]}
    with pytest.raises(Exception, match="does not exist"):
        scram_users.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=20)
    # A wrong password, the wrong mechanism for the user, and a user without credentials all fail.
    assert cannot_produce(address(node, "SASL"), sasl_config("confluent", ca, user="carol", password="guess",
                                                             mechanism="SCRAM-SHA-256"))
    assert cannot_produce(address(node, "SASL"), sasl_config("confluent", ca, user="carol", mechanism="SCRAM-SHA-512"))
    assert cannot_produce(address(node, "SASL"), sasl_config("confluent", ca, user="alice", mechanism="SCRAM-SHA-256"))
    # Deleted, dave can no longer log in; carol still can.
    futures = scram_users.alter_user_scram_credentials([
        UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])
    futures["dave"].result(timeout=20)
    assert cannot_produce(address(node, "SASL"), sasl_config("confluent", ca, user="dave", mechanism="SCRAM-SHA-512"))
    assert not cannot_produce(address(node, "SASL"), sasl_config("confluent", ca, user="carol", mechanism="SCRAM-SHA-256"))
    with pytest.raises(Exception, match="does not exist"):
        scram_users.alter_user_scram_credentials([
            UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])["dave"].result(timeout=20)


def test_scram_credentials_survive_a_restart(tmp_path):
    """They are metadata records: after a restart (and a snapshot of the log) they still work."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    plain, sasl = free_port(), free_port()
    node = SeawayNode(tmp_path, {"listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
                                 "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
                                 "metadata.log.max.record.bytes.between.snapshots": "1"}, port=plain).start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"erin-secret")])["erin"].result(timeout=20)
        login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
                 "sasl.username": "erin", "sasl.password": "erin-secret"}
        assert not cannot_produce(f"127.0.0.1:{sasl}", login)
        node.stop()
        node.start()
        assert not cannot_produce(f"127.0.0.1:{sasl}", login)
        assert cannot_produce(f"127.0.0.1:{sasl}", {**login, "sasl.password": "other"})
    finally:
        node.stop()


# --- what should fail, and leave the node serving ------------------------------------------------

@pytest.mark.parametrize("case,listener,kwargs,logged", [
    ("wrong password", "SASL", {"password": "guess"}, "Invalid username or password"),
    ("unknown user", "SASL", {"user": "mallory"}, "Invalid username or password"),
    ("mechanism not enabled", "TINY", {"mechanism": "SCRAM-SHA-512"}, "SASL mechanism 'SCRAM-SHA-512' is not enabled"),
])
def test_bad_credentials_are_refused(node, ca, case, listener, kwargs, logged):
    since = mark(node)
    assert cannot_produce(address(node, listener), sasl_config("confluent", ca, **kwargs)), case
    wait_for_log(node, since, logged)
    assert_still_serves(node, ca)


def test_requests_before_authentication_close_the_connection(node, ca):
    since = mark(node)
    with socket.create_connection(("127.0.0.1", node.ports["SASL"]), timeout=10) as sock:
        # ApiVersions is allowed before the handshake ...
        versions = wire.roundtrip(sock, m.ApiKey.API_VERSIONS, 3, m.ApiVersionsRequest(
            client_software_name="raw", client_software_version="1"))
        assert versions.error_code == 0
        assert {17, 36} <= {k.api_key for k in versions.api_keys}
        # ... Metadata is not.
        assert wire.roundtrip(sock, m.ApiKey.METADATA, 9, m.MetadataRequest(topics=None)) is None
    wait_for_log(node, since, "Metadata before SASL authentication completed (handshake)")
    with socket.create_connection(("127.0.0.1", node.ports["SASL"]), timeout=10) as sock:
        assert wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))\
            .error_code == 0
        assert wire.roundtrip(sock, m.ApiKey.PRODUCE, 9, m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[])) is None
    assert_still_serves(node, ca)


def test_cve_2022_34917_a_big_frame_before_authentication_is_refused_at_once(node, ca):
    """An unauthenticated client's size prefix over sasl.server.max.receive.size closes the
    connection before the broker reads or allocates any of it."""
    with socket.create_connection(("127.0.0.1", node.ports["TINY"]), timeout=10) as sock:
        sock.sendall((2000).to_bytes(4, "big"))      # 2000 > 1024: nothing more need be sent
        assert wire.closed_without_answer(sock)
    with socket.create_connection(("127.0.0.1", node.ports["SASL"]), timeout=10) as sock:
        sock.sendall((100 * 1024 * 1024).to_bytes(4, "big"))   # under socket.request.max.bytes
        assert wire.closed_without_answer(sock)
    # Once authenticated, the listener's ordinary limit applies again.
    topic = unique_topic("sasl-big")
    create_topic(address(node, "PLAIN"), topic, partitions=1)
    CLIENTS["confluent"].produce(address(node, "TINY"), topic, [Record(value=b"x" * 100_000, partition=0)],
                                 config=sasl_config("confluent", ca))


def handshake_and_authenticate(node, listener: str, token: bytes):
    with socket.create_connection(("127.0.0.1", node.ports[listener]), timeout=10) as sock:
        shake = wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
        assert shake.error_code == 0 and "PLAIN" in shake.mechanisms
        answer = wire.roundtrip(sock, m.ApiKey.SASL_AUTHENTICATE, 2, m.SaslAuthenticateRequest(auth_bytes=token))
        closed = answer is not None and answer.error_code != 0 and wire.closed_without_answer(sock)
        return answer, closed


def test_cve_2017_12610_plain_with_another_authorization_id_is_refused(node):
    answer, closed = handshake_and_authenticate(node, "SASL", b"bob\x00alice\x00alice-secret")
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "authorization id that is different from username" in answer.error_message
    assert closed, "the connection stayed open after a failed authentication"
    answer, _ = handshake_and_authenticate(node, "SASL", b"alice\x00alice\x00alice-secret")
    assert answer.error_code == 0


def test_an_unsupported_mechanism_lists_the_enabled_ones_and_closes(node):
    with socket.create_connection(("127.0.0.1", node.ports["SASL"]), timeout=10) as sock:
        shake = wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="GSSAPI"))
        assert shake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert shake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert wire.closed_without_answer(sock)


def test_a_v0_handshake_takes_bare_tokens(node):
    """SaslHandshake v0 (Kafka 0.10): the token then goes as a bare size-prefixed frame."""
    with socket.create_connection(("127.0.0.1", node.ports["SASL"]), timeout=10) as sock:
        assert wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 0, m.SaslHandshakeRequest(mechanism="PLAIN"))\
            .error_code == 0
        token = b"\x00alice\x00alice-secret"
        sock.sendall(len(token).to_bytes(4, "big") + token)
        assert wire.read_frame(sock) == b""      # PLAIN's empty reply
        versions = wire.roundtrip(sock, m.ApiKey.API_VERSIONS, 0, m.ApiVersionsRequest(), correlation_id=2)
        assert versions.error_code == 0
    with socket.create_connection(("127.0.0.1", node.ports["SASL"]), timeout=10) as sock:
        wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 0, m.SaslHandshakeRequest(mechanism="PLAIN"))
        token = b"\x00alice\x00wrong"
        sock.sendall(len(token).to_bytes(4, "big") + token)
        assert wire.closed_without_answer(sock)


# --- re-authentication (KIP-368) --------------------------------------------------------------------

def metric(node, wanted: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line[len(wanted) + 1:]) for line in text.splitlines() if line.startswith(wanted + " "))


def authentications(node, result: str) -> float:
    return metric(node, f'seaway_authentications_total{{listener="REAUTH",result="{result}"}}')


def expired_sessions(node) -> float:
    return metric(node, 'seaway_bad_requests_total{reason="session_expired"}')


def authenticated_socket(node, user: str = "alice") -> tuple[socket.socket, m.SaslAuthenticateResponse]:
    sock = socket.create_connection(("127.0.0.1", node.ports["REAUTH"]), timeout=10)
    assert wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    answer = wire.roundtrip(sock, m.ApiKey.SASL_AUTHENTICATE, 2,
                            m.SaslAuthenticateRequest(auth_bytes=f"\x00{user}\x00{USERS[user]}".encode()))
    assert answer.error_code == 0
    return sock, answer


def test_a_session_tells_its_lifetime_and_ends_at_the_first_request_after_it(node):
    sock, answer = authenticated_socket(node)
    with sock:
        assert answer.session_lifetime_ms == REAUTH_MS
        assert wire.roundtrip(sock, m.ApiKey.METADATA, 1, m.MetadataRequest(topics=[]), 2) is not None
        time.sleep(REAUTH_MS / 1000 + 0.3)
        wire_frame = wire.frame(m.ApiKey.METADATA, 1, m.MetadataRequest(topics=[]), 3)
        sock.sendall(wire_frame)
        assert wire.closed_without_answer(sock), "a request after the session ended was served"
    assert expired_sessions(node) >= 1
    # A listener without connections.max.reauth.ms gives sessions that never end.
    assert handshake_and_authenticate(node, "SASL", b"\x00alice\x00alice-secret")[0].session_lifetime_ms == 0


def test_re_authenticating_in_time_keeps_the_connection_and_a_new_principal_is_refused(node):
    sock, _ = authenticated_socket(node)
    with sock:
        wire.check_reauthentication(sock, REAUTH_MS)


def test_clients_re_authenticate_and_carry_on(node, ca, scram_users):
    """librdkafka and our own client re-authenticate before each 1.5 s session ends, so a
    producer writing for 6 s loses nothing and never sees its connection closed."""
    from core.client.client import KafkaClient
    from core.client.producer import Producer as SeawayProducer
    from core.client.security import ClientSecurity
    from core.client.sasl import SaslCredentials

    topic = unique_topic("reauth")
    create_topic(address(node, "PLAIN"), topic, partitions=1)
    before, expired_before = authentications(node, "reauthenticated"), expired_sessions(node)
    errors, delivered = [], []
    producer = Producer({"bootstrap.servers": address(node, "REAUTH"), **sasl_config("confluent", ca, user="carol",
                         mechanism="SCRAM-SHA-256")})

    async def ours() -> int:
        security = ClientSecurity(sasl=SaslCredentials("SCRAM-SHA-256", "carol", SCRAM_USERS["carol"]))
        async with KafkaClient([address(node, "REAUTH")], security=security) as client:
            async with SeawayProducer(client) as p:
                sent = 0
                deadline = time.monotonic() + 6
                while time.monotonic() < deadline:
                    await p.send_and_wait(topic, b"ours", partition=0)
                    sent += 1
                    await asyncio.sleep(0.05)
                return sent

    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        producer.produce(topic, b"rdkafka", partition=0,
                         on_delivery=lambda err, msg: (errors if err else delivered).append(err))
        producer.poll(0.05)
    assert producer.flush(15) == 0 and not errors, errors
    sent_by_us = asyncio.run(ours())
    got = CLIENTS["confluent"].consume(address(node, "PLAIN"), topic, {0: 0}, count=len(delivered) + sent_by_us)
    assert len(got) == len(delivered) + sent_by_us
    assert authentications(node, "reauthenticated") - before >= 4   # at least two each
    assert expired_sessions(node) == expired_before, "a client let its session end"


def test_sasl_requests_where_there_is_no_sasl_are_illegal(node):
    with socket.create_connection(("127.0.0.1", node.ports["PLAIN"]), timeout=10) as sock:
        shake = wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
        assert shake.error_code == ErrorCode.ILLEGAL_SASL_STATE
        answer = wire.roundtrip(sock, m.ApiKey.SASL_AUTHENTICATE, 2,
                                     m.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), 2)
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE and "without SASL" in answer.error_message


# --- listeners that cannot serve -----------------------------------------------------------------

@pytest.mark.parametrize("props,message", [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config: PLAIN is enabled on listener SASL_PLAINTEXT but no users"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "GSSAPI"},
     "sasl.enabled.mechanisms: GSSAPI (listener SASL_PLAINTEXT) is not supported"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
      "sasl.jaas.config": "PlainLoginModule required user_a=b;"},
     "sasl.jaas.config: cannot read the option"),
    ({"listeners": "SASL_SSL://127.0.0.1:0"}, "ssl.keystore.location: a TLS listener needs a keystore"),
])
def test_a_sasl_listener_that_cannot_serve_stops_the_node_with_one_line(tmp_path, props, message):
    assert message in start_failure(tmp_path, props)


def test_seaway_users_adds_lists_and_deletes_scram_credentials(node, ca, tmp_path):
    """The CLI salts and hashes the password itself; the user can then log in with SCRAM."""
    from tests.support.cli import seaway
    password_file = tmp_path / "frank.txt"
    password_file.write_text("frank-secret\n")
    plain = address(node, "PLAIN")
    added = seaway("users", "add", "frank", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
                   "--password-file", str(password_file), "-b", plain)
    assert "Set the SCRAM-SHA-512 credential of user frank" in added.stdout
    listed = seaway("users", "list", "frank", "-b", plain, "--output", "json")
    assert '"mechanism": "SCRAM-SHA-512"' in listed.stdout and '"iterations": 8192' in listed.stdout
    login = sasl_config("confluent", ca, user="frank", password="frank-secret", mechanism="SCRAM-SHA-512")
    assert not cannot_produce(address(node, "SASL"), login)
    seaway("users", "delete", "frank", "--mechanism", "SCRAM-SHA-512", "-b", plain)
    assert cannot_produce(address(node, "SASL"), login)
    # Mistakes are one line naming what was wrong.
    missing = seaway("users", "delete", "frank", "--mechanism", "SCRAM-SHA-512", "-b", plain, check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    few = seaway("users", "add", "frank", "--password", "x", "--iterations", "100", "-b", plain, check=False)
    assert few.returncode == 2 and "--iterations: 100 is outside 4096..16384" in few.stderr
    unknown = seaway("users", "list", "nobody", "-b", plain, check=False)
    assert unknown.returncode == 1 and "does not exist" in unknown.stderr


@pytest.mark.parametrize("listener,lines", [
    ("SASL", ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN", "sasl.username=alice",
              "sasl.password=alice-secret"]),
    ("SASL", ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256",
              'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="carol" password="carol-secret";']),
    ("SASLTLS", ["security.protocol=SASL_SSL", "sasl.mechanism=PLAIN", "sasl.username=bob",
                 "sasl.password=bob-secret", "ssl.truststore.location=CA"]),
])
def test_the_cli_authenticates_with_a_command_config(node, ca, scram_users, tmp_path, listener, lines):
    """Seaway's own client speaks SASL: PLAIN and SCRAM (Java's sasl.jaas.config form too),
    over plaintext and TLS."""
    from tests.support.cli import seaway
    config = tmp_path / "client.properties"
    config.write_text("\n".join(line.replace("CA", str(ca.cert_path)) for line in lines) + "\n")
    topic = unique_topic("sasl-cli")
    seaway("topics", "create", topic, "-b", address(node, listener), "--command-config", str(config))
    assert topic in seaway("topics", "list", "-b", address(node, listener), "--command-config", str(config)).stdout
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(config.read_text().replace("-secret", "-guess"))
    refused = seaway("topics", "list", "-b", address(node, listener), "--command-config", str(wrong),
                     "--timeout", "5", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "Invalid" in refused.stderr, refused.stderr


def test_a_command_config_that_cannot_authenticate_is_named(node, tmp_path):
    from tests.support.cli import seaway
    config = tmp_path / "nouser.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n")
    refused = seaway("topics", "list", "-b", address(node, "SASL"), "--command-config", str(config), check=False)
    assert refused.returncode == 2
    assert f"--command-config {config}: sasl.username: SCRAM-SHA-256 needs a user name" in refused.stderr


def test_a_cluster_runs_with_sasl_between_its_nodes(tmp_path):
    """Three combined nodes whose listeners (clients and controller quorum alike) all require
    SASL PLAIN: the quorum elects, brokers register and replicate (ISR of 3) only if every
    node-to-node connection logs in with the node's own JAAS username and password."""
    from tests.support.cluster import KRaftCluster, assert_replicates
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="node" '
            'password="node-secret" user_node="node-secret" user_alice="alice-secret";')
    secure = {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
              "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": jaas}
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
              "sasl.username": "alice", "sasl.password": "alice-secret"}
    with KRaftCluster(tmp_path, combined=3, overrides=secure) as cluster:
        assert_replicates(cluster, client, unique_topic("sasl-cluster"))
        assert "authenticated as User:node" in cluster.nodes[1].log_path.read_text()


def test_credentials_added_at_format_time_let_the_first_nodes_log_in_with_scram(tmp_path):
    """`storage format --add-scram` (kafka-storage's flag): a cluster whose brokers log in to
    each other with SCRAM forms and replicates, because their user exists from the first record
    of the log. The controller listener uses PLAIN: SCRAM cannot log in to the quorum that
    replicates the credentials (as in Kafka), which the last part checks is refused."""
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient

    from tests.support.cluster import KRaftCluster
    from tests.support.node import REPO
    secure = {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
              "sasl.enabled.mechanisms": "SCRAM-SHA-512",
              "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="node" password="node-secret";',
              "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
              "listener.name.controller.plain.sasl.jaas.config":
                  'org.apache.kafka.common.security.plain.PlainLoginModule required username="quorum" '
                  'password="quorum-secret" user_quorum="quorum-secret";'}
    cluster = KRaftCluster(tmp_path, combined=3, overrides=secure)
    for node in cluster.nodes.values():
        formatted = subprocess.run(
            [sys.executable, "-m", "core.cli", "storage", "format", "-c", str(node.config_path), "-g",
             f"--cluster-id={cluster.cluster_id}", "--add-scram", "SCRAM-SHA-512=[name=node,password=node-secret]",
             "--add-scram", "SCRAM-SHA-512=[name=alice,iterations=8192,password=alice-secret]"],
            cwd=REPO, capture_output=True, text=True, check=True)
        assert "wrote 2 SCRAM credentials (alice, node)" in formatted.stdout
        assert (node.data_dir / "bootstrap.records").stat().st_mode & 0o077 == 0
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.direct_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                             "sasl.password": "alice-secret"})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            assert time.monotonic() < deadline, "the nodes did not log in to each other:\n" + cluster.log_tails()
            time.sleep(0.3)
        described = admin.describe_user_scram_credentials().result(timeout=20)
        assert {u: [i.iterations for i in d.scram_credential_infos] for u, d in described.items()} == {
            "alice": [8192], "node": [4096]}
        from confluent_kafka.admin import NewTopic
        topic = unique_topic("scram-cluster")
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=30)
        deadline = time.monotonic() + 30
        while len(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) < 3:
            assert time.monotonic() < deadline, "followers did not log in with SCRAM:\n" + cluster.log_tails()
            time.sleep(0.3)
    del secure["listener.name.controller.sasl.enabled.mechanisms"], secure["listener.name.controller.plain.sasl.jaas.config"]
    props = {**secure, "process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:1",
             "controller.listener.names": "CONTROLLER", "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"}
    assert "sasl.mechanism.controller.protocol: SCRAM-SHA-512 cannot log in to the controller quorum" in \
        start_failure(tmp_path / "refused", props)


@pytest.mark.parametrize("spec,message", [
    ("SCRAM-SHA-256=name=alice,password=x", "is not MECHANISM=[name=USER,password=PASSWORD]"),
    ("SCRAM-SHA-1=[name=alice,password=x]", "is not MECHANISM=[name=USER,password=PASSWORD]"),
    ("SCRAM-SHA-256=[name=alice]", "name and password are both required"),
    ("SCRAM-SHA-256=[name=alice,password=x,iterations=10]", "iterations must be 4096..16384"),
    ("SCRAM-SHA-256=[name=alice,password=x,salt=abc]", "unknown field 'salt'"),
])
def test_a_bad_add_scram_is_one_line_and_writes_nothing(tmp_path, spec, message):
    from tests.support.cli import seaway
    config = tmp_path / "node.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\n")
    refused = seaway("storage", "format", "-c", str(config), "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg",
                     "--add-scram", spec, check=False)
    assert refused.returncode != 0 and message in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "data").exists()
