"""Replication between two clusters with TLS, token authentication and authorization on both, set up as a
Pulsar operator does: each cluster registered with its TLS URLs, the brokers' brokerClient* settings (r1
has TLS and a token file, r2 TLS only) and, where a registration gives them, its own credentials and trust.

Black-box: two broker processes, the official client on pulsar+ssl:// URLs, the admin API with a super
user's token, and the brokers' logs for why a replicator is not connected. Certificates are made by the
test (security_helpers), tokens signed with the test's key.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest

from security_helpers import Certificates, tls_urls, token

SECRET = b"magnetar-replication-secret-32by"
PREFIX = "org.apache.pulsar.broker.authentication."
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
ADMIN = token(SECRET, "admin")
# The role the clusters' replicators authenticate as on the other cluster: a super user there.
REPLICATOR = token(SECRET, "replicator")
WAIT_S = 20
NAMESPACE = "geo/secure"


class Cluster:
    def __init__(self, name: str, broker: Any) -> None:
        self.name = name
        self.broker = broker
        self.tls_url, self.https_url = tls_urls(broker)

    def admin(self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 204)) -> httpx.Response:
        response = httpx.request(
            method, self.broker.http_url + path, json=body, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=15
        )
        assert response.status_code in expect, f"{method} {path} -> {response.status_code} {response.text[:500]}"
        return response

    def registration(self, **extra: object) -> dict[str, object]:
        """This cluster as the other one registers it: its URLs, TLS ones included."""
        return {
            "serviceUrl": self.broker.http_url,
            "serviceUrlTls": self.https_url,
            "brokerServiceUrl": self.broker.url,
            "brokerServiceUrlTls": self.tls_url,
        } | extra


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """r1's brokerClientAuthenticationParameters point here; a test rewrites it."""
    path = tmp_path_factory.mktemp("r1-client") / "replicator.token"
    path.write_text(REPLICATOR)
    return path


@pytest.fixture(scope="module")
def clusters(module_broker_factory, certificates, token_file) -> dict[str, Cluster]:
    secured = certificates.tls_settings(
        authenticationEnabled="true",
        authenticationProviders=f"{PREFIX}AuthenticationProviderToken",
        tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
        authorizationEnabled="true",
        superUserRoles="admin,replicator",
        authenticationRefreshCheckSeconds="1",
        brokerClientTlsEnabled="true",
        brokerClientTrustCertsFilePath=certificates.ca,
    )
    r1 = Cluster(
        "r1",
        module_broker_factory(
            clusterName="r1",
            brokerClientAuthenticationPlugin=TOKEN_PLUGIN,
            brokerClientAuthenticationParameters=f"file://{token_file}",
            **secured,
        ),
    )
    # r2 has no credentials of its own for other clusters: its registration of r1 must give them.
    r2 = Cluster("r2", module_broker_factory(clusterName="r2", **secured))
    both = {"r1": r1, "r2": r2}
    for cluster in both.values():
        for other in both.values():
            path = f"/admin/v2/clusters/{other.name}"
            if cluster.admin("PUT", path, other.registration(), (200, 409)).status_code == 409:
                cluster.admin("POST", path, other.registration())
        cluster.admin("PUT", "/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": ["r1", "r2"]})
        cluster.admin("PUT", f"/admin/v2/namespaces/{NAMESPACE}", {"replication_clusters": ["r1", "r2"]})
    return both


def _topic() -> str:
    return f"persistent://{NAMESPACE}/t-{uuid.uuid4().hex[:8]}"


def _client(client_factory, cluster: Cluster, certificates: Certificates) -> pulsar.Client:
    return client_factory(
        cluster.tls_url,
        tls_trust_certs_file_path=str(certificates.ca),
        authentication=pulsar.AuthenticationToken(ADMIN),
    )


def _publish(client: pulsar.Client, topic: str, payloads: list[bytes]) -> None:
    producer = client.create_producer(topic)
    for payload in payloads:
        producer.send(payload)
    producer.close()


def _receive(consumer: pulsar.Consumer, count: int, timeout_s: float) -> list[bytes]:
    received: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(received) < count and time.monotonic() < deadline:
        try:
            message = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        consumer.acknowledge(message)
        received.append(message.data())
    return received


def _replicator(cluster: Cluster, topic: str, remote: str) -> dict[str, Any]:
    path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/stats"
    return cluster.admin("GET", path).json()["replication"][remote]


