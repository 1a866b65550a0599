"""`magnetar perf produce|consume`: load generators like `pulsar-perf`, on the official client or ours.

Owns the measurement loops only: pacing, counting, latency percentiles, progress lines and the JSON
summary. It talks to a broker as any user does, through `pulsar-client` (`--client pulsar`, the
default) or through magnetar's own wire client (`produce --client magnetar`), and imports nothing of the
broker, so its numbers hold for Pulsar too.

Why a producer of our own: the official Python client builds every message in Python and runs a Python
receipt callback per message, ~37 µs of CPU per message, so it caps a throughput run near 30,000 msg/s
whatever the broker could carry. `--client magnetar` batches by key as the official client's KeyBased
batching does, but encodes a batch with C-level joins and struct packs (`magnetar.client.batch`) and
handles one receipt per batch. Its payloads carry the message's index in their first 8 bytes
(big-endian; the rest are zeros), so a consumer can check per-key order.

Latencies: a producer's is from `send_async` to its receipt callback (monotonic clock); with
`--client magnetar` from the moment its batch is closed to the batch's receipt, which every message
of the batch gets. A consumer's is end to end, receive time minus the message's `publish_timestamp`.
The client stamps that in whole milliseconds from the wall clock (ours once per batch, as the
official client does), so end-to-end latencies are only meaningful on one machine and carry up to
1 ms of truncation.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import struct
import sys
import threading
import time
from array import array
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

import pulsar

from magnetar.client.batch import KEY_TAG, PAYLOAD_SIZE_TAG, bytes_field, entry_section, indexed_messages, varint
from magnetar.client.security import ClientSecurity
from magnetar.client.wire import (
    BrokerError,
    Connection,
    ConnectionLost,
    Producer,
    ReadTimeout,
    individual_ack_frame,
    normalize_topic,
)
from magnetar.protocol.framing import Frame, encode_frame
from magnetar.protocol.messages import parse_entry
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandFlow,
    CommandSend,
    CommandSubscribe,
    ServerError,
)

__all__ = ["main", "percentiles"]

PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p99_9", 0.999))
REPORT_INTERVAL_S = 1.0
# A receive that waits longer than this re-checks whether the run is over; short enough that a
# finished run exits promptly, long enough to cost nothing while messages flow.
RECEIVE_POLL_MS = 200
# The official client's batchingMaxAllowedSizeInBytes default: a batch container closes at 128 KB.
BATCHING_MAX_BYTES = 128 * 1024
# How long `--client magnetar` waits for a receipt before it calls the broker gone.
RECEIPT_TIMEOUT_S = 30.0
# A paced producer wakes at most this often and sends every message then due in one write: woken
# for each message at 10,000 msg/s it spent 38 us of CPU per message in wake-ups and syscalls,
# a fifth of a two-core machine taken from the broker it measures.
PACE_TICK_S = 0.001
# `--batch-receive`: a batch_receive returns once it holds that many messages or after this wait.
BATCH_RECEIVE_WAIT_MS = 10
# The official client's acknowledgementGroupTimeMs default: acks leave in one command per 100 ms.
ACK_GROUP_S = 0.1
_U64 = struct.Struct(">Q")
SUBSCRIPTION_TYPES = {
    "Exclusive": CommandSubscribe.Exclusive,
    "Shared": CommandSubscribe.Shared,
    "Failover": CommandSubscribe.Failover,
    "Key_Shared": CommandSubscribe.Key_Shared,
}
CONSUMER_TYPES = {
    "Exclusive": pulsar.ConsumerType.Exclusive,
    "Shared": pulsar.ConsumerType.Shared,
    "Failover": pulsar.ConsumerType.Failover,
    "Key_Shared": pulsar.ConsumerType.KeyShared,
}


def percentiles(samples: Sequence[float], counts: Sequence[int] | None = None) -> dict[str, float]:
    """Nearest-rank p50/p99/p99.9 and max of `samples` (empty: all zero). With `counts`, sample i
    stands for counts[i] messages (a batch's latency for each of its messages); the ranks are found
    on the running sums of the counts in latency order rather than by repeating each sample: a
    progress line of 10,000 entries then costs ~2 ms, not ~9, and the loop measuring is not held up."""
    if not samples:
        return {name: 0.0 for name, _ in PERCENTILES} | {"max": 0.0}
    if counts is None or counts.count(1) == len(counts):
        ordered = sorted(samples)
        last = len(ordered) - 1
        result = {name: ordered[min(last, int(fraction * len(ordered)))] for name, fraction in PERCENTILES}
        result["max"] = ordered[last]
        return result
    order = sorted(range(len(samples)), key=samples.__getitem__)
    ends = list(accumulate(map(counts.__getitem__, order)))
    total = ends[-1]
    result = {
        name: samples[order[bisect_right(ends, min(total - 1, int(fraction * total)))]]
        for name, fraction in PERCENTILES
    }
    result["max"] = samples[order[-1]]
    return result


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _latency_text(latency: dict[str, float]) -> str:
    return f"p50 {latency['p50']:.2f} p99 {latency['p99']:.2f} p99.9 {latency['p99_9']:.2f} max {latency['max']:.2f} ms"


def _progress(
    role: str,
    count: int,
    previous: int,
    interval_s: float,
    size: int,
    window: Sequence[float],
    window_counts: Sequence[int] | None = None,
) -> None:
    rate = (count - previous) / interval_s
    latency = percentiles(window, window_counts)
    print(
        f"{role}: {rate:10,.0f} msg/s {rate * size / 1e6:7.2f} MB/s  total {count:,}  "
        f"latency p50 {latency['p50']:.2f} p99 {latency['p99']:.2f} ms",
        flush=True,
    )


def _finish(role: str, summary: dict, json_path: str | None) -> None:
    print(
        f"{role} summary: {summary['messages']:,} msg in {summary['seconds']:.2f} s: "
        f"{summary['msg_per_s']:,.0f} msg/s {summary['mb_per_s']:.2f} MB/s, "
        f"latency {_latency_text(summary['latency_ms'])}, "
        f"client CPU {summary['client_cpu_us_per_msg']:.1f} µs/msg",
        flush=True,
    )
    if json_path:
        with open(json_path, "w") as file:
            json.dump(summary, file, indent=2)
            file.write("\n")


def _client(args: argparse.Namespace) -> pulsar.Client:
    security = _security(args)
    options: dict = {}
    if security.auth_method == "token":
        options["authentication"] = pulsar.AuthenticationToken(security.auth_data.decode())
    elif security.auth_method == "basic":
        options["authentication"] = pulsar.AuthenticationBasic(*security.auth_data.decode().split(":", 1))
    elif security.auth_method == "tls":
        options["authentication"] = pulsar.AuthenticationTLS(
            security.tls_certificate_file_path, security.tls_key_file_path
        )
    if security.tls_trust_certs_file_path:
        options["tls_trust_certs_file_path"] = security.tls_trust_certs_file_path
    if security.tls_allow_insecure:
        options["tls_allow_insecure_connection"] = True
    return pulsar.Client(
        args.service_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), **options
    )


def _security(args: argparse.Namespace) -> ClientSecurity:
    """--auth-plugin, --auth-params and the TLS options, as pulsar-perf takes them (docs/security.md)."""
    try:
        return ClientSecurity.from_options(
            args.auth_plugin, args.auth_params, args.tls_trust_cert_path, args.tls_allow_insecure
        )
    except (ValueError, OSError) as error:
        print(f"perf: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def produce(args: argparse.Namespace) -> int:
    if args.client == "magnetar":
        return produce_magnetar(args)
    client = _client(args)
    producer = client.create_producer(
        args.topic,
        batching_enabled=args.batching,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_messages=args.batching_max_messages,
        batching_max_publish_delay_ms=args.batch_delay_ms,
        max_pending_messages=args.max_pending,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    payload = bytes(args.size)
    keys: list[str | None] = [f"key-{index}" for index in range(args.keys)] or [None]
    # Receipts of one producer arrive in send order, so a FIFO of send times pairs each receipt with
    # its send without a closure per message.
    sent_at: collections.deque[float] = collections.deque()
    latencies = array("d")
    failures = [0]
    last_receipt = [0.0]

    def receipt(result: pulsar.Result, _message_id: object) -> None:
        now = time.perf_counter()
        latencies.append((now - sent_at.popleft()) * 1e3)
        last_receipt[0] = now
        if result != pulsar.Result.Ok:
            failures[0] += 1

    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    next_report, reported, reported_at = start + REPORT_INTERVAL_S, 0, start
    key_count = len(keys)
    for index in range(args.messages):
        now = time.perf_counter()
        if args.rate:
            ahead = start + index / args.rate - now
            if ahead > 0:
                time.sleep(ahead)
                now = time.perf_counter()
        if now >= next_report:
            done = len(latencies)
            _progress("produce", done, reported, now - reported_at, args.size, latencies[reported:done])
            next_report, reported, reported_at = now + REPORT_INTERVAL_S, done, now
        sent_at.append(time.perf_counter())
        producer.send_async(payload, receipt, partition_key=keys[index % key_count])
    producer.flush()
    while len(latencies) < args.messages:
        time.sleep(0.001)
    cpu = _cpu_seconds() - cpu_start
    producer.close()
    client.close()
    seconds = last_receipt[0] - start
    summary = {
        "role": "produce",
        "client": "pulsar",
        "topic": args.topic,
        "messages": args.messages,
        "failures": failures[0],
        "size_bytes": args.size,
        "keys": args.keys,
        "batching": args.batching,
        "rate_target": args.rate,
        "max_pending": args.max_pending,
        "seconds": seconds,
        "msg_per_s": args.messages / seconds,
        "mb_per_s": args.messages * args.size / seconds / 1e6,
        "latency_ms": percentiles(latencies),
        "client_cpu_us_per_msg": cpu / args.messages * 1e6,
    }
    _finish("produce", summary, args.json)
    return 1 if failures[0] else 0


class _Refused(Exception):
    """What `--client magnetar` does not do."""


def _connect(service_url: str, topic: str, security: ClientSecurity) -> Connection:
    """A connection of our client for `topic`, which must not be partitioned: our client does not route
    messages to partitions nor consume several."""
    connection = Connection(service_url, RECEIPT_TIMEOUT_S, security)
    try:
        partitions = connection.partitions(topic)
    except BaseException:
        connection.close()
        raise
    if partitions:
        connection.close()
        raise _Refused(f"--client magnetar works with non-partitioned topics only; {topic} has {partitions} partitions")
    return connection


class _KeyBatcher:
    """Messages `index` = 0, 1, 2, ... keyed `key-(index % keys)` round robin, as the official client's
    KeyBased batching groups them: one container of consecutive messages, closed when it holds
    `limit` messages (batchingMaxMessages, or what fits 128 KB), when its delay has passed, or when
    no more messages follow; closing it makes one batch per key, in order of each key's first message.
    The container is a range of indexes, so a batch's messages are a `range` with step `keys`, and a
    batch costs one struct pack (`indexed_messages`) however many messages it holds."""

    def __init__(self, args: argparse.Namespace, producer_id: int, producer_name: str) -> None:
        self.keys = max(args.keys, 1)
        self.names: list[str | None] = [f"key-{j}" for j in range(args.keys)] or [None]
        size_field = PAYLOAD_SIZE_TAG + varint(args.size)
        self.metadata = [
            size_field if name is None else bytes_field(KEY_TAG, name.encode()) + size_field for name in self.names
        ]
        self.size = args.size
        self.zeros = bytes(args.size - 8)
        self.batching = args.batching
        longest = max(len(m) for m in self.metadata) + 4 + args.size
        # Without batching the container is only a chunk of messages encoded together (one entry each)
        # and sent with one socket write: the delay is 0, so it closes as soon as it is filled.
        self.limit = max(1, min(args.batching_max_messages, -(-BATCHING_MAX_BYTES // longest)))
        self.producer_id = producer_id
        self.producer_name = producer_name
        self.sequence = 0

    def close(self, start: int, stop: int, outgoing: bytearray, in_flight: collections.deque, now: float) -> None:
        """Encode messages start..stop-1 into SEND frames on `outgoing`, one (closed at, count, sequence
        id) per entry on `in_flight`."""
        publish_time = int(time.time() * 1000)
        if self.batching:
            for first in range(start, min(stop, start + self.keys)):
                key = first % self.keys
                indexes = range(first, stop, self.keys)
                payload = indexed_messages(self.metadata[key], indexes, self.size)
                self._send(payload, len(indexes), self.names[key], publish_time, outgoing, in_flight, now)
        else:
            for index in range(start, stop):
                payload = _U64.pack(index) + self.zeros
                self._send(payload, None, self.names[index % self.keys], publish_time, outgoing, in_flight, now)

    def _send(
        self,
        payload: bytes,
        batch_count: int | None,
        key: str | None,
        publish_time: int,
        outgoing: bytearray,
        in_flight: collections.deque,
        now: float,
    ) -> None:
        sequence = self.sequence
        count = batch_count or 1
        section = entry_section(self.producer_name, sequence, payload, publish_time, batch_count=batch_count, key=key)
        send = CommandSend(producer_id=self.producer_id, sequence_id=sequence)
        if batch_count is not None:
            send.num_messages = count
            send.highest_sequence_id = sequence + count - 1
        outgoing += encode_frame(BaseCommand(type=BaseCommand.SEND, send=send), section)
        in_flight.append((now, count, sequence))
        self.sequence = sequence + count


def produce_magnetar(args: argparse.Namespace) -> int:
    """The producer on magnetar's wire client: one thread, the socket non-blocking, sends pipelined up
    to `--max-pending` messages (those in an open batch included, as the official client counts them)."""
    if args.size < 8:
        print("produce: --client magnetar needs --size of at least 8 (payloads carry their index)", file=sys.stderr)
        return 2
    topic = normalize_topic(args.topic)
    try:
        connection = _connect(args.service_url, topic, _security(args))
        producer = Producer(connection, topic, f"perf-{os.urandom(4).hex()}")
    except _Refused as refusal:
        print(f"produce: {refusal}", file=sys.stderr)
        return 2
    except (BrokerError, ConnectionLost, ReadTimeout) as error:
        print(f"produce: {error}", file=sys.stderr)
        return 1
    run = _PipelinedProduce(args, _KeyBatcher(args, producer.producer_id, producer.name))
    try:
        cpu = run.publish(connection, producer.producer_id)
        producer.close()
    except (BrokerError, ConnectionLost, ReadTimeout) as error:
        print(f"produce: failed after {run.received:,} of {run.total:,} receipts: {error}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    _finish("produce", run.summary(args, cpu), args.json)
    return 1 if run.failures else 0


class _ProgressLines:
    """A progress line every REPORT_INTERVAL_S for a loop that holds one latency per entry, weighted by
    the entry's messages: the rate since the line before, the latencies of the entries since then."""

    def __init__(self, role: str, size: int, start: float) -> None:
        self.role = role
        self.size = size
        self.due = start + REPORT_INTERVAL_S
        self.at = start
        self.messages = 0
        self.entries = 0

    def report(self, now: float, messages: int, latencies: array, weights: array) -> None:
        done = len(latencies)
        window, window_weights = latencies[self.entries : done], weights[self.entries : done]
        _progress(self.role, messages, self.messages, now - self.at, self.size, window, window_weights)
        self.due, self.messages, self.entries, self.at = now + REPORT_INTERVAL_S, messages, done, now


class _PipelinedProduce:
    """One `produce --client magnetar` run: messages go into the open batch container as the pace and
    `--max-pending` allow, the container closes into SENDs (`_KeyBatcher.close`), and each receipt
    settles the oldest SEND in flight.

    Invariants: `opened <= generated <= total`; the messages `opened..generated-1` are in the open
    container and `in_flight_messages` are closed without a receipt yet, together at most `--max-pending`.
    """

    def __init__(self, args: argparse.Namespace, batcher: _KeyBatcher) -> None:
        self.batcher = batcher
        self.total = args.messages
        self.rate = args.rate
        self.max_pending = args.max_pending
        self.size = args.size
        self.delay_s = args.batch_delay_ms / 1000 if args.batching else 0.0
        self.outgoing = bytearray()
        self.in_flight: collections.deque[tuple[float, int, int]] = collections.deque()
        self.latencies, self.counts = array("d"), array("q")
        self.generated = self.opened = self.received = self.failures = self.in_flight_messages = 0
        self.opened_at = self.last_receipt = self.start = self.heard_at = 0.0

    def publish(self, connection: Connection, producer_id: int) -> float:
        """Send every message and wait for its receipt; the CPU seconds it took."""
        cpu_start = _cpu_seconds()
        self.start = self.heard_at = time.perf_counter()
        progress = _ProgressLines("produce", self.size, self.start)
        while self.received < self.total:
            now = time.perf_counter()
            self._add_messages(now)
            self._close_batch_when_due(now)
            frames = connection.pump(self.outgoing, self._wake_at(now, progress.due) - time.perf_counter())
            now = time.perf_counter()
            for frame in frames:
                self._on_command(frame.command, producer_id, now)
            self._check_receipt_timeout(now)
            if now >= progress.due:
                # After the pump: a batch closed (and stamped) in this turn has left already.
                progress.report(now, self.received, self.latencies, self.counts)
        return _cpu_seconds() - cpu_start

    def _add_messages(self, now: float) -> None:
        """Generate what the pace, `--max-pending` and the container's limit allow into the open container."""
        open_count = self.generated - self.opened
        allowed = min(
            self.total - self.generated,
            self.max_pending - self.in_flight_messages - open_count,
            self.batcher.limit - open_count,
        )
        if self.rate:
            allowed = min(allowed, int((now - self.start) * self.rate) + 1 - self.generated)
        if allowed > 0:
            if not open_count:
                self.opened_at = now
            self.generated += allowed

    def _close_batch_when_due(self, now: float) -> None:
        """Close the open container when it is full, when no message follows, or when its delay
        (batchingMaxPublishDelayMs) has passed."""
        open_count = self.generated - self.opened
        if open_count and (
            open_count >= self.batcher.limit or self.generated == self.total or now - self.opened_at >= self.delay_s
        ):
            self.batcher.close(self.opened, self.generated, self.outgoing, self.in_flight, now)
            self.in_flight_messages += open_count
            self.opened = self.generated

    def _wake_at(self, now: float, report_due: float) -> float:
        """When the pump must return: the next progress line, the open container's delay, the next
        message the pace allows, or at once when messages can be generated now."""
        wake = min(report_due, now + RECEIPT_TIMEOUT_S)
        open_count = self.generated - self.opened
        if open_count:
            wake = min(wake, self.opened_at + self.delay_s)
        if min(self.total - self.generated, self.max_pending - self.in_flight_messages - open_count) > 0:
            wake = min(wake, max(self.start + self.generated / self.rate, now + PACE_TICK_S) if self.rate else now)
        return wake

    def _on_command(self, command: BaseCommand, producer_id: int, now: float) -> None:
        kind = command.type
        if kind == BaseCommand.SEND_RECEIPT:
            if command.send_receipt.producer_id == producer_id:
                self._on_receipt(command.send_receipt, False, now)
        elif kind == BaseCommand.SEND_ERROR:
            if command.send_error.producer_id == producer_id:
                self._on_receipt(command.send_error, True, now)
        elif kind == BaseCommand.CLOSE_PRODUCER:
            raise ConnectionLost("the broker closed the producer")

    def _on_receipt(self, answer: Any, failed: bool, now: float) -> None:
        """A SEND_RECEIPT, or a SEND_ERROR when `failed`, for the oldest SEND in flight."""
        closed_at, count, sequence = self.in_flight.popleft()
        if answer.sequence_id != sequence:
            raise ConnectionLost(f"receipt for sequence id {answer.sequence_id}, expected {sequence}")
        if failed:
            if not self.failures:
                print(f"produce: SEND_ERROR {ServerError.Name(answer.error)}: {answer.message}", file=sys.stderr)
            self.failures += count
        self.latencies.append((now - closed_at) * 1e3)
        self.counts.append(count)
        self.received += count
        self.in_flight_messages -= count
        self.last_receipt = self.heard_at = now

    def _check_receipt_timeout(self, now: float) -> None:
        if not self.in_flight:
            self.heard_at = now
        elif now - self.heard_at > RECEIPT_TIMEOUT_S:
            raise ReadTimeout(f"no receipt from the broker in {RECEIPT_TIMEOUT_S:.0f} s")

    def summary(self, args: argparse.Namespace, cpu: float) -> dict:
        seconds = self.last_receipt - self.start
        return {
            "role": "produce",
            "client": "magnetar",
            "topic": args.topic,
            "messages": self.total,
            "entries": len(self.latencies),
            "failures": self.failures,
            "size_bytes": self.size,
            "keys": args.keys,
            "batching": args.batching,
            "batching_max_messages": args.batching_max_messages,
            "rate_target": self.rate,
            "max_pending": self.max_pending,
            "seconds": seconds,
            "msg_per_s": self.total / seconds,
            "mb_per_s": self.total * self.size / seconds / 1e6,
            "latency_ms": percentiles(self.latencies, self.counts),
            "client_cpu_us_per_msg": cpu / self.total * 1e6,
        }


def consume(args: argparse.Namespace) -> int:
    if args.client == "magnetar":
        return consume_magnetar(args)
    client = _client(args)
    batch_policy = (
        pulsar.ConsumerBatchReceivePolicy(args.batch_receive, -1, BATCH_RECEIVE_WAIT_MS) if args.batch_receive else None
    )
    consumers = [
        client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=CONSUMER_TYPES[args.type],
            consumer_name=f"perf-{index}",
            receiver_queue_size=args.receiver_queue_size,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_receive_policy=batch_policy,
        )
        for index in range(args.consumers)
    ]
    print(
        f"consume: subscribed {args.consumers} {args.type} consumers to {args.topic} as {args.subscription}",
        flush=True,
    )
    # One receive per message, or a batch_receive (up to N messages or 10 ms); each message acked.
    receivers = _Receivers(consumers, pulsar.Consumer.batch_receive if args.batch_receive else _receive_one)
    cpu_start = _cpu_seconds()
    receivers.start()
    receivers.report_until_done(args.messages, args.idle_timeout, args.size)
    receivers.stop()
    cpu = _cpu_seconds() - cpu_start
    for consumer in consumers:
        consumer.close()
    client.close()
    return _consume_summary(
        args,
        {"client": "pulsar", "batch_receive": args.batch_receive},
        receivers.counts,
        receivers.first,
        receivers.last,
        percentiles(receivers.latencies),
        cpu,
    )


