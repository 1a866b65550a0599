"""`magnetar admin`, `produce`, `consume` and `tokens` against a broker with TLS and token
authentication, with pulsar-admin's and pulsar-client's options (`--auth-plugin`, `--auth-params`,
`--tls-trust-cert-path`)."""

from __future__ import annotations

import json
import uuid

import pytest
from cli_runner import fails, ok, ok_json
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa

from security_helpers import Certificates, tls_urls

PREFIX = "org.apache.pulsar.broker.authentication."


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory):
    key = tmp_path_factory.mktemp("keys") / "secret.key"
    ok("tokens", "create-secret-key", "--output", str(key))
    return key


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def broker(module_broker_factory, secret, certificates):
    return module_broker_factory(
        **certificates.tls_settings(
            authenticationEnabled="true",
            authenticationProviders=f"{PREFIX}AuthenticationProviderToken",
            tokenSecretKey=f"file://{secret}",
            authorizationEnabled="true",
            superUserRoles="admin",
        )
    )


def _token(secret, subject: str, *extra: str) -> str:
    return ok("tokens", "create", "--secret-key", f"file://{secret}", "--subject", subject, *extra).stdout.strip()


def test_tokens_create_and_validate(secret, tmp_path) -> None:
    token = _token(secret, "alice", "--expiry-time", "1h")
    claims = ok("tokens", "validate", "--secret-key", str(secret), token).stdout
    assert claims.startswith("{sub=alice, exp=")
    assert "JWT expired" in fails("tokens", "validate", "--secret-key", str(secret), _token(secret, "bob", "-e", "0s"))
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    ok("tokens", "create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public))
    signed = ok("tokens", "create", "--private-key", f"file://{private}", "--subject", "carol").stdout.strip()
    assert ok("tokens", "validate", "--public-key", str(public), signed).stdout.strip() == "{sub=carol}"
    assert fails("tokens", "validate", "--secret-key", str(secret), signed)


def test_tokens_create_refuses_a_key_that_signs_no_token(tmp_path) -> None:
    """A DSA key is a private key jwt cannot sign with: a one-line error, not jwt's traceback."""
    dsa_key = tmp_path / "dsa.pem"
    dsa_key.write_bytes(
        dsa.generate_private_key(key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    assert "DSAPrivateKey signs no token" in fails("tokens", "create", "--private-key", str(dsa_key), "-s", "dave")


def test_produce_and_consume_refused_credentials_are_one_line(broker, secret, certificates) -> None:
    """The official client retries a refused CONNECT until its operation timeout and then says Timeout;
    the command says at once that credentials are missing or were refused."""
    for verb in (["produce", "-m", "x"], ["consume", "-s", "s"]):
        stderr = fails(verb[0], "refused", *verb[1:], "--service-url", broker.url)
        assert stderr.splitlines() == [
            f"magnetar: AuthenticationError: the broker at {broker.url} requires credentials: give them with "
            "--auth-plugin and --auth-params"
        ]
    wrong = _token(secret, "admin")[:-3] + "abc"
    stderr = fails(
        "produce",
        "refused",
        "-m",
        "x",
        "--service-url",
        broker.url,
        "--auth-plugin",
        "token",
        "--auth-params",
        f"token:{wrong}",
    )
    assert stderr.splitlines() == [
        f"magnetar: AuthenticationError: the broker at {broker.url} refused the credentials of --auth-plugin "
        "and --auth-params (the broker's log says why)"
    ]
    assert "Failed to authentication token: Signature verification failed" in broker.output()
    assert "method none failed: the client sent no credentials, and no anonymousUserRole is set" in broker.output()


def test_admin_with_and_without_credentials(broker, secret, certificates) -> None:
    token = _token(secret, "admin")
    plugin = ["--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken"]
    assert "public" in ok_json(
        "admin", "--admin-url", broker.http_url, *plugin, "--auth-params", f"token:{token}", "tenants", "list"
    )
    assert "Authentication required" in fails("admin", "--admin-url", broker.http_url, "tenants", "list")
    _url, https = tls_urls(broker)
    trusted = ["--tls-trust-cert-path", str(certificates.ca)]
    assert "public" in ok_json(
        "admin", "--admin-url", https, *trusted, *plugin, "--auth-params", f"token:{token}", "tenants", "list"
    )


def test_produce_and_consume_over_tls_with_a_token(broker, secret, certificates, tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(_token(secret, "admin"))
    url, _https = tls_urls(broker)
    options = ["--service-url", url, "--tls-trust-cert-path", str(certificates.ca)]
    options += ["--auth-plugin", "token", "--auth-params", f"file://{token_file}"]
    topic = f"cli-sec-{uuid.uuid4().hex[:8]}"
    assert ok_json("produce", topic, "-m", "a,b", *options)["produced"] == 2
    consumed = ok("consume", topic, "-s", "s", "-p", "Earliest", "-n", "2", *options).stdout.splitlines()
    assert [json.loads(line)["content"] for line in consumed] == ["a", "b"]
    stranger = ["--service-url", url, "--tls-trust-cert-path", str(certificates.ca), "--auth-plugin", "token"]
    assert "AuthorizationError" in fails(
        "produce", topic, "-m", "c", *stranger, "--auth-params", f"token:{_token(secret, 'x')}"
    )


def test_admin_grants_lists_and_revokes_permissions(broker, secret) -> None:
    admin = [
        "admin",
        "--admin-url",
        broker.http_url,
        "--auth-plugin",
        "token",
        "--auth-params",
        f"token:{_token(secret, 'admin')}",
    ]
    namespace = f"public/cli-{uuid.uuid4().hex[:8]}"
    ok(*admin, "namespaces", "create", namespace)
    ok(*admin, "namespaces", "grant-permission", namespace, "--role", "alice", "--actions", "produce,consume")
    ok(*admin, "namespaces", "grant-subscription-permission", namespace, "--subscription", "s", "--roles", "alice")
    ok(*admin, "topics", "grant-permission", f"{namespace}/t", "--role", "bob", "--actions", "consume")
    assert ok_json(*admin, "namespaces", "permissions", namespace) == {"alice": ["consume", "produce"]}
    assert ok_json(*admin, "topics", "permissions", f"{namespace}/t") == {
        "alice": ["consume", "produce"],
        "bob": ["consume"],
    }
    ok(*admin, "topics", "revoke-permission", f"{namespace}/t", "--role", "bob")
    ok(*admin, "namespaces", "revoke-subscription-permission", namespace, "--subscription", "s", "--role", "alice")
    ok(*admin, "namespaces", "revoke-permission", namespace, "--role", "alice")
    assert ok_json(*admin, "topics", "permissions", f"{namespace}/t") == {}
    assert "Permissions are not set at the topic level" in fails(
        *admin, "topics", "revoke-permission", f"{namespace}/t", "--role", "bob"
    )
