"""The official client's flows, driven against a broker process: producing and consuming, Key_Shared,
batching, acks, seek, readers, partitioned topics, schemas, dead letters, reconnects.

Black-box: only `pulsar-client`, the `magnetar admin` CLI and broker restarts. Timeouts bound waits; no
assertion depends on how long anything took.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid

import httpx
import mmh3
import pulsar
import pytest
from pulsar.schema import StringSchema

RECEIVE_TIMEOUT_MS = 5000
# How long to listen before concluding that nothing more is coming.
QUIET_MS = 700


def receive_n(consumer: pulsar.Consumer, count: int, timeout_ms: int = RECEIVE_TIMEOUT_MS) -> list[pulsar.Message]:
    return [consumer.receive(timeout_millis=timeout_ms) for _ in range(count)]


def drain(consumer: pulsar.Consumer, quiet_ms: int = QUIET_MS) -> list[pulsar.Message]:
    """Everything that arrives until nothing has for `quiet_ms`."""
    messages = []
    while True:
        try:
            messages.append(consumer.receive(timeout_millis=quiet_ms))
        except pulsar.Timeout:
            return messages


def texts(messages: list[pulsar.Message]) -> list[str]:
    return [m.data().decode() for m in messages]


def wait_backlog(broker, topic: str, subscription: str, backlog: int, timeout_s: float = 10) -> None:
    """Wait until the broker reports `backlog` unacknowledged messages on the subscription: the client
    groups acknowledgements (100 ms, not settable from Python), so an ack() has not reached the broker
    when it returns."""
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        seen = httpx.get(url).json()["subscriptions"][subscription]["msgBacklog"]
        if seen == backlog:
            return
        time.sleep(0.02)
    raise AssertionError(f"backlog of {subscription} still {seen}, not {backlog}, after {timeout_s} s")


def sticky_slot(key: str) -> int:
    """Pulsar's STICKY slot of a key (StickyKeyConsumerSelectorUtils.makeStickyKeyHash): murmur3_x86_32 seed 0,
    31 bits, mod 65536."""
    return ((mmh3.hash(key.encode(), 0, signed=False) & 0x7FFFFFFF) % 65536) or 1


def ids(message_id: pulsar.MessageId) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def create_partitioned(broker, name: str, partitions: int) -> None:
    """Declare a partitioned topic with the CLI over the running broker's admin API."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "admin",
            "--admin-url",
            broker.http_url,
            "topics",
            "create-partitioned-topic",
            name,
            "-p",
            str(partitions),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- produce, Key_Shared, ack, close


@pytest.fixture
def client(module_broker, client_factory) -> pulsar.Client:
    """A client of the module's broker: the flows below each use topics of their own. The tests that
    restart or stop a broker take one of their own (`broker`)."""
    return client_factory(module_broker.url)


def test_produce_subscribe_key_shared_receive_ack_close(client, topic) -> None:
    consumer = client.subscribe(topic, "sub1", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic)
    sent = producer.send(b"hello-1", properties={"a": "b"}, partition_key="k1")
    message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
    assert message.data() == b"hello-1"
    assert message.properties() == {"a": "b"}
    assert message.partition_key() == "k1"
    assert message.redelivery_count() == 0
    assert message.producer_name() != ""
    assert ids(message.message_id()) == ids(sent)
    consumer.acknowledge(message)
    consumer.close()
    producer.close()
    # The ack is durable: the subscription has nothing left for a new consumer.
    again = client.subscribe(topic, "sub1", consumer_type=pulsar.ConsumerType.KeyShared)
    assert drain(again) == []


# ------------------------------------------------------------------------- batching, STICKY, nack


