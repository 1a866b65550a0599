"""Authentication as Pulsar's AuthenticationService: who a client is, from its CONNECT or HTTP request.

Owns: the providers named by `authenticationProviders` (Pulsar's class names): token (JWTs checked by
PyJWT: HS256 with `tokenSecretKey`, RS256/ES256 with `tokenPublicKey`, the role in `tokenAuthClaim`,
`exp` honoured, `tokenAudience` checked), basic (an htpasswd file, `basicAuthConf`, checked by passlib) and TLS (the common name
of a verified client certificate); the anonymous role; reading keys given as `data:` or `file:` URLs.
Must not touch: what a role may do (authorization.py) or connections (connection.py asks, then acts).
"""

from __future__ import annotations

import base64
import binascii
import logging
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from passlib.apache import HtpasswdFile

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.tls import certificate_common_name

__all__ = [
    "Authenticated",
    "AuthenticationError",
    "AuthenticationService",
    "expired",
    "read_key",
]

log = logging.getLogger(__name__)

_PREFIX = "org.apache.pulsar.broker.authentication."
TOKEN, BASIC, TLS = "token", "basic", "tls"
# Pulsar's provider class names (and their short names) to the auth method names clients send.
_PROVIDER_METHODS = {
    _PREFIX + "AuthenticationProviderToken": TOKEN,
    _PREFIX + "AuthenticationProviderBasic": BASIC,
    _PREFIX + "AuthenticationProviderTls": TLS,
    "AuthenticationProviderToken": TOKEN,
    "AuthenticationProviderBasic": BASIC,
    "AuthenticationProviderTls": TLS,
}
_HMAC_ALGORITHMS = ["HS256", "HS384", "HS512"]
_RSA_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
_EC_ALGORITHMS = ["ES256", "ES384", "ES512"]


class AuthenticationError(Exception):
    """Credentials missing, unknown or wrong; answered as Pulsar's AuthenticationError / HTTP 401."""

    server_error = "AuthenticationError"


@dataclass(frozen=True)
class Authenticated:
    role: str
    method: str
    expires_at: float | None = None  # epoch seconds (a token's exp), None: never


def read_key(value: str) -> bytes:
    """A key or file as Pulsar's AuthTokenUtils.readKeyFromUrl reads it: `data:;base64,<b64>`,
    `file:///path`, a path that exists, else the value itself in base64."""
    if value.startswith("data:"):
        header, _, data = value.partition(",")
        if header.endswith(";base64"):
            return base64.b64decode(data)
        return urllib.parse.unquote_to_bytes(data)
    if value.startswith("file:"):
        return Path(urllib.parse.urlparse(value).path).read_bytes()
    if Path(value).exists():
        return Path(value).read_bytes()
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as error:
        raise ConfigError(f"{value!r} is neither a data: or file: URL, a file, nor base64") from error


def load_public_key(data: bytes) -> Any:
    """A public key in DER (what `pulsar tokens create-key-pair` writes) or PEM."""
    if data.lstrip().startswith(b"-----BEGIN"):
        return serialization.load_pem_public_key(data)
    return serialization.load_der_public_key(data)


class TokenProvider:
    """AuthenticationProviderToken: a JWT signed with the secret key or the public key's private half."""

    method = TOKEN

    def __init__(self, config: BrokerConfig) -> None:
        self.claim = config["tokenAuthClaim"] or "sub"
        self.audience_claim = config["tokenAudienceClaim"] or "aud"
        self.audience = config["tokenAudience"] or None
        if config["tokenSecretKey"]:
            self.key: Any = read_key(config["tokenSecretKey"])
            self.algorithms = _HMAC_ALGORITHMS
        elif config["tokenPublicKey"]:
            try:
                self.key = load_public_key(read_key(config["tokenPublicKey"]))
            except ValueError as error:
                raise ConfigError(f"tokenPublicKey: {error}") from error
            if isinstance(self.key, rsa.RSAPublicKey):
                self.algorithms = _RSA_ALGORITHMS
            elif isinstance(self.key, ec.EllipticCurvePublicKey):
                self.algorithms = _EC_ALGORITHMS
            else:
                raise ConfigError("tokenPublicKey: only RSA and EC keys sign tokens")
        else:
            raise ConfigError("AuthenticationProviderToken needs tokenSecretKey or tokenPublicKey")

    def authenticate(self, data: bytes) -> Authenticated:
        token = data.decode("utf-8", "replace").strip()
        try:
            claims = jwt.decode(token, self.key, algorithms=self.algorithms, options={"verify_aud": False})
        except jwt.ExpiredSignatureError as error:
            raise AuthenticationError(f"Failed to authentication token: JWT expired: {error}") from error
        except jwt.InvalidTokenError as error:
            raise AuthenticationError(f"Failed to authentication token: {error}") from error
        role = claims.get(self.claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"Failed to authentication token: no {self.claim!r} claim")
        if self.audience is not None:
            audiences = claims.get(self.audience_claim)
            audiences = [audiences] if isinstance(audiences, str) else audiences
            if not isinstance(audiences, list) or self.audience not in audiences:
                raise AuthenticationError(f"Audiences in token: {audiences} not contains this broker: {self.audience}")
        expires = claims.get("exp")
        return Authenticated(role, TOKEN, float(expires) if expires is not None else None)


