"""Key_Shared under consumer churn: the workload, its delivery log and the checkers over that log.

Owns: three black-box scenarios run with the official client against a broker's URLs (rolling
restarts, a slower consumer as in Pulsar's testMakingProgressWithSlowerConsumer, rolling reconnects as
in testOrderingAfterReconnects / Pulsar #23307), the log every consumer thread writes, and pure
checkers that turn a log into violation strings. `test_e2e_churn.py` runs them under pytest; run this
file as a script for a soak sweep (`--help`). Must not touch: the broker's code; it starts no broker
itself except in the script's main, through tests/conftest.py's BrokerProcess.

How the log is read. Every receive, ack, close and subscribe is appended under one lock, so the index
in the list (`seq`) is a global order. It is the application's view: a message is *held* by a
consumer incarnation (`name#n`, n counting its subscribes) from the moment `receive()` returned until
the application acks it or starts closing that incarnation. The log is written so that this interval
always lies inside the broker's own pending interval for the message: a receive is logged after
`receive()` returns (the broker sent it earlier), an ack and a close are logged before the call is made
(the broker learns of them later). The installed client (pulsar-client 3.13) has no knob for the ack
grouping time, so acks reach the broker up to 100 ms after `acknowledge()`; with the ordering above
this can hide a violation inside that window but never invent one. The same holds for messages still
in a receiver queue, which the application never sees. Nothing here sends negative acks or asks for
redelivery, so PIP-379 allows no reordering at all.

Across brokers (tests/chaos) a hold also ends when it is `released`: the consumer's connection to the
broker that delivered it ended, or that broker lost the topic. The new owner knows nothing of what the
old one delivered and may give the key to another consumer, as Pulsar's does; until the incarnation is
`connected` to a broker again, what it still takes from its receiver queue holds nothing.

The seed fixes the plan (queue sizes, who holds messages and for how long, keys, the order and pace
of restarts), not the thread interleaving: a failing seed shows the same kind of failure when run
again, not necessarily the same log.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import queue
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
from key_shared_helpers import Ring, keys_owned
from pulsar.exceptions import PulsarException, Timeout

# Scale knobs for a soak: messages per rolling run (the other scenarios take a fraction), and seeds.
MESSAGES = int(os.environ.get("MAGNETAR_CHURN_MESSAGES", "4000"))
SEEDS_ENV = "MAGNETAR_CHURN_SEEDS"

SUBSCRIPTION = "churn"
KEYS = 300
PUBLISH_RATE_PER_S = 400  # 4,000 messages span about ten one-second restarts
QUEUE_SIZES = (5, 10, 50, 100, 500, 1000)
RECEIVE_POLL_MS = 20  # the longest an ack waits past its due time behind a receive()
OPERATION_TIMEOUT_S = 10  # the client's own bound on subscribe and close
COMMAND_TIMEOUT_S = 2 * OPERATION_TIMEOUT_S + 5  # a close and a subscribe, each at most one timeout
DRAIN_S = 30  # after publishing and churn stop, the longest wait for every message to be acked
QUIET_S = 8  # ...cut short once nothing at all happened for this long: the subscription is stuck
BACKLOG_S = 10  # grouped acks reach the broker within 100 ms; this is for a busy machine
PROGRESS_S = 30  # the slower-consumer scenario's bound for the other consumers' messages
JOIN_S = 15

MODES = ("pip379", "pip282", "classic")
RULES = (
    "operations",
    "one-consumer-per-key",
    "first-delivery-order",
    "no-loss",
    "redelivered-after-close",
    "progress",
    "drained",
)
# classic and pip282 may break the ordering rules when consumers change (their documented behaviour,
# the simulator's expected kinds); they are counted and reported, not required.
ORDERING_RULES = ("one-consumer-per-key", "first-delivery-order")
REQUIRED = {mode: RULES if mode == "pip379" else tuple(r for r in RULES if r not in ORDERING_RULES) for mode in MODES}


# ------------------------------------------------------------------------------------------- log


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    t: float  # seconds since the log started, for people
    kind: str  # subscribed | connected | received | acked | released | closing | closed | error | fault
    consumer: str  # name#incarnation
    index: int = -1  # the publish index, message property "i"
    key: str = ""
    message_id: str = ""
    redelivery_count: int = 0
    detail: str = ""
    e2e_ms: float = 0.0  # a receive's wall-clock time minus the message's publish timestamp

    def __str__(self) -> str:
        text = f"seq {self.seq:>6} t={self.t:8.3f} {self.consumer:<7} {self.kind:<10}"
        if self.index >= 0:
            text += f" i={self.index} key={self.key}"
        if self.message_id:
            text += f" id={self.message_id} redelivery={self.redelivery_count}"
        if self.detail:
            text += f" {self.detail}"
        return text


class DeliveryLog:
    """Append-only, thread-safe; `seq` is the append order. `observer` sees every event in that order,
    under the lock; with `keep=False` the log keeps no events (a soak checks them as they come)."""

    def __init__(self, observer: Callable[[Event], None] | None = None, keep: bool = True) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._count = 0
        self._start = time.monotonic()
        self._acked = IndexSet()
        self._observer = observer
        self._keep = keep
        self.last_event_at = self._start

    def record(self, kind: str, consumer: str, **fields: object) -> Event:
        with self._lock:
            now = time.monotonic()
            event = Event(self._count, now - self._start, kind, consumer, **fields)
            self._count += 1
            if self._keep:
                self._events.append(event)
            if kind == "acked":
                self._acked.add(event.index)
            if self._observer is not None:
                self._observer(event)
            self.last_event_at = now
        return event

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def acked(self) -> IndexSet:
        with self._lock:
            return self._acked.copy()


# -------------------------------------------------------------------------------------- checkers

# Each rule is a checker fed one event at a time in log order, so that a soak can check hours of
# deliveries without keeping them: a checker keeps only what is still open (messages held, sent and not
# acked) and forgets the rest. `check_*` feed a whole log to one.


def _with_lines(summary: str, *events: Event) -> str:
    return summary + "".join(f"\n      {e}" for e in sorted(set(events), key=lambda e: e.seq))


class IndexSet:
    """A set of publish indexes that grows from 0 without keeping what lies below its low-water mark:
    every index below `low` is in it, and only members at or above `low` are stored. Indexes are
    handed out in order, so the stored part stays as wide as the window of messages still in flight."""

    def __init__(self) -> None:
        self.low = 0
        self._above: set[int] = set()

    def add(self, index: int) -> None:
        if index < self.low:
            return
        self._above.add(index)
        while self.low in self._above:
            self._above.discard(self.low)
            self.low += 1

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and (index < self.low or index in self._above)

    def stored(self) -> int:
        return len(self._above)

    def copy(self) -> IndexSet:
        other = IndexSet()
        other.low = self.low
        other._above = set(self._above)
        return other


class OneConsumerPerKey:
    """No key is delivered to one incarnation while another still holds a message of it. A `released`
    incarnation holds nothing until it is `connected` again (the module's doc)."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self._holds: dict[str, dict[str, dict[int, Event]]] = defaultdict(dict)  # key -> consumer -> i -> receive
        self._keys_held_by: dict[str, set[str]] = defaultdict(set)
        self._released: set[str] = set()

    def feed(self, event: Event) -> None:
        if event.kind == "received":
            if event.consumer not in self._released:
                self._received(event)
        elif event.kind == "acked":
            self._holds[event.key].get(event.consumer, {}).pop(event.index, None)
        elif event.kind in ("closing", "released"):
            for key in self._keys_held_by.pop(event.consumer, ()):
                self._holds[key].pop(event.consumer, None)
            if event.kind == "released":
                self._released.add(event.consumer)
        elif event.kind == "connected":
            self._released.discard(event.consumer)

    def _received(self, event: Event) -> None:
        for other, held in self._holds[event.key].items():
            if other != event.consumer and held:
                first = min(held.values(), key=lambda e: e.seq)
                self.violations.append(
                    _with_lines(
                        f"key {event.key}: i={event.index} delivered to {event.consumer} at seq {event.seq} "
                        f"while {other} holds i={first.index} unacked since seq {first.seq} ({len(held)} held)",
                        first,
                        event,
                    )
                )
                break
        self._holds[event.key].setdefault(event.consumer, {})[event.index] = event
        self._keys_held_by[event.consumer].add(event.key)


class FirstDeliveryOrder:
    """Per key, first deliveries come in publish order (#23307): a redelivery may repeat an older
    message, but no message may reach anyone for the first time after a later one of its key did."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.delivered = IndexSet()
        self._newest: dict[str, Event] = {}

    def feed(self, event: Event) -> None:
        if event.kind != "received" or event.index in self.delivered:
            return
        self.delivered.add(event.index)
        last = self._newest.get(event.key)
        if last is not None and event.index < last.index:
            self.violations.append(
                _with_lines(
                    f"key {event.key}: i={event.index} first delivered to {event.consumer} at seq {event.seq} "
                    f"after i={last.index} was first delivered to {last.consumer} at seq {last.seq}",
                    last,
                    event,
                )
            )
        else:
            self._newest[event.key] = event


class NoLoss:
    """Every message whose send succeeded (`published`) was acked by some incarnation. The publisher's
    receipt and the consumers' ack may come in either order."""

    def __init__(self) -> None:
        self.acked = IndexSet()
        self._unacked: dict[int, str] = {}  # published, not acked yet: index -> key
        self._trail: dict[int, list[Event]] = defaultdict(list)  # deliveries of messages not acked yet

    def published(self, index: int, key: str) -> None:
        if index not in self.acked:
            self._unacked[index] = key

    def feed(self, event: Event) -> None:
        if event.kind == "received" and event.index not in self.acked:
            self._trail[event.index].append(event)
        elif event.kind == "acked":
            self.acked.add(event.index)
            self._unacked.pop(event.index, None)
            self._trail.pop(event.index, None)

    def unacked(self) -> int:
        return len(self._unacked)

    @property
    def violations(self) -> list[str]:
        found = []
        for index in sorted(self._unacked):
            key, deliveries = self._unacked[index], self._trail.get(index, [])
            if not deliveries:
                found.append(f"key {key}: i={index} published, never delivered")
            else:
                to = ", ".join(f"{e.consumer} at seq {e.seq}" for e in deliveries)
                found.append(
                    _with_lines(f"key {key}: i={index} published, delivered to {to}, never acked", *deliveries)
                )
        return found


class RedeliveredAfterClose:
    """A message an incarnation held when it closed reaches some incarnation again later."""

    def __init__(self) -> None:
        self._held: dict[str, dict[int, Event]] = defaultdict(dict)
        self._latest: dict[int, Event] = {}  # index -> its latest receive by anyone, until acked
        self._orphaned: dict[int, tuple[Event, Event]] = {}  # index -> (receive, closing)

    def feed(self, event: Event) -> None:
        if event.kind == "received":
            self._held[event.consumer][event.index] = event
            self._latest[event.index] = event
            self._orphaned.pop(event.index, None)
        elif event.kind == "acked":
            self._held[event.consumer].pop(event.index, None)
            self._latest.pop(event.index, None)  # acked: no longer anyone's to lose
        elif event.kind == "closing":
            for index, receive in self._held.pop(event.consumer, {}).items():
                if self._latest.get(index) is receive:  # else another incarnation has it again, or acked it
                    self._orphaned[index] = (receive, event)

    @property
    def violations(self) -> list[str]:
        return [
            _with_lines(
                f"key {receive.key}: i={index} held by {receive.consumer} (received at seq {receive.seq}) when it "
                f"closed at seq {closing.seq}, never delivered again",
                receive,
                closing,
            )
            for index, (receive, closing) in sorted(self._orphaned.items())
        ]


class Operations:
    """Subscribes, acks and closes succeed: the broker refuses none of them under churn."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def feed(self, event: Event) -> None:
        if event.kind == "error":
            self.violations.append(str(event))


def _fed(
    checker: OneConsumerPerKey | FirstDeliveryOrder | NoLoss | RedeliveredAfterClose | Operations,
    events: Iterable[Event],
) -> list[str]:
    for event in events:
        checker.feed(event)
    return checker.violations


def check_one_consumer_per_key(events: Sequence[Event]) -> list[str]:
    return _fed(OneConsumerPerKey(), events)


def check_first_delivery_order(events: Sequence[Event]) -> list[str]:
    return _fed(FirstDeliveryOrder(), events)


def check_no_loss(events: Sequence[Event], published: dict[int, str]) -> list[str]:
    checker = NoLoss()
    for index, key in published.items():
        checker.published(index, key)
    return _fed(checker, events)


def check_redelivered_after_close(events: Sequence[Event]) -> list[str]:
    return _fed(RedeliveredAfterClose(), events)


def check_operations(events: Sequence[Event]) -> list[str]:
    return _fed(Operations(), events)


class Contract:
    """Every rule's checker, fed as the log is written (`DeliveryLog(observer=contract.feed)`)."""

    def __init__(self) -> None:
        self.operations = Operations()
        self.one_consumer_per_key = OneConsumerPerKey()
        self.first_delivery_order = FirstDeliveryOrder()
        self.no_loss = NoLoss()
        self.redelivered_after_close = RedeliveredAfterClose()
        self._checkers = (
            self.operations,
            self.one_consumer_per_key,
            self.first_delivery_order,
            self.no_loss,
            self.redelivered_after_close,
        )

    def feed(self, event: Event) -> None:
        for checker in self._checkers:
            checker.feed(event)

    def violations(self) -> dict[str, list[str]]:
        return {
            "operations": self.operations.violations,
            "one-consumer-per-key": self.one_consumer_per_key.violations,
            "first-delivery-order": self.first_delivery_order.violations,
            "no-loss": self.no_loss.violations,
            "redelivered-after-close": self.redelivered_after_close.violations,
        }


# -------------------------------------------------------------------------------------- consumers


class ConsumerWorker(threading.Thread):
    """One consumer name on its own client and thread. The thread alone touches its consumer; other
    threads send it commands (close, open) and wait for them. Acks are scheduled `ack_delay_s()` after
    the receive, so a consumer can hold many messages at once."""

    def __init__(
        self,
        name: str,
        url: str,
        topic: str,
        log: DeliveryLog,
        *,
        queue_size: int,
        ack_delay_s: Callable[[], float],
        new_client_per_incarnation: bool = False,
        block_on_key: str | None = None,
        release: threading.Event | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"consumer-{name}")
        self.consumer_name = name
        self.url = url
        self.topic = topic
        self.log = log
        self.queue_size = queue_size
        self.ack_delay_s = ack_delay_s
        self.new_client_per_incarnation = new_client_per_incarnation
        self.block_on_key = block_on_key
        self.release = release or threading.Event()
        self.incarnation = 0
        self.paused = threading.Event()
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._commands: queue.Queue[tuple[str, int | None, threading.Event]] = queue.Queue()
        self._client: pulsar.Client | None = None
        self._consumer: pulsar.Consumer | None = None
        self._due: list[tuple[float, int, pulsar.Message, int, str]] = []  # (ack at, seq, message, i, key)

    @property
    def identity(self) -> str:
        return f"{self.consumer_name}#{self.incarnation}"

    # Called from other threads.

    def close_consumer(self) -> bool:
        return self._command("close")

    def open_consumer(self, queue_size: int | None = None) -> bool:
        return self._command("open", queue_size)

    def restart(self) -> bool:
        return self._command("restart")

    def stop(self) -> None:
        if self.ident is None:
            return  # never started
        self.release.set()
        self._stopping.set()
        self.join(JOIN_S)
        if self.is_alive():
            self.log.record("error", self.identity, detail=f"thread still running {JOIN_S} s after stop")
            self._close_client()

    def _command(self, action: str, queue_size: int | None = None) -> bool:
        done = threading.Event()
        self._commands.put((action, queue_size, done))
        if done.wait(COMMAND_TIMEOUT_S):
            return True
        self.log.record("error", self.identity, detail=f"{action} did not finish in {COMMAND_TIMEOUT_S} s")
        return False

    # The consumer's own thread.

    def run(self) -> None:
        try:
            self._open()
            self.ready.set()
            while not self._stopping.is_set():
                self._serve_commands()
                self._ack_due(time.monotonic())
                if self._consumer is None or self.paused.is_set():
                    self._stopping.wait(RECEIVE_POLL_MS / 1000)
                else:
                    self._receive()
            self._ack_due(float("inf"))  # the run is over: nothing is held back at the final close
        except Exception as error:  # noqa: BLE001 - any failure must end up in the log, not kill silently
            self.log.record("error", self.identity, detail=f"worker failed: {error!r}")
        finally:
            self.ready.set()
            if self._consumer is not None:
                self._close()
            self._close_client()

    def _serve_commands(self) -> None:
        while True:
            try:
                action, queue_size, done = self._commands.get_nowait()
            except queue.Empty:
                return
            if queue_size is not None:
                self.queue_size = queue_size
            if action in ("close", "restart") and self._consumer is not None:
                self._close()
            if action in ("open", "restart"):
                self._open()
            done.set()

    def _open(self) -> None:
        if self._client is None:
            self._client = pulsar.Client(
                self.url,
                operation_timeout_seconds=OPERATION_TIMEOUT_S,
                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            )
        self.incarnation += 1
        for attempt in range(3):  # keep the workload going; each failure is still a violation
            try:
                self._consumer = self._client.subscribe(
                    self.topic,
                    SUBSCRIPTION,
                    consumer_type=pulsar.ConsumerType.KeyShared,
                    consumer_name=self.consumer_name,
                    receiver_queue_size=self.queue_size,
                    initial_position=pulsar.InitialPosition.Earliest,
                )
            except PulsarException as error:
                self.log.record("error", self.identity, detail=f"subscribe attempt {attempt + 1}: {error!r}")
                time.sleep(0.2)
                continue
            self.log.record("subscribed", self.identity, detail=f"receiver_queue_size={self.queue_size}")
            return

    def _close(self) -> None:
        # Held messages die with the incarnation: the application cannot ack them after close.
        self.log.record("closing", self.identity, detail=f"holding {len(self._due)}")
        self._due.clear()
        consumer, self._consumer = self._consumer, None
        try:
            consumer.close()
        except PulsarException as error:
            self.log.record("error", self.identity, detail=f"close: {error!r}")
        self.log.record("closed", self.identity)
        if self.new_client_per_incarnation:
            self._close_client()

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except PulsarException:
                pass  # already closed, or its connection is gone: nothing is left to release

    def _receive(self) -> None:
        wait_ms = RECEIVE_POLL_MS
        if self._due:
            wait_ms = max(1, min(wait_ms, int((self._due[0][0] - time.monotonic()) * 1000)))
        try:
            message = self._consumer.receive(timeout_millis=wait_ms)
        except Timeout:
            return
        except PulsarException as error:
            self.log.record("error", self.identity, detail=f"receive: {error!r}")
            self._stopping.wait(0.05)
            return
        mid = message.message_id()
        index = int(message.properties()["i"])
        key = message.partition_key()
        event = self.log.record(
            "received",
            self.identity,
            index=index,
            key=key,
            message_id=f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}",
            redelivery_count=message.redelivery_count(),
            e2e_ms=time.time() * 1000 - message.publish_timestamp(),
        )
        if key == self.block_on_key:
            # The application is stuck on this key: no receive, no ack, until released.
            self.release.wait(PROGRESS_S + DRAIN_S)
        heapq.heappush(self._due, (time.monotonic() + self.ack_delay_s(), event.seq, message, index, key))

    def _ack_due(self, now: float) -> None:
        while self._due and self._due[0][0] <= now:
            _at, _seq, message, index, key = heapq.heappop(self._due)
            self.log.record("acked", self.identity, index=index, key=key)
            try:
                self._consumer.acknowledge(message)
            except PulsarException as error:
                self.log.record("error", self.identity, detail=f"ack i={index}: {error!r}")