def test_key_based_batching_sticky_consumers_and_nack_redelivery(client, topic) -> None:
    low = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name="low",
        negative_ack_redelivery_delay_ms=300,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(
            pulsar.KeySharedMode.Sticky, allow_out_of_order_delivery=False, sticky_ranges=[(0, 32767)]
        ),
    )
    high = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name="high",
        negative_ack_redelivery_delay_ms=300,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(
            pulsar.KeySharedMode.Sticky, allow_out_of_order_delivery=False, sticky_ranges=[(32768, 65535)]
        ),
    )
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_messages=100,
        batching_max_publish_delay_ms=50,
    )
    keys = [f"key-{i}" for i in range(8)]
    assert {sticky_slot(k) <= 32767 for k in keys} == {True, False}, "keys must land in both ranges"
    expected = [(f"key-{i % 8}", f"m{i}") for i in range(48)]
    for key, text in expected:
        producer.send_async(text.encode(), None, partition_key=key)
    producer.flush()

    by_consumer = {"low": receive_n(low, sum(sticky_slot(k) <= 32767 for k, _ in expected))}
    by_consumer["high"] = receive_n(high, len(expected) - len(by_consumer["low"]))
    assert drain(low, 300) == [] and drain(high, 300) == []
    for name, messages in by_consumer.items():
        for m in messages:
            in_low = sticky_slot(m.partition_key()) <= 32767
            assert in_low == (name == "low"), f"{m.partition_key()} went to {name}"
    # Per key, the order of publication.
    for key in keys:
        got = [m.data().decode() for ms in by_consumer.values() for m in ms if m.partition_key() == key]
        assert got == [t for k, t in expected if k == key]
    # Batches arrived as batches: several messages share one entry.
    entries = {ids(m.message_id()) for ms in by_consumer.values() for m in ms}
    assert len(entries) < len(expected)

    # Nack one message, ack all others: it comes back with redelivery count 1, on the same consumer.
    target = by_consumer["low"][0]
    for m in by_consumer["low"][1:]:
        low.acknowledge(m)
    for m in by_consumer["high"]:
        high.acknowledge(m)
    low.negative_acknowledge(target)
    redelivered = drain(low, 2000)
    assert target.data() in [m.data() for m in redelivered]
    again = next(m for m in redelivered if m.data() == target.data())
    assert again.redelivery_count() == 1
    assert {m.partition_key() for m in redelivered} == {target.partition_key()}
    assert all(m.redelivery_count() == 1 for m in redelivered)
    assert drain(high, 300) == []
    for m in redelivered:
        low.acknowledge(m)


def test_key_shared_replays_beyond_what_the_broker_holds_arrive_whole_and_in_key_order(client, topic) -> None:
    """A consumer with a one-message queue leaves most of its entries in the replay queue while the
    other consumer drains its own. The broker holds the entries it read for replays up to 8 MB; 80
    messages of 150 KB go past that, so some replays are served from what it holds and the rest read
    again from storage. Every message arrives once, byte for byte, in order per key."""
    slow = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name="slow",
        receiver_queue_size=1,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]),
    )
    fast = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name="fast",
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(32768, 65535)]),
    )
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(6)]
    assert {sticky_slot(k) <= 32767 for k in keys} == {True, False}, "keys must land in both ranges"

    def body(index: int) -> bytes:
        return index.to_bytes(4, "big") + bytes([index % 251]) * 150_000

    sent = [(keys[i % len(keys)], i) for i in range(80)]
    for key, index in sent:
        producer.send(body(index), partition_key=key)

    received: dict[str, list[pulsar.Message]] = {"slow": [], "fast": []}
    for name, consumer in (("fast", fast), ("slow", slow)):
        expected = sum((sticky_slot(k) <= 32767) == (name == "slow") for k, _ in sent)
        for _ in range(expected):
            message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
            received[name].append(message)
            consumer.acknowledge(message)
    assert drain(slow, 300) == [] and drain(fast, 300) == []
    for key in keys:
        got = [m for ms in received.values() for m in ms if m.partition_key() == key]
        indexes = [int.from_bytes(m.data()[:4], "big") for m in got]
        assert indexes == [i for k, i in sent if k == key]
        assert all(m.data() == body(i) for m, i in zip(got, indexes))


def test_different_key_shared_policy_is_refused_while_consumers_are_connected(client, topic) -> None:
    client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 100)]),
    )
    with pytest.raises(pulsar.PulsarException):
        client.subscribe(
            topic,
            "sub",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                pulsar.KeySharedMode.Sticky, allow_out_of_order_delivery=True, sticky_ranges=[(200, 300)]
            ),
        )


def test_sticky_range_conflict_is_refused(client, topic) -> None:
    policy = pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 40000)])
    client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=policy)
    overlapping = pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(30000, 65535)])
    with pytest.raises(pulsar.ConsumerAssignError):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=overlapping)


# ------------------------------------ batch-index ack, ack timeout, cumulative ack, seek, readers


def test_batch_index_ack_then_ack_timeout_redelivers_only_unacked_indexes(client, topic) -> None:
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        batch_index_ack_enabled=True,
        unacked_messages_timeout_ms=10000,
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=4, batching_max_publish_delay_ms=60000
    )
    for i in range(4):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    first = receive_n(consumer, 4)
    assert texts(first) == ["b0", "b1", "b2", "b3"]
    assert len({ids(m.message_id()) for m in first}) == 1, "one batch entry"
    consumer.acknowledge(first[1])
    # The client's ack timeout (10 s minimum) asks for a redelivery of the entry; the broker sends the
    # ack set and the client skips index 1.
    redelivered = receive_n(consumer, 3, timeout_ms=30000)
    assert texts(redelivered) == ["b0", "b2", "b3"]
    assert all(m.redelivery_count() == 1 for m in redelivered)
    for m in redelivered:
        consumer.acknowledge(m)
    consumer.close()
    # The ANDed ack sets leave nothing unacked.
    again = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    assert drain(again) == []


