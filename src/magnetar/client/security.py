"""TLS and credentials of magnetar's own client, from the options Pulsar's tools take.

Owns: reading `--auth-plugin`/`--auth-params` (Pulsar's client class names, or token, basic, tls, with
`token:<jwt>`, `file:///path`, `{"userId": …, "password": …}`, `tlsCertFile:…,tlsKeyFile:…`) into what
CONNECT carries (auth_method_name, auth_data) and the client's SSL context for `pulsar+ssl://` URLs
(trusted CAs, insecure mode, a client certificate).
Must not touch: sockets (wire.py connects) or the official client's own options (cli/auth_options.py).
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClientSecurity", "auth_kind", "auth_values"]

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

    @classmethod
    def from_options(
        cls, plugin: str | None = None, params: str | None = None, trust_path: str | None = None, insecure: bool = False
    ) -> ClientSecurity:
        kind = auth_kind(plugin)
        if kind is None:
            return cls(tls_trust_certs_file_path=trust_path, tls_allow_insecure=insecure)
        values = auth_values(kind, params)
        if kind == "token":
            return cls("token", values["token"].encode(), trust_path, insecure)
        if kind == "basic":
            return cls("basic", f"{values['user']}:{values['password']}".encode(), trust_path, insecure)
        return cls("tls", b"", trust_path, insecure, values["cert"], values["key"])

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.tls_trust_certs_file_path)
        if self.tls_allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.tls_certificate_file_path and self.tls_key_file_path:
            context.load_cert_chain(self.tls_certificate_file_path, self.tls_key_file_path)
        return context
