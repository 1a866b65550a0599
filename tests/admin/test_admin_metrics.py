"""`/metrics` in Prometheus text format, black-box: Pulsar's metric names and labels, values that agree
with what the test did and with the stats endpoint, and the draining-hash gauges rising and falling."""

from __future__ import annotations

import time
import uuid

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from admin.admin_helpers import eventually
from e2e.key_shared_helpers import key_shared, keys_owned

NS = "public/default"


@pytest.fixture(scope="module")
def metrics_broker(module_broker_factory):
    return module_broker_factory(keySharedUnblockingIntervalMs=0)


@pytest.fixture
def topic() -> str:
    return f"persistent://{NS}/metrics-{uuid.uuid4().hex[:10]}"


def scrape(broker) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value}, from one scrape."""
    response = httpx.get(f"{broker.http_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float | None:
    for found, number in samples.get(name, {}).items():
        if set(labels.items()) <= set(found):
            return number
    return None


def test_topic_and_subscription_metrics_agree_with_what_happened(metrics_broker, client_factory, topic) -> None:
    client = client_factory(metrics_broker.url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(12):
        producer.send(b"payload-%d" % i)
    received = [consumer.receive(5000) for _ in range(12)]
    for message in received[:4]:
        consumer.acknowledge(message)
    labels = {"cluster": "standalone", "namespace": NS, "topic": topic}
    sub = {**labels, "subscription": "sub"}
    samples = eventually(
        lambda: (s := scrape(metrics_broker)) and value(s, "pulsar_subscription_unacked_messages", **sub) == 8 and s
    )
    assert samples, "unacked messages never reached 8"
    assert value(samples, "pulsar_in_messages_total", **labels) == 12
    assert value(samples, "pulsar_in_bytes_total", **labels) == value(samples, "pulsar_storage_size", **labels) > 0
    assert value(samples, "pulsar_producers_count", **labels) == 1
    assert value(samples, "pulsar_consumers_count", **labels) == 1
    assert value(samples, "pulsar_subscriptions_count", **labels) == 1
    assert value(samples, "pulsar_msg_backlog", **labels) == value(samples, "pulsar_subscription_back_log", **sub) == 8
    assert value(samples, "pulsar_subscription_back_log_no_delayed", **sub) == 8
    assert value(samples, "pulsar_subscription_in_replay", **sub) == 0
    assert value(samples, "pulsar_subscription_blocked_on_unacked_messages", **sub) == 0
    assert value(samples, "pulsar_out_messages_total", **sub) == 12
    assert value(samples, "pulsar_subscription_last_acked_timestamp", **sub) > 0
    assert value(samples, "pulsar_topics_count", cluster="standalone", namespace=NS) >= 1
    # Every entry is timed once it is durable, in exactly one bucket.
    buckets = [
        v
        for name, by_labels in samples.items()
        if name.startswith("pulsar_storage_write_latency_") and not name.endswith(("_count", "_sum"))
        for found, v in by_labels.items()
        if ("topic", topic) in found
    ]
    assert len(buckets) == 10 and sum(buckets) == 12 == value(samples, "pulsar_storage_write_latency_count", **labels)
    assert value(samples, "pulsar_storage_write_latency_sum", **labels) > 0
    # Shared subscriptions have no draining hashes: no such gauge for them.
    assert value(samples, "magnetar_subscription_draining_hashes", **sub) is None
    assert "process_cpu_seconds_total" in samples

    stats = httpx.get(f"{metrics_broker.http_url}/admin/v2/persistent/{NS}/{topic.rsplit('/', 1)[1]}/stats").json()
    assert value(samples, "pulsar_storage_backlog_size", **labels) == stats["backlogSize"]

    time.sleep(1.1)  # rates cover windows of at least a second
    samples = scrape(metrics_broker)
    assert value(samples, "pulsar_rate_in", **labels) > 0 and value(samples, "pulsar_throughput_in", **labels) > 0
    assert value(samples, "pulsar_rate_out", **labels) > 0
    assert value(samples, "pulsar_subscription_msg_rate_out", **sub) == value(samples, "pulsar_rate_out", **labels)


def test_draining_hash_gauges_rise_while_a_consumer_holds_moved_keys_and_fall_after(
    metrics_broker, client_factory, topic
) -> None:
    client = client_factory(metrics_broker.url)
    moving = keys_owned([(["c1"], "c1"), (["c1", "c2"], "c2")], 2)
    c1 = key_shared(client, topic, "c1")
    producer = client.create_producer(topic, batching_enabled=False)
    for key in moving * 2:
        producer.send(b"v", partition_key=key)
    held = [c1.receive(5000) for _ in range(4)]
    key_shared(client, topic, "c2")
    for key in moving:
        producer.send(b"later", partition_key=key)
    sub = {"topic": topic, "subscription": "key_shared"}
    samples = eventually(
        lambda: (s := scrape(metrics_broker)) and value(s, "pulsar_subscription_in_replay", **sub) == 2 and s
    )
    assert samples, "the later messages never waited in the replay queue"
    assert value(samples, "magnetar_subscription_draining_hashes", **sub) == 2
    assert value(samples, "magnetar_subscription_draining_hashes_unacked_messages", **sub) == 4
    assert value(samples, "magnetar_subscription_draining_hashes_cleared", **sub) == 0
    for message in held:
        c1.acknowledge(message)
    samples = eventually(
        lambda: (s := scrape(metrics_broker)) and value(s, "magnetar_subscription_draining_hashes", **sub) == 0 and s
    )
    assert value(samples, "magnetar_subscription_draining_hashes_unacked_messages", **sub) == 0
    assert value(samples, "magnetar_subscription_draining_hashes_cleared", **sub) == 2
    assert eventually(lambda: value(scrape(metrics_broker), "pulsar_subscription_in_replay", **sub) == 0)


def test_connection_metrics_count_the_clients_open(broker_factory) -> None:
    """Pulsar's pulsar_active_connections and pulsar_connection_created_total_count: each official client
    holds one connection to the broker while open."""
    broker = broker_factory()
    before = scrape(broker)
    assert value(before, "pulsar_active_connections", cluster="standalone") == 0
    clients = [pulsar.Client(broker.url) for _ in range(2)]
    try:
        for client in clients:
            client.create_producer(f"persistent://{NS}/connections-{uuid.uuid4().hex[:8]}")
        during = scrape(broker)
        assert value(during, "pulsar_active_connections", cluster="standalone") == 2
        assert value(during, "pulsar_connection_created_total_count", cluster="standalone") == 2
    finally:
        for client in clients:
            client.close()

    def closed() -> dict | None:
        samples = scrape(broker)
        return samples if value(samples, "pulsar_active_connections", cluster="standalone") == 0 else None

    after = eventually(closed)
    assert after is not None, "the closed clients' connections are still counted"
    assert value(after, "pulsar_connection_created_total_count", cluster="standalone") == 2


def test_entry_cache_metrics_count_what_reads_found_there_and_what_they_did_not(broker_factory) -> None:
    """A subscription reading what was just published finds it in the entry cache; with no cache
    (managedLedgerCacheSizeMB=0) every read misses and goes to storage."""
    for cache_mb, cached in ((64, True), (0, False)):
        broker = broker_factory(managedLedgerCacheSizeMB=cache_mb)
        topic = f"persistent://{NS}/cache-{uuid.uuid4().hex[:8]}"
        client = pulsar.Client(broker.url)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):
                producer.send(b"payload-%d" % i)
            consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            for _ in range(20):
                consumer.acknowledge(consumer.receive(5000))
        finally:
            client.close()
        samples = scrape(broker)
        hits = value(samples, "magnetar_ml_cache_hits_total", cluster="standalone")
        misses = value(samples, "magnetar_ml_cache_misses_total", cluster="standalone")
        used = value(samples, "pulsar_ml_cache_used_size", cluster="standalone")
        if cached:
            assert hits == 20 and misses == 0 and used > 0, (hits, misses, used)
        else:
            assert hits == 0 and misses > 0 and used == 0, (hits, misses, used)
