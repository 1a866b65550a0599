"""Black-box tests that exposed broker bugs; they fail until the broker is fixed and then join the others.

Each test states what Pulsar does and what magnetar did when it was written.
"""

from __future__ import annotations

import threading
import time
import uuid

import pulsar

from crash_workload import KEYS_PER_PRODUCER, Publisher, Receiver

RECEIVE_TIMEOUT_MS = 5000


def test_reader_with_inclusive_start_message_id_reads_that_message(client, topic) -> None:
    """Pulsar: a non-durable subscription with start id (L, E) gets a cursor at (L, E-1) (PersistentTopic
    `getNonDurableSubscription`: every start id arrives as a BatchMessageIdImpl, so the entry steps back
    one), i.e. the broker delivers entry E and the client drops it unless the reader is inclusive.
    The C++ client sends the same SUBSCRIBE{start_message_id {L, E}} (no batch_index) for both cases.
    magnetar starts at E+1, so the inclusive reader never sees E."""
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(5)]
    reader = client.create_reader(topic, sent[2], start_message_id_inclusive=True)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=RECEIVE_TIMEOUT_MS).data().decode())
    assert got == ["m2", "m3", "m4"]


def test_key_shared_consumers_keep_receiving_after_a_kill_9_restart(broker, client_factory) -> None:
    """Two producers (plain and KeyBased-batched, keys p0..p7 / b0..b7), three Key_Shared consumers
    (receiver queue 100) that ack everything; kill -9, restart, keep publishing ~0.5 s, stop. Pulsar
    delivers every stored message. magnetar: some consumers (c0 and c2 here, never c1) stop receiving
    their keys for good although they keep calling receive() with permits to spare; the messages are
    stored (a reader finds them) and a fresh consumer on the same subscription receives them."""
    for attempt, publish_after_restart_s in enumerate((0.3, 0.4, 0.5, 0.6, 0.7)):
        topic = f"persistent://public/default/stall-{uuid.uuid4().hex[:8]}"
        log: list = []
        log_lock = threading.Lock()
        consumer_client = client_factory(broker.url)
        receivers = [
            Receiver(
                consumer_client.subscribe(
                    topic, "crash", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}",
                    receiver_queue_size=100,
                ),
                log, log_lock,
            )
            for i in range(3)
        ]
        producer_client = client_factory(broker.url)
        publishers = [
            Publisher(producer_client.create_producer(topic, block_if_queue_full=True, max_pending_messages=500), "p"),
            Publisher(
                producer_client.create_producer(
                    topic, block_if_queue_full=True, max_pending_messages=500, batching_enabled=True,
                    batching_type=pulsar.BatchingType.KeyBased, batching_max_publish_delay_ms=5,
                ),
                "b",
            ),
        ]
        for thread in (*receivers, *publishers):
            thread.start()
        time.sleep(2)
        broker.restart(kill=True)
        time.sleep(publish_after_restart_s)
        for publisher in publishers:
            publisher.stop.set()
        for publisher in publishers:
            publisher.join(timeout=30)
            publisher.producer.flush()

        def missing() -> list[tuple[str, int]]:
            with log_lock:
                seen = {(tag, seq) for _, tag, seq, _ in log}
            acked = set()
            for publisher in publishers:
                with publisher.lock:
                    acked |= {(publisher.tag, seq) for seq in publisher.acked}
            return sorted(acked - seen)

        deadline = time.monotonic() + 20  # upper bound for catching up, not a timing assertion
        while missing() and time.monotonic() < deadline:
            time.sleep(0.2)
        for receiver in receivers:
            receiver.stop.set()
        for receiver in receivers:
            receiver.join(timeout=10)
        lost = missing()
        last = {}
        for key, _tag, seq, consumer_name in log:
            last[key] = (consumer_name, seq)
        assert not lost, (
            f"attempt {attempt}: {len(lost)} acknowledged publishes never delivered, first {lost[:8]}, keys "
            f"{sorted({f'{t}{s % KEYS_PER_PRODUCER}' for t, s in lost})}; last delivery per key {last}; "
            f"published { {p.tag: p.next_seq for p in publishers} }"
        )
        consumer_client.close()
        producer_client.close()
