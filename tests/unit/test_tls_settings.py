"""TLS settings to contexts, and certificate subjects to principals (no sockets): the one-line
errors a bad setting gets, the stores each format is read from, and Kafka's mapping rules."""
from __future__ import annotations

import datetime
import ssl

import pytest

from core.client.tls import TlsError, TlsSettings, _openssl_cipher_name, client_context
from core.config import BrokerConfig
from core.config.defs import ConfigError
from core.security.ca import CertificateAuthority
from core.security.principal_mapping import NoMatchingRule, PrincipalMapper
from core.security.tls import ReloadingContext, server_context


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def server(ca):
    return ca.issue("server")


def settings(**values) -> TlsSettings:
    return TlsSettings({k.replace("_", "."): v for k, v in values.items()})


def pem_keystore(issued, tmp_path, name="keystore.pem"):
    path = tmp_path / name
    path.write_bytes(issued.key.read_bytes() + issued.cert.read_bytes())
    return path


# --- principal mapping rules: Kafka's SslPrincipalMapper semantics ------------------------------

MAPPING_CASES = [
    # rules, distinguished name, principal name (None: no rule applies)
    ("DEFAULT", "CN=writer,O=Corp", "CN=writer,O=Corp"),
    (None, "CN=writer,O=Corp", "CN=writer,O=Corp"),
    ("RULE:^CN=(.*?),O=(.*)$/$1@$2/L,DEFAULT", "CN=Writer,O=Corp", "writer@corp"),
    ("RULE:^CN=(.*?),O=(.*)$/$1@$2/L,DEFAULT", "CN=Writer", "CN=Writer"),
    ("RULE:^CN=(.*?),O=(.*)$/$1/U", "CN=Writer,O=Corp", "WRITER"),
    ("RULE:^CN=(.*?),O=(.*)$/$1/U", "CN=Writer", None),             # no DEFAULT: nothing maps
    ("RULE:^CN=([^,]*).*$/$1/,RULE:^.*$/other/", "CN=a,O=b", "a"),   # the first match wins
    ("RULE:^CN=(.*)$/$3-$1/", "CN=x", "$3-x"),                       # no group 3: literal
    ("RULE:^CN=(.*)$/$12/", "CN=x", "x2"),                           # $12 -> group 1, then "2"
    (r"RULE:^CN=(.*)$/a\/b-$1/", "CN=x", "a/b-x"),                   # \/ is a slash
    ("  RULE:^CN=(.*)$/$1/L ,  DEFAULT ", "CN=ABC", "abc"),          # blanks around rules
]


@pytest.mark.parametrize("rules,dn,expected", MAPPING_CASES)
def test_principal_mapping_rules_follow_kafka(rules, dn, expected):
    mapper = PrincipalMapper(rules)
    if expected is None:
        with pytest.raises(NoMatchingRule):
            mapper.name_of(dn)
    else:
        assert mapper.name_of(dn) == expected


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "NOT A RULE", "RULE:a/b/,DEFAULT,junk"])
def test_bad_mapping_rules_are_a_one_line_error_naming_the_setting(rules):
    with pytest.raises(ConfigError, match=r"^ssl\.principal\.mapping\.rules: "):
        PrincipalMapper(rules)


# --- cipher names --------------------------------------------------------------------------------

@pytest.mark.parametrize("iana,openssl", [
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
])
def test_iana_cipher_names_become_openssl_names(iana, openssl):
    assert _openssl_cipher_name(iana) == openssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.set_ciphers(openssl)   # OpenSSL knows the name it became


# --- server contexts -----------------------------------------------------------------------------

def test_a_pem_keystore_with_key_and_chain_serves(server, tmp_path):
    ctx = server_context(settings(ssl_keystore_location=str(pem_keystore(server, tmp_path))))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE


def test_inline_pem_and_pkcs12_keystores_serve(ca, server):
    server_context(settings(ssl_keystore_certificate_chain=server.cert.read_text(),
                            ssl_keystore_key=server.key.read_text()))
    p12 = ca.pkcs12(server, "store-secret")
    server_context(settings(ssl_keystore_type="PKCS12", ssl_keystore_location=str(p12),
                            ssl_keystore_password="store-secret"))
    server_context(settings(ssl_keystore_location=str(p12), ssl_keystore_password="store-secret"))   # detected


def test_an_encrypted_pem_key_needs_its_password(ca, tmp_path):
    issued = ca.issue("locked", key_password="key-secret")
    keystore = pem_keystore(issued, tmp_path, "locked.pem")
    server_context(settings(ssl_keystore_location=str(keystore), ssl_key_password="key-secret"))
    with pytest.raises(ConfigError, match=r"^ssl\.keystore\.location: .*ssl\.key\.password is wrong"):
        server_context(settings(ssl_keystore_location=str(keystore), ssl_key_password="wrong"))


