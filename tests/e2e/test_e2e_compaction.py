"""Topic compaction with the official client and the admin API: the latest value per key (single
messages and batches), null-value tombstones, compacted readers that read the view then the live
entries, original message ids, durability across a restart, the status endpoint, threshold-triggered
compaction, and readers that do not ask for the compacted view."""

from __future__ import annotations

import time

import httpx
import pulsar
import pytest

from admin.admin_helpers import not_set
from magnetar.client import wire
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandSubscribe

RECEIVE_TIMEOUT_MS = 5000
# How long a test waits for a compaction it started: a few entries take milliseconds.
COMPACTION_WAIT_S = 20


def compaction_url(broker, topic: str) -> str:
    return f"{broker.http_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[-1]}/compaction"


def compaction_status(broker, topic: str) -> dict:
    response = httpx.get(compaction_url(broker, topic), timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def compact(broker, topic: str) -> None:
    response = httpx.put(compaction_url(broker, topic), timeout=10)
    assert response.status_code == 204, response.text
    wait_for_status(broker, topic, "SUCCESS")


def wait_for_status(broker, topic: str, wanted: str) -> None:
    deadline = time.monotonic() + COMPACTION_WAIT_S
    status = compaction_status(broker, topic)
    while status["status"] != wanted:
        assert status["status"] != "ERROR", status
        assert time.monotonic() < deadline, f"compaction status {status}, waiting for {wanted}"
        time.sleep(0.1)
        status = compaction_status(broker, topic)


def read_all(reader) -> list[tuple[str | None, bytes, str]]:
    """(key, value, message id) of everything the reader has, until has_message_available() is false."""
    found = []
    while reader.has_message_available():
        message = reader.read_next(RECEIVE_TIMEOUT_MS)
        found.append((message.partition_key() or None, message.data(), str(message.message_id())))
    return found


def earliest_reader(client, topic: str, compacted: bool):
    return client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)


@pytest.fixture
def broker(module_broker):
    """The module's broker (and `client`'s): each test compacts topics of its own. The tests that restart a
    broker or change a namespace policy start one of their own."""
    return module_broker


def test_compaction_keeps_the_latest_value_per_key_and_tombstones_delete(broker, client, topic) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = {}
    for key, value in [("k1", b"a"), ("k2", b"b"), ("k1", b"c"), (None, b"no key"), ("k3", b"d")]:
        ids[(key, value)] = str(producer.send(value, partition_key=key) if key else producer.send(value))
    producer.send(None, partition_key="k3")  # a null value: deletes k3
    assert compaction_status(broker, topic) == {"status": "NOT_RUN", "lastError": ""}

    compact(broker, topic)

    assert compaction_status(broker, topic) == {"status": "SUCCESS", "lastError": ""}
    view = read_all(earliest_reader(client, topic, compacted=True))
    # The tombstone's key is gone with it; the message without a key is dropped; ids are the originals.
    assert view == [("k2", b"b", ids[("k2", b"b")]), ("k1", b"c", ids[("k1", b"c")])]
    # A reader that does not ask for the compacted view reads everything, the tombstone included.
    everything = read_all(earliest_reader(client, topic, compacted=False))
    assert [(key, value) for key, value, _ in everything] == [
        ("k1", b"a"),
        ("k2", b"b"),
        ("k1", b"c"),
        (None, b"no key"),
        ("k3", b"d"),
        ("k3", b""),
    ]

    # After the horizon a compacted reader reads the live entries, all of them.
    later = str(producer.send(b"e", partition_key="k1"))
    view = read_all(earliest_reader(client, topic, compacted=True))
    assert [(key, value) for key, value, _ in view] == [("k2", b"b"), ("k1", b"c"), ("k1", b"e")]
    assert view[-1][2] == later


def test_batches_keep_their_ids_and_drop_what_was_overwritten(broker, client, topic) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=60_000
    )
    sent = []
    for key, value in [("k1", b"a"), ("k2", b"b"), ("k1", b"c"), ("k3", b"d")]:
        producer.send_async(value, lambda result, message_id: sent.append(str(message_id)), partition_key=key)
    producer.send_async(b"no key", lambda result, message_id: sent.append(str(message_id)))
    producer.flush()
    assert len(sent) == 5
    compact(broker, topic)

    view = read_all(earliest_reader(client, topic, compacted=True))

    # Slots of the batch that were overwritten (k1 = a) or had no key are compacted out; the others keep
    # their batch index.
    assert view == [("k2", b"b", sent[1]), ("k1", b"c", sent[2]), ("k3", b"d", sent[3])]
    everything = read_all(earliest_reader(client, topic, compacted=False))
    assert [value for _, value, _ in everything] == [b"a", b"b", b"c", b"d", b"no key"]


