"""The broker's `ssl.*` settings (Kafka's names, types and defaults). Their meaning, and the
contexts made from them, are in core/client/tls.py and core/security/tls.py."""
from __future__ import annotations

from .defs import ConfigDef, ConfigType

_T = ConfigType
CLIENT_AUTH = ("none", "requested", "required")
STORE_TYPES = ("PEM", "PKCS12", "JKS")

SSL_CONFIG_LIST = [
    ConfigDef("ssl.keystore.type", _T.STRING, None,
              "PEM or PKCS12 (default: told apart by the file's content)", choices=STORE_TYPES),
    ConfigDef("ssl.keystore.location", _T.STRING, None, "this side's key and certificate chain"),
    ConfigDef("ssl.keystore.password", _T.PASSWORD, None, "password of a PKCS12 keystore", sensitive=True),
    ConfigDef("ssl.key.password", _T.PASSWORD, None, "password of an encrypted private key", sensitive=True),
    ConfigDef("ssl.keystore.certificate.chain", _T.PASSWORD, None,
              "the certificate chain in PEM, given inline instead of a keystore file", sensitive=True),
    ConfigDef("ssl.keystore.key", _T.PASSWORD, None,
              "the private key in PEM, given inline instead of a keystore file", sensitive=True),
    ConfigDef("ssl.truststore.type", _T.STRING, None,
              "PEM or PKCS12 (default: told apart by the file's content)", choices=STORE_TYPES),
    ConfigDef("ssl.truststore.location", _T.STRING, None, "the certificates this side trusts"),
    ConfigDef("ssl.truststore.password", _T.PASSWORD, None, "password of a PKCS12 truststore", sensitive=True),
    ConfigDef("ssl.truststore.certificates", _T.PASSWORD, None,
              "trusted certificates in PEM, given inline instead of a truststore file", sensitive=True),
    ConfigDef("ssl.client.auth", _T.STRING, "none", "whether a listener asks clients for a certificate: "
              "none, requested or required", choices=CLIENT_AUTH),
    ConfigDef("ssl.enabled.protocols", _T.LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions allowed"),
    ConfigDef("ssl.protocol", _T.STRING, "TLSv1.3", "accepted for compatibility; ssl.enabled.protocols decides"),
    ConfigDef("ssl.cipher.suites", _T.LIST, [], "TLS 1.2 cipher suites allowed (default: OpenSSL's)"),
    ConfigDef("ssl.endpoint.identification.algorithm", _T.STRING, "https",
              "https: a client checks the server's host name against its certificate; empty: it does not"),
    ConfigDef("ssl.principal.mapping.rules", _T.STRING, "DEFAULT",
              "rules that turn a client certificate's subject into a principal name"),
]
SSL_CONFIGS = {d.name: d for d in SSL_CONFIG_LIST}