# -------------------------------------------------------------------------------------- publishing


class Publisher:
    """One producer on its own client. Message i carries property i and its key as partition key;
    `published` holds the indexes whose send succeeded, with their keys, or, given `on_published`, each
    one goes to it instead (a soak keeps no list of hours of messages)."""

    def __init__(
        self, url: str, topic: str, batching: bool, on_published: Callable[[int, str], None] | None = None
    ) -> None:
        self.client = pulsar.Client(
            url, operation_timeout_seconds=OPERATION_TIMEOUT_S, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        options: dict[str, object] = {"batching_enabled": False}
        if batching:
            # A batch takes its first message's key (Pulsar's Commands.peekStickyKey): KeyBased keeps keys apart.
            options = {
                "batching_enabled": True,
                "batching_type": pulsar.BatchingType.KeyBased,
                "batching_max_publish_delay_ms": 10,
            }
        try:
            self.producer = self.client.create_producer(
                topic, block_if_queue_full=True, max_pending_messages=1000, **options
            )
        except PulsarException:
            self.client.close()
            raise
        self.published: dict[int, str] = {}
        self.on_published = on_published or self.published.__setitem__
        self.failed: list[str] = []
        self.next_index = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def publish(self, keys: Iterable[str], rate_per_s: float) -> None:
        """Send in the background, paced to `rate_per_s`."""
        self._thread = threading.Thread(target=self._send_all, args=(keys, rate_per_s), daemon=True, name="publisher")
        self._thread.start()

    def publishing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout_s: float) -> bool:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return not self.publishing()

    def close(self) -> None:
        try:
            self.client.close()
        except PulsarException:
            pass  # the test's verdict does not depend on a clean producer close

    def _send_all(self, keys: Iterable[str], rate_per_s: float) -> None:
        start = time.monotonic()
        first = self.next_index
        try:
            for n, key in enumerate(keys):
                index = self.next_index
                self.next_index += 1
                self.producer.send_async(
                    str(index).encode(), self._callback(index, key), partition_key=key, properties={"i": str(index)}
                )
                ahead = start + (n + 1) / rate_per_s - time.monotonic()
                if ahead > 0.005:
                    time.sleep(ahead)
            self.producer.flush()
        except PulsarException as error:
            with self._lock:
                self.failed.append(f"publishing from i={first}: {error!r}")

    def _callback(self, index: int, key: str) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
            with self._lock:
                if result == pulsar.Result.Ok:
                    self.on_published(index, key)
                else:
                    self.failed.append(f"send i={index}: {result}")

        return done


