"""The broker's `ssl.*` settings (Kafka's names, types and descriptions). Their defaults, their
meaning and the contexts made from them are in core/client/tls.py (which clients use without
this package) and core/security/tls.py; the defaults are taken from there, not repeated."""
from __future__ import annotations

from core.client.tls import DEFAULTS as _D, STORE_TYPES

from .defs import ConfigDef, ConfigType

_T = ConfigType
CLIENT_AUTH = ("none", "requested", "required")

SSL_CONFIG_LIST = [
    ConfigDef("ssl.keystore.type", _T.STRING, _D["ssl.keystore.type"],
              "PEM or PKCS12 (default: told apart by the file's content)", choices=STORE_TYPES),
    ConfigDef("ssl.keystore.location", _T.STRING, _D["ssl.keystore.location"], "this side's key and certificate chain"),
    ConfigDef("ssl.keystore.password", _T.PASSWORD, _D["ssl.keystore.password"], "password of a PKCS12 keystore", sensitive=True),
    ConfigDef("ssl.key.password", _T.PASSWORD, _D["ssl.key.password"], "password of an encrypted private key", sensitive=True),
    ConfigDef("ssl.keystore.certificate.chain", _T.PASSWORD, _D["ssl.keystore.certificate.chain"],
              "the certificate chain in PEM, given inline instead of a keystore file", sensitive=True),
    ConfigDef("ssl.keystore.key", _T.PASSWORD, _D["ssl.keystore.key"],
              "the private key in PEM, given inline instead of a keystore file", sensitive=True),
    ConfigDef("ssl.truststore.type", _T.STRING, _D["ssl.truststore.type"],
              "PEM or PKCS12 (default: told apart by the file's content)", choices=STORE_TYPES),
    ConfigDef("ssl.truststore.location", _T.STRING, _D["ssl.truststore.location"], "the certificates this side trusts"),
    ConfigDef("ssl.truststore.password", _T.PASSWORD, _D["ssl.truststore.password"], "password of a PKCS12 truststore", sensitive=True),
    ConfigDef("ssl.truststore.certificates", _T.PASSWORD, _D["ssl.truststore.certificates"],
              "trusted certificates in PEM, given inline instead of a truststore file", sensitive=True),
    ConfigDef("ssl.client.auth", _T.STRING, _D["ssl.client.auth"], "whether a listener asks clients for a certificate: "
              "none, requested or required", choices=CLIENT_AUTH),
    ConfigDef("ssl.enabled.protocols", _T.LIST, _D["ssl.enabled.protocols"], "TLS versions allowed"),
    ConfigDef("ssl.protocol", _T.STRING, _D["ssl.protocol"], "accepted for compatibility; ssl.enabled.protocols decides"),
    ConfigDef("ssl.cipher.suites", _T.LIST, _D["ssl.cipher.suites"], "TLS 1.2 cipher suites allowed (default: OpenSSL's)"),
    ConfigDef("ssl.endpoint.identification.algorithm", _T.STRING, _D["ssl.endpoint.identification.algorithm"],
              "https: a client checks the server's host name against its certificate; empty: it does not"),
    ConfigDef("ssl.principal.mapping.rules", _T.STRING, _D["ssl.principal.mapping.rules"],
              "rules that turn a client certificate's subject into a principal name"),
]
SSL_CONFIGS = {d.name: d for d in SSL_CONFIG_LIST}
