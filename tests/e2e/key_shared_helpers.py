"""Shared helpers for the Key_Shared end-to-end tests (test_e2e_key_shared*.py).

Routing is computed here independently of magnetar's code, from Pulsar's formulas
(Commands.resolveStickyKey, Murmur3_32Hash, ConsistentHashingStickyKeyConsumerSelector,
StickyKeyConsumerSelectorUtils.makeStickyKeyHash): Murmur3 x86_32 seed 0 masked to 31 bits; the
consistent-hashing ring over [1, 65535] with 100 points per consumer at
`name + "\\0" + nameIndex + "\\0" + pointIndex`; STICKY slots `hash % 65536` (0 becomes 1).
Consumer and producer names are fixed in the tests so every scenario is deterministic.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

import mmh3
import pulsar
from pulsar.exceptions import Timeout

MODES = ["pip379", "pip282", "classic"]
SUB = "key_shared"
WAIT_S = 30  # upper bound for anything that must eventually arrive
NUMBER_OF_KEYS = 300


# ---------------------------------------------------------------------------------------- hashing


def key_hash(key: str | bytes) -> int:
    data = key.encode() if isinstance(key, str) else key
    return mmh3.hash(data, 0, signed=False) & 0x7FFFFFFF


def sticky_slot(key: str | bytes) -> int:
    """The slot of a STICKY (exclusive ranges) selector: hash % 65536, 0 mapped to 1."""
    return key_hash(key) % 65536 or 1


def ring_slot(key: str | bytes) -> int:
    return key_hash(key) % 65535 + 1


class Ring:
    """Pulsar's consistent-hashing selector for consumers with distinct names (name index 0)."""

    def __init__(self, names: Sequence[str], points: int = 100) -> None:
        owners: dict[int, str] = {}
        for name in names:
            for index in range(points):
                owners.setdefault(ring_slot(f"{name}\0{0}\0{index}"), name)  # first one keeps a collision
        self.slots = sorted(owners)
        self.owners = [owners[s] for s in self.slots]

    def owner(self, key: str | bytes) -> str:
        index = bisect_left(self.slots, ring_slot(key))
        return self.owners[index % len(self.slots)]


def keys_owned(routes: Sequence[tuple[Sequence[str], str]], count: int, prefix: str = "key-") -> list[str]:
    """The first `count` keys that, for every (consumer names, owner) pair, the ring maps to owner."""
    rings = [(Ring(names), owner) for names, owner in routes]
    found: list[str] = []
    n = 0
    while len(found) < count:
        key = f"{prefix}{n}"
        n += 1
        if all(ring.owner(key) == owner for ring, owner in rings):
            found.append(key)
    return found


def sticky_owner(ranges: dict[str, Sequence[tuple[int, int]]], key: str | bytes) -> str | None:
    slot = sticky_slot(key)
    for name, spans in ranges.items():
        if any(start <= slot <= end for start, end in spans):
            return name
    return None


# ---------------------------------------------------------------------------------------- messages


def payload(value: int, key: str | None) -> bytes:
    return f"{value}|{key or ''}".encode()


def parse(message: pulsar.Message) -> tuple[int, str]:
    value, _, key = message.data().decode().partition("|")
    return int(value), key


def msg_pos(message: pulsar.Message) -> tuple[int, int, int]:
    mid = message.message_id()
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


def make_producer(client: pulsar.Client, topic: str, batching: bool = False, **options: object) -> pulsar.Producer:
    if batching:
        options.update(
            batching_enabled=True,
            batching_type=pulsar.BatchingType.KeyBased,
            batching_max_publish_delay_ms=5,
        )
    options.setdefault("max_pending_messages", 2001)
    return client.create_producer(topic, **options)


def send_all(
    producer: pulsar.Producer,
    items: Iterable[tuple[int, str | None]],
    batching: bool = False,
    ordering_key: bool = False,
) -> None:
    """Send (value, key) pairs; the key is the partition key, or the ordering key with `ordering_key`."""
    errors: list[object] = []

    def callback(result: object, _msg_id: object) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)

    for value, key in items:
        kwargs: dict[str, object] = {}
        if key is not None:
            if ordering_key:
                kwargs.update(partition_key="any key", ordering_key=key)
            else:
                kwargs["partition_key"] = key
        if batching:
            producer.send_async(payload(value, key), callback, **kwargs)
        else:
            producer.send(payload(value, key), **kwargs)
    producer.flush()
    assert not errors, errors


def key_shared(
    client: pulsar.Client,
    topic: str,
    name: str,
    *,
    receiver_queue_size: int = 1000,
    policy: pulsar.ConsumerKeySharedPolicy | None = None,
    listener: Callable | None = None,
    ack_timeout_ms: int | None = None,
    subscription: str = SUB,
    **options: object,
) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        subscription,
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name=name,
        receiver_queue_size=receiver_queue_size,
        key_shared_policy=policy,
        message_listener=listener,
        unacked_messages_timeout_ms=ack_timeout_ms,
        **options,
    )


def sticky(*ranges: tuple[int, int], allow_out_of_order: bool = False) -> pulsar.ConsumerKeySharedPolicy:
    return pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky,
        sticky_ranges=list(ranges),
        allow_out_of_order_delivery=allow_out_of_order,
    )


# ---------------------------------------------------------------------------------------- receiving


