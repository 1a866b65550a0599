"""TLS on the binary and HTTP ports with the official client's `pulsar+ssl://` URLs, trust settings and
AuthenticationTLS: served when trusted, refused when not, and nothing readable on the wire. The test CA
and its certificates are made by the tests (security_helpers.Certificates)."""

from __future__ import annotations

import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest

from magnetar.protocol.framing import encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand
from security_helpers import Certificates, tls_urls

PREFIX = "org.apache.pulsar.broker.authentication."


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_broker(module_broker_factory, certificates):
    return module_broker_factory(**certificates.tls_settings())


@pytest.fixture
def mtls_broker(module_broker_factory, certificates):
    """Client certificates required; the role is the certificate's CN; only `admin` is a super user."""
    return module_broker_factory(
        **certificates.tls_settings(
            tlsRequireTrustedClientCertOnConnect="true",
            authenticationEnabled="true",
            authenticationProviders=f"{PREFIX}AuthenticationProviderTls",
            authorizationEnabled="true",
            superUserRoles="admin",
        )
    )


def _topic() -> str:
    return f"persistent://public/default/tls-{uuid.uuid4().hex[:10]}"


def _round_trip(client: pulsar.Client, payload: bytes = b"payload") -> bytes:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    client.create_producer(topic).send(payload)
    return consumer.receive(timeout_millis=5000).data()


def test_pulsar_ssl_with_trusted_ca(tls_broker, certificates, client_factory) -> None:
    url, _https = tls_urls(tls_broker)
    assert url.startswith("pulsar+ssl://")
    client = client_factory(url, tls_trust_certs_file_path=str(certificates.ca), tls_validate_hostname=True)
    assert _round_trip(client) == b"payload"


def test_pulsar_ssl_with_insecure_connection_allowed(tls_broker, client_factory) -> None:
    url, _https = tls_urls(tls_broker)
    assert _round_trip(client_factory(url, tls_allow_insecure_connection=True)) == b"payload"


def test_untrusted_broker_certificate_is_refused_by_the_client(tls_broker, client_factory, tmp_path: Path) -> None:
    other_ca = Certificates(tmp_path / "other")
    url, _https = tls_urls(tls_broker)
    client = client_factory(url, tls_trust_certs_file_path=str(other_ca.ca), operation_timeout_seconds=2)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(_topic())


def test_plain_port_still_serves_and_https_answers(tls_broker, certificates, client_factory) -> None:
    assert _round_trip(client_factory(tls_broker.url)) == b"payload"
    _url, https = tls_urls(tls_broker)
    response = httpx.get(f"{https}/admin/v2/tenants", verify=ssl.create_default_context(cafile=str(certificates.ca)))
    assert response.status_code == 200 and "public" in response.json()
    lookup = httpx.get(
        f"{https}/lookup/v2/topic/persistent/public/default/x",
        verify=ssl.create_default_context(cafile=str(certificates.ca)),
    ).json()
    assert lookup["brokerUrlTls"].startswith("pulsar+ssl://") and lookup["httpUrlTls"] == https


