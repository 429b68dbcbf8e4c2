"""The gateway in front of a secured cluster (core/gateway/secure.py): clients log in to the
gateway as to a broker (SASL PLAIN and SCRAM, relayed to the cluster), and what they may do is
what their own ACLs allow, never what the gateway's login could. The gateway's principal may
only send envelopes (ClusterAction) and read the decision record."""
from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from core.protocol import messages as m
from core.security.ca import CertificateAuthority
from tests.support import wire
from tests.support.gateway import GatewayProcess
from tests.support.node import SeawayNode, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_gateway="gateway-secret" user_alice="alice-secret" user_bob="bob-secret";')
REAUTH_MS = 1500        # the REAUTH listener's connections.max.reauth.ms


def allow(rtype, name, principal, op):
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway-security")
    plain, sasl, reauth = free_port(), free_port(), free_port()
    node = SeawayNode(tmp / "node", {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl},REAUTH://127.0.0.1:{reauth}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"}, port=plain).start()
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("alices", "secret", "__seaway_dr")]).values():
        f.result(20)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-secret")])["carol"].result(20)
    acls = [allow(ResourceType.BROKER, "kafka-cluster", "User:gateway", AclOperation.CLUSTER_ACTION),
            allow(ResourceType.TOPIC, "__seaway_dr", "User:gateway", AclOperation.READ),
            allow(ResourceType.TOPIC, "__seaway_dr", "User:gateway", AclOperation.DESCRIBE)]
    for who in ("User:alice", "User:carol"):
        acls += [allow(ResourceType.TOPIC, "alices", who, op) for op in
                 (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
        acls.append(allow(ResourceType.GROUP, "readers", who, AclOperation.READ))
    for f in admin.create_acls(acls).values():
        f.result(20)
    (tmp / "gateway.properties").write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                                            "sasl.username=gateway\nsasl.password=gateway-secret\n")
    (tmp / "listener.properties").write_text("sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n")
    bootstrap = node.sasl_bootstrap = f"127.0.0.1:{sasl}"
    # One cluster named twice: security is about the one a request reaches, not the move.
    gateway = GatewayProcess(tmp, "a~b", [("a", bootstrap), ("b", bootstrap)], slots=1,
                             extra=("--command-config", str(tmp / "gateway.properties"),
                                    "--listener-config", str(tmp / "listener.properties"))).start()
    # The same gateway over TLS, with a certificate from a CA the clients trust.
    ca = CertificateAuthority(tmp / "ca")
    issued = ca.issue("gateway")
    (tmp / "gateway.pem").write_bytes(issued.key.read_bytes() + issued.cert.read_bytes())
    (tmp / "tls-listener.properties").write_text(f"ssl.keystore.location={tmp / 'gateway.pem'}\n"
                                                 "ssl.keystore.type=PEM\nsasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n")
    (tmp / "tls").mkdir()
    tls_gateway = GatewayProcess(tmp / "tls", "a~b", [("a", bootstrap), ("b", bootstrap)], slots=1,
                                 extra=("--command-config", str(tmp / "gateway.properties"),
                                        "--listener-config", str(tmp / "tls-listener.properties"))).start()
    gateway.tls = tls_gateway
    gateway.ca_path = ca.cert_path
    # And one in front of a listener whose sessions last REAUTH_MS: the gateway's own logins
    # must be renewed too, or the broker closes them.
    (tmp / "reauth").mkdir()
    reauth_bootstrap = f"127.0.0.1:{reauth}"
    gateway.reauth = GatewayProcess(tmp / "reauth", "a~b", [("a", reauth_bootstrap), ("b", reauth_bootstrap)],
                                    slots=1, extra=("--command-config", str(tmp / "gateway.properties"),
                                                    "--listener-config", str(tmp / "listener.properties"))).start()
    yield node, gateway
    gateway.reauth.stop()
    tls_gateway.stop()
    gateway.stop()
    node.stop()


def login(user: str, mechanism: str = "PLAIN", password: str | None = None) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism, "sasl.username": user,
            "sasl.password": password if password is not None else f"{user}-secret"}


def produce(bootstrap: str, topic: str, conf: dict) -> str | None:
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 8000, **conf})
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err) if err else None)
    p.flush(15)
    return errors[0].name() if errors else None


@pytest.mark.parametrize("user, mechanism", [("alice", "PLAIN"), ("carol", "SCRAM-SHA-256")])
def test_a_client_logs_in_at_the_gateway_and_is_allowed_what_its_own_acls_allow(secured, user, mechanism):
    node, gateway = secured
    assert produce(gateway.bootstrap, "alices", login(user, mechanism)) is None
    # Not "secret": the gateway's own login could not either, and the client's cannot.
    assert produce(gateway.bootstrap, "secret", login(user, mechanism)) == "TOPIC_AUTHORIZATION_FAILED"
    c = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "readers", "auto.offset.reset": "earliest",
                  **login(user, mechanism)})
    c.subscribe(["alices"])
    deadline, got = time.monotonic() + 30, None
    while got is None and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got = msg.value()
    c.close()
    assert got == b"v"