# -------------------------------------------------------------------------------------- admin


# HTTP failures, bad JSON, or a subscription missing from the stats: reported, never raised.
ADMIN_ERRORS = (OSError, ValueError, KeyError)


def _admin_get(http_url: str, path: str) -> dict:
    with urllib.request.urlopen(f"{http_url}{path}", timeout=5) as response:
        return json.loads(response.read())


def _topic_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def subscription_stats(http_url: str, topic: str) -> dict:
    return _admin_get(http_url, f"{_topic_path(topic)}/stats")["subscriptions"][SUBSCRIPTION]


def explain_key(http_url: str, topic: str, key: str) -> str:
    """magnetar's why-is-this-key-blocked answer, in one line."""
    try:
        answer = _admin_get(
            http_url, f"{_topic_path(topic)}/subscription/{SUBSCRIPTION}/keys/{urllib.parse.quote(key, safe='')}"
        )
    except ADMIN_ERRORS as error:
        return f"key {key}: explain failed: {error!r}"
    reasons = ",".join(r["code"] for r in answer.get("reasons", [])) or "-"
    owner = (answer.get("consumer") or {}).get("consumerName")
    draining = answer.get("drainingFrom") or {}
    pending = [(m["consumerName"], m["messageId"]) for m in answer.get("pendingMessages", [])]
    return (
        f"key {key}: flowing={answer.get('flowing')} reasons={reasons} owner={owner} "
        f"drainingFrom={draining.get('consumerName')}({draining.get('unackMsgs')}) "
        f"pending={pending[:5]} replayQueue={len(answer.get('replayQueue', []))} "
        f"markDelete={answer.get('markDeletePosition')}"
    )