class _Recorder:
    """A TCP relay that keeps every byte the client sends, as someone on the wire would see them."""

    def __init__(self, port: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target = port
        self.seen = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        try:
            while data := source.recv(65536):
                if record:
                    with self._lock:
                        self.seen += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def recorder() -> Iterator:
    relays: list[_Recorder] = []

    def start(port: int) -> _Recorder:
        relays.append(_Recorder(port))
        return relays[-1]

    yield start
    for relay in relays:
        relay.close()


def test_nothing_readable_on_the_wire_with_tls(tls_broker, certificates, client_factory, recorder) -> None:
    """The topic name travels in the client's LOOKUP on the service URL's connection: readable through a
    relay to the plain port, nowhere in what the same relay sees of a TLS connection."""
    url, _https = tls_urls(tls_broker)
    tls_port = int(url.rsplit(":", 1)[1])
    for port, scheme, options, readable in (
        (tls_broker.port, "pulsar", {}, True),
        (tls_port, "pulsar+ssl", {"tls_trust_certs_file_path": str(certificates.ca)}, False),
    ):
        relay = recorder(port)
        topic = _topic()
        client = client_factory(f"{scheme}://127.0.0.1:{relay.port}", **options)
        client.create_producer(topic).send(b"secret-payload")
        client.close()
        assert (topic.encode() in relay.seen) is readable, scheme
        assert relay.seen


def _answer_to_plain_connect(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        command = BaseCommand(type=BaseCommand.CONNECT)
        command.connect.client_version = "raw"
        command.connect.protocol_version = 20
        raw.sendall(encode_frame(command))
        answer = b""
        try:
            while b"magnetar" not in answer and (chunk := raw.recv(4096)):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return answer


def test_plaintext_connect_to_the_tls_port_gets_no_answer(tls_broker) -> None:
    url, _https = tls_urls(tls_broker)
    # CONNECTED{server_version "magnetar-..."} on the plain port; the TLS port never completes a handshake.
    assert b"magnetar" in _answer_to_plain_connect(tls_broker.port)
    assert b"magnetar" not in _answer_to_plain_connect(int(url.rsplit(":", 1)[1]))


def test_client_certificates_authenticate_and_authorize(mtls_broker, certificates, client_factory) -> None:
    url, _https = tls_urls(mtls_broker)
    trust = {"tls_trust_certs_file_path": str(certificates.ca), "operation_timeout_seconds": 3}
    admin_cert, admin_key = certificates.issue("admin")
    admin = client_factory(url, authentication=pulsar.AuthenticationTLS(str(admin_cert), str(admin_key)), **trust)
    assert _round_trip(admin) == b"payload"

    other_cert, other_key = certificates.issue("someone-else")
    other = client_factory(url, authentication=pulsar.AuthenticationTLS(str(other_cert), str(other_key)), **trust)
    with pytest.raises(pulsar.AuthorizationError):
        other.create_producer(_topic())

    anonymous = client_factory(url, **trust)
    with pytest.raises(pulsar.PulsarException):
        anonymous.create_producer(_topic())
    untrusted_cert, untrusted_key = certificates.untrusted("admin")
    forged = client_factory(
        url, authentication=pulsar.AuthenticationTLS(str(untrusted_cert), str(untrusted_key)), **trust
    )
    with pytest.raises(pulsar.PulsarException):
        forged.create_producer(_topic())
    assert "Authenticated with role admin (method tls)" in mtls_broker.output()


@pytest.fixture
def https_roles_broker(module_broker_factory, certificates):
    """Client certificates asked for, not required; the TLS provider on; only `admin` is a super user."""
    return module_broker_factory(
        **certificates.tls_settings(
            authenticationEnabled="true",
            authenticationProviders=f"{PREFIX}AuthenticationProviderTls",
            authorizationEnabled="true",
            superUserRoles="admin",
        )
    )


def test_https_client_certificates_are_roles(https_roles_broker, certificates) -> None:
    """An admin call over HTTPS with a trusted client certificate is made by the certificate's CN."""
    _url, https = tls_urls(https_roles_broker)

    def call(method: str, path: str, role: str | None, body: object = None) -> httpx.Response:
        context = ssl.create_default_context(cafile=str(certificates.ca))
        if role is not None:
            cert, key = certificates.issue(role)
            context.load_cert_chain(cert, key)
        with httpx.Client(verify=context, timeout=10) as client:
            return client.request(method, https + path, json=body)

    tenant = f"t-{uuid.uuid4().hex[:8]}"
    assert call("GET", "/admin/v2/clusters", "admin").status_code == 200
    created = call(
        "PUT", f"/admin/v2/tenants/{tenant}", "admin", {"adminRoles": ["alice"], "allowedClusters": ["standalone"]}
    )
    assert created.status_code == 204, created.text
    assert call("PUT", f"/admin/v2/namespaces/{tenant}/ns", "alice").status_code == 204
    assert call("GET", f"/admin/v2/namespaces/{tenant}", "alice").json() == [f"{tenant}/ns"]
    refused = call("GET", "/admin/v2/clusters", "alice")
    assert (refused.status_code, refused.json()) == (401, {"reason": "This operation requires super-user access"})
    assert call("GET", f"/admin/v2/namespaces/{tenant}", "bob").status_code == 403
    anonymous = call("GET", "/admin/v2/clusters", None)
    assert anonymous.status_code == 401 and "Authentication required" in anonymous.text


def test_the_standalone_registers_its_tls_urls_and_its_super_users_own_public(broker_factory, certificates) -> None:
    """Pulsar's standalone registers its cluster with every URL it serves and gives tenant `public` the
    super users as admins (PulsarStandalone.createNameSpace)."""
    broker = broker_factory(**certificates.tls_settings(superUserRoles="admin,ops"))
    binary_tls, https = tls_urls(broker)
    cluster = httpx.get(f"{broker.http_url}/admin/v2/clusters/standalone").json()
    assert cluster == {
        "serviceUrl": broker.http_url,
        "serviceUrlTls": https,
        "brokerServiceUrl": broker.url,
        "brokerServiceUrlTls": binary_tls,
    }
    public = httpx.get(f"{broker.http_url}/admin/v2/tenants/public").json()
    assert sorted(public["adminRoles"]) == ["admin", "ops"]