class BasicProvider:
    """AuthenticationProviderBasic: `user:password` against an htpasswd file (apr1, crypt, bcrypt, sha)."""

    method = BASIC

    def __init__(self, config: BrokerConfig) -> None:
        if not config["basicAuthConf"]:
            raise ConfigError("AuthenticationProviderBasic needs basicAuthConf")
        try:
            self.users = HtpasswdFile.from_string(read_key(config["basicAuthConf"]))
        except ValueError as error:
            raise ConfigError(f"basicAuthConf: {error}") from error

    def authenticate(self, data: bytes) -> Authenticated:
        user, sep, password = data.decode("utf-8", "replace").partition(":")
        if not sep:
            raise AuthenticationError("Failed to authenticate: expected user:password")
        checked = self.users.check_password(user, password)
        if checked is None:
            raise AuthenticationError(f"Failed to authenticate: unknown user {user}")
        if not checked:
            raise AuthenticationError(f"Failed to authenticate: wrong password for user {user}")
        return Authenticated(user, BASIC)


class TlsProvider:
    """AuthenticationProviderTls: the role is the common name of the client's verified certificate."""

    method = TLS

    def authenticate_certificate(self, ssl_object: Any) -> Authenticated:
        role = certificate_common_name(ssl_object)
        if role is None:
            raise AuthenticationError("Failed to get TLS certificate: no trusted client certificate")
        return Authenticated(role, TLS)


class AuthenticationService:
    def __init__(self, config: BrokerConfig) -> None:
        self.enabled = bool(config["authenticationEnabled"])
        self.anonymous_role = config["anonymousUserRole"] or None
        self.providers: dict[str, Any] = {}
        names = [n.strip() for n in str(config["authenticationProviders"]).split(",") if n.strip()]
        for name in names if self.enabled else ():
            method = _PROVIDER_METHODS.get(name)
            if method is None:
                raise ConfigError(f"authenticationProviders: {name} is not one magnetar has")
            self.providers[method] = {TOKEN: TokenProvider, BASIC: BasicProvider, TLS: lambda _c: TlsProvider()}[
                method
            ](config)
        if self.enabled and not self.providers and self.anonymous_role is None:
            raise ConfigError("authenticationEnabled needs authenticationProviders or anonymousUserRole")

    def authenticate(self, method: str, data: bytes, ssl_object: Any = None) -> Authenticated:
        """CONNECT's auth_method_name and auth_data (and the TLS session, for the tls method). A client
        whose method no provider serves gets the anonymous role, as in Pulsar, or is refused."""
        provider = self.providers.get(method)
        if provider is None:
            if self.anonymous_role is not None:
                return Authenticated(self.anonymous_role, "none")
            if method == "none":
                raise AuthenticationError("the client sent no credentials, and no anonymousUserRole is set")
            served = ", ".join(sorted(self.providers))
            raise AuthenticationError(f"no authentication provider for method {method} (these serve {served})")
        if method == TLS:
            return provider.authenticate_certificate(ssl_object)
        return provider.authenticate(data)

    def authenticate_http(self, authorization: str | None, ssl_object: Any = None) -> Authenticated:
        """An HTTP request's `Authorization: Bearer|Basic` header, else its client certificate."""
        if authorization:
            scheme, _, credentials = authorization.partition(" ")
            scheme = scheme.lower()
            if scheme == "bearer" and TOKEN in self.providers:
                return self.providers[TOKEN].authenticate(credentials.strip().encode())
            if scheme == "basic" and BASIC in self.providers:
                try:
                    decoded = base64.b64decode(credentials.strip(), validate=True)
                except binascii.Error as error:
                    raise AuthenticationError("Authentication required: malformed Basic credentials") from error
                return self.providers[BASIC].authenticate(decoded)
        if TLS in self.providers and certificate_common_name(ssl_object) is not None:
            return self.providers[TLS].authenticate_certificate(ssl_object)
        if self.anonymous_role is not None:
            return Authenticated(self.anonymous_role, "none")
        raise AuthenticationError("Authentication required")


def expired(authenticated: Authenticated | None, now: float) -> bool:
    """Whether the credentials ran out at `now` (epoch seconds)."""
    return authenticated is not None and authenticated.expires_at is not None and now >= authenticated.expires_at
