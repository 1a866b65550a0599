"""The explainers beyond Pulsar, black-box with the official client: `pendingAcks`, `keys/{key}` and
`hashes/{hash}` of a subscription.

The scenario PIP-379 describes: one consumer holds unacked messages of keys that move to a consumer
that joins; the explainer names the holding message ids and since when, the stats show the draining
hashes; after the acks both return to zero and the waiting messages flow. Each broker serves the module;
each test has its own topic.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable

import httpx
import pulsar
import pytest

from admin.admin_helpers import eventually, message_id
from e2e.key_shared_helpers import key_hash, key_shared, keys_owned, ring_slot

NS = "public/default"
SUB = "key_shared"


@pytest.fixture(scope="module")
def brokers(module_broker_factory) -> Callable[[str], object]:
    """A broker per Key_Shared ordering mode, started on first use and shared by the module."""
    return lambda mode="pip379": module_broker_factory(keySharedOrderingMode=mode, keySharedUnblockingIntervalMs=0)


@pytest.fixture
def name() -> str:
    return f"explain-{uuid.uuid4().hex[:10]}"


def codes(answer: dict) -> list[str]:
    return [reason["code"] for reason in answer["reasons"]]


def test_a_held_key_is_explained_until_its_messages_are_acked(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    moving = keys_owned([(["c1"], "c1"), (["c1", "c2"], "c2")], 3)
    hashes = {ring_slot(key) for key in moving}
    assert len(hashes) == 3
    c1 = key_shared(client, topic, "c1")
    producer = client.create_producer(topic, batching_enabled=False)
    sent_from_ms = int(time.time() * 1000)
    for value in range(6):
        producer.send(b"%d" % value, partition_key=moving[value % 3])
    held = [c1.receive(5000) for _ in range(6)]
    received_by_ms = int(time.time() * 1000)
    c2 = key_shared(client, topic, "c2")
    for value in range(6, 9):
        producer.send(b"%d" % value, partition_key=moving[value % 3])
    base = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}"
    with httpx.Client(base_url=base, timeout=10) as http:
        # The three new messages cannot go to c2 while c1 holds older messages of their keys.
        sub = eventually(lambda: (s := http.get("/stats").json()["subscriptions"][SUB])["msgInReplay"] == 3 and s)
        assert sub, "the new messages never reached the replay queue"
        first, second = sub["consumers"]
        assert (first["consumerName"], second["consumerName"]) == ("c1", "c2")
        assert first["drainingHashesCount"] == sub["drainingHashesCount"] == 3
        assert first["drainingHashesUnackedMessages"] == sub["drainingHashesUnackedMessages"] == 6
        assert {h["hash"] for h in first["drainingHashes"]} == hashes
        assert all(h["unackMsgs"] == 2 and h["blockedAttempts"] >= 1 for h in first["drainingHashes"])
        assert second["drainingHashesCount"] == 0 and second["unackedMessages"] == 0

        key = moving[0]
        answer = http.get(f"/subscription/{SUB}/keys/{key}").json()
        assert (answer["key"], answer["keyHash"], answer["stickyKeyHash"]) == (key, key_hash(key), ring_slot(key))
        assert answer["flowing"] is False and codes(answer) == ["IN_REPLAY_QUEUE", "DRAINING"]
        assert answer["consumer"]["consumerName"] == "c2"
        draining = answer["drainingFrom"]
        holding = [message_id(m) for m in held if m.partition_key() == key]
        assert draining["consumerName"] == "c1" and draining["unackMsgs"] == 2 and draining["blockedAttempts"] >= 1
        assert draining["heldBy"] == holding
        assert [m["messageId"] for m in answer["pendingMessages"]] == holding
        for pending in answer["pendingMessages"]:
            assert pending["consumerName"] == "c1" and pending["sameKey"] and pending["redeliveryCount"] == 0
            assert sent_from_ms <= pending["sentTimestamp"] <= received_by_ms
        assert draining["heldSince"] == answer["pendingMessages"][0]["sentTime"]
        assert len(answer["replayQueue"]) == 1 and answer["replayQueue"][0]["sameKey"]
        by_hash = http.get(f"/subscription/{SUB}/hashes/{ring_slot(key)}").json()
        assert by_hash["drainingFrom"]["heldBy"] == holding and codes(by_hash) == codes(answer)

        pending = http.get(f"/subscription/{SUB}/pendingAcks").json()
        assert pending["type"] == "Key_Shared"
        assert [(c["consumerName"], c["unackedMessages"]) for c in pending["consumers"]] == [("c1", 6), ("c2", 0)]
        assert [m["messageId"] for m in pending["consumers"][0]["pendingAcks"]] == [message_id(m) for m in held]
        assert {m["stickyKeyHash"] for m in pending["consumers"][0]["pendingAcks"]} == hashes

        for message in held:
            c1.acknowledge(message)
        later = sorted(int(c2.receive(5000).data()) for _ in range(3))
        assert later == [6, 7, 8]
        sub = eventually(
            lambda: (s := http.get("/stats").json()["subscriptions"][SUB])["drainingHashesCount"] == 0 and s
        )
        assert sub["drainingHashesUnackedMessages"] == 0 and sub["msgInReplay"] == 0
        assert sub["consumers"][0]["drainingHashesClearedTotal"] == 3 and sub["consumers"][0]["drainingHashes"] == []
        answer = http.get(f"/subscription/{SUB}/keys/{key}").json()
        assert answer["flowing"] is True and answer["drainingFrom"] is None and answer["replayQueue"] == []
        assert [m["consumerName"] for m in answer["pendingMessages"]] == ["c2"]  # c2 holds it now, unacked


def test_redelivered_messages_show_their_count(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(
        topic, "shared", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=50
    )
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"once")
    first = consumer.receive(5000)
    consumer.negative_acknowledge(first)
    again = consumer.receive(5000)
    assert again.redelivery_count() == 1
    url = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/subscription/shared/pendingAcks"
    (only,) = httpx.get(url, timeout=10).json()["consumers"]
    (message,) = only["pendingAcks"]
    assert message["messageId"] == message_id(again) and message["redeliveryCount"] == 1
    assert "stickyKeyHash" not in message  # Shared routes by no key


@pytest.mark.parametrize("mode", ["classic", "pip282"])
def test_a_recently_joined_owner_is_named_with_its_join_position(brokers, client_factory, name, mode) -> None:
    broker = brokers(mode)
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    (key,) = keys_owned([(["c1"], "c1"), (["c1", "c2"], "c2")], 1)
    c1 = key_shared(client, topic, "c1")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"held", partition_key=key)
    c1.receive(5000)
    key_shared(client, topic, "c2")
    url = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/subscription/{SUB}/keys/{key}"
    answer = eventually(lambda: (a := httpx.get(url, timeout=10).json())["consumer"]["consumerName"] == "c2" and a)
    assert answer["orderingMode"] == mode and "RECENTLY_JOINED" in codes(answer)
    assert answer["consumer"]["joinPosition"] and answer["drainingFrom"] is None


def test_keys_in_base64_and_subscriptions_without_consumers(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    raw = bytes([0, 255, 7])
    key_shared(client, topic, "c1").close()  # the subscription stays, with nobody connected
    base = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/subscription/{SUB}"
    with httpx.Client(base_url=base, timeout=10) as http:
        answer = http.get(f"/keys/{base64.b64encode(raw).decode()}", params={"base64Encoded": "true"}).json()
        assert answer["keyHash"] == key_hash(raw) and answer["stickyKeyHash"] == ring_slot(raw)
        assert codes(answer) == ["NO_CONSUMERS"] and answer["consumer"] is None
        assert http.get("/pendingAcks").json()["consumers"] == []
        key_shared(client, topic, "c1")
        answer = eventually(lambda: (a := http.get("/keys/a/b").json())["consumer"] and a)
        assert answer["key"] == "a/b" and answer["stickyKeyHash"] == ring_slot("a/b") and answer["flowing"]


def test_errors(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    client.subscribe(topic, "exclusive", consumer_type=pulsar.ConsumerType.Exclusive)
    key_shared(client, topic, "c1")
    base = f"{broker.http_url}/admin/v2/persistent/{NS}/{name}/subscription"
    with httpx.Client(base_url=base, timeout=10) as http:
        for url, status in [
            ("/shared/keys/k", 412),  # Shared routes by no key
            ("/exclusive/pendingAcks", 412),  # Exclusive and Failover keep no pending acks
            ("/exclusive/hashes/5", 412),
            ("/nobody/pendingAcks", 404),
            ("/nobody/keys/k", 404),
            (f"/{SUB}/hashes/65536", 400),
            (f"/{SUB}/hashes/-1", 400),
            (f"/{SUB}/hashes/x", 400),
            (f"/{SUB}/keys/%25%25?base64Encoded=true", 400),
        ]:
            response = http.get(url)
            assert response.status_code == status, (url, response.text)
            assert response.json()["reason"], url
        assert http.get(f"/{SUB}/hashes/0").status_code == 200
    response = httpx.get(f"{broker.http_url}/admin/v2/persistent/{NS}/no-such-topic/subscription/s/pendingAcks")
    assert (
        response.status_code == 404 and response.json()["reason"] == f"Topic persistent://{NS}/no-such-topic not found"
    )