def _receive_one(consumer: pulsar.Consumer) -> tuple[pulsar.Message, ...]:
    try:
        return (consumer.receive(RECEIVE_POLL_MS),)
    except pulsar.Timeout:
        return ()


class _Receivers:
    """The official client's consumers, one thread each taking messages with `take` and acking each;
    the main thread reads what they count for its progress lines and the summary."""

    def __init__(
        self, consumers: list[pulsar.Consumer], take: Callable[[pulsar.Consumer], Sequence[pulsar.Message]]
    ) -> None:
        self.take = take
        self.latencies = array("d")
        self.counts = [0] * len(consumers)
        self.first = [0.0] * len(consumers)
        self.last = [0.0] * len(consumers)
        self.done = threading.Event()
        self.threads = [
            threading.Thread(target=self._receive_loop, args=(i, c), daemon=True) for i, c in enumerate(consumers)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join()

    def _receive_loop(self, index: int, consumer: pulsar.Consumer) -> None:
        count = 0
        while not self.done.is_set():
            messages = self.take(consumer)
            if not messages:
                continue
            now = time.time()
            now_ms = now * 1e3
            for message in messages:
                self.latencies.append(now_ms - message.publish_timestamp())
                consumer.acknowledge(message)
            if not count:
                self.first[index] = now
            count += len(messages)
            self.counts[index] = count
            self.last[index] = now

    def report_until_done(self, messages: int, idle_timeout_s: float, size: int) -> None:
        """A progress line a second until `messages` arrived or none did for `idle_timeout_s`."""
        reported, reported_at, progress_at, latencies_seen = 0, time.perf_counter(), time.monotonic(), 0
        while True:
            time.sleep(REPORT_INTERVAL_S)
            total = sum(self.counts)
            now = time.perf_counter()
            if total != reported:
                progress_at = time.monotonic()
            if total >= messages or time.monotonic() - progress_at > idle_timeout_s:
                return
            seen = len(self.latencies)
            _progress("consume", total, reported, now - reported_at, size, self.latencies[latencies_seen:seen])
            reported, reported_at, latencies_seen = total, now, seen


def _consume_summary(
    args: argparse.Namespace,
    fields: dict,
    counts: list[int],
    first: list[float],
    last: list[float],
    latency_ms: dict[str, float],
    cpu: float,
) -> int:
    total = sum(counts)
    started = min((t for t in first if t), default=0.0)
    seconds = max(last) - started if total else 0.0
    summary = {
        "role": "consume",
        **fields,
        "topic": args.topic,
        "subscription": args.subscription,
        "type": args.type,
        "consumers": args.consumers,
        "messages": total,
        "expected": args.messages,
        "per_consumer": counts,
        "seconds": seconds,
        "msg_per_s": total / seconds if seconds else 0.0,
        "mb_per_s": total * args.size / seconds / 1e6 if seconds else 0.0,
        "latency_ms": latency_ms,
        "client_cpu_us_per_msg": cpu / total * 1e6 if total else 0.0,
    }
    _finish("consume", summary, args.json)
    if total < args.messages:
        print(f"consume: only {total:,} of {args.messages:,} messages arrived", file=sys.stderr)
        return 1
    return 0


def consume_magnetar(args: argparse.Namespace) -> int:
    """The consumers on magnetar's wire client: one connection and one thread for all of them, as the
    official client shares a connection; permits of `--receiver-queue-size` per consumer, given back
    when half are used; each entry's checksum verified and its metadata parsed (a batch is counted by
    its message count and gets one latency); whole entries acked individually, grouped per 100 ms."""
    topic = normalize_topic(args.topic)
    try:
        connection = _connect(args.service_url, topic, _security(args))
        consumer_ids = [
            connection.subscribe(
                topic,
                args.subscription,
                durable=True,
                create_topic=True,
                sub_type=SUBSCRIPTION_TYPES[args.type],
                consumer_name=f"perf-{index}",
            )
            for index in range(args.consumers)
        ]
    except _Refused as refusal:
        print(f"consume: {refusal}", file=sys.stderr)
        return 2
    except (BrokerError, ConnectionLost, ReadTimeout) as error:
        print(f"consume: {error}", file=sys.stderr)
        return 1
    print(
        f"consume: subscribed {args.consumers} {args.type} consumers to {args.topic} as {args.subscription}",
        flush=True,
    )
    consumers = _PipelinedConsumers(consumer_ids, args.receiver_queue_size)
    try:
        cpu = consumers.receive(connection, args.messages, args.idle_timeout, args.size)
        consumers.close(connection)
    except (BrokerError, ConnectionLost, ReadTimeout) as error:
        print(f"consume: failed after {consumers.total:,} of {args.messages:,} messages: {error}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    fields = {"client": "magnetar", "entries": len(consumers.latencies)}
    latency_ms = percentiles(consumers.latencies, consumers.weights)
    return _consume_summary(args, fields, consumers.counts, consumers.first, consumers.last, latency_ms, cpu)


class _PipelinedConsumers:
    """The consumers of `consume --client magnetar` on one connection: what each received, the permits
    it has yet to give back (`unreturned`: one FLOW once half the queue is used, ConsumerImpl's
    receiverQueueRefillThreshold) and its acks waiting for the next group."""

    def __init__(self, consumer_ids: list[int], receiver_queue_size: int) -> None:
        self.consumer_ids = consumer_ids
        self.index_of = {consumer_id: index for index, consumer_id in enumerate(consumer_ids)}
        self.queue = receiver_queue_size
        self.outgoing = bytearray()
        for consumer_id in consumer_ids:
            self.outgoing += _flow_frame(consumer_id, receiver_queue_size)
        consumers = len(consumer_ids)
        self.unreturned = [0] * consumers
        self.acks: list[list[tuple[int, int]]] = [[] for _ in consumer_ids]
        self.counts, self.first, self.last = [0] * consumers, [0.0] * consumers, [0.0] * consumers
        self.latencies, self.weights = array("d"), array("q")
        self.total = 0

    def receive(self, connection: Connection, messages: int, idle_timeout_s: float, size: int) -> float:
        """Receive until `messages` arrived or none did for `idle_timeout_s`; the CPU seconds it took."""
        cpu_start = _cpu_seconds()
        start = heard_at = time.perf_counter()
        ack_due = start + ACK_GROUP_S
        progress = _ProgressLines("consume", size, start)
        while self.total < messages:
            frames = connection.pump(self.outgoing, min(ack_due, progress.due) - time.perf_counter())
            wall_ms = time.time() * 1e3
            for frame in frames:
                self._on_frame(frame, wall_ms)
            now = time.perf_counter()
            if frames:
                heard_at = now
            if now >= ack_due:
                _queue_acks(self.outgoing, self.consumer_ids, self.acks)
                ack_due = now + ACK_GROUP_S
            if now >= progress.due:
                progress.report(now, self.total, self.latencies, self.weights)
                if now - heard_at > idle_timeout_s:
                    break
        return _cpu_seconds() - cpu_start

    def _on_frame(self, frame: Frame, wall_ms: float) -> None:
        command = frame.command
        if command.type == BaseCommand.MESSAGE:
            message = command.message
            index = self.index_of[message.consumer_id]
            entry = parse_entry(frame.payload)
            count = entry.num_messages
            self.latencies.append(wall_ms - entry.publish_time)
            self.weights.append(count)
            self.acks[index].append((message.message_id.ledgerId, message.message_id.entryId))
            if not self.counts[index]:
                self.first[index] = wall_ms / 1e3
            self.counts[index] += count
            self.last[index] = wall_ms / 1e3
            self.total += count
            self.unreturned[index] += count
            if self.unreturned[index] >= self.queue // 2:
                self.outgoing += _flow_frame(message.consumer_id, self.unreturned[index])
                self.unreturned[index] = 0
        elif command.type == BaseCommand.CLOSE_CONSUMER:
            raise ConnectionLost("the broker closed a consumer")

    def close(self, connection: Connection) -> None:
        """Send the acks still grouped, then close the consumers."""
        _queue_acks(self.outgoing, self.consumer_ids, self.acks)
        deadline = time.perf_counter() + RECEIPT_TIMEOUT_S
        while self.outgoing and time.perf_counter() < deadline:
            connection.pump(self.outgoing, 0.1)
        for consumer_id in self.consumer_ids:
            connection.close_consumer(consumer_id)


def _flow_frame(consumer_id: int, permits: int) -> bytes:
    flow = CommandFlow(consumer_id=consumer_id, messagePermits=permits)
    return encode_frame(BaseCommand(type=BaseCommand.FLOW, flow=flow))


def _queue_acks(outgoing: bytearray, consumer_ids: list[int], acks: list[list[tuple[int, int]]]) -> None:
    for consumer_id, positions in zip(consumer_ids, acks):
        if positions:
            outgoing += individual_ack_frame(consumer_id, positions)
            positions.clear()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magnetar perf", description="Load a broker as pulsar-perf does.")
    sub = parser.add_subparsers(dest="verb", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    common.add_argument("--topic", required=True)
    common.add_argument("--messages", type=int, default=1_000_000, help="how many to send or to wait for")
    common.add_argument("--json", metavar="FILE", help="also write the summary here")
    common.add_argument("--auth-plugin", help="token, basic, tls or Pulsar's client class names (docs/security.md)")
    common.add_argument(
        "--auth-params", help='token:<jwt>, file:///path, {"userId":…,"password":…}, tlsCertFile:…,tlsKeyFile:…'
    )
    common.add_argument("--tls-trust-cert-path", help="CA certificates for a pulsar+ssl:// service URL")
    common.add_argument("--tls-allow-insecure", action="store_true", help="accept any broker certificate")

    produce_parser = sub.add_parser("produce", parents=[common], help="publish and time the receipts")
    produce_parser.add_argument("--size", type=int, default=100, help="payload bytes")
    produce_parser.add_argument("--rate", type=float, default=0, help="msg/s; 0 = as fast as possible")
    produce_parser.add_argument("--keys", type=int, default=1000, help="distinct partition keys, round robin; 0 = none")
    produce_parser.add_argument(
        "--batching", action=argparse.BooleanOptionalAction, default=True, help="KeyBased batching (default on)"
    )
    produce_parser.add_argument("--batch-delay-ms", type=int, default=1, help="batching delay (pulsar-perf's default)")
    produce_parser.add_argument(
        "--batching-max-messages", type=int, default=1000, help="messages per batch container (the client's default)"
    )
    produce_parser.add_argument(
        "--client",
        choices=("pulsar", "magnetar"),
        default="pulsar",
        help="the official pulsar-client, or magnetar's own wire client (cheap per message; payloads carry their index)",
    )
    produce_parser.add_argument("--max-pending", type=int, default=1000, help="sends in flight before blocking")

    consume_parser = sub.add_parser("consume", parents=[common], help="receive, acknowledge and time end to end")
    consume_parser.add_argument("--subscription", default="perf")
    consume_parser.add_argument("--type", choices=sorted(CONSUMER_TYPES), default="Key_Shared")
    consume_parser.add_argument("--consumers", type=int, default=1)
    consume_parser.add_argument("--receiver-queue-size", type=int, default=1000)
    consume_parser.add_argument(
        "--client",
        choices=("pulsar", "magnetar"),
        default="pulsar",
        help="the official pulsar-client, or magnetar's own wire client (non-partitioned topics, individual acks)",
    )
    consume_parser.add_argument(
        "--batch-receive",
        type=int,
        default=0,
        metavar="N",
        help="official client: take messages with batch_receive, up to N at a time or 10 ms, instead of one "
        "receive per message (one hand-over of the GIL per batch); 0 = receive (default)",
    )
    consume_parser.add_argument("--size", type=int, default=100, help="payload bytes, for MB/s only")
    consume_parser.add_argument(
        "--idle-timeout", type=float, default=60, help="give up after this many seconds without a message"
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return produce(args) if args.verb == "produce" else consume(args)
