"""Replicated subscriptions that also replicate what was acknowledged out of order (magnetar beyond PIP-33,
Pulsar #10054), between broker processes with the official client.

A consumer group acknowledges part of a topic in r1, out of order, and fails over to r2: with
`replicatedSubscriptionsAckedRangesEnabled` r2 delivers exactly the messages r1 left unacknowledged,
published in r1 or in r2; without it, Pulsar's rule (everything above the mark-delete position r1's
snapshots carried). Nothing is lost either way. Snapshots every 100 ms; unbatched producers (one message
per entry: acknowledgements of part of a batch are not replicated).
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter

import pulsar
import pytest

from geo_helpers import Geo, admin, new_topic, topic_path, wait_until

FREQUENCY_MS = 100
FROM_R1, FROM_R2 = 30, 12  # messages published in each cluster


def geo_pair(module_broker_factory, namespace: str, acked_ranges: bool) -> Geo:
    settings = {
        "replicatedSubscriptionsSnapshotFrequencyMillis": str(FREQUENCY_MS),
        "replicatedSubscriptionsAckedRangesEnabled": str(acked_ranges).lower(),
    }
    geo = Geo({name: module_broker_factory(clusterName=name, **settings) for name in ("r1", "r2")})
    geo.connect()
    geo.create_tenant()
    geo.create_namespace(namespace, ["r1", "r2"])
    return geo


@pytest.fixture(scope="module")
def pair(module_broker_factory) -> Geo:
    return geo_pair(module_broker_factory, "ar", True)


@pytest.fixture(scope="module")
def pulsar_pair(module_broker_factory) -> Geo:
    """The same clusters' settings with the feature off: Pulsar's rule."""
    return geo_pair(module_broker_factory, "arp", False)


def backlog(broker, topic: str, subscription: str) -> int | None:
    response = admin(broker, "GET", topic_path(topic) + "/stats", expect=(200, 404))
    if response.status_code == 404:
        return None
    stats = response.json().get("subscriptions", {}).get(subscription)
    return None if stats is None else stats["msgBacklog"]


def wait_stable(read, what: str, stable_s: float = 1.0) -> None:
    """Until `read()` gives the same value for `stable_s` (10 snapshot periods: the last ACKED_RANGES, or
    UPDATE, written in r1 has reached r2 and been applied)."""
    seen: list[tuple[float, object]] = []

    def stable() -> bool:
        now, value = time.monotonic(), read()
        seen.append((now, value))
        since = [t for t, v in seen if v != value]
        return now - (since[-1] if since else seen[0][0]) >= stable_s

    wait_until(stable, what, lambda: f"values seen: {[v for _, v in seen[-20:]]}", interval_s=0.2)


def publish(client: pulsar.Client, topic: str, prefix: str, count: int) -> list[str]:
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"{prefix}{i:03d}" for i in range(count)]
    for index, payload in enumerate(sent):
        producer.send(payload.encode(), partition_key=f"k{index % 5}")
    producer.close()
    return sent


def consume_acking(consumers: list[pulsar.Consumer], count: int, acked: set[str]) -> list[str]:
    """Receive `count` messages across the consumers, acknowledging those in `acked` and holding the rest."""
    got: list[str] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        for consumer in consumers:
            while True:  # what this consumer has, then the next one
                try:
                    message = consumer.receive(timeout_millis=50)
                except pulsar.Timeout:
                    break
                payload = message.data().decode()
                got.append(payload)
                if payload in acked:
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


def fail_over(
    geo: Geo, client_factory, consumer_type: pulsar.ConsumerType, choose_acked
) -> tuple[list[str], set[str], list[str]]:
    """Messages from both clusters; two consumers of `consumer_type` in r1 receive them all and acknowledge
    `choose_acked(sent)`; once r2 has settled, r1's consumers go and one consumer in r2 drains the
    subscription. Returns (sent, acknowledged in r1, received in r2)."""
    topic = new_topic(geo_namespace(geo), "acked")
    name = f"sub-{uuid.uuid4().hex[:6]}"
    r1, r2 = client_factory(geo["r1"].url), client_factory(geo["r2"].url)
    for client in (r1, r2):
        client.subscribe(topic, name, consumer_type=consumer_type, replicate_subscription_state_enabled=True).close()
    sent = publish(r1, topic, "a", FROM_R1) + publish(r2, topic, "b", FROM_R2)
    acked = choose_acked(sent)
    consumers = [
        r1.subscribe(
            topic, name, consumer_type=consumer_type, replicate_subscription_state_enabled=True, consumer_name=f"c{i}"
        )
        for i in range(2)
    ]
    received_r1 = consume_acking(consumers, len(sent), acked)
    assert sorted(received_r1) == sent, f"r1 received {sorted(Counter(received_r1).items())}"
    wait_stable(lambda: backlog(geo["r2"], topic, name), "r2's subscription settled")
    for consumer in consumers:
        consumer.close()
    received_r2 = drain(
        r2.subscribe(topic, name, consumer_type=consumer_type, replicate_subscription_state_enabled=True)
    )
    return sent, acked, received_r2


def geo_namespace(geo: Geo) -> str:
    return "ar" if geo.brokers["r1"].settings.get("replicatedSubscriptionsAckedRangesEnabled") == "true" else "arp"


def every_other(sent: list[str]) -> set[str]:
    """Every other message acknowledged, the first one not: r1's mark-delete position never moves."""
    return set(sent[1::2])


def seeded_subset(sent: list[str]) -> set[str]:
    """The first ten acknowledged (the mark-delete position moves past snapshots), then a seeded half."""
    chooser = random.Random(17)
    return set(sent[:10]) | {payload for payload in sent[10:] if chooser.random() < 0.5}


@pytest.mark.parametrize("choose_acked", [every_other, seeded_subset])
@pytest.mark.parametrize("consumer_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_failing_over_delivers_exactly_what_was_left_unacknowledged(
    pair, client_factory, consumer_type, choose_acked
) -> None:
    sent, acked, received = fail_over(pair, client_factory, consumer_type, choose_acked)
    unacked = sorted(set(sent) - acked)
    duplicates = [p for p, n in Counter(received).items() if n > 1]
    assert not duplicates, f"r2 delivered twice: {duplicates}"
    assert sorted(received) == unacked, (
        f"lost: {sorted(set(unacked) - set(received))}; delivered although acknowledged in r1: "
        f"{sorted(set(received) & acked)}"
    )


def test_without_the_feature_pulsars_rule_delivers_everything_above_the_mark_delete_position(
    pulsar_pair, client_factory
) -> None:
    """The first message stays unacknowledged, so r1's mark-delete position passes no snapshot: r2 delivers
    every message, the ones acknowledged in r1 as duplicates (Pulsar #10054)."""
    sent, _acked, received = fail_over(pulsar_pair, client_factory, pulsar.ConsumerType.Shared, every_other)
    assert sorted(received) == sent
