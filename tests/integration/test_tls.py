"""TLS listeners with real clients: SSL and mTLS with each of the four client families, every
way in that should fail failing cleanly while the node keeps serving the others, certificate
rotation without a restart, and listeners that cannot serve stopping the node with one line.

One node serves every case through five listeners:

    PLAIN      PLAINTEXT
    TLS        SSL, no client certificate asked for
    MTLS       SSL, ssl.client.auth=required, trusting the test CA
    WRONGHOST  SSL with a certificate for another host name, TLS 1.3 only
    MAPPED     SSL, client certificate required, principal mapping rules set
"""
from __future__ import annotations

import datetime
import socket
import ssl
import time

import anyio
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from core.security.ca import CertificateAuthority
from tests.support.clients import CLIENTS, Record, create_topic, unique_topic
from tests.support.node import SeawayNode, free_port, start_failure

pytestmark = pytest.mark.timeout(300)

LISTENERS = ("PLAIN", "TLS", "MTLS", "WRONGHOST", "MAPPED")


class Pki:
    def __init__(self, directory):
        self.ca = CertificateAuthority(directory / "ca")
        self.server = self.ca.issue("server")
        self.client = self.ca.issue("client", common_name="writer")
        self.elsewhere = self.ca.issue("elsewhere", hosts=("elsewhere.example",))
        old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
        self.expired = self.ca.issue("expired", not_before=old, days=2)
        self.stranger = CertificateAuthority(directory / "other-ca", name="Someone else").issue("stranger")
        self.keystore = directory / "server.pem"   # Kafka's PEM keystore: key and chain in one file
        self.keystore.write_bytes(self.server.key.read_bytes() + self.server.cert.read_bytes())
        self.elsewhere_keystore = directory / "elsewhere.pem"
        self.elsewhere_keystore.write_bytes(self.elsewhere.key.read_bytes() + self.elsewhere.cert.read_bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    ports = {name: free_port() for name in LISTENERS}
    directory = tmp_path_factory.mktemp("tls-node")
    props = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,TLS:SSL,MTLS:SSL,WRONGHOST:SSL,MAPPED:SSL",
        "inter.broker.listener.name": "PLAIN",
        "ssl.keystore.location": str(pki.keystore),
        "ssl.truststore.location": str(pki.ca.cert_path),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mapped.ssl.client.auth": "required",
        "listener.name.mapped.ssl.principal.mapping.rules": "RULE:^CN=(.*?),O=Seaway$/$1/U",
        "listener.name.wronghost.ssl.keystore.location": str(pki.elsewhere_keystore),
        "listener.name.wronghost.ssl.enabled.protocols": "TLSv1.3",
    }
    n = SeawayNode(directory, props, port=ports["PLAIN"]).start()
    n.ports = ports
    yield n
    n.stop()


def address(node, listener: str) -> str:
    return f"127.0.0.1:{node.ports[listener]}"