def test_failover_cumulative_ack(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    messages = receive_n(consumer, 10)
    assert texts(messages) == [f"m{i}" for i in range(10)]
    consumer.acknowledge_cumulative(messages[5])
    consumer.close()
    again = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover)
    assert texts(drain(again)) == [f"m{i}" for i in range(6, 10)]


def test_cumulative_ack_refused_on_key_shared(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    client.create_producer(topic).send(b"x", partition_key="k")
    message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
    with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
        consumer.acknowledge_cumulative(message)


def test_redeliver_unacknowledged_on_exclusive(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    assert texts(receive_n(consumer, 3)) == ["m0", "m1", "m2"]
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 3)
    assert texts(again) == ["m0", "m1", "m2"]
    # Pulsar keeps no redelivery count for single-active-consumer subscriptions
    # (PersistentDispatcherSingleActiveConsumer uses RedeliveryTrackerDisabled).
    assert [m.redelivery_count() for m in again] == [0, 0, 0]


def test_seek_to_earliest_and_by_publish_time(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    time.sleep(0.02)  # distinct publish times (ms) between the two halves, not a timing assertion
    for i in range(5, 10):
        producer.send(f"m{i}".encode())
    # Received but not acknowledged: the client's grouped acks could otherwise reach the broker after
    # the SEEK and delete what the seek rewound.
    messages = receive_n(consumer, 10)
    assert texts(messages) == [f"m{i}" for i in range(10)]

    consumer.seek(pulsar.MessageId.earliest)
    assert texts(receive_n(consumer, 10)) == [f"m{i}" for i in range(10)]
    assert drain(consumer, 300) == []

    cut = messages[5].publish_timestamp()
    assert messages[4].publish_timestamp() < cut
    consumer.seek(cut)
    assert texts(receive_n(consumer, 5)) == [f"m{i}" for i in range(5, 10)]
    assert drain(consumer, 300) == []


def test_seek_by_message_id(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(6)]
    assert len(receive_n(consumer, 6)) == 6
    consumer.seek(sent[2])
    # The broker resets the cursor to that entry and delivers from it; the C++ client drops the entry
    # it sought to (its start id is exclusive), so the application sees what follows.
    assert texts(receive_n(consumer, 3)) == [f"m{i}" for i in range(3, 6)]
    assert drain(consumer, 300) == []


def test_reader_from_earliest_with_has_message_available(client, topic) -> None:
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data().decode())
    assert got == [f"m{i}" for i in range(5)]
    assert not reader.has_message_available()
    producer.send(b"m5")
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data() == b"m5"


def test_reader_on_empty_topic_has_nothing(client, topic) -> None:
    client.create_producer(topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()


def test_reader_from_message_id_exclusive_and_latest(client, topic) -> None:
    # The inclusive case (`start_message_id_inclusive=True`) is in test_e2e_found_bugs.py.
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(5)]

    exclusive = client.create_reader(topic, sent[2])
    got = []
    while exclusive.has_message_available():
        got.append(exclusive.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data().decode())
    assert got == ["m3", "m4"]

    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    producer.send(b"m5")
    assert latest.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data() == b"m5"


def test_readers_leave_no_durable_subscription(client, topic) -> None:
    producer = client.create_producer(topic)
    producer.send(b"m0")
    for _ in range(3):
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data() == b"m0"
        reader.close()
    # A durable subscription created now starts at Latest: the reader cursors left nothing behind
    # that would change that, and the topic still serves.
    consumer = client.subscribe(topic, "after-readers")
    producer.send(b"m1")
    assert consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS).data() == b"m1"


def test_unsubscribe_deletes_the_subscription(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"old{i}".encode())
    assert len(receive_n(consumer, 3)) == 3  # received, never acknowledged
    consumer.unsubscribe()
    # Same name again at Latest: a new cursor, so the three unacked messages are gone.
    again = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer.send(b"new")
    assert texts(drain(again)) == ["new"]


def test_get_last_message_id(client, topic) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(3)]
    last = consumer.get_last_message_id()
    assert ids(last) == ids(sent[-1])


# ---------------------------------------------------- partitioned topics, regex subscribe, schema