def _wait_for_log(cluster: Cluster, text: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while text not in cluster.broker.output():
        assert time.monotonic() < deadline, f"{text!r} not in {cluster.name}'s log:\n{cluster.broker.output()[-3000:]}"
        time.sleep(0.2)


def test_messages_replicate_over_tls_with_the_brokers_token(clusters, certificates, client_factory) -> None:
    """r1 -> r2 with r1's brokerClient* settings: TLS to r2's brokerServiceUrlTls, the token from its file;
    a partitioned topic is created in r2 through its HTTPS admin API with the same token."""
    r1, r2 = clusters["r1"], clusters["r2"]
    topic = _topic()
    partitions = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/partitions"
    r1.admin("PUT", partitions, 2)
    deadline = time.monotonic() + WAIT_S
    while r2.admin("GET", partitions, expect=(200, 404)).json().get("partitions") != 2:
        assert time.monotonic() < deadline, "r1 did not create the partitioned topic in r2"
        time.sleep(0.1)
    consumer = _client(client_factory, r2, certificates).subscribe(
        topic, "s", initial_position=pulsar.InitialPosition.Earliest
    )
    payloads = [f"m{i}".encode() for i in range(20)]
    _publish(_client(client_factory, r1, certificates), topic, payloads)
    assert sorted(_receive(consumer, len(payloads), WAIT_S)) == sorted(payloads)
    stats = _replicator(r1, topic + "-partition-0", "r2")
    host, port = r2.tls_url.split("://", 1)[1].rsplit(":", 1)
    remote = stats["outboundConnection"].split(" - R:", 1)[1]  # Netty's channel: [id: 0x…, L:/… - R:host/ip:port]
    assert stats["connected"] and remote.startswith(f"{host}/") and remote.endswith(f":{port}]"), stats
    assert "Authenticated with role replicator (method token)" in r2.broker.output()


def test_missing_credentials_then_the_registration_gives_them(clusters, certificates, client_factory) -> None:
    """r2 has no brokerClientAuthenticationPlugin: its replicator to r1 is refused and says so, and goes
    once r2's registration of r1 names a token (which then wins over the broker's settings)."""
    r1, r2 = clusters["r1"], clusters["r2"]
    topic = _topic()
    consumer = _client(client_factory, r1, certificates).subscribe(
        topic, "s", initial_position=pulsar.InitialPosition.Earliest
    )
    payloads = [f"m{i}".encode() for i in range(10)]
    _publish(_client(client_factory, r2, certificates), topic, payloads)
    _wait_for_log(r2, f"[{topic}] Replicator to r1 at {r1.tls_url} not connected: AuthenticationError")
    assert "method none failed: the client sent no credentials, and no anonymousUserRole is set" in r1.broker.output()
    assert _receive(consumer, 1, 2) == []
    assert not _replicator(r2, topic, "r1")["connected"]

    registration = r1.registration(authenticationPlugin=TOKEN_PLUGIN, authenticationParameters=f"token:{REPLICATOR}")
    r2.admin("POST", "/admin/v2/clusters/r1", registration)
    assert sorted(_receive(consumer, len(payloads), WAIT_S)) == sorted(payloads)
    assert _replicator(r2, topic, "r1")["connected"]


@pytest.mark.parametrize(
    ("wrong", "refused_because", "remote_log"),
    [
        pytest.param(
            {
                "authenticationPlugin": TOKEN_PLUGIN,
                "authenticationParameters": "token:" + token(b"x" * 32, "replicator"),
            },
            "AuthenticationError",
            "Signature verification failed",
            id="token-of-another-key",
        ),
        pytest.param({"brokerClientTlsEnabled": True}, "CERTIFICATE_VERIFY_FAILED", None, id="untrusted-certificate"),
    ],
)
def test_a_wrong_registration_stops_replication_until_corrected(
    clusters, certificates, client_factory, tmp_path, wrong, refused_because, remote_log
) -> None:
    """r1's registration of r2 overrides r1's own settings: a token r2 does not accept, or TLS trusting
    another CA (`brokerClientTrustCertsFilePath`), and nothing arrives; the corrected registration is
    used at the replicator's next attempt."""
    r1, r2 = clusters["r1"], clusters["r2"]
    if "brokerClientTlsEnabled" in wrong:
        wrong = wrong | {"brokerClientTrustCertsFilePath": str(Certificates(tmp_path / "other").ca)}
    r1.admin("POST", "/admin/v2/clusters/r2", r2.registration(**wrong))
    try:
        topic = _topic()
        consumer = _client(client_factory, r2, certificates).subscribe(
            topic, "s", initial_position=pulsar.InitialPosition.Earliest
        )
        payloads = [f"m{i}".encode() for i in range(10)]
        _publish(_client(client_factory, r1, certificates), topic, payloads)
        _wait_for_log(r1, f"[{topic}] Replicator to r2 at {r2.tls_url} not connected: ")
        assert refused_because in r1.broker.output().split(f"[{topic}] Replicator to r2 at", 1)[1].split("\n", 1)[0]
        if remote_log is not None:
            assert remote_log in r2.broker.output()
        assert _receive(consumer, 1, 2) == []
    finally:
        r1.admin("POST", "/admin/v2/clusters/r2", r2.registration())
    assert sorted(_receive(consumer, len(payloads), WAIT_S)) == sorted(payloads)


def test_the_replicators_expiring_token_is_refreshed(clusters, certificates, client_factory, token_file) -> None:
    """r2 challenges the token r1's replicator connected with once it expires; r1 answers with its token
    file read again, and the same connection goes on replicating."""
    r1, r2 = clusters["r1"], clusters["r2"]
    topic = _topic()
    consumer = _client(client_factory, r2, certificates).subscribe(
        topic, "s", initial_position=pulsar.InitialPosition.Earliest
    )
    token_file.write_text(token(SECRET, "replicator", expires_in_s=3))
    try:
        _publish(_client(client_factory, r1, certificates), topic, [b"before"])
        assert _receive(consumer, 1, WAIT_S) == [b"before"]
        connected_since = _replicator(r1, topic, "r2")["outboundConnectedSince"]
    finally:
        token_file.write_text(REPLICATOR)
    _wait_for_log(r2, "Refreshed the credentials of role replicator")
    _publish(_client(client_factory, r1, certificates), topic, [b"after"])
    assert _receive(consumer, 1, WAIT_S) == [b"after"]
    assert _replicator(r1, topic, "r2")["outboundConnectedSince"] == connected_since
