"""A small certificate authority: a CA key and certificate, and certificates it signs.

`regions up` uses it to give every node of the local platform a certificate, and the tests use
it for theirs. It writes PEM files (and, on request, PKCS12 keystores), keys readable only by
their owner. Not a general PKI: no revocation, no intermediates, one CA per directory.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    """The files of one issued certificate."""
    cert: Path        # the certificate, then the CA's (a chain a peer can check)
    key: Path         # the private key, unencrypted PEM unless a password was given
    ca: Path          # the CA certificate alone: the truststore


def _name(common_name: str, organization: str | None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class CertificateAuthority:
    """Load the CA in `directory` (ca.crt, ca.key), or make one there if it has none."""

    def __init__(self, directory: Path, name: str = "Seaway local CA"):
        self.directory = Path(directory)
        self.cert_path = self.directory / "ca.crt"
        self.key_path = self.directory / "ca.key"
        if self.cert_path.exists() and self.key_path.exists():
            self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)   # we only ever make EC keys
            self.key = key
            return
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(name, "Seaway")
        self.cert = (x509.CertificateBuilder()
                     .subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - _DAY).not_valid_after(now + 3650 * _DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        _write_private(self.key_path, self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, common_name: str | None = None, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              organization: str | None = "Seaway", key_password: str | None = None,
              not_before: datetime.datetime | None = None, days: int = 825,
              issuer: "CertificateAuthority | None" = None) -> Issued:
        """A certificate for `name` (files <name>.crt and <name>.key beside the CA), valid for
        servers and clients, with `hosts` as DNS names and IP addresses. `not_before` and
        `days` let tests make certificates that are expired or not yet valid."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.timezone.utc) - _DAY
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        builder = (x509.CertificateBuilder()
                   .subject_name(_name(common_name or name, organization))
                   .issuer_name(self.cert.subject)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(start + days * _DAY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(key_password.encode()) if key_password
            else serialization.NoEncryption())
        issued = Issued(self.directory / f"{name}.crt", self.directory / f"{name}.key", self.cert_path)
        _write_private(issued.key, key.private_bytes(serialization.Encoding.PEM,
                                                     serialization.PrivateFormat.PKCS8, encryption))
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM)
                                + self.cert.public_bytes(serialization.Encoding.PEM))
        return issued

    def pkcs12(self, issued: Issued, password: str, *, key_password: str | None = None) -> Path:
        """The issued key and certificate chain as a PKCS12 keystore (<name>.p12)."""
        key = serialization.load_pem_private_key(issued.key.read_bytes(),
                                                 password=key_password.encode() if key_password else None)
        chain = x509.load_pem_x509_certificates(issued.cert.read_bytes())
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        data = pkcs12.serialize_key_and_certificates(
            issued.cert.stem.encode(), key, chain[0], chain[1:],
            serialization.BestAvailableEncryption(password.encode()))
        path = issued.cert.with_suffix(".p12")
        _write_private(path, data)
        return path

    def truststore_pkcs12(self, password: str) -> Path:
        """The CA certificate alone as a PKCS12 truststore (ca.p12)."""
        data = pkcs12.serialize_key_and_certificates(
            b"ca", None, None, [self.cert], serialization.BestAvailableEncryption(password.encode()))
        path = self.directory / "ca.p12"
        path.write_bytes(data)
        return path