def test_partitioned_topic_produce_and_consume(broker, client_factory, topic) -> None:
    create_partitioned(broker, topic, 3)
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    sent = {}
    for i in range(30):
        key = f"key{i % 6}"
        message_id = producer.send(f"m{i}".encode(), partition_key=key)
        sent[f"m{i}"] = (key, message_id.partition())
    assert {p for _, p in sent.values()} <= {0, 1, 2}
    received = receive_n(consumer, 30)
    assert drain(consumer, 300) == []
    assert sorted(texts(received)) == sorted(sent)
    partitions_of_key: dict[str, set[int]] = {}
    for m in received:
        key, partition = sent[m.data().decode()]
        assert m.topic_name() == f"{topic}-partition-{partition}"
        assert m.message_id().partition() == partition
        partitions_of_key.setdefault(key, set()).add(partition)
        consumer.acknowledge(m)
    assert all(len(p) == 1 for p in partitions_of_key.values())
    # Per partition, the order of publication.
    for partition in range(3):
        got = [m.data().decode() for m in received if m.message_id().partition() == partition]
        assert got == [t for t, (_, p) in sent.items() if p == partition]
    consumer.close()
    again = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert drain(again) == []


def test_partitioned_topic_metadata_counts_partitions(broker, client_factory, topic) -> None:
    create_partitioned(broker, topic, 3)
    client = client_factory(broker.url)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    other = f"{topic}-plain"
    assert client.get_topic_partitions(other) == [other]


def test_regex_subscribe(client, topic) -> None:
    prefix = f"persistent://public/default/rx-{uuid.uuid4().hex[:8]}"
    matching = [f"{prefix}-a", f"{prefix}-b"]
    for name in [*matching, f"{prefix}x-other"]:
        client.create_producer(name).send(f"from {name}".encode())
    consumer = client.subscribe(
        re.compile(re.escape(prefix) + r"-.*"), "sub", initial_position=pulsar.InitialPosition.Earliest
    )
    got = drain(consumer, 1500)
    assert sorted(texts(got)) == sorted(f"from {name}" for name in matching)
    assert {m.topic_name() for m in got} == set(matching)


def test_string_schema_producer_and_consumer(client, topic) -> None:
    consumer = client.subscribe(topic, "sub", schema=StringSchema())
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("héllo")
    message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
    assert message.value() == "héllo"
    assert message.data() == "héllo".encode()


# ------------------------------------------------------------ dead letters, reconnect, keep-alive


def test_dead_letter_queue_after_max_redeliveries(client, topic) -> None:
    consumer = client.subscribe(
        topic,
        "dl",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=200,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=1),
    )
    dlq = client.subscribe(f"{topic}-dl-DLQ", "dlq-reader", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    sent = producer.send(b"poison", properties={"p": "1"})
    producer.send(b"fine")
    counts = {}
    for _ in range(3):
        message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        if message.data() == b"fine":
            consumer.acknowledge(message)
            continue
        counts.setdefault(message.redelivery_count(), 0)
        counts[message.redelivery_count()] += 1
        consumer.negative_acknowledge(message)
    assert counts == {0: 1, 1: 1}
    dead = dlq.receive(timeout_millis=10000)
    assert dead.data() == b"poison"
    assert dead.properties()["REAL_TOPIC"] == topic
    assert dead.properties()["p"] == "1"
    assert dead.properties()["ORIGIN_MESSAGE_ID"].startswith(f"({sent.ledger_id()},{sent.entry_id()},")
    # The original is acknowledged once it is in the DLQ: nothing more arrives, even for a new consumer.
    assert drain(consumer) == []
    consumer.close()
    again = client.subscribe(topic, "dl", consumer_type=pulsar.ConsumerType.Shared)
    assert drain(again) == []


def test_broker_restart_producer_and_consumer_reconnect(broker, client_factory, topic) -> None:
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode(), partition_key=f"k{i % 2}")
    before = receive_n(consumer, 5)
    for m in before[:3]:
        consumer.acknowledge(m)
    wait_backlog(broker, topic, "sub", 2)
    broker.restart()
    for i in range(5, 10):
        producer.send(f"m{i}".encode(), partition_key=f"k{i % 2}")
    after = drain(consumer, 3000)
    # m3 and m4 were unacked at the restart: they come again; then the new ones, per key in order.
    assert sorted(set(texts(after))) == sorted(f"m{i}" for i in range(3, 10))
    for key in ("k0", "k1"):
        firsts = []
        for m in after:
            if m.partition_key() == key and m.data().decode() not in firsts:
                firsts.append(m.data().decode())
        assert firsts == sorted(firsts, key=lambda t: int(t[1:]))
    for m in after:
        consumer.acknowledge(m)


