"""Three brokers built by open_broker (through `Standalone`, with their admin servers) in one process,
each with its own data directory and ports, sharing one in-memory metadata store. The official Python
client talks to broker A only and follows the redirects to the owners; admin requests about a topic
another broker owns get a 307; unloading a bundle, a broker's shutdown and an expired session give the
bundles up, and the clients find the topics served again.

Storage is per broker here (the BookKeeper engine comes separately), so after a move these tests check
ownership and redirects with new messages, not the data published before."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests

from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.config import load_config
from magnetar.broker.topic_name import TopicName
from magnetar.cli.rest import AdminClient
from magnetar.cli.standalone import Standalone
from magnetar.metadata.memory import MemoryMetadataServer

# Topics of four different bundles of public/default (tests/unit/broker/cluster/test_bundles.py).
TOPICS = ["my-topic", "t-3", "t-1", "t-0"]
TIMEOUT_S = 30


class Cluster:
    """The brokers run on one event loop in a thread of their own, as the client blocks."""

    def __init__(self, tmp_path: Path, count: int) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = MemoryMetadataServer()
        self.members: list[Standalone] = []
        for index in range(count):
            config = load_config(overrides={"brokerServicePort": "0", "webServicePort": "0", "consoleEnabled": "false"})
            member = Standalone(config, tmp_path / f"broker-{index}", self.server.connect())
            self.run(member.start())
            self.members.append(member)

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(TIMEOUT_S)

    def url(self, index: int) -> str:
        return self.members[index].broker.config.advertised_url

    def http_url(self, index: int) -> str:
        return self.members[index].broker.config.advertised_web_url

    def owner_index(self, topic: str) -> int | None:
        """Which broker owns the topic's bundle, from the brokers' own ownership."""
        for index, member in enumerate(self.members):
            cluster = member.broker.context.cluster
            assert cluster is not None
            if member.broker.ready and cluster.ownership.owns(self.bundle(topic)):
                return index
        return None

    def bundle(self, topic: str) -> Bundle:
        cluster = self.members[0].broker.context.cluster
        assert cluster is not None
        return self.run(cluster.bundles.bundle_of(TopicName.parse(topic)))

    def expire_session(self, index: int) -> None:
        store = self.members[index].broker.context.cluster.store  # type: ignore[union-attr]

        async def expire() -> None:
            store.expire_session()  # type: ignore[attr-defined]

        self.run(expire())

    def stop(self, index: int) -> None:
        self.run(self.members[index].stop())

    def close(self) -> None:
        for member in self.members:
            if member.broker.ready:
                self.run(member.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT_S)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path, 3)
    try:
        yield running
    finally:
        running.close()


def _round_trip(client: pulsar.Client, topic: str, payload: bytes) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    producer.send(payload)
    message = consumer.receive(timeout_millis=TIMEOUT_S * 1000)
    assert message.data() == payload
    consumer.acknowledge(message)
    producer.close()
    consumer.close()


def test_a_client_of_one_broker_reaches_topics_owned_by_all_three(cluster: Cluster) -> None:
    client = pulsar.Client(cluster.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        for topic in TOPICS[:3]:
            _round_trip(client, topic, f"to {topic}".encode())
    finally:
        client.close()
    # The least loaded broker takes each new bundle: three bundles, one per broker.
    assert sorted(cluster.owner_index(topic) for topic in TOPICS[:3]) == [0, 1, 2]  # type: ignore[type-var]
    brokers = requests.get(f"{cluster.http_url(0)}/admin/v2/brokers/standalone", timeout=TIMEOUT_S).json()
    assert sorted(brokers) == sorted(cluster.http_url(i).removeprefix("http://") for i in range(3))
    leader = requests.get(f"{cluster.http_url(2)}/admin/v2/brokers/leaderBroker", timeout=TIMEOUT_S).json()
    assert leader["serviceUrl"] == cluster.http_url(0)
    for topic in TOPICS[:3]:
        owner = cluster.owner_index(topic)
        assert owner is not None
        broker_id = cluster.http_url(owner).removeprefix("http://")
        owned = AdminClient(cluster.http_url(0)).get(f"/admin/v2/brokers/standalone/{broker_id}/ownedNamespaces")
        assert str(cluster.bundle(topic)) in owned
    bundles = requests.get(f"{cluster.http_url(1)}/admin/v2/namespaces/public/default/bundles", timeout=TIMEOUT_S)
    assert bundles.json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }


def test_admin_requests_for_a_topic_another_broker_owns_are_redirected_there(cluster: Cluster) -> None:
    client = pulsar.Client(cluster.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        for topic in TOPICS[:3]:
            _round_trip(client, topic, b"x")
    finally:
        client.close()
    topic = next(t for t in TOPICS[:3] if cluster.owner_index(t) != 0)
    owner = cluster.owner_index(topic)
    assert owner is not None
    path = f"/admin/v2/persistent/public/default/{topic}/stats"
    answer = requests.get(f"{cluster.http_url(0)}{path}", allow_redirects=False, timeout=TIMEOUT_S)
    assert answer.status_code == 307
    assert answer.headers["Location"].startswith(f"{cluster.http_url(owner)}{path}")
    # magnetar's admin client follows it, for a GET and for a PUT alike.
    stats = AdminClient(cluster.http_url(0)).get(path)
    assert "sub" in stats["subscriptions"]
    AdminClient(cluster.http_url(0)).put(f"/admin/v2/persistent/public/default/{topic}/unload")
    # The HTTP lookup answers the owner.
    found = requests.get(f"{cluster.http_url(0)}/lookup/v2/topic/persistent/public/default/{topic}", timeout=TIMEOUT_S)
    assert found.json()["brokerUrl"] == cluster.url(owner)


def test_an_unloaded_bundle_is_served_again_after_its_clients_look_it_up(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    client = pulsar.Client(cluster.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        for topic in TOPICS[:3]:
            _round_trip(client, topic, b"x")
        topic = next(t for t in TOPICS[:3] if cluster.owner_index(t) != 0)
        producer = client.create_producer(topic)
        bundle = cluster.bundle(topic)
        # Asked of broker A, done by the owner (the admin client follows the 307).
        caplog.set_level("INFO", "magnetar.broker.cluster")
        AdminClient(cluster.http_url(0)).put(f"/admin/v2/namespaces/public/default/{bundle.range}/unload")
        unloaded = [r for r in caplog.records if r.getMessage() == f"Unloaded bundle {bundle}"]
        assert len(unloaded) == 1
        # The producer was closed by the broker, looked the topic up again and sends to its new owner.
        producer.send(b"after the unload")
        assert cluster.owner_index(topic) is not None
        producer.close()
    finally:
        client.close()


def test_a_broker_shutting_down_gives_its_bundles_to_the_others(cluster: Cluster) -> None:
    client = pulsar.Client(cluster.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        for topic in TOPICS[:3]:
            _round_trip(client, topic, b"x")
        topic = next(t for t in TOPICS[:3] if cluster.owner_index(t) not in (0, None))
        leaving = cluster.owner_index(topic)
        assert leaving is not None
        cluster.stop(leaving)
        assert cluster.owner_index(topic) is None
        _round_trip(client, topic, b"after the shutdown")
        assert cluster.owner_index(topic) not in (None, leaving)
        assert (
            leaving_id(cluster, leaving)
            not in requests.get(f"{cluster.http_url(0)}/admin/v2/brokers", timeout=TIMEOUT_S).json()
        )
    finally:
        client.close()


def leaving_id(cluster: Cluster, index: int) -> str:
    return cluster.http_url(index).removeprefix("http://")


def test_a_broker_whose_session_expires_drops_its_bundles_and_the_topics_are_served_again(cluster: Cluster) -> None:
    client = pulsar.Client(cluster.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        for topic in TOPICS[:3]:
            _round_trip(client, topic, b"x")
        topic = next(t for t in TOPICS[:3] if cluster.owner_index(t) not in (0, None))
        expired = cluster.owner_index(topic)
        assert expired is not None
        producer = client.create_producer(topic)
        cluster.expire_session(expired)
        # The session's bundles are gone with it: nobody owns the topic's bundle until it is looked up.
        assert cluster.server.value(f"/namespace/public/default/{cluster.bundle(topic).range}") is None
        member_cluster = cluster.members[expired].broker.context.cluster
        assert member_cluster is not None
        assert member_cluster.ownership.owned == []
        # The producer, closed, finds the topic's new owner; the broker registered itself again.
        producer.send(b"after the expiry")
        assert cluster.owner_index(topic) is not None
        producer.close()
        brokers = requests.get(f"{cluster.http_url(0)}/admin/v2/brokers", timeout=TIMEOUT_S).json()
        assert leaving_id(cluster, expired) in brokers
    finally:
        client.close()
