"""Authentication and authorization on the binary protocol, with the official client's AuthenticationToken
and AuthenticationBasic: credentials accepted and refused as Pulsar does, permissions granted and revoked
taking effect, and a token that expires on a live connection refreshed (AUTH_CHALLENGE/AUTH_RESPONSE)."""

from __future__ import annotations

import base64
import re
import socket
import time
import uuid

import httpx
import pulsar
import pytest
from passlib.hash import apr_md5_crypt

from magnetar.protocol.framing import FrameDecoder, encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, ServerError
from security_helpers import token

SECRET = b"magnetar-e2e-secret-key-32-bytes"
PREFIX = "org.apache.pulsar.broker.authentication."
ADMIN = token(SECRET, "admin")
WAIT_S = 10


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    htpasswd = tmp_path_factory.mktemp("basic") / "htpasswd"
    htpasswd.write_text(f"root:{apr_md5_crypt.hash('root-pw')}\nbob:{apr_md5_crypt.hash('bob-pw')}\n")
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": f"{PREFIX}AuthenticationProviderToken,{PREFIX}AuthenticationProviderBasic",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
        "basicAuthConf": f"file://{htpasswd}",
        "authorizationEnabled": "true",
        "superUserRoles": "admin,root",
        "authenticationRefreshCheckSeconds": "1",
    }


@pytest.fixture
def secured(module_broker_factory, settings):
    return module_broker_factory(**settings)


def _client(client_factory, broker, authentication) -> pulsar.Client:
    return client_factory(broker.url, authentication=authentication, operation_timeout_seconds=5)


def _topic() -> str:
    return f"persistent://public/default/sec-{uuid.uuid4().hex[:10]}"


def _admin(broker, method: str, path: str, body: object = None) -> httpx.Response:
    return httpx.request(
        method, f"{broker.http_url}{path}", json=body, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10
    )


def _round_trip(client: pulsar.Client, topic: str) -> bytes:
    consumer = client.subscribe(topic, "sub")
    client.create_producer(topic).send(b"payload")
    return consumer.receive(timeout_millis=5000).data()


def test_valid_token_and_basic_credentials_are_accepted(secured, client_factory) -> None:
    assert _round_trip(_client(client_factory, secured, pulsar.AuthenticationToken(ADMIN)), _topic()) == b"payload"
    basic = pulsar.AuthenticationBasic("root", "root-pw")
    assert _round_trip(_client(client_factory, secured, basic), _topic()) == b"payload"


@pytest.mark.parametrize(
    ("authentication", "reason"),
    [
        pytest.param(
            None, "method none failed: the client sent no credentials, and no anonymousUserRole is set", id="none"
        ),
        pytest.param(
            lambda: pulsar.AuthenticationToken(token(SECRET, "admin", expires_in_s=-10)),
            "Failed to authentication token: JWT expired",
            id="expired",
        ),
        pytest.param(
            lambda: pulsar.AuthenticationToken(ADMIN[:-3] + "abc"),
            "Failed to authentication token: Signature verification failed",
            id="tampered",
        ),
        pytest.param(
            lambda: pulsar.AuthenticationBasic("root", "wrong"),
            "wrong password for user root",
            id="basic-wrong-password",
        ),
    ],
)
def test_bad_credentials_are_refused(secured, client_factory, authentication, reason: str) -> None:
    """The broker answers ERROR{AuthenticationError} and closes, as Pulsar's ServerCnx; the C++ client
    (and so the Python one) drops that connection and retries until its operation timeout."""
    options = {} if authentication is None else {"authentication": authentication()}
    client = client_factory(secured.url, operation_timeout_seconds=2, **options)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(_topic())
    assert reason in secured.output()


def test_refusal_on_the_wire_is_an_authentication_error(secured) -> None:
    with socket.create_connection(("127.0.0.1", secured.port), timeout=5) as raw:
        command = BaseCommand(type=BaseCommand.CONNECT)
        command.connect.client_version = "raw"
        command.connect.protocol_version = 20
        command.connect.auth_method_name = "token"
        command.connect.auth_data = token(b"y" * 32, "admin").encode()
        raw.sendall(encode_frame(command))
        decoder, frames, data = FrameDecoder(), [], b"-"
        while data:
            data = raw.recv(65536)
            frames += decoder.receive_data(data)
    assert [(f.type, f.error.error, f.error.message) for f, _payload in frames] == [
        (BaseCommand.ERROR, ServerError.AuthenticationError, "Unable to authenticate")
    ]