def stats_line(stats: dict) -> str:
    consumers = ", ".join(
        f"{c.get('consumerName')}: unacked={c.get('unackedMessages')} permits={c.get('availablePermits')} "
        f"draining={c.get('drainingHashesCount')}"
        for c in stats.get("consumers", [])
    )
    return (
        f"msgBacklog={stats.get('msgBacklog')} msgInReplay={stats.get('msgInReplay')} "
        f"unackedMessages={stats.get('unackedMessages')} consumers=[{consumers}]"
    )


# -------------------------------------------------------------------------------------- runs


@dataclass
class Outcome:
    scenario: str
    mode: str
    batching: bool
    seed: int
    published: dict[int, str]
    events: list[Event]
    violations: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return (
            f"{self.scenario} mode={self.mode} batching={'keybased' if self.batching else 'unbatched'} seed={self.seed}"
        )

    def failed_rules(self) -> list[str]:
        return [rule for rule in REQUIRED[self.mode] if self.violations.get(rule)]

    def summary(self) -> str:
        received = [e for e in self.events if e.kind == "received"]
        repeated = len(received) - len({e.index for e in received})
        counts = ", ".join(f"{rule} {len(self.violations.get(rule, []))}" for rule in RULES)
        return (
            f"{self.title}: {len(self.published)} published, {len(received)} deliveries "
            f"({repeated} repeated, {sum(1 for e in received if e.redelivery_count)} with a redelivery count), "
            f"{sum(1 for e in self.events if e.kind == 'subscribed')} subscribes; violations: {counts}"
        )

    def report(self, limit: int = 5) -> str:
        lines = [self.summary(), *self.notes]
        for rule in RULES:
            found = self.violations.get(rule, [])
            if not found:
                continue
            verdict = "FAILED" if rule in REQUIRED[self.mode] else f"reported (allowed for {self.mode})"
            lines.append(f"{verdict} {rule}: {len(found)}, first {min(limit, len(found))}:")
            lines += [f"  {v}" for v in found[:limit]]
        return "\n".join(lines)

    def write_log(self, path: Path) -> None:
        with open(path, "w") as out:
            out.write(self.report(limit=50) + "\n\n")
            out.writelines(f"{e}\n" for e in self.events)


