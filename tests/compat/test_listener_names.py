"""Advertised listeners: a broker with `advertisedListeners` answers a lookup naming a
listener with that listener's URL, one naming no listener with the internal listener's, and one naming a
listener it does not have with Pulsar's error (ServiceNotReady, "the broker do not have X listener"),
over the binary protocol and over HTTP. Checked with the Python, Java and Go clients.

The broker advertises `internal` (its own address), `external` (the same port under the name
`localhost`) and `elsewhere` (a port nobody listens on): a client that names `elsewhere` cannot connect,
which shows that the name, not the service URL, decided where it went.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pulsar
import pytest
from go_compat import run_scenario

# A TLS URL of the external listener: answered with it, never connected to (the clients here use no TLS).
EXTERNAL_TLS_PORT = 6651


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    # A broker of this module's own, restarted with listeners that name the port it was given.
    broker = module_broker_factory(internalListenerName="internal")
    broker.settings["advertisedListeners"] = (
        f"internal:pulsar://127.0.0.1:{broker.port},external:pulsar://localhost:{broker.port},"
        f"external:pulsar+ssl://localhost:{EXTERNAL_TLS_PORT},elsewhere:pulsar://127.0.0.1:{_closed_port()}"
    )
    broker.restart()
    return broker


@pytest.fixture(scope="module")
def java(java_compat, broker) -> Callable[..., dict[str, Any]]:
    def run(scenario: str, **args: Any) -> dict[str, Any]:
        return java_compat.run(scenario, httpUrl=broker.http_url, **args)

    return run


def _lookup(broker, topic: str, **request: Any) -> httpx.Response:
    path = topic.replace("persistent://", "persistent/")
    return httpx.get(f"{broker.http_url}/lookup/v2/topic/{path}", timeout=5, **request)


def _topic() -> str:
    return f"persistent://public/default/l-{uuid.uuid4().hex[:10]}"


def test_http_lookup_answers_the_named_listener(broker) -> None:
    topic = _topic()
    internal = f"pulsar://127.0.0.1:{broker.port}"
    default = _lookup(broker, topic).json()
    assert (default["brokerUrl"], default["brokerUrlTls"]) == (internal, None)
    by_query = _lookup(broker, topic, params={"listenerName": "external"}).json()
    assert (by_query["brokerUrl"], by_query["nativeUrl"]) == (f"pulsar://localhost:{broker.port}",) * 2
    assert by_query["brokerUrlTls"] == f"pulsar+ssl://localhost:{EXTERNAL_TLS_PORT}"
    # The web service URL is the broker's own whichever listener is named, as in Pulsar.
    assert by_query["httpUrl"] == default["httpUrl"] == broker.http_url
    by_header = _lookup(broker, topic, headers={"X-Pulsar-ListenerName": "external"}).json()
    assert by_header["brokerUrl"] == f"pulsar://localhost:{broker.port}"
    # The query parameter wins over the header, as in Pulsar's TopicLookup.
    both = _lookup(broker, topic, params={"listenerName": "internal"}, headers={"X-Pulsar-ListenerName": "external"})
    assert both.json()["brokerUrl"] == internal
    unknown = _lookup(broker, topic, params={"listenerName": "nope"})
    assert (unknown.status_code, unknown.json()) == (500, {"reason": "the broker do not have nope listener"})


def test_python_client_listener_name(broker, client_factory) -> None:
    topic = _topic()
    client = client_factory(broker.url, listener_name="external")
    consumer = client.subscribe(topic, "sub")
    client.create_producer(topic).send(b"through external")
    assert consumer.receive(timeout_millis=5000).data() == b"through external"
    for name in ("elsewhere", "nope"):
        elsewhere = client_factory(broker.url, listener_name=name, operation_timeout_seconds=2)
        with pytest.raises(pulsar.PulsarException):
            elsewhere.subscribe(topic, f"sub-{name}")


def test_java_client_listener_name(java, broker) -> None:
    for url in (broker.url, broker.http_url):
        seen = java("listener_lookup", serviceUrl=url, topic=_topic(), listenerName="external")
        assert seen == {"received": ["m-0", "m-1", "m-2"]}


def test_java_client_goes_where_the_listener_says(java, broker) -> None:
    # Over HTTP the Java client names its listener in the lookup's query (`?listenerName=`).
    for url in (broker.url, broker.http_url):
        seen = java("listener_lookup", serviceUrl=url, topic=_topic(), listenerName="elsewhere", timeoutMs=1000)
        assert "subscribeError" in seen


def test_java_client_unknown_listener(java, broker) -> None:
    seen = java("listener_lookup", serviceUrl=broker.url, topic=_topic(), listenerName="nope", timeoutMs=1000)
    assert seen["subscribeError"].startswith("LookupException")
    assert "the broker do not have nope listener" in seen["subscribeError"]


def test_go_client_listener_name(broker) -> None:
    def run(listener: str) -> dict[str, Any]:
        return run_scenario("listener-lookup", broker.url, broker.http_url, f"go-{uuid.uuid4().hex[:8]}", listener)

    assert run("external") == {"received": ["m-0", "m-1", "m-2"]}
    assert "subscribe_error" in run("elsewhere")
    # This client reports the error code only.
    assert "ServiceNotReady" in run("nope")["subscribe_error"]
