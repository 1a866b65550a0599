"""TLS on the broker's ports: the server's `ssl.SSLContext` from Pulsar's tls* settings, and a peer's role.

Owns: reading `tlsCertificateFilePath`, `tlsKeyFilePath`, `tlsTrustCertsFilePath`,
`tlsRequireTrustedClientCertOnConnect`, `tlsProtocols` and `tlsCiphers` into one server context (the
standard `ssl` module does all the cryptography), which TLS port is configured, and the common name of
a verified client certificate (the role of AuthenticationProviderTls).
Must not touch: sockets (server.py binds them) or what a role may do (authorization.py).
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from magnetar.broker.config import BrokerConfig, ConfigError

__all__ = ["certificate_common_name", "server_context", "tls_port"]

_PROTOCOLS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def tls_port(config: BrokerConfig, key: str) -> int | None:
    """The port of `brokerServicePortTls` or `webServicePortTls`, None when unset (TLS off)."""
    raw = str(config[key]).strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError as error:
        raise ConfigError(f"{key}: cannot read {raw!r} as a port") from error
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: {port} is not a port")
    return port


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context both TLS ports serve with. A client certificate is asked for whenever trusted CAs are
    configured (Pulsar's OPTIONAL client auth), and required with tlsRequireTrustedClientCertOnConnect."""
    certificate, key = config["tlsCertificateFilePath"], config["tlsKeyFilePath"]
    if not certificate or not key:
        raise ConfigError("a TLS port needs tlsCertificateFilePath and tlsKeyFilePath")
    # ssl's errors for a missing file name no file ("[Errno 2] No such file or directory").
    for setting in ("tlsCertificateFilePath", "tlsKeyFilePath", "tlsTrustCertsFilePath"):
        path = config[setting]
        if path and not os.path.isfile(path):
            raise ConfigError(f"{setting}: no file {path}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"tlsCertificateFilePath/tlsKeyFilePath: {error}") from error
    _trust_clients(context, config)
    _limit_protocols_and_ciphers(context, config)
    return context


def _trust_clients(context: ssl.SSLContext, config: BrokerConfig) -> None:
    """tlsTrustCertsFilePath: the CAs a client certificate is checked against, asked for when set
    (required with tlsRequireTrustedClientCertOnConnect)."""
    trusted = config["tlsTrustCertsFilePath"]
    if trusted:
        try:
            context.load_verify_locations(cafile=trusted)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"tlsTrustCertsFilePath: {error}") from error
        context.verify_mode = ssl.CERT_REQUIRED if config["tlsRequireTrustedClientCertOnConnect"] else ssl.CERT_OPTIONAL
    elif config["tlsRequireTrustedClientCertOnConnect"]:
        raise ConfigError("tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath")


def _limit_protocols_and_ciphers(context: ssl.SSLContext, config: BrokerConfig) -> None:
    """tlsProtocols (the lowest and highest versions named) and tlsCiphers, when set."""
    protocols = [p.strip() for p in str(config["tlsProtocols"]).split(",") if p.strip()]
    if protocols:
        unknown = [p for p in protocols if p not in _PROTOCOLS]
        if unknown:
            raise ConfigError(f"tlsProtocols: {', '.join(unknown)} not one of {', '.join(_PROTOCOLS)}")
        versions = sorted(_PROTOCOLS[p] for p in protocols)
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = [c.strip() for c in str(config["tlsCiphers"]).split(",") if c.strip()]
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError as error:
            raise ConfigError(f"tlsCiphers: no cipher matches {config['tlsCiphers']!r}") from error


def certificate_common_name(ssl_object: Any) -> str | None:
    """The CN of a peer's verified certificate (None without one): ssl only hands out a verified one."""
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()
    for rdn in (certificate or {}).get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return value
    return None