class Workload:
    """The consumers, publisher and log of one run. `finish` drains and checks; leaving the `with`
    block stops every thread and closes every client, whatever happened."""

    def __init__(
        self,
        url: str,
        http_url: str,
        topic: str,
        batching: bool,
        log: DeliveryLog | None = None,
        on_published: Callable[[int, str], None] | None = None,
    ) -> None:
        self.url = url
        self.http_url = http_url
        self.topic = topic
        self.batching = batching
        self.log = log or DeliveryLog()
        self.workers: dict[str, ConsumerWorker] = {}
        self.publisher = Publisher(url, topic, batching, on_published)
        self.extra: dict[str, list[str]] = defaultdict(list)
        self.notes: list[str] = []

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *_exc: object) -> None:
        for worker in self.workers.values():
            worker.stop()
        self.publisher.close()

    def add(self, name: str, **options: object) -> ConsumerWorker:
        worker = ConsumerWorker(name, self.url, self.topic, self.log, **options)
        self.workers[name] = worker
        return worker

    def start(self) -> None:
        """All consumers subscribe at once, as applications started together do: concurrent first
        subscribes to a new subscription once gave it two dispatchers over one cursor."""
        for worker in self.workers.values():
            worker.start()
        for worker in self.workers.values():
            worker.ready.wait(COMMAND_TIMEOUT_S)

    def unacked(self, indexes: Iterable[int]) -> list[int]:
        acked = self.log.acked()
        return sorted(i for i in indexes if i not in acked)

    def wait_acked(self, indexes: Iterable[int], timeout_s: float, quiet_s: float) -> list[int]:
        """Wait until all are acked; give up at the timeout, or sooner once the log stays silent."""
        wanted = set(indexes)
        started = time.monotonic()
        while True:
            missing = self.unacked(wanted)
            now = time.monotonic()
            quiet_since = max(started, self.log.last_event_at)
            if not missing or now > started + timeout_s or now - quiet_since > quiet_s:
                return missing
            time.sleep(0.05)

    def finish(self, scenario: str, mode: str, seed: int) -> Outcome:
        publish_done = self.publisher.wait(DRAIN_S)
        if not publish_done:
            self.extra["operations"].append(f"publishing did not finish within {DRAIN_S} s of the end of churn")
        self.extra["operations"] += self.publisher.failed
        published = dict(self.publisher.published)
        started = time.monotonic()
        missing = self.wait_acked(published, DRAIN_S, QUIET_S)
        if missing:
            self._not_drained(missing, published, time.monotonic() - started)
        else:
            self._wait_backlog_empty()
        for worker in self.workers.values():
            worker.stop()
        events = self.log.events()
        violations = {
            "operations": check_operations(events) + self.extra["operations"],
            "one-consumer-per-key": check_one_consumer_per_key(events),
            "first-delivery-order": check_first_delivery_order(events),
            "no-loss": check_no_loss(events, published),
            "redelivered-after-close": check_redelivered_after_close(events),
            "progress": self.extra["progress"],
            "drained": self.extra["drained"],
        }
        return Outcome(scenario, mode, self.batching, seed, published, events, violations, self.notes)

    def _not_drained(self, missing: list[int], published: dict[int, str], waited_s: float) -> None:
        silent_s = time.monotonic() - self.log.last_event_at
        detail = [
            f"{len(missing)} of {len(published)} published messages still unacked after waiting {waited_s:.1f} s "
            f"once publishing and churn stopped (last event {silent_s:.1f} s ago)"
        ]
        try:
            detail.append("stats: " + stats_line(subscription_stats(self.http_url, self.topic)))
        except ADMIN_ERRORS as error:
            detail.append(f"stats failed: {error!r}")
        keys = list(dict.fromkeys(published[i] for i in missing))
        detail += [explain_key(self.http_url, self.topic, key) for key in keys[:5]]
        self.extra["drained"].append("\n      ".join(detail))

    def _wait_backlog_empty(self) -> None:
        deadline = time.monotonic() + BACKLOG_S
        while True:
            try:
                stats = subscription_stats(self.http_url, self.topic)
            except ADMIN_ERRORS as error:
                self.extra["drained"].append(f"stats failed: {error!r}")
                return
            if stats.get("msgBacklog") == 0:
                return
            if time.monotonic() > deadline:
                self.extra["drained"].append(
                    f"every message acked by the application, but after {BACKLOG_S} s: " + stats_line(stats)
                )
                return
            time.sleep(0.1)