def test_a_second_compaction_builds_on_the_first(broker, client, topic) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a", partition_key="k1")
    producer.send(b"b", partition_key="k2")
    compact(broker, topic)
    producer.send(b"c", partition_key="k1")
    producer.send(None, partition_key="k2")
    producer.send(b"d", partition_key="k3")

    compact(broker, topic)

    view = read_all(earliest_reader(client, topic, compacted=True))
    assert [(key, value) for key, value, _ in view] == [("k1", b"c"), ("k3", b"d")]


def test_the_compacted_view_survives_a_restart(broker_factory, client_factory, topic) -> None:
    broker = broker_factory()
    client = client_factory(broker.url)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a", partition_key="k1")
    kept = str(producer.send(b"b", partition_key="k1"))
    compact(broker, topic)
    client.close()

    broker.restart()

    client = client_factory(broker.url)
    view = read_all(earliest_reader(client, topic, compacted=True))
    assert view == [("k1", b"b", kept)]
    # The status is the loaded topic's, as in Pulsar: a restart forgets it.
    assert compaction_status(broker, topic)["status"] == "NOT_RUN"
    stats = httpx.get(f"{broker.http_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[-1]}/stats").json()
    assert "__compaction" in stats["subscriptions"]


def test_a_compacted_consumer_and_a_table_view(broker, client, topic) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"1", partition_key="a")
    producer.send(b"2", partition_key="b")
    producer.send(b"3", partition_key="a")
    producer.send(None, partition_key="b")
    compact(broker, topic)

    consumer = client.subscribe(
        topic,
        "compacted",
        consumer_type=pulsar.ConsumerType.Exclusive,
        is_read_compacted=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    message = consumer.receive(RECEIVE_TIMEOUT_MS)
    assert (message.partition_key(), message.data()) == ("a", b"3")
    consumer.acknowledge(message)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)

    table = client.create_table_view(topic)
    assert table.get("a") == b"3"
    assert table.get("b") is None
    table.close()


def test_read_compacted_is_refused_on_shared_subscriptions(broker, client, topic) -> None:
    """The official clients refuse this configuration themselves; the broker's answer is Pulsar's."""
    client.create_producer(topic).close()
    with wire.Connection(broker.url) as connection:
        request_id = connection.next_id()
        subscribe = {
            "topic": topic,
            "subscription": "shared",
            "subType": CommandSubscribe.Shared,
            "consumer_id": connection.next_id(),
            "request_id": request_id,
            "read_compacted": True,
        }
        with pytest.raises(wire.BrokerError) as refused:
            connection.request(BaseCommand(type=BaseCommand.SUBSCRIBE, subscribe=subscribe), request_id)
    assert refused.value.code == "NotAllowedError"
    assert "readCompacted only allowed on failover or exclusive subscriptions" in str(refused.value)


def test_status_of_a_missing_topic_is_not_found(broker) -> None:
    response = httpx.get(compaction_url(broker, "persistent://public/default/missing"), timeout=10)
    assert response.status_code == 404
    assert httpx.put(compaction_url(broker, "persistent://public/default/missing"), timeout=10).status_code == 404


def test_a_topic_past_its_threshold_is_compacted(broker_factory, client_factory, topic) -> None:
    broker = broker_factory(brokerServiceCompactionMonitorIntervalInSeconds=1)
    client = client_factory(broker.url)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a" * 100, partition_key="k1")
    producer.send(b"b" * 100, partition_key="k1")
    local = topic.rsplit("/", 1)[-1]
    policy = f"{broker.http_url}/admin/v2/persistent/public/default/{local}/compactionThreshold"
    assert httpx.post(policy, json=10, timeout=10).status_code == 204
    assert httpx.get(policy, timeout=10).json() == 10

    wait_for_status(broker, topic, "SUCCESS")

    view = read_all(earliest_reader(client, topic, compacted=True))
    assert [(key, value) for key, value, _ in view] == [("k1", b"b" * 100)]


def test_namespace_threshold_policy(broker_factory) -> None:
    broker = broker_factory()
    url = f"{broker.http_url}/admin/v2/namespaces/public/default/compactionThreshold"
    assert not_set(httpx.get(url, timeout=10))
    assert httpx.put(url, json=-1, timeout=10).status_code == 412
    assert httpx.put(url, json=1024, timeout=10).status_code == 204
    assert httpx.get(url, timeout=10).json() == 1024
    assert httpx.delete(url, timeout=10).status_code == 204
    assert not_set(httpx.get(url, timeout=10))
