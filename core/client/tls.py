"""TLS for Seaway's clients (and the parts a listener shares): contexts from Kafka's `ssl.*`
client properties.

Kafka's names and meanings, so an existing client.properties works:

- the keystore, what this side presents: `ssl.keystore.type` PEM or PKCS12 (JKS cannot be read
  here: the error says how to convert it), `ssl.keystore.location`, `ssl.keystore.password`,
  `ssl.key.password`; or, for PEM, the chain and key given inline in
  `ssl.keystore.certificate.chain` and `ssl.keystore.key`;
- the truststore, what this side trusts: `ssl.truststore.type`, `ssl.truststore.location`,
  `ssl.truststore.password`, or inline PEM in `ssl.truststore.certificates`;
- `ssl.enabled.protocols` (TLSv1.2 and TLSv1.3; older versions are refused as insecure),
  `ssl.cipher.suites` (OpenSSL or IANA names; TLS 1.3's suites cannot be narrowed in Python and
  are always allowed), `ssl.endpoint.identification.algorithm` (`https` checks the server's
  host name against its certificate, empty turns that check off).

A setting that cannot work raises TlsError, one line that names the key. Private keys never
touch the disk in clear: PKCS12 keys and inline PEM keys reach OpenSSL through an anonymous
in-memory file (memfd).
"""
from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_INSECURE_PROTOCOLS = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "TLS")

# Every ssl.* setting with its default, for clients and (core/config/tls.py) the broker alike.
DEFAULTS: dict[str, Any] = {
    "ssl.keystore.type": None, "ssl.keystore.location": None, "ssl.keystore.password": None,
    "ssl.key.password": None, "ssl.keystore.certificate.chain": None, "ssl.keystore.key": None,
    "ssl.truststore.type": None, "ssl.truststore.location": None, "ssl.truststore.password": None,
    "ssl.truststore.certificates": None, "ssl.client.auth": "none",
    "ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"], "ssl.protocol": "TLSv1.3", "ssl.cipher.suites": [],
    "ssl.endpoint.identification.algorithm": "https", "ssl.principal.mapping.rules": "DEFAULT",
}
_LISTS = ("ssl.enabled.protocols", "ssl.cipher.suites")
STORE_TYPES = ("PEM", "PKCS12", "JKS")


