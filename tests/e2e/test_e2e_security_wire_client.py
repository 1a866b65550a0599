"""magnetar's own client (`perf --client magnetar`'s) on a pulsar+ssl:// URL with a token: it connects and
is answered when the broker's certificate is trusted and the token valid, and is refused otherwise; a token
that expires on a live connection is refreshed when the broker challenges it (AUTH_CHALLENGE)."""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from magnetar.client.security import ClientSecurity
from magnetar.client.wire import BrokerError, Connection, ConnectionLost
from security_helpers import Certificates, tls_urls, token

SECRET = b"magnetar-wire-secret-key-32bytes"
PREFIX = "org.apache.pulsar.broker.authentication."


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def url(module_broker_factory, certificates) -> str:
    broker = module_broker_factory(
        **certificates.tls_settings(
            authenticationEnabled="true",
            authenticationProviders=f"{PREFIX}AuthenticationProviderToken",
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
        )
    )
    return tls_urls(broker)[0]


def test_tls_and_token(url, certificates, tmp_path) -> None:
    security = ClientSecurity.from_options("token", f"token:{token(SECRET, 'admin')}", str(certificates.ca))
    topic = f"persistent://public/default/wire-{uuid.uuid4().hex[:8]}"
    with Connection(url, 10, security) as connection:
        assert connection.partitions(topic) == 0
    with pytest.raises(BrokerError) as refused:
        Connection(url, 10, ClientSecurity.from_options("token", "token:not-a-jwt", str(certificates.ca)))
    assert refused.value.code == "AuthenticationError"
    untrusted = ClientSecurity.from_options(
        "token", f"token:{token(SECRET, 'admin')}", str(Certificates(tmp_path / "x").ca)
    )
    with pytest.raises(ConnectionLost):
        Connection(url, 10, untrusted)


@pytest.fixture
def refreshing(module_broker_factory, certificates):
    """A broker that checks credentials every second, so a token expiring in seconds is challenged."""
    return module_broker_factory(
        **certificates.tls_settings(
            authenticationEnabled="true",
            authenticationProviders=f"{PREFIX}AuthenticationProviderToken",
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
            authenticationRefreshCheckSeconds="1",
        )
    )


def _keep_asking(connection: Connection, topic: str, seconds: float) -> None:
    """Requests for `seconds`: the client reads, and so sees the broker's challenges, only when asked."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert connection.partitions(topic) == 0
        time.sleep(0.2)


def test_an_expiring_token_is_refreshed_from_its_file(refreshing, certificates, tmp_path) -> None:
    """The token file is read again for the AUTH_RESPONSE: a rewritten file keeps the connection; one
    holding the expired token still gets it closed by the broker."""
    url = tls_urls(refreshing)[0]
    topic = f"persistent://public/default/wire-{uuid.uuid4().hex[:8]}"
    token_file = tmp_path / "admin.token"
    token_file.write_text(token(SECRET, "admin", expires_in_s=2))
    security = ClientSecurity.from_options("token", f"file://{token_file}", str(certificates.ca))
    with Connection(url, 10, security) as connection:
        token_file.write_text(token(SECRET, "admin", expires_in_s=600))
        _keep_asking(connection, topic, 5)
    assert "Refreshed the credentials of role admin" in refreshing.output()

    token_file.write_text(token(SECRET, "admin", expires_in_s=2))
    with Connection(url, 10, security) as connection, pytest.raises(ConnectionLost):
        _keep_asking(connection, topic, 6)
