"""`magnetar tokens`: keys and tokens for AuthenticationProviderToken, as `pulsar tokens` makes them.

Owns: the four subcommands (create-secret-key, create-key-pair, create, validate) and their options,
with Pulsar's names. Keys are written as Pulsar writes them (raw secret bytes, DER key pairs) and read
as the broker reads them (broker/auth.py: data: or file: URLs, paths, DER or PEM).
Must not touch: the broker; validation uses the broker's own token provider.
"""

from __future__ import annotations

import base64
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import jwt
import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from magnetar.broker.auth import AuthenticationError, TokenProvider, read_key
from magnetar.broker.config import ConfigError, load_config
from magnetar.cli.help import SuggestingGroup

__all__ = ["app"]

app = typer.Typer(
    help="Keys and tokens for token authentication (pulsar tokens).", no_args_is_help=True, cls=SuggestingGroup
)

# Secret key sizes per HMAC algorithm (bytes), as jjwt's Keys.secretKeyFor makes them.
_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_CURVES = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
_RSA = ("RS256", "RS384", "RS512")
# The private keys a token can be signed with.
SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey
# Pulsar's RelativeTimeUtil units.
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _fail(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(1)


def _duration_s(text: str) -> int:
    match = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip())
    if match is None:
        raise typer.BadParameter(
            f"{text!r}: expected a number and a unit of s, m, h, d, w, y", param_hint="--expiry-time"
        )
    return int(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def _key_bytes(value: str) -> bytes:
    try:
        return read_key(value)
    except (ConfigError, OSError) as failure:
        _fail(f"cannot read key {value!r}: {failure}")
        raise


@app.command("create-secret-key")
def create_secret_key(
    algorithm: Annotated[str, typer.Option("--signature-algorithm", "-a", help="HS256, HS384 or HS512")] = "HS256",
    output: Annotated[str | None, typer.Option("--output", "-o", help="write the key to this file")] = None,
    base64_output: Annotated[bool, typer.Option("--base64", "-b", help="print the key in base64")] = False,
) -> None:
    """A new secret key for HMAC-signed tokens (tokenSecretKey)."""
    if algorithm not in _SECRET_BYTES:
        raise typer.BadParameter(f"{algorithm} is not one of {', '.join(_SECRET_BYTES)}", param_hint="-a")
    key = secrets.token_bytes(_SECRET_BYTES[algorithm])
    data = base64.b64encode(key) if base64_output else key
    if output:
        Path(output).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


@app.command("create-key-pair")
def create_key_pair(
    output_private_key: Annotated[str, typer.Option("--output-private-key", help="file for the private key (DER)")],
    output_public_key: Annotated[str, typer.Option("--output-public-key", help="file for the public key (DER)")],
    algorithm: Annotated[
        str, typer.Option("--signature-algorithm", "-a", help="RS256, RS384, RS512, ES256, ES384 or ES512")
    ] = "RS256",
) -> None:
    """A new key pair for tokens signed with a private key (tokenPublicKey on the broker)."""
    private: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if algorithm in _CURVES:
        private = ec.generate_private_key(_CURVES[algorithm])
    elif algorithm in _RSA:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        raise typer.BadParameter(f"{algorithm} is not one of {', '.join((*_RSA, *_CURVES))}", param_hint="-a")
    Path(output_private_key).write_bytes(
        private.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    Path(output_public_key).write_bytes(
        private.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _private_key(data: bytes) -> SigningKey:
    if data.lstrip().startswith(b"-----BEGIN"):
        key = serialization.load_pem_private_key(data, password=None)
    else:
        key = serialization.load_der_private_key(data, password=None)
    if not isinstance(key, SigningKey):
        _fail(f"a {type(key).__name__} signs no token: RSA, EC, Ed25519 or Ed448 keys do")
    return key


@app.command("create")
def create(
    subject: Annotated[str, typer.Option("--subject", "-s", help="the role the token names")],
    secret_key: Annotated[
        str | None, typer.Option("--secret-key", "-sk", help="secret key: data:;base64,..., file:///path or a path")
    ] = None,
    private_key: Annotated[str | None, typer.Option("--private-key", "-pk", help="private key (DER or PEM)")] = None,
    expiry_time: Annotated[str | None, typer.Option("--expiry-time", "-e", help="e.g. 30s, 10m, 1h, 7d, 1y")] = None,
    algorithm: Annotated[
        str | None, typer.Option("--signature-algorithm", "-a", help="default: HS256 or RS256/ES256 by key")
    ] = None,
    headers: Annotated[
        list[str] | None, typer.Option("--headers", "-hd", help="extra header key=value (repeatable)")
    ] = None,
) -> None:
    """A new token for `subject`, signed with a secret key or a private key."""
    if (secret_key is None) == (private_key is None):
        _fail("Either --secret-key or --private-key needs to be passed")
    if secret_key is not None:
        key: SigningKey | bytes = _key_bytes(secret_key)
        algorithm = algorithm or "HS256"
    else:
        key = _private_key(_key_bytes(private_key or ""))
        algorithm = algorithm or ("ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256")
    claims: dict[str, object] = {"sub": subject}
    if expiry_time is not None:
        claims["exp"] = int(time.time()) + _duration_s(expiry_time)
    extra = dict(item.split("=", 1) for item in headers or [] if "=" in item)
    typer.echo(jwt.encode(claims, key, algorithm=algorithm, headers=extra or None))


@app.command("validate")
def validate(
    token: Annotated[str | None, typer.Argument(help="the token (else --token-file or --stdin)")] = None,
    secret_key: Annotated[str | None, typer.Option("--secret-key", "-sk", help="secret key")] = None,
    public_key: Annotated[str | None, typer.Option("--public-key", "-pk", help="public key (DER or PEM)")] = None,
    token_file: Annotated[str | None, typer.Option("--token-file", "-f", help="read the token from this file")] = None,
    stdin: Annotated[bool, typer.Option("--stdin", "-i", help="read the token from standard input")] = False,
) -> None:
    """Check a token's signature and expiry as the broker does, and print its claims."""
    if (secret_key is None) == (public_key is None):
        _fail("Either --secret-key or --public-key needs to be passed")
    if token is None:
        token = Path(token_file).read_text() if token_file else sys.stdin.read() if stdin else None
    if not token:
        _fail("Token needs to be passed as an argument, with --token-file or with --stdin")
    settings = {"tokenSecretKey": secret_key or "", "tokenPublicKey": public_key or ""}
    try:
        provider = TokenProvider(load_config(overrides=settings))
        provider.authenticate((token or "").strip().encode())
    except (ConfigError, AuthenticationError) as failure:
        _fail(str(failure))
    claims = jwt.decode((token or "").strip(), options={"verify_signature": False})
    typer.echo("{" + ", ".join(f"{k}={v}" for k, v in claims.items()) + "}")
