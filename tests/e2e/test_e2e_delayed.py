"""Delayed delivery (deliver_at_time) on Shared and Key_Shared; other types deliver at once, as Pulsar."""

from __future__ import annotations

import datetime

import pulsar
import pytest


@pytest.mark.parametrize("consumer_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_delayed_message_arrives_after_its_delay_and_does_not_hold_others(client, topic, consumer_type) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=consumer_type)
    producer = client.create_producer(topic)
    producer.send(b"later", partition_key="k", deliver_after=datetime.timedelta(seconds=1))
    producer.send(b"now", partition_key="k")
    first = consumer.receive(timeout_millis=5000)
    second = consumer.receive(timeout_millis=5000)
    assert [first.data(), second.data()] == [b"now", b"later"]
    # Not before its time (publish time and the broker share this machine's clock).
    assert second.publish_timestamp() + 1000 <= _now_ms() + 50
    consumer.acknowledge(first)
    consumer.acknowledge(second)


def test_delay_survives_a_restart(broker, client_factory, topic) -> None:
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    # Long enough for a restart on a loaded CI machine (a BookKeeper broker's took over 5 s there): the
    # message must still be held when the consumer is back, or the check below would prove nothing.
    delay_ms = 15_000
    producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=delay_ms))
    client.close()
    broker.restart()
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    resubscribed_ms = _now_ms()
    message = consumer.receive(timeout_millis=delay_ms + 15_000)
    due_ms = message.publish_timestamp() + delay_ms
    assert resubscribed_ms < due_ms, f"the restart took {resubscribed_ms - due_ms} ms past the delay"
    # Not before its time (publish time and the broker share this machine's clock).
    assert _now_ms() + 50 >= due_ms
    assert message.data() == b"later"
    consumer.acknowledge(message)


def test_exclusive_ignores_the_delay(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    producer.send(b"later", deliver_after=datetime.timedelta(seconds=30))
    assert consumer.receive(timeout_millis=5000).data() == b"later"


def _now_ms() -> int:
    return int(datetime.datetime.now().timestamp() * 1000)