def receive_n(
    consumers: dict[str, pulsar.Consumer], count: int, timeout_s: float = WAIT_S, ack: bool = True
) -> dict[str, list[pulsar.Message]]:
    """Poll the consumers in turn until `count` messages arrived in total (or the deadline)."""
    got: dict[str, list[pulsar.Message]] = {name: [] for name in consumers}
    total = 0
    deadline = time.monotonic() + timeout_s
    while total < count and time.monotonic() < deadline:
        progressed = False
        for name, consumer in consumers.items():
            while total < count:
                try:
                    message = consumer.receive(timeout_millis=0 if progressed else 20)
                except Timeout:
                    break
                got[name].append(message)
                total += 1
                progressed = True
                if ack:
                    consumer.acknowledge(message)
    return got


def receive_nothing(consumer: pulsar.Consumer, within_ms: int = 1000) -> pulsar.Message | None:
    try:
        return consumer.receive(timeout_millis=within_ms)
    except Timeout:
        return None


def values(messages: Iterable[pulsar.Message]) -> list[int]:
    return [parse(m)[0] for m in messages]


def assert_per_key_increasing(messages: Iterable[pulsar.Message], what: str = "") -> None:
    last: dict[str, int] = {}
    for message in messages:
        value, key = parse(message)
        assert value > last.get(key, -1), f"{what} key {key!r}: {value} after {last[key]}"
        last[key] = value


def check_distribution(received: dict[str, list[pulsar.Message]], total: int) -> None:
    """receiveAndCheckDistribution: all received once, a key on one consumer, each within ±40%."""
    got = sorted(v for messages in received.values() for v in values(messages))
    assert got == list(range(total)), f"received {len(got)} of {total}, duplicates or gaps"
    owner: dict[str, str] = {}
    for name, messages in received.items():
        for message in messages:
            key = parse(message)[1]
            assert owner.setdefault(key, name) == name, f"key {key!r} on {owner[key]} and {name}"
    fair = total / len(received)
    for name, messages in received.items():
        assert fair * 0.6 <= len(messages) <= fair * 1.4, (
            f"{name} got {len(messages)}, fair share {fair:.0f}: {[len(m) for m in received.values()]}"
        )
    for name, messages in received.items():
        assert_per_key_increasing(messages, name)


def receive_and_check(consumers: dict[str, pulsar.Consumer], expected: dict[str, int]) -> None:
    """receiveAndCheck: each consumer receives its expected count, acks only even values (per key
    strictly increasing); the ack timeout redelivers exactly the odd ones, again per key increasing;
    then nothing more. A key is seen on one consumer only. Consumers need an ack timeout."""
    first: dict[str, list[pulsar.Message]] = {}
    for name, consumer in consumers.items():
        got = receive_n({name: consumer}, expected[name], ack=False)[name]
        assert len(got) == expected[name], f"{name}: {len(got)} of {expected[name]}"
        assert_per_key_increasing(got, name)
        for message in got:
            if parse(message)[0] % 2 == 0:
                consumer.acknowledge(message)
        first[name] = got
    owner: dict[str, str] = {}
    for name, got in first.items():
        for message in got:
            key = parse(message)[1]
            assert owner.setdefault(key, name) == name, f"key {key!r} on {owner[key]} and {name}"
    for name, consumer in consumers.items():
        odd = [m for m in first[name] if parse(m)[0] % 2]
        again = receive_n({name: consumer}, len(odd), timeout_s=WAIT_S + 15)[name]
        assert sorted(values(again)) == sorted(values(odd)), (
            f"{name}: expected the odd ones again, {[(parse(m)[0], msg_pos(m)) for m in odd]},"
            f" got {[(parse(m)[0], msg_pos(m), m.redelivery_count()) for m in again]}"
        )
        assert all(m.redelivery_count() >= 1 for m in again) or not again
        assert_per_key_increasing(again, f"{name} (redelivered)")
    for name, consumer in consumers.items():
        extra = receive_nothing(consumer, 300)
        assert extra is None, f"{name} got one more: {parse(extra)}"


class Collector:
    """Listeners that record (consumer name, value, key, position) and ack; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_consumer: dict[str, list[tuple[int, str, tuple[int, int, int]]]] = defaultdict(list)
        self.values: set[int] = set()
        self.count = 0
        self.out_of_order: list[str] = []
        self._last_pos: dict[str, tuple[int, int, int]] = {}
        self._seen: set[int] = set()

    def listener(
        self, name: str, ack: bool = True, before: Callable[[pulsar.Message], None] | None = None
    ) -> Callable[[pulsar.Consumer, pulsar.Message], None]:
        def on_message(consumer: pulsar.Consumer, message: pulsar.Message) -> None:
            if before is not None:
                before(message)
            self.record(name, message)
            if ack:
                consumer.acknowledge(message)

        return on_message

    def record(self, name: str, message: pulsar.Message) -> None:
        value, key = parse(message)
        position = msg_pos(message)
        with self.lock:
            self.by_consumer[name].append((value, key, position))
            self.count += 1
            # #23307's check: per key, positions never go backwards, except for duplicates.
            last = self._last_pos.get(key)
            if last is not None and position < last and value not in self._seen:
                self.out_of_order.append(f"key {key!r}: value {value} at {position} after {last} on {name}")
            if last is None or position > last:
                self._last_pos[key] = position
            self._seen.add(value)
            self.values.add(value)

    def wait_values(self, wanted: Iterable[int], timeout_s: float = WAIT_S) -> set[int]:
        """Wait until every wanted value was received; returns the missing ones."""
        wanted = set(wanted)
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                missing = wanted - self.values
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.02)
