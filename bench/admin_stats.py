"""Admin API cost on a Key_Shared topic with 64 consumers and 10,000 draining hashes.

The state is built honestly, through the broker, with the official client in this one process:
- consumer c00 subscribes alone (receiver queue 20,000) and is sent one message for each of 10,000
  keys chosen, with Pulsar's ring formula (magnetar's own selector, 100 points per consumer), to have
  10,000 distinct sticky hashes that c00 no longer owns once c01..c63 are connected. c00's application
  never receives them: they sit in its receiver queue, sent and unacknowledged;
- c01..c63 join one by one; each takes ranges from c00, and every pending hash in a range that moves
  starts draining. The broker's own stats must then show 10,000 draining hashes before anything is
  measured.

Measured, one broker (defaults, fsync on):
1. response time of stats, internalStats, pendingAcks, keys/{key} and hashes/{hash} of a draining
   key, and /metrics: sequential requests from this process, median / p90 / max and body size;
2. dispatch throughput while the hashes drain: c01..c63 ack in message listeners, one producer
   publishes 100-byte messages to 1,000 keys that do not drain; messages per second from the first
   send to the last ack, and the broker's CPU per message, in alternating runs without and with a
   poller that starts a GET of stats and then /metrics every 100 ms, on a fixed schedule (up to
   `POLLS_IN_FLIGHT_MAX` at once when answers take longer than the period; a tick finding them all
   busy is skipped and counted). The poller is a process of its own, so that the client's listener
   threads do not hold it back on this process's GIL.
Prints a table and writes bench/results/admin_stats.json.

    python bench/admin_stats.py [--messages 20000] [--runs 3] [--requests 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pulsar

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import READY, Broker, cpu_seconds, load_line, machine
from magnetar.core.selectors import ConsistentHashingSelector
from magnetar.core.sticky_key import key_hash

RESULTS = Path(__file__).parent / "results"
CONSUMERS = 64
DRAINING = 10_000
TRAFFIC_KEYS = 1_000
SIZE_BYTES = 100
POLL_INTERVAL_S = 0.1
# Answers slower than the period overlap rather than push the schedule back; more than this many
# outstanding would only measure a queue.
POLLS_IN_FLIGHT_MAX = 4
SUBSCRIPTION = "ks"
WAIT_S = 120


def consumer_names() -> list[str]:
    return [f"c{i:02d}" for i in range(CONSUMERS)]


def choose_keys() -> tuple[list[str], list[str]]:
    """(draining keys, traffic keys): the first 10,000 keys `d-N` with distinct sticky hashes that the
    full ring does not give to c00, and 1,000 keys `t-N` served by c01..c63 with hashes of their own."""
    ring = ConsistentHashingSelector(100)
    for name in consumer_names():
        ring.add_consumer(name, name)
    taken: set[int] = set()
    draining: list[str] = []
    n = 0
    while len(draining) < DRAINING:
        key = f"d-{n}"
        n += 1
        slot = ring.slot(key_hash(key.encode()))
        if slot not in taken and ring.select(slot) != "c00":
            taken.add(slot)
            draining.append(key)
    traffic: list[str] = []
    n = 0
    while len(traffic) < TRAFFIC_KEYS:
        key = f"t-{n}"
        n += 1
        slot = ring.slot(key_hash(key.encode()))
        if slot not in taken and ring.select(slot) != "c00":
            traffic.append(key)
    return draining, traffic


def wait_for(what: str, check, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def summary(samples_ms: list[float]) -> dict:
    ordered = sorted(samples_ms)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 2),
        "max_ms": round(ordered[-1], 2),
    }


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def listener(self, consumer: pulsar.Consumer, message: pulsar.Message) -> None:
        consumer.acknowledge(message)
        with self.lock:
            self.count += 1


def poll(http_url: str, stats_path: str, stop, polls, busy_ms, skipped) -> None:
    """The poller process: every 100 ms an idle worker (one keep-alive connection each) GETs stats then
    /metrics, until `stop` is set; a tick that finds every worker busy is skipped and counted."""
    idle = threading.Semaphore(POLLS_IN_FLIGHT_MAX)
    ticks: queue.SimpleQueue[bool] = queue.SimpleQueue()

    def worker() -> None:
        with httpx.Client(base_url=http_url, timeout=60) as http:
            while ticks.get():
                started = time.perf_counter()
                http.get(stats_path).raise_for_status()
                http.get("/metrics").raise_for_status()
                with busy_ms.get_lock():
                    busy_ms.value += (time.perf_counter() - started) * 1000
                with polls.get_lock():
                    polls.value += 1
                idle.release()

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(POLLS_IN_FLIGHT_MAX)]
    for thread in workers:
        thread.start()
    tick = time.monotonic()
    while not stop.is_set():
        if idle.acquire(blocking=False):
            ticks.put(True)
        else:
            with skipped.get_lock():
                skipped.value += 1
        tick += POLL_INTERVAL_S
        stop.wait(max(tick - time.monotonic(), 0))
    for _ in workers:
        ticks.put(False)
    for thread in workers:
        thread.join()


class Poller:
    """A poller process; `start` returns once it has polled once, so a run never starts unpolled."""

    def __init__(self, http_url: str, stats_path: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop_event = context.Event()
        self.polls = context.Value("i", 0)
        self.busy_ms = context.Value("d", 0.0)
        self.skipped = context.Value("i", 0)
        self.process = context.Process(
            target=poll,
            args=(http_url, stats_path, self.stop_event, self.polls, self.busy_ms, self.skipped),
            daemon=True,
        )

    def start(self) -> None:
        self.process.start()
        wait_for("the first poll", lambda: self.polls.value > 0)
        with self.polls.get_lock(), self.busy_ms.get_lock(), self.skipped.get_lock():
            self.polls.value, self.busy_ms.value, self.skipped.value = 0, 0.0, 0

    def stop(self) -> None:
        self.stop_event.set()
        self.process.join()


def throughput_run(
    producer: pulsar.Producer,
    counter: Counter,
    traffic: list[str],
    messages: int,
    broker_pid: int,
    poller: Poller | None,
) -> dict:
    payload = b"x" * SIZE_BYTES
    start_count = counter.count
    errors: list[object] = []

    def sent(result: object, _message_id: object) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)

    if poller is not None:
        poller.start()
    cpu_before = cpu_seconds(broker_pid)
    started = time.perf_counter()
    for i in range(messages):
        producer.send_async(payload, sent, partition_key=traffic[i % len(traffic)])
    producer.flush()
    wait_for("every message acked", lambda: counter.count - start_count >= messages)
    elapsed = time.perf_counter() - started
    cpu_after = cpu_seconds(broker_pid)
    if poller is not None:
        poller.stop()
    assert not errors, errors[:5]
    result = {
        "polling": poller is not None,
        "msg_per_s": round(messages / elapsed),
        "broker_cpu_us_per_msg": round((cpu_after - cpu_before) / messages * 1e6, 1),
        "seconds": round(elapsed, 2),
    }
    if poller is not None:
        result["polls_per_s"] = round(poller.polls.value / elapsed, 1)
        result["poll_ms_mean"] = round(poller.busy_ms.value / max(poller.polls.value, 1), 1)
        result["ticks_skipped"] = poller.skipped.value
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=60_000, help="messages per throughput run")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per case (alternating)")
    parser.add_argument("--requests", type=int, default=20, help="requests per endpoint")
    args = parser.parse_args()

    draining_keys, traffic_keys = choose_keys()
    before = machine()
    directory = Path(tempfile.mkdtemp(prefix="admin-stats-"))
    broker = Broker(directory / "data")
    broker.start()
    http_url = READY.search(broker.log_path.read_text()).group(3)
    topic_local = f"admin-stats-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{topic_local}"
    base = f"/admin/v2/persistent/public/default/{topic_local}"
    client = pulsar.Client(
        broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), operation_timeout_seconds=60
    )
    http = httpx.Client(base_url=http_url, timeout=60)
    try:
        built = time.perf_counter()
        counter = Counter()
        holder = client.subscribe(
            topic,
            SUBSCRIPTION,
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name="c00",
            receiver_queue_size=2 * DRAINING,
        )
        producer = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=5_000, block_if_queue_full=True
        )
        for key in draining_keys:
            producer.send_async(b"held", None, partition_key=key)
        producer.flush()

        def sub() -> dict:
            return http.get(f"{base}/stats").json()["subscriptions"][SUBSCRIPTION]

        wait_for("c00 to hold 10,000 messages", lambda: sub()["unackedMessages"] == DRAINING)
        for name in consumer_names()[1:]:
            client.subscribe(
                topic,
                SUBSCRIPTION,
                consumer_type=pulsar.ConsumerType.KeyShared,
                consumer_name=name,
                receiver_queue_size=1000,
                message_listener=counter.listener,
            )
        wait_for("10,000 draining hashes", lambda: sub()["drainingHashesCount"] == DRAINING)
        state = sub()
        build_s = time.perf_counter() - built
        print(
            f"state built in {build_s:.1f} s: {len(state['consumers'])} consumers, "
            f"{state['drainingHashesCount']} draining hashes, {state['unackedMessages']} unacked",
            flush=True,
        )

        draining_key = draining_keys[0]
        sticky_hash = http.get(f"{base}/subscription/{SUBSCRIPTION}/keys/{draining_key}").json()["stickyKeyHash"]
        endpoints = {
            "stats": f"{base}/stats",
            "internalStats": f"{base}/internalStats",
            "pendingAcks": f"{base}/subscription/{SUBSCRIPTION}/pendingAcks",
            "explain key": f"{base}/subscription/{SUBSCRIPTION}/keys/{draining_key}",
            "explain hash": f"{base}/subscription/{SUBSCRIPTION}/hashes/{sticky_hash}",
            "metrics": "/metrics",
        }
        responses = []
        for label, path in endpoints.items():
            samples, size = [], 0
            for _ in range(args.requests):
                started = time.perf_counter()
                response = http.get(path)
                samples.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                size = len(response.content)
            responses.append({"endpoint": label, "requests": args.requests, "bytes": size, **summary(samples)})
            print(f"{label:<14} {responses[-1]['median_ms']:>8} ms median", flush=True)

        runs = []
        warm = throughput_run(producer, counter, traffic_keys, args.messages // 4, broker.pid, None)
        print(f"warm-up {warm['msg_per_s']} msg/s", flush=True)
        for run in range(args.runs):
            for polling in (False, True):
                poller = Poller(http_url, f"{base}/stats") if polling else None
                result = throughput_run(producer, counter, traffic_keys, args.messages, broker.pid, poller)
                result["run"] = run
                runs.append(result)
                print(
                    f"run {run} polling={polling}: {result['msg_per_s']} msg/s, "
                    f"{result['broker_cpu_us_per_msg']} us/msg broker CPU",
                    flush=True,
                )
        final = sub()
        assert final["drainingHashesCount"] == DRAINING, "the draining state changed during the runs"
        holder.close()
    finally:
        http.close()
        client.close()
        broker.stop()
    after = machine()

    cases = {}
    for polling in (False, True):
        mine = [r for r in runs if r["polling"] == polling]
        cases["polling" if polling else "quiet"] = {
            "msg_per_s_median": statistics.median(r["msg_per_s"] for r in mine),
            "msg_per_s_range": [min(r["msg_per_s"] for r in mine), max(r["msg_per_s"] for r in mine)],
            "broker_cpu_us_per_msg_median": statistics.median(r["broker_cpu_us_per_msg"] for r in mine),
        }
        if polling:
            cases["polling"]["polls_per_s_median"] = statistics.median(r["polls_per_s"] for r in mine)
            cases["polling"]["poll_ms_mean_median"] = statistics.median(r["poll_ms_mean"] for r in mine)
            cases["polling"]["ticks_skipped_total"] = sum(r["ticks_skipped"] for r in mine)
    quiet, polled = cases["quiet"]["msg_per_s_median"], cases["polling"]["msg_per_s_median"]
    report = {
        "bench": "admin_stats",
        "consumers": CONSUMERS,
        "draining_hashes": DRAINING,
        "unacked_messages": DRAINING,
        "traffic_keys": TRAFFIC_KEYS,
        "size_bytes": SIZE_BYTES,
        "messages_per_run": args.messages,
        "poll_interval_ms": POLL_INTERVAL_S * 1000,
        "state_build_s": round(build_s, 1),
        "machine_before": before,
        "machine_after": after,
        "responses": responses,
        "throughput": cases,
        "throughput_change_with_polling_pct": round((polled - quiet) / quiet * 100, 1),
        "runs": runs,
    }

    print()
    print(f"64 consumers, {DRAINING:,} draining hashes ({load_line(before, after)})")
    print(f"{'endpoint':<14} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} {'bytes':>10}")
    for row in responses:
        print(f"{row['endpoint']:<14} {row['median_ms']:>10} {row['p90_ms']:>8} {row['max_ms']:>8} {row['bytes']:>10}")
    print()
    print(f"{'dispatch':<14} {'msg/s median':>12} {'range':>16} {'broker µs/msg':>14}")
    for label, case in cases.items():
        low, high = case["msg_per_s_range"]
        print(
            f"{label:<14} {case['msg_per_s_median']:>12} {f'{low}-{high}':>16} "
            f"{case['broker_cpu_us_per_msg_median']:>14}"
        )
    print(
        f"change with polling every 100 ms: {report['throughput_change_with_polling_pct']}% "
        f"({cases['polling']['polls_per_s_median']} polls/s answered, {cases['polling']['poll_ms_mean_median']} ms "
        f"each, {cases['polling']['ticks_skipped_total']} ticks skipped with {POLLS_IN_FLIGHT_MAX} in flight)"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "admin_stats.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