def tls_config(client: str, pki: Pki, *, cert=None) -> dict:
    """The client's own spelling of "TLS, trusting the test CA" (and presenting `cert`)."""
    if client == "kafkajs":
        return {"ssl": {"ca": str(pki.ca.cert_path), **({"cert": str(cert.cert), "key": str(cert.key)} if cert else {})}}
    if client == "kafka-python":
        return {"security_protocol": "SSL", "ssl_cafile": str(pki.ca.cert_path),
                **({"ssl_certfile": str(cert.cert), "ssl_keyfile": str(cert.key)} if cert else {})}
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca.cert_path),
            **({"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)} if cert else {})}


def log_since(node, mark: int) -> str:
    return node.log_path.read_bytes()[mark:].decode(errors="replace")


def wait_for_log(node, mark: int, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = log_since(node, mark)
        if text in seen:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged; the node logged:\n{log_since(node, mark)[-3000:]}")


def confluent_cannot_produce(bootstrap: str, config: dict) -> list:
    """Produce one record with a short timeout; the delivery errors (none means it worked)."""
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 4000,
                         "log_level": 0, **config})
    producer.produce("tls-refused", b"x", on_delivery=lambda err, msg: errors.append(err) if err else None)
    producer.flush(10)
    return errors


def assert_still_serves(node, pki) -> None:
    """A TLS client gets through on the TLS listener: whatever just failed left the node up."""
    topic = unique_topic("tls-after")
    client = CLIENTS["confluent"]
    client.produce(address(node, "TLS"), topic, [Record(value=b"after", partition=0)],
                   config=tls_config("confluent", pki))
    got = client.consume(address(node, "TLS"), topic, {0: 0}, count=1, config=tls_config("confluent", pki))
    assert [r.value for r in got] == [b"after"]


# --- what should work ----------------------------------------------------------------------------

@pytest.mark.parametrize("listener", ["TLS", "MTLS"])
@pytest.mark.parametrize("client_name", ["confluent", "kafka-python", "kcat", "kafkajs"])
def test_each_client_produces_and_consumes_over_tls_and_mtls(node, pki, client_name, listener):
    client = CLIENTS[client_name]
    config = tls_config(client_name, pki, cert=pki.client if listener == "MTLS" else None)
    topic = unique_topic(f"tls-{client_name}")
    create_topic(address(node, "PLAIN"), topic, partitions=1)   # kafkajs does not create topics
    records = [Record(key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(20)]
    client.produce(address(node, listener), topic, records, config=config)
    got = client.consume(address(node, listener), topic, {0: 0}, count=20, config=config)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]


def test_the_tls_listener_really_encrypts(node, pki):
    """What the listener speaks is TLS 1.2 or 1.3 with the configured certificate, and the
    bytes of a plaintext Kafka request are not answered."""
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    with socket.create_connection(("127.0.0.1", node.ports["TLS"])) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            assert dict(x[0] for x in tls.getpeercert()["subject"])["commonName"] == "server"

def test_enabled_protocols_are_enforced(node):
    """WRONGHOST allows only TLSv1.3: a client that stops at TLS 1.2 is refused by the server."""
    def handshake(maximum):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.maximum_version = maximum
        with socket.create_connection(("127.0.0.1", node.ports["WRONGHOST"])) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                return tls.version()
    assert handshake(ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    with pytest.raises(ssl.SSLError, match="(?i)protocol version|unsupported protocol"):
        handshake(ssl.TLSVersion.TLSv1_2)


def test_sensitive_settings_are_never_described(node):
    admin = AdminClient({"bootstrap.servers": address(node, "PLAIN")})
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["ssl.keystore.location"].value is not None
    for name in ("ssl.keystore.password", "ssl.key.password", "ssl.keystore.key", "ssl.truststore.password"):
        assert configs[name].is_sensitive and configs[name].value is None, name


# --- what should fail, and leave the node serving ------------------------------------------------

@pytest.mark.parametrize("case", ["no certificate", "untrusted certificate", "expired certificate"])
def test_mtls_refuses_clients_without_a_good_certificate(node, pki, case):
    cert = {"no certificate": None, "untrusted certificate": pki.stranger,
            "expired certificate": pki.expired}[case]
    mark = node.log_path.stat().st_size
    errors = confluent_cannot_produce(address(node, "MTLS"), tls_config("confluent", pki, cert=cert))
    assert errors, f"a client with {case} produced through an mTLS listener"
    seen = wait_for_log(node, mark, "TLS handshake failed")
    assert "MTLS" in seen
    assert_still_serves(node, pki)


def test_a_certificate_for_another_host_is_refused_by_the_client(node, pki):
    """The client checks the server's name (ssl.endpoint.identification.algorithm=https)."""
    errors = confluent_cannot_produce(address(node, "WRONGHOST"), tls_config("confluent", pki))
    assert errors
    assert not confluent_cannot_produce(address(node, "WRONGHOST"), {
        **tls_config("confluent", pki), "ssl.endpoint.identification.algorithm": "none"})
    assert_still_serves(node, pki)


def test_a_certificate_no_mapping_rule_covers_is_refused(node, pki):
    """MAPPED's only rule wants O=Seaway: the client's certificate maps, the stranger's
    (O=Seaway too, but untrusted) never gets that far, and one from a subject without O does not map."""
    assert not confluent_cannot_produce(address(node, "MAPPED"), tls_config("confluent", pki, cert=pki.client))
    plain = pki.ca.issue("no-org", organization=None)
    mark = node.log_path.stat().st_size
    assert confluent_cannot_produce(address(node, "MAPPED"), tls_config("confluent", pki, cert=plain))
    wait_for_log(node, mark, "no rule of ssl.principal.mapping.rules maps 'CN=no-org'")
    assert_still_serves(node, pki)


def test_plaintext_to_a_tls_port_and_tls_to_a_plaintext_port_are_closed(node, pki):
    mark = node.log_path.stat().st_size
    assert confluent_cannot_produce(address(node, "TLS"), {})
    wait_for_log(node, mark, "TLS handshake failed")
    mark = node.log_path.stat().st_size
    assert confluent_cannot_produce(address(node, "PLAIN"), tls_config("confluent", pki))
    wait_for_log(node, mark, "sent a TLS handshake to PLAINTEXT listener PLAIN")
    with socket.create_connection(("127.0.0.1", node.ports["TLS"]), timeout=15) as raw:
        raw.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")   # ApiVersions v0
        answer = b""
        while chunk := raw.recv(4096):
            answer += chunk
        # At most a TLS alert record (content type 21), never a Kafka response, then the close.
        assert answer == b"" or answer[0] == 0x15, answer
    assert_still_serves(node, pki)


def test_a_close_notify_is_answered_at_once(node, pki):
    """A client that ends with close_notify and waits for the node's (Python's ssl and asyncio
    do; Seaway's client gave up after a second, on every TLS connection it closed) gets it,
    after a request and without one, and the node serves on."""
    from core.client.connection import BrokerConnection
    context = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    for send_a_request in (False, True):
        with socket.create_connection(("127.0.0.1", node.ports["TLS"]), timeout=15) as raw:
            tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
            if send_a_request:
                tls.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")
                size = int.from_bytes(tls.recv(4), "big")   # ApiVersions v0 answered: read it all
                body = b""
                while len(body) < size:
                    body += tls.recv(size - len(body))
            tls.settimeout(15)
            plain = tls.unwrap()             # sends close_notify, returns once the node's arrived
            assert plain.recv(1) == b""      # and then the socket closes

    async def open_and_close() -> float:
        conn = BrokerConnection("127.0.0.1", node.ports["TLS"], ssl_context=context, request_timeout_ms=15000)
        await conn.connect()
        started = time.monotonic()
        await conn.close()
        return time.monotonic() - started
    took = anyio.run(open_and_close)
    assert took < 0.9, f"closing a TLS connection took {took:.2f}s: the close_notify went unanswered"
    assert_still_serves(node, pki)


def test_a_rotated_certificate_is_served_without_a_restart(node, pki):
    def served_serial() -> int:
        ctx = ssl.create_default_context(cafile=str(pki.ca.cert_path))
        with socket.create_connection(("127.0.0.1", node.ports["TLS"])) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                return int(tls.getpeercert()["serialNumber"], 16)

    before = served_serial()
    rotated = pki.ca.issue("server-rotated", common_name="server")
    staged = pki.keystore.with_suffix(".new")
    staged.write_bytes(rotated.key.read_bytes() + rotated.cert.read_bytes())
    staged.replace(pki.keystore)   # as certificate tools do: a new file moved into place
    from cryptography import x509
    expected = x509.load_pem_x509_certificate(rotated.cert.read_bytes()).serial_number
    deadline = time.monotonic() + 10
    while served_serial() != expected:
        assert time.monotonic() < deadline, f"still serving serial {before} after rotation"
        time.sleep(0.3)
    assert_still_serves(node, pki)


# --- listeners that cannot serve -----------------------------------------------------------------

@pytest.mark.parametrize("props,message", [
    ({"listeners": "SSL://127.0.0.1:0"},
     "ssl.keystore.location: a TLS listener needs a keystore"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent/server.pem"},
     "ssl.keystore.location: cannot read /nonexistent/server.pem"),
    ({"listeners": "SECURE://127.0.0.1:0", "listener.security.protocol.map": "SECURE:SSL",
      "listener.name.secure.ssl.client.auth": "required", "ssl.keystore.location": "KEYSTORE"},
     "listener.name.secure.ssl.truststore.location: ssl.client.auth=required needs a truststore"),
])
def test_a_listener_that_cannot_serve_stops_the_node_with_one_line(tmp_path, pki, props, message):
    props = {k: (str(pki.keystore) if v == "KEYSTORE" else v) for k, v in props.items()}
    assert message in start_failure(tmp_path, props)


# --- Seaway's own CLI ----------------------------------------------------------------------------

def test_the_cli_connects_over_tls_with_a_command_config(node, pki, tmp_path):
    from tests.support.cli import seaway
    tls = tmp_path / "tls.properties"
    tls.write_text(f"security.protocol=SSL\nssl.truststore.location={pki.ca.cert_path}\n")
    mtls = tmp_path / "mtls.properties"
    client_keystore = tmp_path / "client.pem"
    client_keystore.write_bytes(pki.client.key.read_bytes() + pki.client.cert.read_bytes())
    mtls.write_text(tls.read_text() + f"ssl.keystore.location={client_keystore}\n")
    topic = unique_topic("tls-cli")
    seaway("topics", "create", topic, "-b", address(node, "TLS"), "--command-config", str(tls))
    listed = seaway("topics", "list", "-b", address(node, "MTLS"), "--command-config", str(mtls))
    assert topic in listed.stdout
    # Without its certificate the mTLS listener turns the CLI away: one line, no traceback.
    refused = seaway("topics", "list", "-b", address(node, "MTLS"), "--command-config", str(tls),
                     "--timeout", "5", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # A certificate the CLI does not trust: the reason is OpenSSL's.
    untrusting = tmp_path / "untrusting.properties"
    untrusting.write_text(f"security.protocol=SSL\nssl.truststore.location={pki.stranger.ca}\n")
    refused = seaway("topics", "list", "-b", address(node, "TLS"), "--command-config", str(untrusting),
                     "--timeout", "5", check=False)
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
    # A key the CLI does not know is named, with the file.
    typo = tmp_path / "typo.properties"
    typo.write_text("security.protocol=SSL\nssl.trustore.location=/x\n")
    refused = seaway("topics", "list", "-b", address(node, "TLS"), "--command-config", str(typo), check=False)
    assert refused.returncode == 2
    assert f"--command-config {typo}: ssl.trustore.location: not a TLS setting" in refused.stderr


# --- a cluster whose nodes talk to each other over mTLS ------------------------------------------

def test_a_cluster_runs_with_mtls_between_brokers_and_controllers(tmp_path, pki):
    """Three combined nodes, both listeners SSL with client certificates required: the quorum
    elects, brokers register and replicate (ISR of 3) only if every node-to-node connection
    (raft, heartbeats, forwarding, follower fetches) speaks TLS with the node's certificate."""
    from tests.support.cluster import KRaftCluster, assert_replicates
    secure = {"listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:SSL",
              "ssl.keystore.location": str(pki.keystore), "ssl.truststore.location": str(pki.ca.cert_path),
              "ssl.client.auth": "required"}
    with KRaftCluster(tmp_path, combined=3, overrides=secure) as cluster:   # started on entry
        assert_replicates(cluster, tls_config("confluent", pki, cert=pki.client), unique_topic("mtls-cluster"), 200)
        # The controller listener refuses a plaintext client: the quorum is TLS, not just the clients.
        port = cluster.controller_ports[1]
        with socket.create_connection(("127.0.0.1", port), timeout=15) as raw:
            raw.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")
            answer = b""
            while chunk := raw.recv(4096):
                answer += chunk
            assert answer == b"" or answer[0] == 0x15


def test_the_cli_says_when_a_tls_port_is_asked_in_plaintext(node):
    from tests.support.cli import seaway
    proc = seaway("topics", "list", "-b", address(node, "TLS"), "--timeout", "5", check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "security.protocol=SSL or SASL_SSL" in proc.stderr, proc.stderr
