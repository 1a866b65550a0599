"""What the security tests share: a test CA with server and client certificates made on the spot (the
`cryptography` package; no key is ever committed), tokens, htpasswd files, and finding a broker's TLS ports."""

from __future__ import annotations

import datetime
import ipaddress
import re
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

TLS_PORTS = re.compile(r"TLS ports: (pulsar\+ssl://[\d.]+:(\d+)|no pulsar\+ssl://), (https://[\d.]+:(\d+)|no https://)")
ALGORITHM = ec.SECP256R1()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@dataclass
class Certificates:
    """ca.pem, server.pem/server-key.pem (for 127.0.0.1 and localhost) and client certificates by role."""

    directory: Path

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ALGORITHM)
        now = datetime.datetime.now(datetime.UTC)
        self._ca = (
            x509.CertificateBuilder()
            .subject_name(_name("magnetar test CA"))
            .issuer_name(_name("magnetar test CA"))
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()), critical=False)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = self.directory / "ca.pem"
        self.ca.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))
        self.server, self.server_key = self.issue("localhost", server=True)

    def issue(
        self, common_name: str, server: bool = False, ca_key: ec.EllipticCurvePrivateKey | None = None
    ) -> tuple[Path, Path]:
        """A certificate for `common_name` signed by the test CA (or by `ca_key`, to make an untrusted one)."""
        key = ec.generate_private_key(ALGORITHM)
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()), critical=False
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        certificate = builder.sign(ca_key or self._ca_key, hashes.SHA256())
        cert_path = self.directory / f"{common_name}{'-untrusted' if ca_key else ''}.pem"
        key_path = cert_path.with_name(cert_path.stem + "-key.pem")
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return cert_path, key_path

    def untrusted(self, common_name: str) -> tuple[Path, Path]:
        return self.issue(common_name, ca_key=ec.generate_private_key(ALGORITHM))

    def tls_settings(self, **extra: object) -> dict[str, object]:
        return {
            "brokerServicePortTls": 0,
            "webServicePortTls": 0,
            "tlsCertificateFilePath": self.server,
            "tlsKeyFilePath": self.server_key,
            "tlsTrustCertsFilePath": self.ca,
        } | extra


def tls_urls(broker) -> tuple[str, str]:
    """The broker's pulsar+ssl:// and https:// URLs, from its log."""
    match = TLS_PORTS.search(broker.output())
    assert match, broker.output()
    return match.group(1), match.group(3)


def token(secret: bytes, subject: str, expires_in_s: float | None = None, **claims: object) -> str:
    payload: dict[str, object] = {"sub": subject} | claims
    if expires_in_s is not None:
        payload["exp"] = int(time.time() + expires_in_s)
    return jwt.encode(payload, secret, algorithm="HS256")
