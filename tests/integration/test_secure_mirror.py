"""The mirror between two secured clusters: it reads the source over SASL_SSL with SCRAM and
writes the target over mTLS, with Kafka client properties in its link config; properties that
cannot work stop it with one line naming the key."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from core.security.ca import CertificateAuthority
from tests.support.clients import create_topic
from tests.support.mirror import produce, read_all
from tests.support.node import REPO, SeawayNode, free_port

pytestmark = pytest.mark.timeout(300)


def test_the_mirror_copies_between_two_secured_clusters(tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    server, mirror_cert = ca.issue("server"), ca.issue("mirror", common_name="mirror")
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(server.key.read_bytes() + server.cert.read_bytes())
    ports = {name: free_port() for name in ("src_plain", "src_secure", "tgt_plain", "tgt_secure")}
    source = SeawayNode(tmp_path / "source", {
        "listeners": f"PLAIN://127.0.0.1:{ports['src_plain']},SECURE://127.0.0.1:{ports['src_secure']}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SECURE:SASL_SSL",
        "ssl.keystore.location": str(keystore), "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
        port=ports["src_plain"]).start()
    target = SeawayNode(tmp_path / "target", {
        "listeners": f"PLAIN://127.0.0.1:{ports['tgt_plain']},SECURE://127.0.0.1:{ports['tgt_secure']}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SECURE:SSL",
        "ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca.cert_path),
        "ssl.client.auth": "required"}, port=ports["tgt_plain"]).start()
    mirror = None
    try:
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "mirror", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"mirror-secret")])["mirror"].result(20)
        create_topic(source.bootstrap, "orders", partitions=3)
        produce(source.bootstrap, "orders", 0, 300)
        mirror_keystore = tmp_path / "mirror.pem"
        mirror_keystore.write_bytes(mirror_cert.key.read_bytes() + mirror_cert.cert.read_bytes())
        config = tmp_path / "links.yaml"
        config.write_text(f"""links:
  - source_alias: src
    source_bootstrap: 127.0.0.1:{ports['src_secure']}
    source_properties:
      security.protocol: SASL_SSL
      ssl.truststore.location: {ca.cert_path}
      sasl.mechanism: SCRAM-SHA-512
      sasl.username: mirror
      sasl.password: mirror-secret
    target_alias: tgt
    target_bootstrap: 127.0.0.1:{ports['tgt_secure']}
    target_properties:
      security.protocol: SSL
      ssl.truststore.location: {ca.cert_path}
      ssl.keystore.location: {mirror_keystore}
    refresh_topics_s: 1
""")
        log = open(tmp_path / "mirror.log", "wb")
        mirror = subprocess.Popen([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)],
                                  cwd=REPO, stdout=log, stderr=log)
        copied = read_all(target.bootstrap, "src.orders", until=300, timeout=90)
        assert sorted({value for _, _, value, *_ in copied}) == sorted(f"v{i}" for i in range(300)), \
            (tmp_path / "mirror.log").read_text()[-3000:]
        assert "authenticated as User:mirror (SASL SCRAM-SHA-512)" in source.log_path.read_text()
    finally:
        if mirror is not None:
            mirror.terminate()
            mirror.wait(30)
        source.stop()
        target.stop()


@pytest.mark.parametrize("properties,message", [
    ("{security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512}", "sasl.username: SCRAM-SHA-512 needs a user name"),
    ("{security.protocol: SSL, ssl.trustore.location: /x}", "ssl.trustore.location: not a TLS setting"),
    ("{security.protocol: SSL, ssl.truststore.location: /nonexistent/ca.crt}", "cannot read /nonexistent/ca.crt"),
])
def test_link_properties_that_cannot_work_are_one_line(tmp_path, properties, message):
    config = tmp_path / "links.yaml"
    config.write_text("links:\n  - {source_alias: a, source_bootstrap: '127.0.0.1:1', target_alias: b, "
                      f"target_bootstrap: '127.0.0.1:2', source_properties: {properties}}}\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert message in proc.stderr and "source_properties" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 30
