"""Brokers of one cluster on a real ZooKeeper and three real bookies: each built by open_broker from
Pulsar's settings (`metadataStoreUrl=zk:...`, `bookkeeperMetadataServiceUri`, E/W/A 3/3/2), in one process
on one event loop, the official Python client in front. A topic keeps its messages and its subscription's
acknowledgements when its bundle moves to another broker; the old owner's ledger is closed when it lets
the bundle go, so the new owner recovers nothing; a topic one broker created is listed by the others; a
namespace created and its policies set through one broker hold at the broker that owns its topics, and a
partitioned topic's own policies at every broker owning one of its partitions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from bookkeeper_fixture import LocalBookKeeperCluster, start_cluster
from geo_helpers import wait_until
from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.cluster.setup import ClusterMetadata, initialize_cluster_metadata
from magnetar.broker.config import load_config
from magnetar.broker.topic_name import TopicName
from magnetar.cli.rest import AdminClient
from magnetar.cli.standalone import Standalone
from magnetar.metadata.urls import open_metadata_store
from magnetar.storage.bookkeeper_engine import managed_ledger_path
from magnetar.storage.ml_data_formats_pb2 import ManagedLedgerInfo

TIMEOUT_S = 30
CLUSTER = "c1"


class Brokers:
    """Two brokers on a loop in a thread of their own, as the client blocks."""

    def __init__(self, root: Path, bookies: LocalBookKeeperCluster) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.zk = f"zk:{bookies.zookeeper.address}"
        self.run(self._initialize(bookies))
        self.members: list[Standalone] = []
        for index in range(2):
            config = load_config(
                overrides={
                    "clusterName": CLUSTER,
                    "brokerServicePort": "0",
                    "webServicePort": "0",
                    "consoleEnabled": "false",
                    "metadataStoreUrl": self.zk,
                    "bookkeeperMetadataServiceUri": bookies.metadata_service_uri,
                    "managedLedgerDefaultEnsembleSize": "3",
                    "managedLedgerDefaultWriteQuorum": "3",
                    "managedLedgerDefaultAckQuorum": "2",
                }
            )
            member = Standalone(config, root / f"broker-{index}")
            self.run(member.start())
            self.members.append(member)

    async def _initialize(self, bookies: LocalBookKeeperCluster) -> None:
        store = await open_metadata_store(self.zk)
        try:
            setup = ClusterMetadata(
                CLUSTER,
                "http://127.0.0.1:8080",
                "pulsar://127.0.0.1:6650",
                existing_bk_metadata_service_uri=bookies.metadata_service_uri,
            )
            await initialize_cluster_metadata(setup, store, store)
        finally:
            await store.close()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(TIMEOUT_S)

    def url(self, index: int) -> str:
        return self.members[index].broker.config.advertised_url

    def http_url(self, index: int) -> str:
        return self.members[index].broker.config.advertised_web_url

    def bundle(self, topic: str) -> Bundle:
        cluster = self.members[0].broker.context.cluster
        assert cluster is not None
        return self.run(cluster.bundles.bundle_of(TopicName.parse(topic)))

    def owner_index(self, topic: str) -> int:
        owners = [
            index
            for index, member in enumerate(self.members)
            if member.broker.context.cluster is not None
            and member.broker.context.cluster.ownership.owns(self.bundle(topic))
        ]
        assert len(owners) == 1, owners
        return owners[0]

    def ledger_list(self, topic: str) -> ManagedLedgerInfo:
        cluster = self.members[0].broker.context.cluster
        assert cluster is not None
        found = self.run(cluster.store.get(managed_ledger_path(topic)))
        assert found is not None
        return ManagedLedgerInfo.FromString(found.value)

    def close(self) -> None:
        for member in self.members:
            if member.broker.ready:
                self.run(member.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT_S)


@pytest.fixture(scope="module")
def bookies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBookKeeperCluster]:
    cluster = start_cluster(tmp_path_factory)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory, bookies: LocalBookKeeperCluster) -> Iterator[Brokers]:
    running = Brokers(tmp_path_factory.mktemp("brokers"), bookies)
    try:
        yield running
    finally:
        running.close()


def _receive_all(consumer: pulsar.Consumer, count: int) -> list[bytes]:
    received = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=TIMEOUT_S * 1000)
        received.append(message.data())
        consumer.acknowledge(message)
    return received


def test_a_topic_keeps_its_messages_and_acknowledgements_when_its_bundle_moves(brokers: Brokers) -> None:
    topic = "persistent://public/default/moving"
    client = pulsar.Client(brokers.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        consumer = client.subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(100):
            producer.send(f"m-{i}".encode(), partition_key=f"k-{i % 7}")
        # Acknowledged one by one: the first 40 are acknowledged before the move, the others are not read.
        first = _receive_all(consumer, 40)
        assert first == [f"m-{i}".encode() for i in range(40)]
        consumer.close()
        producer.close()
        owner = brokers.owner_index(topic)
        AdminClient(brokers.http_url(owner)).put(
            f"/admin/v2/namespaces/public/default/{brokers.bundle(topic).range}/unload"
        )
        # The old owner closed its ledger when it let the bundle go: the list it wrote last names it with
        # its entries, and the next owner, recovering it, finds nothing more.
        before_move = brokers.ledger_list(topic)
        assert sum(info.entries for info in before_move.ledgerInfo) == 100

        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"after the move", partition_key="k-0")
        rest = _receive_all(consumer, 61)
        assert rest == [f"m-{i}".encode() for i in range(40, 100)] + [b"after the move"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=500)
    finally:
        client.close()


def test_a_topic_one_broker_created_is_listed_by_the_others(brokers: Brokers) -> None:
    topic = "persistent://public/default/listed-everywhere"
    client = pulsar.Client(brokers.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        client.create_producer(topic).close()
    finally:
        client.close()
    for index in range(2):
        listed = AdminClient(brokers.http_url(index)).get("/admin/v2/persistent/public/default")
        assert topic in listed, (index, listed)


def test_a_namespace_and_its_policies_set_through_one_broker_hold_at_the_broker_owning_its_topics(
    brokers: Brokers,
) -> None:
    namespace = "public/shared-policies"
    topic = f"persistent://{namespace}/deduplicated"
    AdminClient(brokers.http_url(0)).put(f"/admin/v2/namespaces/{namespace}")
    wait_until(
        lambda: namespace in AdminClient(brokers.http_url(1)).get("/admin/v2/namespaces/public"),
        "the second broker lists the namespace the first created",
    )
    client = pulsar.Client(brokers.url(1), operation_timeout_seconds=TIMEOUT_S)
    try:
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        for sequence_id in range(3):
            producer.send(b"m", sequence_id=sequence_id)
        producer.close()
        other = AdminClient(brokers.http_url(1 - brokers.owner_index(topic)))
        other.post(f"/admin/v2/namespaces/{namespace}/deduplication", True)
        other.post(f"/admin/v2/namespaces/{namespace}/subscriptionTypesEnabled", ["Exclusive"])

        def last_sequence_id() -> int:
            again = client.create_producer(topic, producer_name="p", batching_enabled=False)
            try:
                return int(again.last_sequence_id())
            finally:
                again.close()

        def shared_refused() -> bool:
            try:
                client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared).close()
            except pulsar.NotAllowedError:
                return True
            return False

        # The owner's loaded topic took deduplication on: a producer of the same name learns where it was.
        wait_until(lambda: last_sequence_id() == 2, "the owner applies the other broker's deduplication policy")
        # The second write of the policies may reach the owner after the first one was applied (each is a
        # change of the namespace's node it hears of and reads): it holds once it has arrived.
        wait_until(shared_refused, "the owner applies the other broker's subscription types")
        client.subscribe(topic, "exclusive", consumer_type=pulsar.ConsumerType.Exclusive).close()
    finally:
        client.close()


def test_a_partitioned_topics_own_policy_holds_at_every_broker_owning_one_of_its_partitions(
    brokers: Brokers,
) -> None:
    # A partitioned topic's policies are its own, stored once for its partitions, which fall in
    # different bundles: the broker the request went to writes them, and the other, owning some
    # partitions, hears of the change through the metadata store.
    base = "persistent://public/default/partitioned-policies"
    partitions = [f"{base}-partition-{index}" for index in range(8)]
    AdminClient(brokers.http_url(0)).put("/admin/v2/persistent/public/default/partitioned-policies/partitions", 8)
    client = pulsar.Client(brokers.url(0), operation_timeout_seconds=TIMEOUT_S)
    try:
        for partition in partitions:
            producer = client.create_producer(partition, producer_name="p", batching_enabled=False)
            for sequence_id in range(3):
                producer.send(b"m", sequence_id=sequence_id)
            producer.close()
        owners = {brokers.owner_index(partition) for partition in partitions}
        assert owners == {0, 1}, "the partitions' bundles should be spread over both brokers"
        AdminClient(brokers.http_url(0)).post(
            "/admin/v2/persistent/public/default/partitioned-policies/deduplicationEnabled", True
        )

        def last_sequence_ids() -> list[int]:
            found = []
            for partition in partitions:
                again = client.create_producer(partition, producer_name="p", batching_enabled=False)
                try:
                    found.append(int(again.last_sequence_id()))
                finally:
                    again.close()
            return found

        # Every partition's loaded topic took deduplication on, wherever it is served.
        wait_until(lambda: last_sequence_ids() == [2] * 8, "every owner applies the partitioned topic's policy")
    finally:
        client.close()