def test_sigterm_exits_zero(broker, client_factory, topic) -> None:
    client = client_factory(broker.url)
    producer = client.create_producer(topic)
    producer.send(b"x")
    assert broker.stop() == 0
    assert "magnetar stopped" in broker.output()


# ------------------------------------------------------------------------- subscription semantics


def test_initial_position_earliest_and_latest(client, topic) -> None:
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"old{i}".encode())
    earliest = client.subscribe(topic, "e", initial_position=pulsar.InitialPosition.Earliest)
    latest = client.subscribe(topic, "l", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"new")
    assert texts(drain(earliest)) == ["old0", "old1", "old2", "new"]
    assert texts(drain(latest)) == ["new"]


def test_exclusive_second_consumer_is_refused(client, topic) -> None:
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    # The refusal changed nothing for the first consumer.
    client.create_producer(topic).send(b"x")
    assert first.receive(timeout_millis=RECEIVE_TIMEOUT_MS).data() == b"x"


def test_failover_switches_to_the_other_consumer_when_the_active_one_closes(broker, client_factory, topic) -> None:
    client = client_factory(broker.url)
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    got = {"a": drain(first), "b": drain(second)}
    active, standby = ("a", "b") if got["a"] else ("b", "a")
    assert texts(got[active]) == [f"m{i}" for i in range(5)]
    assert got[standby] == []
    consumers = {"a": first, "b": second}
    for m in got[active][:3]:
        consumers[active].acknowledge(m)
    wait_backlog(broker, topic, "sub", 2)
    consumers[active].close()
    for i in range(5, 8):
        producer.send(f"m{i}".encode())
    # The standby takes over: the two unacked messages of the closed one, then the new ones, in order.
    assert texts(drain(consumers[standby])) == [f"m{i}" for i in range(3, 8)]


def test_shared_round_robin_across_two_consumers(client, topic) -> None:
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(f"m{i}".encode())
    got_first, got_second = [], []
    # Alternate receives so that both keep returning permits.
    while len(got_first) + len(got_second) < 40:
        progressed = False
        for consumer, sink in ((first, got_first), (second, got_second)):
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(message)
            sink.append(message.data().decode())
            progressed = True
        if not progressed:
            break
    assert sorted(got_first + got_second) == sorted(f"m{i}" for i in range(40))
    assert got_first and got_second, "both consumers receive messages"


def test_producer_name_in_use_is_refused(client, topic) -> None:
    producer = client.create_producer(topic, producer_name="only-one")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="only-one")
    producer.send(b"still works")
    producer.close()
    # Once closed, the name is free again.
    client.create_producer(topic, producer_name="only-one").send(b"again")


def test_deduplication_drops_a_resent_sequence_id(broker_factory, client_factory, topic) -> None:
    broker = broker_factory(brokerDeduplicationEnabled="true")
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, producer_name="dedup-p")
    for sequence_id in range(3):
        producer.send(f"s{sequence_id}".encode(), sequence_id=sequence_id)
    producer.close()
    producer = client.create_producer(topic, producer_name="dedup-p")
    producer.send(b"s1-again", sequence_id=1)
    producer.send(b"s2-again", sequence_id=2)
    producer.send(b"s3", sequence_id=3)
    assert texts(drain(consumer)) == ["s0", "s1", "s2", "s3"]


def test_deduplication_returns_last_sequence_id_to_a_reconnecting_producer(
    broker_factory, client_factory, topic
) -> None:
    broker = broker_factory(brokerDeduplicationEnabled="true")
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, producer_name="dedup-q")
    for i in range(4):
        producer.send(f"a{i}".encode())
    producer.close()
    # The broker returns last_sequence_id 3, so the client's next automatic sequence id is 4.
    producer = client.create_producer(topic, producer_name="dedup-q")
    assert producer.last_sequence_id() == 3
    producer.send(b"b0")
    assert texts(drain(consumer)) == ["a0", "a1", "a2", "a3", "b0"]


def test_reader_with_inclusive_start_message_id_reads_that_message(client, topic) -> None:
    """Pulsar: a non-durable subscription with start id (L, E) gets a cursor at (L, E-1) (PersistentTopic
    `getNonDurableSubscription`: every start id arrives as a BatchMessageIdImpl, so the entry steps back
    one), i.e. the broker delivers entry E and the client drops it unless the reader is inclusive.
    The C++ client sends the same SUBSCRIBE{start_message_id {L, E}} (no batch_index) for both cases."""
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(5)]
    reader = client.create_reader(topic, sent[2], start_message_id_inclusive=True)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data().decode())
    assert got == ["m2", "m3", "m4"]
