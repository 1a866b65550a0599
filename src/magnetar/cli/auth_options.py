"""The authentication and TLS options of `magnetar admin`, `produce` and `consume`, as pulsar-admin and
pulsar-client take them: `--auth-plugin` (Pulsar's class names, or token, basic, tls) with `--auth-params`,
and `--tls-trust-cert-path`, `--tls-allow-insecure`.

Owns: reading those options into what the official client takes (`pulsar.AuthenticationToken`, …, trust
settings) and what an HTTP call carries (`Authorization: Bearer|Basic`, an SSL context).
Must not touch: anything the commands do with them.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["AuthParams", "AuthPlugin", "Credentials", "TlsAllowInsecure", "TlsTrustCertPath"]

_PREFIX = "org.apache.pulsar.client.impl.auth."
_KINDS = {
    "token": "token",
    _PREFIX + "AuthenticationToken": "token",
    "basic": "basic",
    _PREFIX + "AuthenticationBasic": "basic",
    "tls": "tls",
    _PREFIX + "AuthenticationTls": "tls",
}

AuthPlugin = Annotated[
    str | None,
    typer.Option(
        "--auth-plugin",
        envvar="MAGNETAR_AUTH_PLUGIN",
        help="org.apache.pulsar.client.impl.auth.AuthenticationToken|AuthenticationBasic|AuthenticationTls (or token, basic, tls)",
    ),
]
AuthParams = Annotated[
    str | None,
    typer.Option(
        "--auth-params",
        envvar="MAGNETAR_AUTH_PARAMS",
        help='token:<jwt> or file:///path; {"userId":"u","password":"p"}; tlsCertFile:/c.pem,tlsKeyFile:/k.pem',
    ),
]
TlsTrustCertPath = Annotated[
    str | None, typer.Option("--tls-trust-cert-path", help="CA certificates (PEM) that the broker's must chain to")
]
TlsAllowInsecure = Annotated[
    bool, typer.Option("--tls-allow-insecure", help="accept any broker certificate (tests only)")
]


def _key_values(params: str) -> dict[str, str]:
    """`{"k": "v"}` or `k:v,k2:v2`, the two forms Pulsar's tools accept."""
    if params.lstrip().startswith("{"):
        return {str(k): str(v) for k, v in json.loads(params).items()}
    pairs = (item.split(":", 1) for item in params.split(",") if ":" in item)
    return {key.strip(): value.strip() for key, value in pairs}


@dataclass(frozen=True)
class Credentials:
    plugin: str | None = None
    params: str | None = None
    trust_path: str | None = None
    allow_insecure: bool = False

    def _kind(self) -> str | None:
        if not self.plugin:
            return None
        kind = _KINDS.get(self.plugin)
        if kind is None:
            raise typer.BadParameter(f"{self.plugin} is not one of {', '.join(sorted(_KINDS))}", param_hint="--auth-plugin")
        return kind

    def _token(self) -> str:
        params = (self.params or "").strip()
        if params.startswith("token:"):
            return params[len("token:"):]
        if params.startswith("file:"):
            return Path(urllib.parse.urlparse(params).path).read_text().strip()
        return params

    def _basic(self) -> tuple[str, str]:
        values = _key_values(self.params or "{}")
        user = values.get("userId") or values.get("username")
        if user is None or "password" not in values:
            raise typer.BadParameter('expected {"userId": "...", "password": "..."}', param_hint="--auth-params")
        return user, values["password"]

    def _tls_files(self) -> tuple[str, str]:
        values = _key_values(self.params or "")
        if "tlsCertFile" not in values or "tlsKeyFile" not in values:
            raise typer.BadParameter("expected tlsCertFile:<path>,tlsKeyFile:<path>", param_hint="--auth-params")
        return values["tlsCertFile"], values["tlsKeyFile"]

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for `pulsar.Client`."""
        import pulsar

        options: dict[str, Any] = {}
        kind = self._kind()
        if kind == "token":
            options["authentication"] = pulsar.AuthenticationToken(self._token())
        elif kind == "basic":
            options["authentication"] = pulsar.AuthenticationBasic(*self._basic())
        elif kind == "tls":
            options["authentication"] = pulsar.AuthenticationTLS(*self._tls_files())
        if self.trust_path:
            options["tls_trust_certs_file_path"] = self.trust_path
        if self.allow_insecure:
            options["tls_allow_insecure_connection"] = True
        return options

    def authorization_header(self) -> str | None:
        kind = self._kind()
        if kind == "token":
            return f"Bearer {self._token()}"
        if kind == "basic":
            user, password = self._basic()
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """For https:// admin URLs: the trust settings, and the client certificate of the tls plugin."""
        context = ssl.create_default_context(cafile=self.trust_path)
        if self.allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self._kind() == "tls":
            context.load_cert_chain(*self._tls_files())
        return context
