"""The authentication and TLS options of `magnetar admin`, `produce` and `consume`, as pulsar-admin and
pulsar-client take them: `--auth-plugin` (Pulsar's class names, or token, basic, tls) with `--auth-params`,
and `--tls-trust-cert-path`, `--tls-allow-insecure`.

Owns: reading those options into what the official client takes (`pulsar.AuthenticationToken`, …, trust
settings) and what an HTTP call carries (`Authorization: Bearer|Basic`, an SSL context).
Must not touch: anything the commands do with them.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from magnetar.client.security import auth_kind, auth_values

__all__ = ["AuthParams", "AuthPlugin", "Credentials", "TlsAllowInsecure", "TlsTrustCertPath"]

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


@dataclass(frozen=True)
class Credentials:
    plugin: str | None = None
    params: str | None = None
    trust_path: str | None = None
    allow_insecure: bool = False

    def _kind(self) -> str | None:
        try:
            return auth_kind(self.plugin)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--auth-plugin") from None

    def _values(self) -> dict[str, str]:
        try:
            return auth_values(self._kind() or "", self.params)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--auth-params") from None

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for `pulsar.Client`."""
        import pulsar

        options: dict[str, Any] = {}
        kind = self._kind()
        if kind == "token":
            options["authentication"] = pulsar.AuthenticationToken(self._values()["token"])
        elif kind == "basic":
            values = self._values()
            options["authentication"] = pulsar.AuthenticationBasic(values["user"], values["password"])
        elif kind == "tls":
            values = self._values()
            options["authentication"] = pulsar.AuthenticationTLS(values["cert"], values["key"])
        if self.trust_path:
            options["tls_trust_certs_file_path"] = self.trust_path
        if self.allow_insecure:
            options["tls_allow_insecure_connection"] = True
        return options

    def authorization_header(self) -> str | None:
        kind = self._kind()
        if kind == "token":
            return f"Bearer {self._values()['token']}"
        if kind == "basic":
            values = self._values()
            return "Basic " + base64.b64encode(f"{values['user']}:{values['password']}".encode()).decode()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """For https:// admin URLs: the trust settings, and the client certificate of the tls plugin."""
        context = ssl.create_default_context(cafile=self.trust_path)
        if self.allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self._kind() == "tls":
            values = self._values()
            context.load_cert_chain(values["cert"], values["key"])
        return context
