"""The official Java client 4.0.x (compat/java) producing to magnetar: plain sends, every access mode,
batching with every compression codec, and messages shared with the official Python client."""

from __future__ import annotations

import pulsar
import pytest


def test_producer_is_created_and_its_messages_read_back(java, topic):
    # A regression: create() never returned (PRODUCER_SUCCESS without schema_version).
    seen = java("produce_consume", topic=topic, count=10)
    assert seen["producerName"].startswith("standalone-")
    assert seen["lastSequenceId"] == 9
    received = seen["received"]
    assert [m["value"] for m in received] == [f"m-{i}" for i in range(10)]
    assert [m["key"] for m in received] == [f"k-{i % 3}" for i in range(10)]
    assert [m["properties"] for m in received] == [{"index": str(i)} for i in range(10)]
    assert [m["id"] for m in received] == seen["sent"]
    assert {m["producerName"] for m in received} == {seen["producerName"]}
    assert seen["more"] == []


def test_shared_producers_publish_side_by_side(java, topic):
    assert java("access_shared", topic=topic)["values"] == ["from-first", "from-second"]


def test_exclusive_producer_keeps_others_out_until_it_closes(java, topic):
    seen = java("access_exclusive", topic=topic)
    assert seen["sharedWhileExclusive"] == "ProducerBusyException"
    assert seen["exclusiveWhileExclusive"] == "ProducerFencedException"
    assert seen["exclusiveWhileShared"] == "ProducerFencedException"
    assert seen["exclusiveAfterClose"] == "created"
    assert seen["values"] == ["by-owner", "by-next"]


def test_exclusive_with_fencing_fences_the_producer_it_replaces(java, topic):
    # A regression: ExclusiveWithFencing was refused like Exclusive instead of fencing the old producer.
    seen = java("access_fencing", topic=topic)
    assert seen["oldSendAfterFencing"] == "ProducerFencedException"
    assert seen["oldConnected"] is False
    # A second ExclusiveWithFencing fences the first in turn; the fenced one, reconnecting with its
    # older topic epoch, does not take the topic back.
    assert seen["fencingSendAfterFencing"] == "ProducerFencedException"
    assert seen["sharedWhileFencing"] == "ProducerBusyException"
    assert seen["values"] == ["old-1", "fencing-1", "newest-1"]


def test_wait_for_exclusive_takes_over_when_the_owner_leaves(java, topic):
    seen = java("access_wait", topic=topic)
    assert seen["waiterReadyWhileOwned"] is False
    assert seen["waiterName"] == "waiter"
    assert seen["values"] == ["by-owner", "by-waiter"]


@pytest.mark.parametrize("compression", ["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_batches_of_every_compression_arrive_whole_and_in_order(
    java, topic, compression, module_broker, client_factory
):
    seen = java("batch_compression", topic=topic, compression=compression, count=25, batchSize=10)
    assert seen["values"] == [f"value-{i}" for i in range(25)]
    # Three entries of 10, 10 and 5 messages; the consumer's ids are the producer's.
    entries = sorted({(ledger, entry) for ledger, entry, _, _ in seen["ids"]})
    assert len(entries) == 3
    assert [batch for _, _, batch, _ in seen["ids"]] == list(range(10)) + list(range(10)) + list(range(5))
    assert seen["ids"] == seen["sent"]
    # The official Python client reads the Java client's compressed batches too.
    consumer = client_factory(module_broker.url).subscribe(
        topic, "python", initial_position=pulsar.InitialPosition.Earliest
    )
    values = [consumer.receive(timeout_millis=5000).data().decode() for _ in range(25)]
    assert values == [f"value-{i}-" + "abc" * 50 for i in range(25)]


def test_java_consumer_reads_what_the_python_client_produced(java, topic, module_broker, client_factory):
    producer = client_factory(module_broker.url).create_producer(topic, batching_enabled=True)
    for i in range(6):
        producer.send_async(f"py-{i}".encode(), None, partition_key=f"key-{i % 2}", properties={"n": str(i)})
    producer.flush()
    received = java("consume", topic=topic, count=6)["received"]
    assert [m["value"] for m in received] == [f"py-{i}" for i in range(6)]
    assert [m["key"] for m in received] == [f"key-{i % 2}" for i in range(6)]
    assert [m["properties"] for m in received] == [{"n": str(i)} for i in range(6)]
