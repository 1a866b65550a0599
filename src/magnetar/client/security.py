"""TLS and credentials of magnetar's own client, from the options Pulsar's tools take.

Owns: reading `--auth-plugin`/`--auth-params` (Pulsar's client class names, or token, basic, tls, with
`token:<jwt>`, `file:///path`, `{"userId": …, "password": …}`, `tlsCertFile:…,tlsKeyFile:…`) into what
CONNECT carries (auth_method_name, auth_data) and the client's SSL context for `pulsar+ssl://` URLs
(trusted CAs, insecure mode, a client certificate), and the fresh credentials an AUTH_RESPONSE carries when
a broker challenges a live connection (the plugin read again, as the official clients' token supplier is
called again: a `file:` token rewritten since the connection opened is what goes).
Must not touch: sockets (wire.py and the replicator's producer connect) or the official client's own
options (cli/auth_options.py).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

from magnetar.protocol.pulsar_api_pb2 import AuthData, BaseCommand, CommandAuthResponse

__all__ = ["ClientSecurity", "auth_kind", "auth_values"]

# What CONNECT announces: this client answers AUTH_CHALLENGE (FeatureFlags.supports_auth_refresh).
FEATURE_FLAGS = {"supports_auth_refresh": True}

_PREFIX = "org.apache.pulsar.client.impl.auth."
_KINDS = {
    "token": "token",
    _PREFIX + "AuthenticationToken": "token",
    "basic": "basic",
    _PREFIX + "AuthenticationBasic": "basic",
    "tls": "tls",
    _PREFIX + "AuthenticationTls": "tls",
}


def auth_kind(plugin: str | None) -> str | None:
    """token, basic or tls for a plugin name; None without one; ValueError for one magnetar lacks."""
    if not plugin:
        return None
    kind = _KINDS.get(plugin)
    if kind is None:
        raise ValueError(f"--auth-plugin: {plugin} is not one of {', '.join(sorted(_KINDS))}")
    return kind


def auth_values(kind: str, params: str | None) -> dict[str, str]:
    """The parameters of a token (`token`), basic (`user`, `password`) or tls (`cert`, `key`) plugin."""
    params = (params or "").strip()
    if kind == "token":
        if params.startswith("token:"):
            return {"token": params[len("token:") :]}
        if params.startswith("file:"):
            return {"token": Path(urllib.parse.urlparse(params).path).read_text().strip()}
        return {"token": params}
    if params.startswith("{"):
        values = {str(k): str(v) for k, v in json.loads(params).items()}
    else:
        pairs = (item.split(":", 1) for item in params.split(",") if ":" in item)
        values = {key.strip(): value.strip() for key, value in pairs}
    if kind == "basic":
        user = values.get("userId") or values.get("username")
        if user is None or "password" not in values:
            raise ValueError('--auth-params: expected {"userId": "...", "password": "..."}')
        return {"user": user, "password": values["password"]}
    if "tlsCertFile" not in values or "tlsKeyFile" not in values:
        raise ValueError("--auth-params: expected tlsCertFile:<path>,tlsKeyFile:<path>")
    return {"cert": values["tlsCertFile"], "key": values["tlsKeyFile"]}


@dataclass(frozen=True)
class ClientSecurity:
    auth_method: str = ""
    auth_data: bytes = b""
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure: bool = False
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    # The plugin and its parameters as given, read again for each CONNECT and AUTH_RESPONSE.
    auth_plugin: str | None = None
    auth_params: str | None = None

    @classmethod
    def from_options(
        cls, plugin: str | None = None, params: str | None = None, trust_path: str | None = None, insecure: bool = False
    ) -> ClientSecurity:
        kind = auth_kind(plugin)
        security = cls(tls_trust_certs_file_path=trust_path or None, tls_allow_insecure=insecure)
        if kind is None:
            return security
        values = auth_values(kind, params)
        security = replace(security, auth_plugin=plugin, auth_params=params)
        if kind == "token":
            return replace(security, auth_method="token", auth_data=values["token"].encode())
        if kind == "basic":
            return replace(security, auth_method="basic", auth_data=f"{values['user']}:{values['password']}".encode())
        return replace(
            security, auth_method="tls", tls_certificate_file_path=values["cert"], tls_key_file_path=values["key"]
        )

    def connect_fields(self) -> dict[str, object]:
        """What CONNECT carries besides the versions: the credentials as the plugin gives them now, and
        that a challenge is answered."""
        fields: dict[str, object] = {"feature_flags": FEATURE_FLAGS}
        if self.auth_method:
            fields |= {"auth_method_name": self.auth_method, "auth_data": self.fresh_auth_data()}
        return fields

    def fresh_auth_data(self) -> bytes:
        """The credentials as the plugin gives them now (a `file:` token read again); raises OSError or
        ValueError when it no longer can."""
        if self.auth_plugin is None:
            return self.auth_data
        return ClientSecurity.from_options(self.auth_plugin, self.auth_params).auth_data

    def auth_response(self, client_version: str, protocol_version: int) -> BaseCommand:
        """The AUTH_RESPONSE to a broker's AUTH_CHALLENGE: fresh credentials of the same method."""
        response = AuthData(auth_method_name=self.auth_method or "none", auth_data=self.fresh_auth_data())
        return BaseCommand(
            type=BaseCommand.AUTH_RESPONSE,
            authResponse=CommandAuthResponse(
                client_version=client_version, protocol_version=protocol_version, response=response
            ),
        )

    def http_authorization(self) -> str | None:
        """The `Authorization` header of an admin call with these credentials (a TLS client authenticates
        with its certificate instead: None)."""
        if self.auth_method == "token":
            return "Bearer " + self.fresh_auth_data().decode()
        if self.auth_method == "basic":
            return "Basic " + base64.b64encode(self.fresh_auth_data()).decode()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.tls_trust_certs_file_path)
        if self.tls_allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls_certificate_file_path and self.tls_key_file_path:
            context.load_cert_chain(self.tls_certificate_file_path, self.tls_key_file_path)
        return context
