"""magnetar's own client (`perf --client magnetar`'s) on a pulsar+ssl:// URL with a token: it connects and
is answered when the broker's certificate is trusted and the token valid, and is refused otherwise."""

from __future__ import annotations

import base64
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
