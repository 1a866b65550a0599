"""Replicated subscriptions (PIP-33) between broker processes, with the official client: Pulsar's
ReplicatedSubscriptionTest scenarios (replication reference §3) with its expected values, and the position a
consumer group finds in the other cluster after failing over.

Snapshots every 100 ms (Pulsar's tests use small frequencies too), so that a test waits fractions of a
second for a subscription to move in the other cluster.
"""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from geo_helpers import Geo, admin, new_topic, topic_path, wait_until

FREQUENCY_MS = 100
SETTINGS = {"replicatedSubscriptionsSnapshotFrequencyMillis": str(FREQUENCY_MS)}


@pytest.fixture(scope="module")
def pair(module_broker_factory) -> Geo:
    """Clusters r1 and r2, namespace `geo/rs` replicating between them."""
    geo = Geo({name: module_broker_factory(clusterName=name, **SETTINGS) for name in ("r1", "r2")})
    geo.connect()
    geo.create_tenant()
    geo.create_namespace("rs", ["r1", "r2"])
    return geo


def subscription_stats(broker, topic: str, subscription: str) -> dict | None:
    response = admin(broker, "GET", topic_path(topic) + "/stats", expect=(200, 404))
    if response.status_code == 404:
        return None
    return response.json().get("subscriptions", {}).get(subscription)


def mark_delete(broker, topic: str, subscription: str) -> tuple[int, int] | None:
    response = admin(broker, "GET", topic_path(topic) + "/internalStats", expect=(200, 404))
    if response.status_code == 404:
        return None
    cursor = response.json().get("cursors", {}).get(subscription)
    if cursor is None:
        return None
    ledger, entry = cursor["markDeletePosition"].split(":")
    return int(ledger), int(entry)


def receive(consumer: pulsar.Consumer, count: int, ack: bool = True) -> list[str]:
    got = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=10_000)
        got.append(message.data().decode())
        if ack:
            consumer.acknowledge(message)
    return got


def drain(consumer: pulsar.Consumer, quiet_ms: int = 1000) -> list[str]:
    got = []
    while True:
        try:
            message = consumer.receive(timeout_millis=quiet_ms)
        except pulsar.Timeout:
            return got
        got.append(message.data().decode())
        consumer.acknowledge(message)


def test_a_consumer_failing_over_resumes_at_the_last_snapshot_it_acknowledged(pair, client_factory) -> None:
    """Pulsar's testReplicatedSubscriptionAcrossTwoRegions with a snapshot between the halves: 3 messages in
    r1, a snapshot, 3 more; the first 3 consumed in r1. r2's subscription moves to the snapshot, so r2's
    consumer receives exactly the last 3: the snapshot's position is the acknowledged one (Pulsar's rule
    gives no duplicates when no traffic came between the snapshot and the acknowledgement)."""
    topic = new_topic("rs", "failover")
    name = f"sub-{uuid.uuid4().hex[:6]}"
    r1, r2 = client_factory(pair["r1"].url), client_factory(pair["r2"].url)
    for client in (r1, r2):
        client.subscribe(topic, name, replicate_subscription_state_enabled=True).close()
    producer = r1.create_producer(topic)
    sent = [f"m{i}" for i in range(6)]
    for payload in sent[:3]:
        producer.send(payload.encode())
    time.sleep(5 * FREQUENCY_MS / 1000)  # a snapshot round trip: REQUEST to r2, RESPONSE back, SNAPSHOT
    for payload in sent[3:]:
        producer.send(payload.encode())
    consumer = r1.subscribe(topic, name, replicate_subscription_state_enabled=True)
    assert receive(consumer, 3) == sent[:3]
    wait_until(lambda: mark_delete(pair["r2"], topic, name) not in (None, (-1, -1)) and
               mark_delete(pair["r2"], topic, name)[1] >= 0,
               "r2's subscription moved",
               lambda: f"r1 {mark_delete(pair['r1'], topic, name)}, r2 {mark_delete(pair['r2'], topic, name)}")
    consumer.close()
    assert drain(r2.subscribe(topic, name, replicate_subscription_state_enabled=True)) == sent[3:]