def random_keys(rnd: random.Random, count: int) -> list[str]:
    return [f"k-{rnd.randrange(KEYS)}" for _ in range(count)]


def ack_delays(rnd: random.Random, low_s: float, high_s: float, immediate: float = 0.0) -> Callable[[], float]:
    """Delays drawn from `rnd`: none with probability `immediate`, else uniform in [low_s, high_s]."""

    def draw() -> float:
        return 0.0 if rnd.random() < immediate else rnd.uniform(low_s, high_s)

    return draw


def rolling_restarts(
    url: str, http_url: str, topic: str, *, mode: str, seed: int, batching: bool, messages: int = MESSAGES
) -> Outcome:
    """Four consumers, each on its own client, one of them holding every message 0.3-1.5 s; while
    `messages` are published, one consumer at a time closes with its client and subscribes again
    under the same name on a new client, about once a second (a rolling restart of applications)."""
    rnd = random.Random(seed)
    names = ["c1", "c2", "c3", "c4"]
    holder = rnd.choice(names)
    with Workload(url, http_url, topic, batching) as load:
        for n, name in enumerate(names):
            own = random.Random(seed * 1000 + n)  # one generator per thread: Random is not shared
            delay = ack_delays(own, 0.3, 1.5) if name == holder else ack_delays(own, 0.0, 0.05, immediate=0.5)
            load.add(name, queue_size=rnd.choice(QUEUE_SIZES), ack_delay_s=delay, new_client_per_incarnation=True)
        load.start()
        load.notes.append(
            "plan: holder "
            + holder
            + ", receiver queues "
            + ", ".join(f"{w.consumer_name}={w.queue_size}" for w in load.workers.values())
        )
        load.publisher.publish(random_keys(rnd, messages), PUBLISH_RATE_PER_S)
        order = names[:]
        rnd.shuffle(order)
        turn = 0
        while load.publisher.publishing():
            time.sleep(rnd.uniform(0.7, 1.3))
            load.workers[order[turn % len(order)]].restart()
            turn += 1
        return load.finish("rolling-restarts", mode, seed)


