"""Producing test messages with the official client, reading topics back, and running stream queries."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

import pulsar

from magnetar.client import wire


@dataclass(frozen=True)
class Sent:
    key: str | None
    value: bytes
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int | None = None  # ms
    ordering_key: bytes | None = None


def keyed_messages(count: int, keys: int, prefix: str = "m") -> list[Sent]:
    return [Sent(f"key-{i % keys}", f"{prefix}{i}".encode()) for i in range(count)]


def produce(
    client: pulsar.Client, topic: str, messages: list[Sent], batched: bool = True, batch_max: int = 100
) -> None:
    """Publish with the official client: batched by key (as Key_Shared users must) or one per entry."""
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_messages=batch_max,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
    )
    for sent in messages:
        options: dict[str, Any] = {}
        if sent.key is not None:
            options["partition_key"] = sent.key
        if sent.properties:
            options["properties"] = sent.properties
        if sent.event_time is not None:
            options["event_timestamp"] = sent.event_time
        if sent.ordering_key is not None:
            options["ordering_key"] = sent.ordering_key.decode()
        producer.send_async(sent.value, None, **options)
    producer.flush()
    producer.close()


def keep(client: pulsar.Client, topic: str) -> None:
    """A durable subscription, so that retention keeps what tests publish across ledger rollovers."""
    client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()


def source(spark: Any, broker: Any, topic: str, streaming: bool = False, **options: Any) -> Any:
    read = spark.readStream if streaming else spark.read
    read = read.format("magnetar").option("serviceUrl", broker.url).option("adminUrl", broker.http_url)
    if "topics" not in options and "topicsPattern" not in options:
        read = read.option("topic", topic)
    for name, value in options.items():
        read = read.option(name, str(value))
    return read.load()


def entries(broker: Any, topic: str) -> int:
    """Stored entries of a topic (internalStats' numberOfEntries)."""
    return admin_get(broker, f"/admin/v2/persistent/{topic.split('://')[1]}/internalStats")["numberOfEntries"]


def admin_get(broker: Any, path: str) -> Any:
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return json.loads(response.read() or b"null")


def admin_post(broker: Any, path: str, body: Any) -> None:
    request = urllib.request.Request(
        broker.http_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()


def admin_put(broker: Any, path: str, body: Any = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.http_url + path, data, {"Content-Type": "application/json"}, method="PUT")
    urllib.request.urlopen(request, timeout=10).close()


def read_back(broker: Any, topic: str) -> list[tuple[tuple[int, int], Any]]:
    """Every stored entry of a topic over the wire, in order: (position, parsed entry)."""
    with wire.Connection(broker.url) as connection:
        consumer_id = connection.subscribe(topic, f"probe-{uuid.uuid4().hex[:6]}", durable=False)
        last, _mark_delete = connection.last_message_id(consumer_id)
    return [
        (e.position, e.entry) for e in wire.read_range(broker.url, topic, wire.EARLIEST, last, wire.FULL_HASH_RANGE)
    ]


def run_available_now(query_builder: Any, timeout_s: float = 120) -> Any:
    query = query_builder.trigger(availableNow=True).start()
    assert query.awaitTermination(timeout_s), "the availableNow query did not finish"
    if query.exception() is not None:
        raise query.exception()
    return query


def wait_for(condition: Any, timeout_s: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s} s"
        time.sleep(0.2)
