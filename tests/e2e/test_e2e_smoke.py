"""The broker starts, serves the official client, and stops cleanly on SIGTERM."""

from __future__ import annotations

import urllib.request

import pulsar


def test_produce_consume_key_shared_and_clean_stop(broker, client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode(), partition_key=f"k{i % 4}")
    received = []
    for _ in range(20):
        message = consumer.receive(timeout_millis=5000)
        received.append(message.data().decode())
        consumer.acknowledge(message)
    assert received == [f"m{i}" for i in range(20)]
    client.close()
    assert broker.stop() == 0
    assert "magnetar stopped" in broker.output()


def test_health_endpoint(broker) -> None:
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/brokers/health", timeout=5) as response:
        assert response.status == 200
        assert response.read() == b"ok"