def slow_consumer(
    url: str, http_url: str, topic: str, *, mode: str, seed: int, batching: bool, messages: int = MESSAGES // 2
) -> Outcome:
    """testMakingProgressWithSlowerConsumer: ten consumers on their own clients (queue 100); the one
    that owns `slow-key` blocks its application on that key's first message and holds it unacked;
    everything of the other nine must still be acked; no consumer joins or leaves."""
    rnd = random.Random(seed)
    names = [f"s{n}" for n in range(10)]
    slow_key = "slow-key"
    ring = Ring(names)
    slow_owner = ring.owner(slow_key)
    release = threading.Event()
    with Workload(url, http_url, topic, batching) as load:
        for n, name in enumerate(names):
            own = random.Random(seed * 1000 + n)
            load.add(
                name,
                queue_size=100,
                ack_delay_s=ack_delays(own, 0.0, 0.01),
                block_on_key=slow_key if name == slow_owner else None,
                release=release,
            )
        load.start()
        keys = [slow_key] + random_keys(rnd, messages - 1)
        load.notes.append(f"plan: {slow_owner} owns {slow_key} and blocks on it")
        load.publisher.publish(keys, PUBLISH_RATE_PER_S * 4)
        load.publisher.wait(DRAIN_S)
        others = [i for i, key in load.publisher.published.items() if ring.owner(key) != slow_owner]
        stalled = load.wait_acked(others, PROGRESS_S, PROGRESS_S)
        if stalled:
            load.extra["progress"].append(
                f"{len(stalled)} of {len(others)} messages of keys owned by the other nine consumers unacked "
                f"{PROGRESS_S} s after publishing while {slow_owner} blocks on {slow_key}; first: "
                + ", ".join(
                    f"i={i} key={load.publisher.published[i]} owner={ring.owner(load.publisher.published[i])}"
                    for i in stalled[:5]
                )
                + "\n      "
                + explain_key(http_url, topic, load.publisher.published[stalled[0]])
            )
        release.set()
        return load.finish("slow-consumer", mode, seed)