class TlsError(ValueError):
    """A TLS setting that cannot work: one line naming the key."""


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def context_from_client_properties(props: Mapping[str, str], where: str = "") -> ssl.SSLContext | None:
    """The TLS context Kafka client properties ask for (`security.protocol` and `ssl.*`, as in
    a client.properties file), or None for PLAINTEXT and SASL_PLAINTEXT. SASL's keys are
    core/client/security.py's."""
    protocol = (props.get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise TlsError(f"{where}security.protocol: {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return None
    return client_context(TlsSettings.from_properties(props, where))


@dataclass(frozen=True)
class TlsSettings:
    """The ssl.* values for one listener or one client, and where they came from (`where`
    prefixes the key in error messages: `listener.name.ssl.` for a listener override)."""
    values: Mapping[str, Any]
    where: str = ""

    @classmethod
    def from_properties(cls, props: Mapping[str, str], where: str = "") -> "TlsSettings":
        """From client properties (strings, as in a client.properties file)."""
        values: dict[str, Any] = {}
        for name, raw in props.items():
            if not name.startswith("ssl."):
                continue
            if name == "ssl.ca.location":
                # librdkafka's name for a PEM file of trusted CAs, so that one properties file
                # serves kcat -F, confluent-kafka and Seaway's CLI alike.
                values["ssl.truststore.location"] = raw
                values["ssl.truststore.type"] = "PEM"
                continue
            if name not in DEFAULTS:
                raise TlsError(f"{where}{name}: not a TLS setting Seaway knows")
            if name in _LISTS:
                values[name] = [part.strip() for part in raw.split(",") if part.strip()]
            elif name.endswith(".type") and raw:
                if raw.strip().upper() not in STORE_TYPES:
                    raise TlsError(f"{where}{name}: {raw!r} is not PEM or PKCS12")
                values[name] = raw.strip().upper()
            else:
                values[name] = raw
        return cls(values, where)

    def __getitem__(self, name: str) -> Any:
        return self.values.get(name, DEFAULTS[name])

    def key(self, name: str) -> str:
        return f"{self.where}{name}"

    def files(self) -> list[Path]:
        return [Path(p) for p in (self["ssl.keystore.location"], self["ssl.truststore.location"]) if p]

    @property
    def has_keystore(self) -> bool:
        return bool(self["ssl.keystore.location"] or self["ssl.keystore.certificate.chain"])

    @property
    def has_truststore(self) -> bool:
        return bool(self["ssl.truststore.location"] or self["ssl.truststore.certificates"])


# ------------------------------------------------------------------------------- contexts

def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: it checks the server's certificate against the truststore (the
    system's CAs when none is set) and, unless endpoint identification is off, its host name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    apply_protocols(ctx, settings)
    if settings.has_truststore:
        load_truststore(ctx, settings)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    algorithm = (settings["ssl.endpoint.identification.algorithm"] or "").strip().lower()
    if algorithm not in ("", "https"):
        raise TlsError(f"{settings.key('ssl.endpoint.identification.algorithm')}: {algorithm!r} is "
                          f"not https or empty")
    ctx.check_hostname = algorithm == "https"
    if settings.has_keystore:
        load_keystore(ctx, settings)
    return ctx


def apply_protocols(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    key = settings.key("ssl.enabled.protocols")
    versions = []
    for name in settings["ssl.enabled.protocols"]:
        if name in _INSECURE_PROTOCOLS:
            raise TlsError(f"{key}: {name} is not allowed (insecure); use TLSv1.2 and TLSv1.3")
        if name not in _PROTOCOLS:
            raise TlsError(f"{key}: {name!r} is not TLSv1.2 or TLSv1.3")
        versions.append(_PROTOCOLS[name])
    if not versions:
        raise TlsError(f"{key}: at least one of TLSv1.2 and TLSv1.3 is needed")
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    ctx.options |= ssl.OP_NO_COMPRESSION | getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    suites = settings["ssl.cipher.suites"]
    if suites:
        tls12 = [_openssl_cipher_name(s) for s in suites if not _is_tls13_suite(s)]
        if tls12:
            try:
                ctx.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise TlsError(f"{settings.key('ssl.cipher.suites')}: none of {', '.join(suites)} "
                                  f"is a cipher suite OpenSSL knows") from None
        elif ssl.TLSVersion.TLSv1_2 in versions:
            raise TlsError(f"{settings.key('ssl.cipher.suites')}: only TLS 1.3 suites are listed, "
                              f"but TLSv1.2 is enabled; list TLS 1.2 suites or enable only TLSv1.3")


def _is_tls13_suite(name: str) -> bool:
    return name.upper() in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                            "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                            "TLS_AES_128_CCM_8_SHA256")


def _openssl_cipher_name(name: str) -> str:
    """IANA (Java) names of the usual TLS 1.2 suites in OpenSSL's spelling; others pass as they
    are, so an OpenSSL name works too. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 becomes
    ECDHE-RSA-AES256-GCM-SHA384."""
    upper = name.strip().upper()
    if not upper.startswith("TLS_") or "_WITH_" not in upper:
        return name.strip()
    kx, cipher = upper[4:].split("_WITH_", 1)
    kx = kx.replace("_", "-")
    cipher = (cipher.replace("AES_128_", "AES128-").replace("AES_256_", "AES256-")
              .replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305").replace("_", "-"))
    if kx == "RSA":
        return cipher
    return f"{kx}-{cipher}"


# ------------------------------------------------------------------------------- stores

def _store_type(settings: TlsSettings, which: str, data: bytes) -> str:
    declared = settings[f"ssl.{which}.type"]
    kind = declared or ("JKS" if data[:4] == b"\xfe\xed\xfe\xed"
                        else "PEM" if b"-----BEGIN" in data[:4096] else "PKCS12")
    if kind == "JKS":
        location = settings[f"ssl.{which}.location"]
        raise TlsError(
            f"{settings.key(f'ssl.{which}.type')}: {location} is a JKS {which}, which cannot be read "
            f"here; convert it with `keytool -importkeystore -srckeystore {location} "
            f"-destkeystore {location}.p12 -deststoretype PKCS12` and use PKCS12")
    return kind


def _read(settings: TlsSettings, name: str) -> bytes:
    path = settings[name]
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"{settings.key(name)}: cannot read {path}: {exc.strerror}") from None


def load_keystore(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    key_password = settings["ssl.key.password"]
    if settings["ssl.keystore.certificate.chain"]:
        if not settings["ssl.keystore.key"]:
            raise TlsError(f"{settings.key('ssl.keystore.key')}: the inline certificate chain "
                              f"needs its private key")
        pem = (settings["ssl.keystore.key"].strip() + "\n"
               + settings["ssl.keystore.certificate.chain"].strip() + "\n").encode()
        _load_pem_chain(ctx, settings, pem, key_password, "ssl.keystore.certificate.chain")
        return
    data = _read(settings, "ssl.keystore.location")
    if _store_type(settings, "keystore", data) == "PEM":
        _load_pem_chain(ctx, settings, data, key_password, "ssl.keystore.location")
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    password = settings["ssl.keystore.password"]
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        raise TlsError(f"{settings.key('ssl.keystore.password')}: cannot open the PKCS12 keystore "
                          f"{settings['ssl.keystore.location']} (wrong password, or not PKCS12)") from None
    if key is None or cert is None:
        raise TlsError(f"{settings.key('ssl.keystore.location')}: the PKCS12 keystore holds no "
                          f"private key with its certificate")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
    _load_pem_chain(ctx, settings, pem, None, "ssl.keystore.location")


def _load_pem_chain(ctx: ssl.SSLContext, settings: TlsSettings, pem: bytes, password: str | None,
                    name: str) -> None:
    try:
        with _private_file(pem) as path:
            ctx.load_cert_chain(path, password=password.encode() if password else None)
    except ssl.SSLError as exc:
        hint = " (or ssl.key.password is wrong)" if b"ENCRYPTED" in pem else ""
        raise TlsError(f"{settings.key(name)}: no usable certificate and private key in PEM"
                          f"{hint}: {exc.reason or exc}") from None


def load_truststore(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings["ssl.truststore.certificates"]:
        pem = settings["ssl.truststore.certificates"]
        name = "ssl.truststore.certificates"
    else:
        data = _read(settings, "ssl.truststore.location")
        name = "ssl.truststore.location"
        if _store_type(settings, "truststore", data) == "PEM":
            pem = data.decode("ascii", "replace")
        else:
            pem = _pkcs12_certificates(settings, data)
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsError(f"{settings.key(name)}: no trusted certificate could be read: {exc}") from None


def _pkcs12_certificates(settings: TlsSettings, data: bytes) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    password = settings["ssl.truststore.password"]
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise TlsError(f"{settings.key('ssl.truststore.password')}: cannot open the PKCS12 truststore "
                          f"{settings['ssl.truststore.location']} (wrong password, or not PKCS12)") from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


class _private_file:
    """A path OpenSSL can open that holds `data` and nothing on disk: a memfd where Linux has
    it, else a file in a private temporary directory, removed on exit."""

    def __init__(self, data: bytes):
        self.data = data
        self.fd: int | None = None
        self.tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> str:
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("seaway-tls", os.MFD_CLOEXEC)
            os.write(self.fd, self.data)
            return f"/proc/self/fd/{self.fd}"
        self.tmp = tempfile.TemporaryDirectory(prefix="seaway-tls-")
        path = os.path.join(self.tmp.name, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.data)
        return path

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.tmp is not None:
            self.tmp.cleanup()


# ------------------------------------------------------------------------------- principals

def certificate_subject(der: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form (CN=writer,O=Corp), as Java's
    X500Principal.getName() gives it to Kafka's principal builder."""
    from cryptography import x509
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