def _eventually_refused(send) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            send()
        except pulsar.PulsarException:
            return
        assert time.monotonic() < deadline, "still allowed after the revocation"
        time.sleep(0.1)


def test_namespace_permissions_granted_and_revoked(secured, client_factory) -> None:
    namespace = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert _admin(secured, "PUT", f"/admin/v2/namespaces/{namespace}").status_code == 204
    topic = f"persistent://{namespace}/t"
    alice = _client(client_factory, secured, pulsar.AuthenticationToken(token(SECRET, "alice")))
    with pytest.raises(pulsar.AuthorizationError):
        alice.create_producer(topic)

    assert (
        _admin(secured, "POST", f"/admin/v2/namespaces/{namespace}/permissions/alice", ["produce"]).status_code == 204
    )
    producer = alice.create_producer(topic, send_timeout_millis=3000)
    producer.send(b"one")
    with pytest.raises(pulsar.AuthorizationError):
        alice.subscribe(topic, "sub")
    assert (
        _admin(
            secured, "POST", f"/admin/v2/namespaces/{namespace}/permissions/alice", ["produce", "consume"]
        ).status_code
        == 204
    )
    consumer = alice.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert consumer.receive(timeout_millis=5000).data() == b"one"
    assert _admin(secured, "GET", f"/admin/v2/namespaces/{namespace}/permissions").json() == {
        "alice": ["consume", "produce"]
    }

    # Revoked: the live producer is closed by the broker and cannot come back; new ones are refused.
    assert _admin(secured, "DELETE", f"/admin/v2/namespaces/{namespace}/permissions/alice").status_code == 204
    _eventually_refused(lambda: producer.send(b"two"))
    with pytest.raises(pulsar.AuthorizationError):
        alice.create_producer(topic)
    assert _admin(secured, "GET", f"/admin/v2/namespaces/{namespace}/permissions").json() == {}


def test_topic_and_subscription_permissions(secured, client_factory) -> None:
    namespace = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert _admin(secured, "PUT", f"/admin/v2/namespaces/{namespace}").status_code == 204
    granted, other = f"persistent://{namespace}/granted", f"persistent://{namespace}/other"
    path = f"/admin/v2/persistent/{namespace}/granted/permissions"
    assert _admin(secured, "POST", f"{path}/carol", ["produce", "consume"]).status_code == 204
    assert _admin(secured, "GET", path).json() == {"carol": ["consume", "produce"]}
    carol = _client(client_factory, secured, pulsar.AuthenticationToken(token(SECRET, "carol")))
    carol.create_producer(granted).send(b"x")
    with pytest.raises(pulsar.AuthorizationError):
        carol.create_producer(other)
    # A subscription that lists roles is theirs alone.
    assert (
        _admin(
            secured, "POST", f"/admin/v2/namespaces/{namespace}/permissions/subscription/private", ["dave"]
        ).status_code
        == 204
    )
    with pytest.raises(pulsar.AuthorizationError):
        carol.subscribe(granted, "private")
    carol.subscribe(granted, "open")
    assert _admin(secured, "DELETE", f"{path}/carol").status_code == 204
    assert _admin(secured, "DELETE", f"{path}/carol").status_code == 412
    with pytest.raises(pulsar.AuthorizationError):
        carol.create_producer(granted)


def test_expiring_token_is_refreshed_on_a_live_connection(secured, client_factory) -> None:
    # The client asks its supplier again when challenged: each answer is a new short-lived token.
    supplied: list[str] = []

    def fresh_token() -> str:
        supplied.append(token(SECRET, "admin", expires_in_s=2))
        return supplied[-1]

    client = _client(client_factory, secured, pulsar.AuthenticationToken(fresh_token))
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    producer.send(b"before")
    time.sleep(4)  # two expiries, each challenged and answered
    producer.send(b"after")
    assert [consumer.receive(timeout_millis=5000).data() for _ in range(2)] == [b"before", b"after"]
    assert "Refreshed the credentials of role admin" in secured.output()
    assert len(supplied) >= 2


