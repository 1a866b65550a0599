"""The token and basic providers and the authentication service, as Pulsar's accept and refuse credentials."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from passlib.hash import apr_md5_crypt, bcrypt, des_crypt

from magnetar.broker.auth import (
    AuthenticationError,
    AuthenticationService,
    BasicProvider,
    TokenProvider,
    expired,
    read_key,
)
from magnetar.broker.config import ConfigError, load_config

SECRET = b"0123456789abcdef0123456789abcdef"
PREFIX = "org.apache.pulsar.broker.authentication."


def _secret_url() -> str:
    return "data:;base64," + base64.b64encode(SECRET).decode()


def _token_provider(**settings: str) -> TokenProvider:
    return TokenProvider(load_config(overrides=settings))


def test_key_forms_read_as_pulsar_reads_them(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(SECRET)
    assert read_key(_secret_url()) == SECRET
    assert read_key(f"file://{key_file}") == SECRET
    assert read_key(str(key_file)) == SECRET
    assert read_key(base64.b64encode(SECRET).decode()) == SECRET
    with pytest.raises(ConfigError):
        read_key("not a key!")


def test_hs256_token_gives_its_subject_and_expiry() -> None:
    provider = _token_provider(tokenSecretKey=_secret_url())
    expires = int(time.time()) + 60
    authenticated = provider.authenticate(jwt.encode({"sub": "alice", "exp": expires}, SECRET, "HS256").encode())
    assert (authenticated.role, authenticated.method, authenticated.expires_at) == ("alice", "token", expires)
    assert not expired(authenticated, now=expires - 1)
    assert expired(authenticated, now=expires + 1)
    assert provider.authenticate(jwt.encode({"sub": "bob"}, SECRET, "HS256").encode()).expires_at is None


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(jwt.encode({"sub": "alice", "exp": int(time.time()) - 5}, SECRET, "HS256"), id="expired"),
        pytest.param(jwt.encode({"sub": "alice"}, b"another key of thirty-two bytes!", "HS256"), id="other-key"),
        pytest.param(jwt.encode({"role": "alice"}, SECRET, "HS256"), id="no-sub"),
        pytest.param(jwt.encode({"sub": "alice"}, SECRET, "HS256")[:-2] + "xx", id="tampered-signature"),
        pytest.param("not.a.token", id="garbage"),
    ],
)
def test_bad_tokens_are_refused(token: str) -> None:
    with pytest.raises(AuthenticationError):
        _token_provider(tokenSecretKey=_secret_url()).authenticate(token.encode())


def test_tampered_claims_are_refused() -> None:
    header, _claims, signature = jwt.encode({"sub": "alice"}, SECRET, "HS256").split(".")
    forged = base64.urlsafe_b64encode(b'{"sub":"admin"}').rstrip(b"=").decode()
    with pytest.raises(AuthenticationError):
        _token_provider(tokenSecretKey=_secret_url()).authenticate(f"{header}.{forged}.{signature}".encode())


def test_unsigned_token_is_refused() -> None:
    with pytest.raises(AuthenticationError):
        _token_provider(tokenSecretKey=_secret_url()).authenticate(jwt.encode({"sub": "admin"}, None, "none").encode())


def test_role_claim_is_configurable() -> None:
    provider = _token_provider(tokenSecretKey=_secret_url(), tokenAuthClaim="role")
    assert provider.authenticate(jwt.encode({"role": "carol"}, SECRET, "HS256").encode()).role == "carol"


@pytest.mark.parametrize("kind", ["rsa-der", "rsa-pem", "ec-der"])
def test_public_key_tokens(tmp_path: Path, kind: str) -> None:
    private = (
        rsa.generate_private_key(65537, 2048) if kind.startswith("rsa") else ec.generate_private_key(ec.SECP256R1())
    )
    encoding = serialization.Encoding.PEM if kind.endswith("pem") else serialization.Encoding.DER
    public_file = tmp_path / "public.key"
    public_file.write_bytes(
        private.public_key().public_bytes(encoding, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    provider = _token_provider(tokenPublicKey=f"file://{public_file}")
    algorithm = "RS256" if kind.startswith("rsa") else "ES256"
    assert provider.authenticate(jwt.encode({"sub": "dave"}, private, algorithm).encode()).role == "dave"
    # An HMAC token "signed" with the public key's bytes must not pass (algorithm confusion).
    with pytest.raises(AuthenticationError):
        provider.authenticate(jwt.encode({"sub": "eve"}, SECRET, "HS256").encode())
    other = ec.generate_private_key(ec.SECP256R1()) if algorithm == "ES256" else rsa.generate_private_key(65537, 2048)
    with pytest.raises(AuthenticationError):
        provider.authenticate(jwt.encode({"sub": "dave"}, other, algorithm).encode())


def test_basic_provider_reads_htpasswd_schemes(tmp_path: Path) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(
        f"apr:{apr_md5_crypt.hash('pw-apr')}\ncrypt:{des_crypt.hash('pwcrypt')}\nbc:{bcrypt.using(rounds=4).hash('pw-bc')}\n"
    )
    provider = BasicProvider(load_config(overrides={"basicAuthConf": str(htpasswd)}))
    assert provider.authenticate(b"apr:pw-apr").role == "apr"
    assert provider.authenticate(b"crypt:pwcrypt").role == "crypt"
    assert provider.authenticate(b"bc:pw-bc").role == "bc"
    for wrong in (b"apr:nope", b"nobody:pw-apr", b"no-colon"):
        with pytest.raises(AuthenticationError):
            provider.authenticate(wrong)


def test_service_takes_pulsar_class_names_and_the_anonymous_role(tmp_path: Path) -> None:
    config = load_config(
        overrides={
            "authenticationEnabled": "true",
            "authenticationProviders": f"{PREFIX}AuthenticationProviderToken, {PREFIX}AuthenticationProviderTls",
            "tokenSecretKey": _secret_url(),
        }
    )
    service = AuthenticationService(config)
    assert set(service.providers) == {"token", "tls"}
    token = jwt.encode({"sub": "alice"}, SECRET, "HS256")
    assert service.authenticate("token", token.encode()).role == "alice"
    assert service.authenticate_http(f"Bearer {token}").role == "alice"
    with pytest.raises(AuthenticationError):
        service.authenticate("none", b"")
    with pytest.raises(AuthenticationError):
        service.authenticate_http(None)
    with pytest.raises(AuthenticationError):
        service.authenticate("tls", b"")  # no certificate on this connection
    anonymous = AuthenticationService(load_config(overrides=dict(config.values) | {"anonymousUserRole": "guest"}))
    assert anonymous.authenticate("none", b"").role == "guest"
    assert anonymous.authenticate_http(None).role == "guest"


def test_unknown_provider_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError):
        AuthenticationService(
            load_config(overrides={"authenticationEnabled": "true", "authenticationProviders": "com.example.Mine"})
        )


def test_audience_is_checked_when_the_broker_has_one() -> None:
    provider = _token_provider(tokenSecretKey=_secret_url(), tokenAudience="broker-a")
    assert provider.authenticate(jwt.encode({"sub": "a", "aud": "broker-a"}, SECRET, "HS256").encode()).role == "a"
    listed = jwt.encode({"sub": "a", "aud": ["other", "broker-a"]}, SECRET, "HS256")
    assert provider.authenticate(listed.encode()).role == "a"
    for claims in ({"sub": "a", "aud": "broker-b"}, {"sub": "a"}):
        with pytest.raises(AuthenticationError):
            provider.authenticate(jwt.encode(claims, SECRET, "HS256").encode())
    custom = _token_provider(tokenSecretKey=_secret_url(), tokenAudience="b", tokenAudienceClaim="svc")
    assert custom.authenticate(jwt.encode({"sub": "a", "svc": "b"}, SECRET, "HS256").encode()).role == "a"
    # Without tokenAudience, a token's audience is not looked at.
    unchecked = _token_provider(tokenSecretKey=_secret_url())
    assert unchecked.authenticate(jwt.encode({"sub": "a", "aud": "anything"}, SECRET, "HS256").encode()).role == "a"