def rolling_reconnects(
    url: str, http_url: str, topic: str, *, mode: str, seed: int, batching: bool, messages: int = MESSAGES // 2
) -> Outcome:
    """testOrderingAfterReconnects (#23307): c1 and c3 paused (queue 10), c2 (queue 500) gets a quarter
    of the messages, all of its keys; c2 closes, c1 and c3 resume, c2 comes back (queue 10), c1 and c3
    reconnect in turn; then the rest, random keys, while one consumer at a time closes and subscribes
    again on its client every 0.1-0.5 s. Each consumer has its own client."""
    rnd = random.Random(seed)
    names = ["c1", "c2", "c3"]
    c2_keys = keys_owned([(names, "c2")], 60)
    with Workload(url, http_url, topic, batching) as load:
        for n, name in enumerate(names):
            own = random.Random(seed * 1000 + n)
            worker = load.add(
                name, queue_size=500 if name == "c2" else 10, ack_delay_s=ack_delays(own, 0.0, 0.02, immediate=0.7)
            )
            if name != "c2":
                worker.paused.set()
        load.start()
        first = messages // 4
        load.publisher.publish([rnd.choice(c2_keys) for _ in range(first)], PUBLISH_RATE_PER_S * 4)
        load.publisher.wait(DRAIN_S)
        c1, c2, c3 = (load.workers[name] for name in names)
        c2.close_consumer()
        c1.paused.clear()
        c3.paused.clear()
        c2.open_consumer(queue_size=10)
        time.sleep(0.1)
        c1.restart()
        time.sleep(0.1)
        c3.restart()
        load.publisher.publish(random_keys(rnd, messages - first), PUBLISH_RATE_PER_S)
        while load.publisher.publishing():
            time.sleep(rnd.uniform(0.1, 0.5))
            load.workers[rnd.choice(names)].restart()
        return load.finish("rolling-reconnects", mode, seed)


SCENARIOS: dict[str, Callable[..., Outcome]] = {
    "rolling-restarts": rolling_restarts,
    "slow-consumer": slow_consumer,
    "rolling-reconnects": rolling_reconnects,
}


def seeds(default: Sequence[int]) -> list[int]:
    """MAGNETAR_CHURN_SEEDS: a count N (seeds 1..N), a list `3,8,21`, or a range `1-50`."""
    text = os.environ.get(SEEDS_ENV, "").strip()
    if not text:
        return list(default)
    return parse_seeds(text)


def parse_seeds(text: str) -> list[int]:
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return list(range(1, int(text) + 1))


# -------------------------------------------------------------------------------------- soak


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Soak sweep of the Key_Shared churn scenarios; one broker per run.")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--modes", default="pip379", help="comma-separated: pip379,pip282,classic")
    parser.add_argument("--batching", choices=["unbatched", "keybased", "both"], default="both")
    parser.add_argument("--seeds", default="1-10", help="count N, list 3,8,21 or range 1-50")
    parser.add_argument("--messages", type=int, default=MESSAGES, help="per rolling-restarts run; others take half")
    parser.add_argument("--logs", type=Path, default=None, help="directory for the log of every failed run")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import BrokerProcess  # tests/conftest.py: a broker process on free ports

    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    batchings = {"unbatched": [False], "keybased": [True], "both": [False, True]}[args.batching]
    logs = args.logs or Path(tempfile.mkdtemp(prefix="magnetar-churn-"))
    logs.mkdir(parents=True, exist_ok=True)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="magnetar-churn-broker-") as scratch:
        for mode in args.modes.split(","):
            for scenario in scenarios:
                for batching in batchings:
                    for seed in parse_seeds(args.seeds):
                        broker = BrokerProcess(
                            Path(scratch) / f"data-{mode}-{scenario}-{batching}-{seed}", {"keySharedOrderingMode": mode}
                        )
                        broker.start()
                        try:
                            messages = args.messages if scenario == "rolling-restarts" else args.messages // 2
                            outcome = SCENARIOS[scenario](
                                broker.url,
                                broker.http_url,
                                f"persistent://public/default/churn-{seed}",
                                mode=mode,
                                seed=seed,
                                batching=batching,
                                messages=messages,
                            )
                        finally:
                            broker.stop()
                        print(outcome.summary(), flush=True)
                        if outcome.failed_rules():
                            failures += 1
                            path = logs / f"{scenario}-{mode}-{'keybased' if batching else 'unbatched'}-{seed}.log"
                            outcome.write_log(path)
                            shutil.copy(broker.log_path, path.with_suffix(".broker.log"))
                            print(outcome.report(limit=3) + f"\nlog: {path}\n", flush=True)
    print(f"{failures} failed run(s); logs in {logs}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