@pytest.mark.parametrize("case,values,message", [
    ("no keystore", {}, r"^ssl\.keystore\.location: a TLS listener needs a keystore"),
    ("missing file", {"ssl.keystore.location": "/nonexistent/ks.pem"}, r"^ssl\.keystore\.location: cannot read"),
    ("client auth without truststore", {"KEYSTORE": 1, "ssl.client.auth": "required"},
     r"^ssl\.truststore\.location: ssl\.client\.auth=required needs a truststore"),
    ("insecure protocol", {"KEYSTORE": 1, "ssl.enabled.protocols": ["TLSv1.1", "TLSv1.2"]},
     r"^ssl\.enabled\.protocols: TLSv1\.1 is not allowed"),
    ("unknown cipher", {"KEYSTORE": 1, "ssl.cipher.suites": ["NO-SUCH-CIPHER"]},
     r"^ssl\.cipher\.suites: none of NO-SUCH-CIPHER"),
    ("inline chain without key", {"ssl.keystore.certificate.chain": "x"}, r"^ssl\.keystore\.key: "),
])
def test_a_listener_that_cannot_serve_is_a_one_line_error(server, tmp_path, case, values, message):
    values = dict(values)
    if values.pop("KEYSTORE", None):
        values["ssl.keystore.location"] = str(pem_keystore(server, tmp_path))
    with pytest.raises(ConfigError, match=message) as caught:
        server_context(TlsSettings(values))
    assert "\n" not in str(caught.value)


def test_a_jks_keystore_is_refused_with_how_to_convert_it(tmp_path):
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    with pytest.raises(ConfigError, match=r"^ssl\.keystore\.type: .* is a JKS keystore.*keytool -importkeystore"):
        server_context(settings(ssl_keystore_location=str(jks)))


def test_a_wrong_pkcs12_password_is_named(ca, server):
    p12 = ca.pkcs12(server, "right")
    with pytest.raises(ConfigError, match=r"^ssl\.keystore\.password: cannot open the PKCS12 keystore"):
        server_context(settings(ssl_keystore_location=str(p12), ssl_keystore_password="wrong"))


def test_listener_settings_override_the_nodes_and_errors_name_them(tmp_path):
    config = BrokerConfig({"listeners": "SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                           "listener.security.protocol.map": "SSL:SSL,INTERNAL:SSL",
                           "ssl.client.auth": "required",
                           "listener.name.internal.ssl.client.auth": "none",
                           "log.dirs": str(tmp_path)}, warn_unknown=False)
    values, where = config.tls_values("INTERNAL")
    assert values["ssl.client.auth"] == "none" and where == "listener.name.internal."
    values, where = config.tls_values("SSL")
    assert values["ssl.client.auth"] == "required" and where == ""
    with pytest.raises(ConfigError, match=r"^listener\.name\.internal\.ssl\.keystore\.location: "):
        server_context(TlsSettings(*config.tls_values("INTERNAL")))
    with pytest.raises(ConfigError, match=r"^listener\.name\.internal\.ssl\.client\.auth: "):
        BrokerConfig({"listeners": "INTERNAL://127.0.0.1:0", "listener.security.protocol.map": "INTERNAL:SSL",
                      "listener.name.internal.ssl.client.auth": "sometimes", "log.dirs": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^listener\.name\.other\.\*: OTHER is not one of listeners"):
        BrokerConfig({"listener.name.other.ssl.client.auth": "none", "log.dirs": str(tmp_path)})


# --- client contexts -----------------------------------------------------------------------------

def test_client_properties_are_read_as_kafka_names_them(ca):
    ctx = client_context(TlsSettings.from_properties({
        "ssl.truststore.location": str(ca.cert_path), "ssl.enabled.protocols": "TLSv1.3"}))
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    ctx = client_context(TlsSettings.from_properties({
        "ssl.truststore.location": str(ca.cert_path), "ssl.endpoint.identification.algorithm": ""}))
    assert not ctx.check_hostname
    with pytest.raises(TlsError, match=r"^ssl\.keystore\.typo: not a TLS setting"):
        TlsSettings.from_properties({"ssl.keystore.typo": "x"})
    with pytest.raises(TlsError, match=r"^ssl\.truststore\.type: 'JKX' is not PEM or PKCS12"):
        TlsSettings.from_properties({"ssl.truststore.type": "JKX"})


def test_a_pkcs12_truststore_is_read(ca):
    p12 = ca.truststore_pkcs12("trust")
    client_context(TlsSettings.from_properties({"ssl.truststore.location": str(p12),
                                                "ssl.truststore.password": "trust"}))


# --- reloading -----------------------------------------------------------------------------------

def test_a_rotated_keystore_is_loaded_and_a_broken_one_is_not(ca, tmp_path, monkeypatch, caplog):
    first = ca.issue("rot-1")
    keystore = pem_keystore(first, tmp_path, "rot.pem")
    reloading = ReloadingContext(settings(ssl_keystore_location=str(keystore)))
    original = reloading.context
    clock = [1000.0]
    monkeypatch.setattr("core.security.tls.time.monotonic", lambda: clock[0])
    reloading._checked = clock[0]
    assert reloading.current() is original          # unchanged file: the same context
    second = ca.issue("rot-2", not_before=datetime.datetime.now(datetime.timezone.utc))
    keystore.write_bytes(second.key.read_bytes() + second.cert.read_bytes())
    assert reloading.current() is original          # checked at most once a second
    clock[0] += 2
    assert reloading.current() is not original and reloading.reloads == 1
    reloaded = reloading.context
    keystore.write_bytes(b"-----BEGIN half a file")
    clock[0] += 2
    assert reloading.current() is reloaded          # a broken file keeps the last good one
    assert "still serving the previous certificate" in caplog.text


def test_the_broker_and_the_client_know_the_same_ssl_settings_and_defaults():
    """One list of ssl.* settings: a key the broker's config accepts but the client's reader
    refuses (or the other way round) would make the same properties file work on one side only."""
    from core.client.tls import DEFAULTS
    from core.config.tls import SSL_CONFIGS
    assert set(SSL_CONFIGS) == set(DEFAULTS)
    assert {name: d.default for name, d in SSL_CONFIGS.items()} == DEFAULTS