def test_bob_has_no_acls_and_gets_none_through_the_gateway(secured):
    node, gateway = secured
    assert produce(gateway.bootstrap, "alices", login("bob")) == "TOPIC_AUTHORIZATION_FAILED"


def login_errors(bootstrap: str, conf: dict) -> set[str]:
    """The errors a consumer reports (error_cb) while it tries to reach the cluster."""
    errors: set[str] = set()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", **conf,
                  "error_cb": lambda err: errors.add(err.name())})
    try:
        c.list_topics(timeout=5)
    except KafkaException:
        pass
    c.close()
    return errors


@pytest.mark.parametrize("user, mechanism, password", [("alice", "PLAIN", "wrong"), ("carol", "SCRAM-SHA-256", "wrong"),
                                                        ("nobody", "PLAIN", "x")])
def test_bad_credentials_are_refused_as_the_broker_refuses_them(secured, user, mechanism, password):
    node, gateway = secured
    through = login_errors(gateway.bootstrap, login(user, mechanism, password))
    direct = login_errors(node.sasl_bootstrap, login(user, mechanism, password))
    assert "_AUTHENTICATION" in direct
    assert "_AUTHENTICATION" in through, through


def test_a_client_that_does_not_log_in_gets_nothing(secured):
    node, gateway = secured
    c = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "x"})
    with pytest.raises(KafkaException):
        c.list_topics(timeout=5)
    c.close()
    # ... and the gateway serves others meanwhile.
    assert produce(gateway.bootstrap, "alices", login("alice")) is None


@pytest.mark.parametrize("user, mechanism", [("alice", "PLAIN"), ("carol", "SCRAM-SHA-256")])
def test_over_tls_the_gateway_is_a_sasl_ssl_listener(secured, user, mechanism):
    node, gateway = secured
    conf = {**login(user, mechanism), "security.protocol": "SASL_SSL", "ssl.ca.location": str(gateway.ca_path)}
    assert produce(gateway.tls.bootstrap, "alices", conf) is None
    assert produce(gateway.tls.bootstrap, "secret", conf) == "TOPIC_AUTHORIZATION_FAILED"
    # A client that speaks plaintext to the TLS port gets nowhere.
    assert produce(gateway.tls.bootstrap, "alices", login(user, mechanism)) is not None


def logged_in_at(gateway, user: str) -> tuple[socket.socket, m.SaslAuthenticateResponse]:
    host, port = gateway.bootstrap.split(",")[0].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    assert wire.roundtrip(sock, m.ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="PLAIN"), 1)\
        .error_code == 0
    answer = wire.roundtrip(sock, m.ApiKey.SASL_AUTHENTICATE, 2,
                            m.SaslAuthenticateRequest(auth_bytes=f"\x00{user}\x00{user}-secret".encode()), 2)
    return sock, answer


def test_a_session_ends_where_the_clusters_would_and_only_its_principal_may_renew_it(secured):
    """The cluster's connections.max.reauth.ms holds through the gateway: the session's
    lifetime is the broker's, a request after it ends closes the connection, a login again in
    time keeps it, and logging in again as someone else is refused and closed (KIP-368)."""
    node, gateway = secured
    sock, answer = logged_in_at(gateway.reauth, "alice")
    with sock:
        assert answer.error_code == 0 and answer.session_lifetime_ms == REAUTH_MS
        assert wire.roundtrip(sock, m.ApiKey.METADATA, 1, m.MetadataRequest(topics=[]), 3) is not None
        time.sleep(REAUTH_MS / 1000 + 0.3)
        sock.sendall(wire.frame(m.ApiKey.METADATA, 1, m.MetadataRequest(topics=[]), 4))
        assert wire.closed_without_answer(sock), "a request after the session ended was served"
    sock, _ = logged_in_at(gateway.reauth, "alice")
    with sock:
        wire.check_reauthentication(sock, REAUTH_MS)


def test_librdkafka_logs_in_again_through_the_gateway_and_writes_on(secured):
    """A producer writing for 6 s through sessions of 1.5 s: librdkafka renews its login
    through the gateway (and the gateway its own), and nothing fails."""
    node, gateway = secured
    node_log, gateway_log = node.log_path.stat().st_size, gateway.reauth.log_path.stat().st_size
    errors: list = []
    delivered: list = []
    p = Producer({"bootstrap.servers": gateway.reauth.bootstrap, "message.timeout.ms": 10000,
                  **login("carol", "SCRAM-SHA-256")})
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        p.produce("alices", b"renewed", on_delivery=lambda err, msg: (errors if err else delivered).append(err))
        p.poll(0.05)
    assert p.flush(15) == 0
    assert not errors, errors
    assert len(delivered) > 50
    # No session ended unrenewed: neither the client's at the gateway nor the gateway's own
    # at the broker.
    for path, since in ((gateway.reauth.log_path, gateway_log), (node.log_path, node_log)):
        seen = path.read_bytes()[since:].decode(errors="replace")
        assert "expired" not in seen, seen[-2000:]
