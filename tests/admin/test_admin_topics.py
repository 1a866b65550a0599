"""Persistent topics over `/admin/v2/persistent`, black-box against a broker process with the official client.

Shapes, status codes and reasons are Pulsar's (PersistentTopicsBase): topics and partitioned topics,
subscriptions, skip, reset, expire, peek and examine with their X-Pulsar-* headers, last message id,
unload, and the topic-level deduplication policy. Each operation's effect is checked the way a user sees
it: what a consumer receives next. One broker serves the module; each test has its own topics.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import httpx
import pulsar
import pytest

from admin.admin_helpers import not_set

if TYPE_CHECKING:
    from conftest import BrokerProcess


NS = "public/default"
RECEIVE_MS = 5000
QUIET_MS = 300


@pytest.fixture(scope="module")
def admin_broker(module_broker_factory) -> BrokerProcess:
    return module_broker_factory()


@pytest.fixture(scope="module")
def http(admin_broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{admin_broker.http_url}/admin/v2", timeout=10) as client:
        yield client


@pytest.fixture
def pulsar_client(admin_broker: BrokerProcess, client_factory) -> pulsar.Client:
    return client_factory(admin_broker.url)


@pytest.fixture
def name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def reason(response: httpx.Response) -> str:
    return response.json()["reason"]


def full(name: str) -> str:
    return f"persistent://{NS}/{name}"


def drain(consumer: pulsar.Consumer) -> list[bytes]:
    received = []
    while True:
        try:
            message = consumer.receive(timeout_millis=QUIET_MS)
        except pulsar.Timeout:
            return received
        received.append(message.data())
        consumer.acknowledge(message)


def produce(client: pulsar.Client, name: str, count: int, **options) -> list[pulsar.MessageId]:
    producer = client.create_producer(full(name), batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), **options) for i in range(count)]
    producer.close()
    return ids


def until(condition, what: str, wait_s: float = 10) -> None:
    deadline = time.monotonic() + wait_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {wait_s} s: {what}")
        time.sleep(0.05)


def message_id(msg_id: pulsar.MessageId) -> str:
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}"


def wait_for_consumer(client: pulsar.Client, http: httpx.Client, name: str, subscription: str) -> pulsar.Consumer:
    """A consumer, subscribed once the admin API has created the subscription."""
    assert subscription in http.get(f"/persistent/{NS}/{name}/subscriptions").json()
    return client.subscribe(full(name), subscription)


# -------------------------------------------------------------------------------------- topics


def test_create_list_delete_topic(http: httpx.Client, name: str) -> None:
    assert http.put(f"/persistent/{NS}/{name}").status_code == 204
    assert full(name) in http.get(f"/persistent/{NS}").json()
    exists = http.put(f"/persistent/{NS}/{name}")
    assert (exists.status_code, reason(exists)) == (409, "This topic already exists")
    assert http.get(f"/persistent/{NS}/{name}/partitions").json() == {"partitions": 0, "deleted": False}
    assert http.delete(f"/persistent/{NS}/{name}").status_code == 204
    assert full(name) not in http.get(f"/persistent/{NS}").json()
    missing = http.delete(f"/persistent/{NS}/{name}")
    assert (missing.status_code, reason(missing)) == (404, f"Topic {full(name)} not found")


def test_topic_errors(http: httpx.Client, name: str) -> None:
    unknown_namespace = http.put(f"/persistent/public/nowhere/{name}")
    assert (unknown_namespace.status_code, reason(unknown_namespace)) == (404, "Namespace does not exist")
    unknown_tenant = http.get("/persistent/nobody/default")
    assert (unknown_tenant.status_code, reason(unknown_tenant)) == (404, "Tenant does not exist")
    invalid = http.put(f"/persistent/{NS}/bad%20name")
    assert (invalid.status_code, reason(invalid)) == (412, "Topic name is not valid")
    for path in ("subscriptions", "lastMessageId", "partitions", "examinemessage"):
        assert http.get(f"/persistent/{NS}/{name}/{path}").status_code == 404, path
    assert http.put(f"/persistent/{NS}/{name}/unload").status_code == 404
    orphan = http.put(f"/persistent/{NS}/{name}-partition-0")
    assert orphan.status_code == 412


def test_delete_topic_in_use_needs_force(http: httpx.Client, name: str, pulsar_client) -> None:
    producer = pulsar_client.create_producer(full(name))
    producer.send(b"x")
    busy = http.delete(f"/persistent/{NS}/{name}")
    assert (busy.status_code, reason(busy)) == (412, "Topic has active producers/subscriptions")
    assert http.delete(f"/persistent/{NS}/{name}", params={"force": "true"}).status_code == 204
    # The producer was closed by the broker; a new one starts an empty topic.
    consumer = pulsar_client.subscribe(full(name), "after", initial_position=pulsar.InitialPosition.Earliest)
    pulsar_client.create_producer(full(name)).send(b"fresh")
    assert drain(consumer) == [b"fresh"]


# --------------------------------------------------------------------------------- partitioned


def test_partitioned_topic_lifecycle(http: httpx.Client, name: str, pulsar_client) -> None:
    path = f"/persistent/{NS}/{name}/partitions"
    assert http.put(path, json=3).status_code == 204
    assert http.get(path).json() == {"partitions": 3, "deleted": False}
    assert full(name) in http.get(f"/persistent/{NS}/partitioned").json()
    listed = http.get(f"/persistent/{NS}").json()
    assert [t for t in listed if t.startswith(full(name))] == [f"{full(name)}-partition-{i}" for i in range(3)]
    again = http.put(path, json=3)
    assert (again.status_code, reason(again)) == (409, "Partitioned topic already exists")
    assert http.post(path, json=5).status_code == 204
    assert http.get(path).json()["partitions"] == 5
    # Pulsar 4.0.7's answers: fewer partitions are unprocessable (422); the number it has changes nothing.
    shrink = http.post(path, json=4)
    assert (shrink.status_code, reason(shrink)) == (
        422,
        "Desired partitions 4 can't be less than the current partitions 5.",
    )
    assert http.post(path, json=5).status_code == 204
    assert http.get(path).json()["partitions"] == 5
    consumer = pulsar_client.subscribe(full(name), "sub")
    producer = pulsar_client.create_producer(full(name))
    for i in range(10):
        producer.send(f"p{i}".encode(), partition_key=f"k{i}")
    assert sorted(drain(consumer)) == sorted(f"p{i}".encode() for i in range(10))
    producer.close()
    consumer.close()
    assert http.delete(path).status_code == 204
    assert http.get(path).status_code == 404
    assert full(name) not in http.get(f"/persistent/{NS}/partitioned").json()
    assert not [t for t in http.get(f"/persistent/{NS}").json() if t.startswith(full(name))]


def test_partitioned_topic_errors(http: httpx.Client, name: str, pulsar_client) -> None:
    path = f"/persistent/{NS}/{name}/partitions"
    zero = http.put(path, json=0)
    assert (zero.status_code, reason(zero)) == (406, "Number of partitions should be more than 0")
    too_many = http.put(path, json=1001)
    assert too_many.status_code == 406
    assert reason(too_many) == "Number of partitions should be less than or equal to 1000"
    assert http.put(path, json="three").status_code == 400
    suffix = http.put(f"/persistent/{NS}/{name}-partition-1/partitions", json=2)
    assert (suffix.status_code, reason(suffix)) == (412, "Partitioned Topic Name should not contain '-partition-'")
    not_partitioned = (409, f"Topic {full(name)} is not the partitioned topic.")
    missing = http.post(path, json=4)
    assert (missing.status_code, reason(missing)) == not_partitioned
    assert http.delete(path).status_code == 404
    assert http.put(f"/persistent/{NS}/{name}").status_code == 204
    plain = http.put(path, json=2)
    assert (plain.status_code, reason(plain)) == (409, "This topic already exists")
    grown = http.post(path, json=0)  # the topic is looked at before the number, as in Pulsar
    assert (grown.status_code, reason(grown)) == not_partitioned
    other = f"{name}-p"
    assert http.put(f"/persistent/{NS}/{other}/partitions", json=2).status_code == 204
    assert http.put(f"/persistent/{NS}/{other}").status_code == 409
    producer = pulsar_client.create_producer(full(other))
    busy = http.delete(f"/persistent/{NS}/{other}/partitions")
    assert (busy.status_code, reason(busy)) == (412, "Topic has active producers/subscriptions")
    producer.close()
    assert http.delete(f"/persistent/{NS}/{other}/partitions").status_code == 204


def test_partitioned_topic_update_errors(http: httpx.Client, name: str) -> None:
    """POST .../partitions answers as Pulsar 4.0.7's internalUpdatePartitionedTopicAsync does (its reasons
    checked against a Pulsar 4.0.7 standalone): the topic first, then the number."""
    path = f"/persistent/{NS}/{name}/partitions"
    assert http.put(path, json=2).status_code == 204
    for fewer in (1, 0, -1):
        refused = http.post(path, json=fewer)
        assert (refused.status_code, reason(refused)) == (
            422,
            f"Desired partitions {fewer} can't be less than the current partitions 2.",
        )
    too_many = http.post(path, json=1001)
    assert (too_many.status_code, reason(too_many)) == (
        422,
        "Desired partitions 1001 can't be greater than the maximum partitions per topic 1000.",
    )
    suffix = http.post(f"/persistent/{NS}/{name}-partition-1/partitions", json=3)
    assert (suffix.status_code, reason(suffix)) == (412, "Partitioned Topic Name should not contain '-partition-'")
    # Pulsar does not look for the namespace: a topic of a namespace that does not exist is not partitioned.
    elsewhere = http.post(f"/persistent/public/nowhere-{name}/{name}/partitions", json=3)
    assert (elsewhere.status_code, reason(elsewhere)) == (
        409,
        f"Topic persistent://public/nowhere-{name}/{name} is not the partitioned topic.",
    )
    assert http.post(path, json="three").status_code == 400
    assert http.get(path).json()["partitions"] == 2
    assert http.delete(path).status_code == 204


def test_force_delete_partitioned_topic_in_use(http: httpx.Client, name: str, pulsar_client) -> None:
    """The producer closed by the deletion reconnects at once; it must not re-create a partition."""
    assert http.put(f"/persistent/{NS}/{name}/partitions", json=2).status_code == 204
    producer = pulsar_client.create_producer(full(name), send_timeout_millis=2000)
    producer.send(b"x", partition_key="a")
    assert http.delete(f"/persistent/{NS}/{name}/partitions", params={"force": "true"}).status_code == 204
    with pytest.raises(pulsar.PulsarException):
        producer.send(b"y", partition_key="a")
    assert not [t for t in http.get(f"/persistent/{NS}").json() if t.startswith(full(name))]
    assert http.get(f"/persistent/{NS}/{name}/partitions").status_code == 404


def test_partitioned_subscription_operations_reach_every_partition(
    http: httpx.Client, name: str, pulsar_client
) -> None:
    assert http.put(f"/persistent/{NS}/{name}/partitions", json=2).status_code == 204
    sub = f"/persistent/{NS}/{name}/subscription/audit"
    assert http.put(sub, json={"ledgerId": -1, "entryId": -1}).status_code == 204
    for i in range(2):
        assert http.get(f"/persistent/{NS}/{name}-partition-{i}/subscriptions").json() == ["audit"]
    assert http.get(f"/persistent/{NS}/{name}/subscriptions").json() == ["audit"]
    assert http.put(sub).status_code == 409
    producer = pulsar_client.create_producer(full(name))
    for i in range(6):
        producer.send(f"p{i}".encode(), partition_key=f"key-{i}")
    assert http.post(f"{sub}/skip_all").status_code == 204
    for path in (f"{sub}/position/1", f"/persistent/{NS}/{name}/examinemessage", f"{sub}/skip/1"):
        response = http.post(path) if path.endswith("skip/1") else http.get(path)
        assert response.status_code == 405, path
    by_id = http.post(f"{sub}/resetcursor", json={"ledgerId": 1, "entryId": 0})
    assert (by_id.status_code, reason(by_id)) == (405, "Reset-cursor at position is not allowed for partitioned-topic")
    # Back to the start on every partition: a consumer gets all six again.
    assert http.post(f"{sub}/resetcursor/0").status_code == 204
    consumer = pulsar_client.subscribe(full(name), "audit")
    assert sorted(drain(consumer)) == sorted(f"p{i}".encode() for i in range(6))
    producer.close()
    consumer.close()
    assert http.delete(sub).status_code == 204
    assert http.get(f"/persistent/{NS}/{name}/subscriptions").json() == []


# ------------------------------------------------------------------------------- subscriptions


def test_subscription_create_list_delete(http: httpx.Client, name: str, pulsar_client) -> None:
    produce(pulsar_client, name, 3)
    base = f"/persistent/{NS}/{name}/subscription"
    assert http.put(f"{base}/from-start", json={"ledgerId": -1, "entryId": -1, "partitionIndex": -1}).status_code == 204
    assert http.put(f"{base}/from-now").status_code == 204
    assert http.get(f"/persistent/{NS}/{name}/subscriptions").json() == ["from-now", "from-start"]
    exists = http.put(f"{base}/from-now")
    assert (exists.status_code, reason(exists)) == (409, "Subscription already exists for topic")
    assert drain(wait_for_consumer(pulsar_client, http, name, "from-start")) == [b"m0", b"m1", b"m2"]
    consumer = wait_for_consumer(pulsar_client, http, name, "from-now")
    assert drain(consumer) == []
    busy = http.delete(f"{base}/from-now")
    assert (busy.status_code, reason(busy)) == (412, "Subscription has active connected consumers")
    assert http.delete(f"{base}/from-now", params={"force": "true"}).status_code == 204
    assert http.get(f"/persistent/{NS}/{name}/subscriptions").json() == ["from-start"]
    missing = http.delete(f"{base}/from-now")
    assert (missing.status_code, reason(missing)) == (404, f"Subscription from-now not found for topic {full(name)}")
    assert http.put(f"{base}/x", json={"ledgerId": "one", "entryId": 0}).status_code == 400


def test_create_subscription_at_message_id(http: httpx.Client, name: str, pulsar_client) -> None:
    ids = produce(pulsar_client, name, 5)
    body = {"ledgerId": ids[3].ledger_id(), "entryId": ids[3].entry_id(), "partitionIndex": -1}
    assert http.put(f"/persistent/{NS}/{name}/subscription/mid", json=body).status_code == 204
    assert drain(wait_for_consumer(pulsar_client, http, name, "mid")) == [b"m3", b"m4"]


def test_create_subscription_on_a_new_topic_creates_it(http: httpx.Client, name: str) -> None:
    assert http.put(f"/persistent/{NS}/{name}/subscription/first").status_code == 204
    assert full(name) in http.get(f"/persistent/{NS}").json()


def test_skip_skip_all_and_peek(http: httpx.Client, name: str, pulsar_client) -> None:
    http.put(f"/persistent/{NS}/{name}/subscription/sub", json={"ledgerId": -1, "entryId": -1})
    produce(pulsar_client, name, 6)
    sub = f"/persistent/{NS}/{name}/subscription/sub"
    assert http.get(f"{sub}/position/1").content == b"m0"
    assert http.get(f"{sub}/position/6").content == b"m5"
    assert http.get(f"{sub}/position/7").status_code == 404
    assert http.get(f"{sub}/position/0").status_code == 412
    assert http.post(f"{sub}/skip/2").status_code == 204
    assert http.get(f"{sub}/position/1").content == b"m2"
    consumer = wait_for_consumer(pulsar_client, http, name, "sub")
    first = consumer.receive(timeout_millis=RECEIVE_MS)
    assert first.data() == b"m2"
    consumer.acknowledge(first)
    # m3 is unacked but delivered; acking m4 individually leaves m3 as the first to peek and skip.
    third = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(2)][1]
    consumer.acknowledge(third)
    until(lambda: http.get(f"{sub}/position/1").content == b"m3", "the client's grouped acks reach the broker")
    assert http.get(f"{sub}/position/2").content == b"m5"
    assert http.post(f"{sub}/skip_all").status_code == 204
    assert http.get(f"{sub}/position/1").status_code == 404
    assert http.post(f"{sub}/skip/-1").status_code == 400
    assert http.post(f"/persistent/{NS}/{name}/subscription/nobody/skip_all").status_code == 404


def test_peek_headers(http: httpx.Client, name: str, pulsar_client) -> None:
    http.put(f"/persistent/{NS}/{name}/subscription/sub", json={"ledgerId": -1, "entryId": -1})
    producer = pulsar_client.create_producer(full(name), producer_name="peeker", batching_enabled=False)
    properties = {"color": "blue", "two words": "x", "accent": "café"}
    sent = producer.send(b"payload", properties=properties, partition_key="k1", event_timestamp=1_700_000_000_123)
    response = http.get(f"/persistent/{NS}/{name}/subscription/sub/position/1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.content == b"payload"
    headers = response.headers
    assert headers["X-Pulsar-Message-ID"] == message_id(sent)
    assert headers["X-Pulsar-PROPERTY-color"] == "blue"
    assert (b"X-Pulsar-PROPERTY-accent", "café".encode()) in response.headers.raw
    assert "X-Pulsar-PROPERTY-two words" not in headers
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == properties
    assert headers["X-Pulsar-partition-key"] == "k1"
    assert headers["X-Pulsar-producer-name"] == "peeker"
    assert headers["X-Pulsar-sequence-id"] == "0"
    assert headers["X-Pulsar-Is-Encrypted"] == "false"
    assert headers["X-Pulsar-event-time"] == "2023-11-14T22:13:20.123Z"
    published = datetime.fromisoformat(headers["X-Pulsar-publish-time"])
    assert abs(published.timestamp() - time.time()) < 600
    assert "X-Pulsar-num-batch-message" not in headers


def test_peek_a_batch(http: httpx.Client, name: str, pulsar_client) -> None:
    http.put(f"/persistent/{NS}/{name}/subscription/sub", json={"ledgerId": -1, "entryId": -1})
    producer = pulsar_client.create_producer(
        full(name), batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=60_000
    )
    for i in range(3):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    response = http.get(f"/persistent/{NS}/{name}/subscription/sub/position/1")
    assert response.headers["X-Pulsar-num-batch-message"] == "3"
    assert int(response.headers["X-Pulsar-batch-size"]) > len(response.content) > 0
    for i in range(3):
        assert f"b{i}".encode() in response.content


def test_examine_message_and_last_message_id(http: httpx.Client, name: str, pulsar_client) -> None:
    ids = produce(pulsar_client, name, 4)
    examine = f"/persistent/{NS}/{name}/examinemessage"
    assert http.get(examine).content == b"m3"
    assert http.get(examine, params={"initialPosition": "latest", "messagePosition": 2}).content == b"m2"
    first = http.get(examine, params={"initialPosition": "earliest", "messagePosition": 1})
    assert (first.content, first.headers["X-Pulsar-Message-ID"]) == (b"m0", message_id(ids[0]))
    assert http.get(examine, params={"initialPosition": "earliest", "messagePosition": 5}).status_code == 404
    assert http.get(examine, params={"initialPosition": "middle"}).status_code == 400
    last = http.get(f"/persistent/{NS}/{name}/lastMessageId").json()
    assert last == {"ledgerId": ids[3].ledger_id(), "entryId": ids[3].entry_id(), "partitionIndex": -1}


def test_reset_cursor_by_message_id_and_by_time(http: httpx.Client, name: str, pulsar_client) -> None:
    http.put(f"/persistent/{NS}/{name}/subscription/sub", json={"ledgerId": -1, "entryId": -1})
    ids = produce(pulsar_client, name, 5)
    sub = f"/persistent/{NS}/{name}/subscription/sub"
    consumer = wait_for_consumer(pulsar_client, http, name, "sub")
    assert drain(consumer) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    # The connected consumer is closed by the reset and re-subscribes from the new position.
    body = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id(), "partitionIndex": -1}
    assert http.post(f"{sub}/resetcursor", json=body).status_code == 204
    assert drain(consumer) == [b"m2", b"m3", b"m4"]
    assert http.post(f"{sub}/resetcursor", json=body | {"isExcluded": True}).status_code == 204
    assert drain(consumer) == [b"m3", b"m4"]
    assert http.post(f"{sub}/resetcursor/0").status_code == 204
    assert drain(consumer) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    future = int(time.time() * 1000) + 3_600_000
    assert http.post(f"{sub}/resetcursor/{future}").status_code == 204
    assert http.get(f"{sub}/position/1").status_code == 404
    assert http.post(f"{sub}/resetcursor", json={"entryId": 1}).status_code == 400
    assert http.post(f"/persistent/{NS}/{name}/subscription/none/resetcursor/0").status_code == 404


def test_expire_messages(http: httpx.Client, name: str, pulsar_client) -> None:
    for sub in ("one", "two", "three"):
        http.put(f"/persistent/{NS}/{name}/subscription/{sub}", json={"ledgerId": -1, "entryId": -1})
    produce(pulsar_client, name, 3)
    base = f"/persistent/{NS}/{name}"
    assert http.post(f"{base}/subscription/one/expireMessages/3600").status_code == 204
    assert http.get(f"{base}/subscription/one/position/1").content == b"m0"
    assert http.post(f"{base}/subscription/one/expireMessages/0").status_code == 204
    assert http.get(f"{base}/subscription/one/position/1").status_code == 404
    assert http.get(f"{base}/subscription/two/position/1").content == b"m0"
    assert http.post(f"{base}/all_subscription/expireMessages/0").status_code == 204
    for sub in ("two", "three"):
        assert http.get(f"{base}/subscription/{sub}/position/1").status_code == 404
    assert http.post(f"{base}/subscription/none/expireMessages/0").status_code == 404


def test_unload_keeps_clients_working(http: httpx.Client, name: str, pulsar_client) -> None:
    consumer = pulsar_client.subscribe(full(name), "sub")
    producer = pulsar_client.create_producer(full(name), batching_enabled=False)
    producer.send(b"before")
    assert drain(consumer) == [b"before"]
    assert http.put(f"/persistent/{NS}/{name}/unload").status_code == 204
    # Both reconnect to the reloaded topic; the subscription kept its place.
    producer.send(b"after")
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"after"
    assert http.get(f"/persistent/{NS}/{name}/subscriptions").json() == ["sub"]


def test_topic_deduplication_policy(http: httpx.Client, name: str, pulsar_client) -> None:
    path = f"/persistent/{NS}/{name}/deduplicationEnabled"
    assert http.get(path).status_code == 404
    consumer = pulsar_client.subscribe(full(name), "sub")
    assert not_set(http.get(path))
    assert http.post(path, json=True).status_code == 204
    assert http.get(path).json() is True
    producer = pulsar_client.create_producer(full(name), producer_name="dup", batching_enabled=False)
    producer.send(b"one", sequence_id=1)
    producer.send(b"again", sequence_id=1)
    producer.send(b"two", sequence_id=2)
    assert drain(consumer) == [b"one", b"two"]
    assert http.delete(path).status_code == 204
    producer.send(b"again", sequence_id=1)
    assert drain(consumer) == [b"again"]