def test_expired_token_without_a_new_one_closes_the_connection(secured, client_factory) -> None:
    client = _client(client_factory, secured, pulsar.AuthenticationToken(token(SECRET, "admin", expires_in_s=2)))
    client.create_producer(_topic())
    deadline = time.monotonic() + WAIT_S
    while "refreshed credentials refused" not in secured.output():
        assert time.monotonic() < deadline, secured.output()[-2000:]
        time.sleep(0.2)


def test_listing_a_namespace_needs_a_namespace_permission(secured, client_factory) -> None:
    """A pattern consumer lists the namespace's topics (GET_TOPICS_OF_NAMESPACE): a topic grant is not enough."""
    namespace = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert _admin(secured, "PUT", f"/admin/v2/namespaces/{namespace}").status_code == 204
    assert (
        _admin(secured, "POST", f"/admin/v2/persistent/{namespace}/a/permissions/erin", ["consume"]).status_code == 204
    )
    erin = _client(client_factory, secured, pulsar.AuthenticationToken(token(SECRET, "erin")))
    pattern = re.compile(f"persistent://{namespace}/.*")
    # The C++ client reports any failed listing as a LookupError; the broker's log names the refusal.
    with pytest.raises(pulsar.exceptions.LookupError):
        erin.subscribe(pattern, "sub")
    assert f"Role erin may not list the topics of {namespace}" in secured.output()
    assert _admin(secured, "POST", f"/admin/v2/namespaces/{namespace}/permissions/erin", ["consume"]).status_code == 204
    erin.subscribe(pattern, "sub").close()


def test_http_service_url_works_for_a_role_that_may_produce_and_consume(secured, client_factory) -> None:
    """A client with an http:// service URL asks GET …/partitions before it produces or consumes. Pulsar
    checks TopicOperation.LOOKUP there, which a role with produce and consume permission passes although it
    does not administer the tenant; a role without any permission is refused."""
    namespace = f"public/http-{uuid.uuid4().hex[:6]}"
    assert _admin(secured, "PUT", f"/admin/v2/namespaces/{namespace}").status_code == 204
    path = f"/admin/v2/namespaces/{namespace}/permissions/carol"
    assert _admin(secured, "POST", path, ["produce", "consume"]).status_code == 204
    topic = f"persistent://{namespace}/orders"
    carol = token(SECRET, "carol")
    client = client_factory(
        secured.http_url, authentication=pulsar.AuthenticationToken(carol), operation_timeout_seconds=5
    )
    consumer = client.subscribe(topic, "sub")
    client.create_producer(topic).send(b"over http lookup")
    assert consumer.receive(timeout_millis=5000).data() == b"over http lookup"
    partitions = f"{secured.http_url}/admin/v2/persistent/{namespace}/orders/partitions"
    assert httpx.get(partitions, headers={"Authorization": f"Bearer {carol}"}, timeout=10).status_code == 200
    refused = httpx.get(partitions, headers={"Authorization": f"Bearer {token(SECRET, 'dave')}"}, timeout=10)
    assert refused.status_code == 401
    assert refused.json() == {
        "reason": f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [{topic}]"
    }


def test_a_topic_of_a_tenant_that_does_not_exist_is_not_found(secured, client_factory) -> None:
    """With authorization on, a role that is no super user asking for a topic in a tenant (or namespace)
    that does not exist gets TopicNotFound, as from Pulsar's ServerCnx, not an authorization error; a
    topic of an existing namespace it may not use stays an authorization error."""
    client = _client(client_factory, secured, pulsar.AuthenticationToken(token(SECRET, "carol")))
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://no-such-tenant/ns/t-{uuid.uuid4().hex[:8]}")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(f"persistent://public/no-such-namespace/t-{uuid.uuid4().hex[:8]}", "sub")
    with pytest.raises(pulsar.AuthorizationError):
        client.create_producer(_topic())
