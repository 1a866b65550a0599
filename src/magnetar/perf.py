"""`magnetar perf produce|consume`: load generators like `pulsar-perf`, built on the official client.

Owns the measurement loops only: pacing, counting, latency percentiles, progress lines and the JSON
summary. It talks to a broker as any user does, through `pulsar-client`, and imports nothing of the
broker, so its numbers hold for Pulsar too.

Latencies: a producer's is from `send_async` to its receipt callback (monotonic clock); a consumer's
is end to end, receive time minus the message's `publish_timestamp`. The client stamps that in whole
milliseconds from the wall clock, so end-to-end latencies are only meaningful on one machine and
carry up to 1 ms of truncation.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import sys
import threading
import time
from array import array
from collections.abc import Sequence

import pulsar

__all__ = ["main", "percentiles"]

PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p99_9", 0.999))
REPORT_INTERVAL_S = 1.0
# A receive that waits longer than this re-checks whether the run is over; short enough that a
# finished run exits promptly, long enough to cost nothing while messages flow.
RECEIVE_POLL_MS = 200
CONSUMER_TYPES = {
    "Exclusive": pulsar.ConsumerType.Exclusive,
    "Shared": pulsar.ConsumerType.Shared,
    "Failover": pulsar.ConsumerType.Failover,
    "Key_Shared": pulsar.ConsumerType.KeyShared,
}


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """Nearest-rank p50/p99/p99.9 and max of `samples` (empty: all zero)."""
    if not samples:
        return {name: 0.0 for name, _ in PERCENTILES} | {"max": 0.0}
    ordered = sorted(samples)
    last = len(ordered) - 1
    result = {name: ordered[min(last, int(fraction * len(ordered)))] for name, fraction in PERCENTILES}
    result["max"] = ordered[last]
    return result


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _latency_text(latency: dict[str, float]) -> str:
    return f"p50 {latency['p50']:.2f} p99 {latency['p99']:.2f} p99.9 {latency['p99_9']:.2f} max {latency['max']:.2f} ms"


def _progress(role: str, count: int, previous: int, interval_s: float, size: int, window: Sequence[float]) -> None:
    rate = (count - previous) / interval_s
    latency = percentiles(window)
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


def _client(service_url: str) -> pulsar.Client:
    return pulsar.Client(
        service_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )


def produce(args: argparse.Namespace) -> int:
    client = _client(args.service_url)
    producer = client.create_producer(
        args.topic,
        batching_enabled=args.batching,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_publish_delay_ms=args.batch_delay_ms,
        max_pending_messages=args.max_pending,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    payload = bytes(args.size)
    keys = [f"key-{index}" for index in range(args.keys)] or [None]
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


def consume(args: argparse.Namespace) -> int:
    client = _client(args.service_url)
    consumers = [
        client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=CONSUMER_TYPES[args.type],
            consumer_name=f"perf-{index}",
            receiver_queue_size=args.receiver_queue_size,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for index in range(args.consumers)
    ]
    print(
        f"consume: subscribed {args.consumers} {args.type} consumers to {args.topic} as {args.subscription}",
        flush=True,
    )
    latencies = array("d")
    counts = [0] * args.consumers
    first = [0.0] * args.consumers
    last = [0.0] * args.consumers
    done = threading.Event()

    def receive_loop(index: int, consumer: pulsar.Consumer) -> None:
        count = 0
        while not done.is_set():
            try:
                message = consumer.receive(RECEIVE_POLL_MS)
            except pulsar.Timeout:
                continue
            now = time.time()
            latencies.append(now * 1e3 - message.publish_timestamp())
            consumer.acknowledge(message)
            if not count:
                first[index] = now
            count += 1
            counts[index] = count
            last[index] = now

    cpu_start = _cpu_seconds()
    threads = [threading.Thread(target=receive_loop, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
    for thread in threads:
        thread.start()
    reported, reported_at, progress_at, latencies_seen = 0, time.perf_counter(), time.monotonic(), 0
    while True:
        time.sleep(REPORT_INTERVAL_S)
        total = sum(counts)
        now = time.perf_counter()
        if total != reported:
            progress_at = time.monotonic()
        if total >= args.messages or time.monotonic() - progress_at > args.idle_timeout:
            break
        seen = len(latencies)
        _progress("consume", total, reported, now - reported_at, args.size, latencies[latencies_seen:seen])
        reported, reported_at, latencies_seen = total, now, seen
    done.set()
    for thread in threads:
        thread.join()
    cpu = _cpu_seconds() - cpu_start
    for consumer in consumers:
        consumer.close()
    client.close()
    total = sum(counts)
    started = min((t for t in first if t), default=0.0)
    seconds = max(last) - started if total else 0.0
    summary = {
        "role": "consume",
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
        "latency_ms": percentiles(latencies),
        "client_cpu_us_per_msg": cpu / total * 1e6 if total else 0.0,
    }
    _finish("consume", summary, args.json)
    if total < args.messages:
        print(f"consume: only {total:,} of {args.messages:,} messages arrived", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magnetar perf", description="Load a broker as pulsar-perf does.")
    sub = parser.add_subparsers(dest="verb", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    common.add_argument("--topic", required=True)
    common.add_argument("--messages", type=int, default=1_000_000, help="how many to send or to wait for")
    common.add_argument("--json", metavar="FILE", help="also write the summary here")

    produce_parser = sub.add_parser("produce", parents=[common], help="publish and time the receipts")
    produce_parser.add_argument("--size", type=int, default=100, help="payload bytes")
    produce_parser.add_argument("--rate", type=float, default=0, help="msg/s; 0 = as fast as possible")
    produce_parser.add_argument("--keys", type=int, default=1000, help="distinct partition keys, round robin; 0 = none")
    produce_parser.add_argument(
        "--batching", action=argparse.BooleanOptionalAction, default=True, help="KeyBased batching (default on)"
    )
    produce_parser.add_argument("--batch-delay-ms", type=int, default=1, help="batching delay (pulsar-perf's default)")
    produce_parser.add_argument("--max-pending", type=int, default=1000, help="sends in flight before blocking")

    consume_parser = sub.add_parser("consume", parents=[common], help="receive, acknowledge and time end to end")
    consume_parser.add_argument("--subscription", default="perf")
    consume_parser.add_argument("--type", choices=sorted(CONSUMER_TYPES), default="Key_Shared")
    consume_parser.add_argument("--consumers", type=int, default=1)
    consume_parser.add_argument("--receiver-queue-size", type=int, default=1000)
    consume_parser.add_argument("--size", type=int, default=100, help="payload bytes, for MB/s only")
    consume_parser.add_argument(
        "--idle-timeout", type=float, default=60, help="give up after this many seconds without a message"
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return produce(args) if args.verb == "produce" else consume(args)
