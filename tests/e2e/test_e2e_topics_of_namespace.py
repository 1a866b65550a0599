"""GET_TOPICS_OF_NAMESPACE by mode, as the official client's regex subscriptions ask it: persistent topics
only (the default), non-persistent only, or all. Before a fix the non-persistent mode answered nothing, so a
regex subscription never saw a non-persistent topic."""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

RECEIVE_MS = 10000
QUIET_MS = 500


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (pulsar.RegexSubscriptionMode.PersistentOnly, {b"durable"}),
        (pulsar.RegexSubscriptionMode.NonPersistentOnly, {b"volatile"}),
        (pulsar.RegexSubscriptionMode.AllTopics, {b"durable", b"volatile"}),
    ],
)
def test_regex_subscription_sees_the_topics_of_its_mode(module_broker, client_factory, mode, expected) -> None:
    client = client_factory(module_broker.url)
    prefix = f"regex-{uuid.uuid4().hex[:8]}"
    producers = {
        b"durable": client.create_producer(f"persistent://public/default/{prefix}-a"),
        b"volatile": client.create_producer(f"non-persistent://public/default/{prefix}-b"),
    }
    consumer = client.subscribe(re.compile(f"public/default/{prefix}-.*"), "sub", regex_subscription_mode=mode)
    for payload, producer in producers.items():
        producer.send(payload)
    received = set()
    while True:
        try:
            received.add(consumer.receive(timeout_millis=QUIET_MS if received == expected else RECEIVE_MS).data())
        except pulsar.Timeout:
            break
    assert received == expected
