"""kill -9 the broker while it is producing and consuming: no acknowledged publish is lost, per-key order holds.

Two producers (one plain, one with KeyBased batching) publish keyed messages with `send_async` and record
which sends the broker acknowledged; three Key_Shared consumers receive and acknowledge. At a random
moment in each round the broker gets SIGKILL and is started again on the same data; the clients
reconnect on their own. At the end every acknowledged publish must have been received (messages
unacknowledged at a crash may come twice), and per key the first deliveries never go backwards.

Rounds: MAGNETAR_E2E_CRASH_ROUNDS (default 3). The kill moments come from MAGNETAR_E2E_CRASH_SEED when
set; the seed is printed in every failure so a run can be replayed.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
import uuid
from collections import defaultdict

import pulsar
from crash_workload import KEYS_PER_PRODUCER, Publisher, Receiver

ROUNDS = int(os.environ.get("MAGNETAR_E2E_CRASH_ROUNDS", "3"))
CONSUMERS = 3
# Upper bound for the consumers to catch up after the last round (not a timing assertion).
CATCH_UP_TIMEOUT_S = 30
STALL_RECEIVE_TIMEOUT_MS = 5000


def start_workload(client_factory, url: str, topic: str, log: list, log_lock: threading.Lock):
    """Three Key_Shared consumers that ack everything and two producers (plain and KeyBased-batched),
    all started; returns (receivers, publishers, their two clients)."""
    consumer_client = client_factory(url)
    receivers = [
        Receiver(
            consumer_client.subscribe(
                topic,
                "crash",
                consumer_type=pulsar.ConsumerType.KeyShared,
                consumer_name=f"c{i}",
                receiver_queue_size=100,
            ),
            log,
            log_lock,
        )
        for i in range(CONSUMERS)
    ]
    producer_client = client_factory(url)
    publishers = [
        Publisher(producer_client.create_producer(topic, block_if_queue_full=True, max_pending_messages=500), "p"),
        Publisher(
            producer_client.create_producer(
                topic,
                block_if_queue_full=True,
                max_pending_messages=500,
                batching_enabled=True,
                batching_type=pulsar.BatchingType.KeyBased,
                batching_max_publish_delay_ms=5,
            ),
            "b",
        ),
    ]
    for thread in (*receivers, *publishers):
        thread.start()
    return receivers, publishers, (consumer_client, producer_client)


def test_kill_9_during_produce_and_consume(broker, client_factory, topic) -> None:
    seed = int(os.environ.get("MAGNETAR_E2E_CRASH_SEED", str(time.time_ns() % 1_000_000)))
    rng = random.Random(seed)
    where = f"(seed {seed}, rounds {ROUNDS})"

    log: list[tuple[str, str, int, str]] = []
    log_lock = threading.Lock()
    receivers, publishers, _clients = start_workload(client_factory, broker.url, topic, log, log_lock)

    for _ in range(ROUNDS):
        time.sleep(rng.uniform(0.3, 1.5))  # the random moment of the crash
        broker.restart(kill=True)
        # Let the clients reconnect and traffic resume before the next kill.
        deadline = time.monotonic() + 30
        before = sum(len(p.acked) for p in publishers)
        while sum(len(p.acked) for p in publishers) < before + 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(len(p.acked) for p in publishers) >= before + 50, f"publishing did not resume {where}"

    for publisher in publishers:
        publisher.stop.set()
    for publisher in publishers:
        publisher.join(timeout=30)
        publisher.producer.flush()

    def missing() -> dict[str, set[int]]:
        with log_lock:
            seen: dict[str, set[int]] = defaultdict(set)
            for _, tag, seq, _ in log:
                seen[tag].add(seq)
        out = {}
        for publisher in publishers:
            with publisher.lock:
                acked = set(publisher.acked)
            out[publisher.tag] = acked - seen[publisher.tag]
        return out

    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while any(missing().values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for receiver in receivers:
        receiver.stop.set()
    for receiver in receivers:
        receiver.join(timeout=10)

    lost = {tag: sorted(seqs) for tag, seqs in missing().items() if seqs}
    if lost:
        # Tell a stall from a loss: which of the missing messages does the topic still hold?
        reader = client_factory(broker.url).create_reader(topic, pulsar.MessageId.earliest)
        stored: set[tuple[str, int]] = set()
        while reader.has_message_available():
            tag, seq = reader.read_next(timeout_millis=10000).data().decode().split(":")
            stored.add((tag, int(seq)))
        in_topic = {tag: [s for s in seqs if (tag, s) in stored] for tag, seqs in lost.items()}
        keys = {tag: sorted({s % KEYS_PER_PRODUCER for s in seqs}) for tag, seqs in lost.items()}
        last_owner = {}
        for key, _tag, seq, consumer_name in log:
            last_owner[key] = (consumer_name, seq)
        # Does a fresh consumer on the same subscription get them (a stuck dispatcher) or not (a lost cursor)?
        for receiver in receivers:
            receiver.consumer.close()
        fresh = client_factory(broker.url).subscribe(topic, "crash", consumer_type=pulsar.ConsumerType.KeyShared)
        redelivered: set[tuple[str, int]] = set()
        while True:
            try:
                message = fresh.receive(timeout_millis=2000)
            except pulsar.Timeout:
                break
            tag, seq = message.data().decode().split(":")
            redelivered.add((tag, int(seq)))
        fresh_gets = {tag: sum((tag, s) in redelivered for s in seqs) for tag, seqs in lost.items()}
        raise AssertionError(
            f"acknowledged publishes never received {where}: "
            f"{ {t: (len(s), s[:20]) for t, s in lost.items()} }; "
            f"of these still stored in the topic: { {t: (len(s), s[:20]) for t, s in in_topic.items()} }; "
            f"key suffixes of the missing: {keys}; last delivery per key (consumer, seq): {last_owner}; "
            f"receivers alive: {[r.is_alive() for r in receivers]}; "
            f"published: { {p.tag: p.next_seq for p in publishers} }; "
            f"a fresh consumer on the subscription then received {fresh_gets} of the missing"
        )
    assert all(len(p.acked) > 0 for p in publishers), where

    # Per key, first deliveries in publication order (duplicates of earlier messages are allowed).
    first_deliveries: dict[str, list[int]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for key, tag, seq, _consumer in log:
        assert key == f"{tag}{seq % KEYS_PER_PRODUCER}", f"message {tag}:{seq} arrived with key {key} {where}"
        if (tag, seq) not in seen:
            seen.add((tag, seq))
            first_deliveries[key].append(seq)
    for key, seqs in first_deliveries.items():
        backwards = [(a, b) for a, b in itertools.pairwise(seqs) if b < a]
        assert not backwards, f"key {key}: first deliveries went backwards at {backwards[:5]} {where}"


def missing_deliveries(log: list, log_lock: threading.Lock, publishers: list[Publisher]) -> list[tuple[str, int]]:
    """The acknowledged publishes (tag, seq) that no consumer has received yet."""
    with log_lock:
        seen = {(tag, seq) for _, tag, seq, _ in log}
    acked = set()
    for publisher in publishers:
        with publisher.lock:
            acked |= {(publisher.tag, seq) for seq in publisher.acked}
    return sorted(acked - seen)


def test_key_shared_consumers_keep_receiving_after_a_kill_9_restart(broker, client_factory) -> None:
    """Two producers (plain and KeyBased-batched, keys p0..p7 / b0..b7), three Key_Shared consumers
    (receiver queue 100) that ack everything; kill -9, restart, keep publishing ~0.5 s, stop. Every stored
    message reaches the consumers. (A read that was still reading when the dispatcher asked to cancel it
    used to wait for new entries instead, so replayed messages of whole consumers waited for ever.)"""
    for attempt, publish_after_restart_s in enumerate((0.3, 0.4, 0.5, 0.6, 0.7)):
        topic = f"persistent://public/default/stall-{uuid.uuid4().hex[:8]}"
        log: list = []
        log_lock = threading.Lock()
        receivers, publishers, clients = start_workload(client_factory, broker.url, topic, log, log_lock)
        time.sleep(2)
        broker.restart(kill=True)
        time.sleep(publish_after_restart_s)
        for publisher in publishers:
            publisher.stop.set()
        for publisher in publishers:
            publisher.join(timeout=30)
            publisher.producer.flush()

        deadline = time.monotonic() + 20  # upper bound for catching up, not a timing assertion
        while missing_deliveries(log, log_lock, publishers) and time.monotonic() < deadline:
            time.sleep(0.2)
        for receiver in receivers:
            receiver.stop.set()
        for receiver in receivers:
            receiver.join(timeout=10)
        lost = missing_deliveries(log, log_lock, publishers)
        last = {}
        for key, _tag, seq, consumer_name in log:
            last[key] = (consumer_name, seq)
        assert not lost, (
            f"attempt {attempt}: {len(lost)} acknowledged publishes never delivered, first {lost[:8]}, keys "
            f"{sorted({f'{t}{s % KEYS_PER_PRODUCER}' for t, s in lost})}; last delivery per key {last}; "
            f"published { {p.tag: p.next_seq for p in publishers} }"
        )
        for client in clients:
            client.close()
