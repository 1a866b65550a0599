"""Readers with key hash ranges, and producer deduplication of batch entries, against a broker process.

The official Python client cannot declare key hash ranges on a reader (Java's ReaderBuilder.keyHashRange
can), so these tests speak the protocol with the Spark source's own client, magnetar.client.wire; the
messages are produced with the official client, keyed and batched by key as users do.
"""

from __future__ import annotations

import collections
import time

import pulsar
import pytest

from magnetar.client import wire
from magnetar.core.sticky_key import key_hash, range_slot
from magnetar.protocol.messages import encode_batch, encode_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata, SingleMessageMetadata

QUARTERS = [((0, 16383),), ((16384, 32767),), ((32768, 49151),), ((49152, 65535),)]


def produce_keyed(client: pulsar.Client, topic: str, messages: int, keys: int, batched: bool) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_messages=50,
        block_if_queue_full=True,
    )
    for i in range(messages):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"key-{i % keys}")
    producer.flush()
    producer.close()


def last_entry(url: str, topic: str) -> tuple[int, int]:
    with wire.Connection(url) as connection:
        consumer_id = connection.subscribe(topic, "probe", durable=False)
        return connection.last_message_id(consumer_id)[0]


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched-by-key"])
def test_readers_with_key_hash_ranges_split_a_topic_on_the_broker(broker, client, topic, batched) -> None:
    produce_keyed(client, topic, 400, keys=40, batched=batched)
    end = last_entry(broker.url, topic)
    seen: dict[tuple[int, int], int] = {}
    messages = 0
    for index, ranges in enumerate(QUARTERS):
        ((low, high),) = ranges
        # read_range passes on every MESSAGE the broker sends: an entry outside the range here was sent.
        for received in wire.read_range(broker.url, topic, wire.EARLIEST, end, ranges):
            slot = range_slot(received.entry.key_hash)
            assert low <= slot <= high, f"{received.position} (slot {slot}) sent to the reader of {ranges}"
            assert received.position not in seen, f"{received.position} reached two readers"
            seen[received.position] = index
            messages += received.entry.num_messages
    assert messages == 400
    assert len(seen) == end[1] + 1  # every entry of the (single) ledger, each to one reader
    # Each key went to exactly one reader.
    owners = collections.defaultdict(set)
    for key in range(40):
        slot = range_slot(key_hash(f"key-{key}".encode()))
        owners[key].add(next(i for i, ((lo, hi),) in enumerate(QUARTERS) if lo <= slot <= hi))
    assert all(len(readers) == 1 for readers in owners.values())


def test_entries_of_other_hashes_are_acked_so_a_reader_learns_it_passed_the_end(broker, client, topic) -> None:
    produce_keyed(client, topic, 60, keys=12, batched=False)  # key-0 .. key-11, key-11 last
    end = last_entry(broker.url, topic)
    slot = range_slot(key_hash(b"key-0"))
    assert slot != range_slot(key_hash(b"key-11"))
    with wire.Connection(broker.url) as connection:
        consumer_id = connection.subscribe(
            topic, "one-slot", durable=False, start=wire.EARLIEST, hash_ranges=((slot, slot),)
        )
        connection.flow(consumer_id, 1000)
        received = []
        while (frame := connection.next_message(consumer_id, deadline=time.monotonic() + 0.5)) is not None:
            message_id = frame.command.message.message_id
            received.append((message_id.ledgerId, message_id.entryId))
            assert range_slot(wire.parse_entry(frame.payload).key_hash) == slot
        assert len(received) == 5  # key-0 is every 12th message of 60
        # The reader acks its own; the broker acked the other hashes as it filtered them.
        connection.ack_cumulative(consumer_id, received[-1])
        _last, mark_delete = connection.last_message_id(consumer_id)
        assert received[-1] < end and mark_delete == end


def test_invalid_key_hash_ranges_are_refused(broker, client, topic) -> None:
    produce_keyed(client, topic, 1, keys=1, batched=False)
    with wire.Connection(broker.url) as connection:
        for ranges in (((0, 70000),), ((10, 5),), ((0, 100), (50, 200))):
            with pytest.raises(wire.BrokerError) as refused:
                connection.subscribe(topic, "bad", durable=False, start=wire.EARLIEST, hash_ranges=ranges)
            assert refused.value.code == "ConsumerAssignError"


def _batch_section(producer_name: str, first: int, count: int) -> bytes:
    singles = [(SingleMessageMetadata(partition_key="k"), f"v{first + i}".encode()) for i in range(count)]
    metadata = MessageMetadata(
        producer_name=producer_name,
        sequence_id=first,
        publish_time=1,
        num_messages_in_batch=count,
        highest_sequence_id=first + count - 1,
        partition_key="k",
    )
    return encode_entry(metadata, encode_batch(singles))


def test_a_resent_batch_entry_is_a_duplicate_across_a_broker_restart(broker_factory, topic) -> None:
    """Deduplication keeps a batch's highest sequence id, also when a restart rebuilds it from storage."""
    broker = broker_factory(brokerDeduplicationEnabled="true")
    with wire.Connection(broker.url) as connection:
        # A durable subscription keeps the ledgers across the restart (retention deletes consumed ones).
        connection.subscribe(topic, "keeper", durable=True, create_topic=True)
        producer = wire.Producer(connection, topic, "batcher")
        producer.send(0, 9, 10, _batch_section("batcher", 0, 10))
        producer.send(10, 19, 10, _batch_section("batcher", 10, 10))
        assert [r.duplicate for r in producer.flush()] == [False, False]
    broker.restart()
    with wire.Connection(broker.url) as connection:
        producer = wire.Producer(connection, topic, "batcher")
        assert producer.last_sequence_id == 19
        producer.send(10, 19, 10, _batch_section("batcher", 10, 10))
        producer.send(20, 29, 10, _batch_section("batcher", 20, 10))
        assert [r.duplicate for r in producer.flush()] == [True, False]
    stored = wire.read_range(broker.url, topic, wire.EARLIEST, last_entry(broker.url, topic), wire.FULL_HASH_RANGE)
    assert sum(e.entry.num_messages for e in stored) == 30
