"""Replicated subscriptions (PIP-33): sync lag, duplicates after a failover, marker overhead.

Two `magnetar standalone` processes (clusters r1 and r2, fresh data directories, fsync on) wired as the
other replication benchmarks wire them (namespace `bench/geo` replicating to [r1, r2]); one broker pair
per snapshot frequency (`replicatedSubscriptionsSnapshotFrequencyMillis`, `-c key=value`). The producer
is `magnetar perf produce --client magnetar --no-batching` on r1, paced (`--rate`): one message per
entry, and every payload carries the message's index k in its first 8 bytes, so a message is known by
the same k in both clusters. Each run has a fresh topic, created on r1 through the admin API, started
once both replicators (r1 -> r2 and r2 -> r1) are connected and the subscription exists, replicated, in
both clusters (a consumer with `replicate_subscription_state_enabled=True` subscribed in r2 and closed,
as Pulsar's tests do).

**Sync lag** (per message: ack in r1 -> r2's subscription passed it). One Exclusive consumer in r1
(official client, replicated subscription) acknowledges each message individually as it receives it and
notes the time of each `acknowledge()` call (monotonic clock). A separate process polls both brokers'
`internalStats` every `--poll-ms` (10 ms) and keeps each change of the subscription's `markDeletePosition`
with the time it was seen (the midpoint between the poll that saw it and the one before: +-half a poll
interval plus one request). After the run, a reader of r2's topic (magnetar's wire client, non-durable)
maps each k to its position in r2 (markers are never dispatched, so it sees data only) and the consumer's
message ids map k to r1. Message k "passed" in a cluster at the first poll whose mark-delete position is
at or after k's position there. Two lags per message, over every message of the run:
- from the client's `acknowledge()` call to r2 passing k: what a user sees; includes the official
  client's ack grouping (the C++ client sends grouped acks every 100 ms, not configurable from Python);
- from r1's mark-delete passing k (the broker has the ack) to r2 passing k: the broker's part.
The issue's goal, p99 <= 1.5 x the snapshot frequency, is judged on both and printed for both.

**Duplicates after a failover** (Pulsar's rule vs magnetar's acked ranges). 4 Shared consumers in r1
(official client, one thread each, replicated subscription) receive at `--dup-rate` (10,000 msg/s) and
acknowledge each message after a seeded random delay (by k, so both modes see the same workload):
`uniform` = U(0, 100 ms); `slow` = the same, and 1 message in 20,000 held 10 s (a slow message).
After 2/3 of the messages have been received the consumers stop abruptly (pending acks are dropped, the
consumers closed); the producer goes on to the end. Once r2 has every message and r2's subscription has
not changed for max(5 x frequency, 3 s), the group fails over: one Shared consumer on r2 drains the
subscription. Counted: duplicates = messages received in r2 whose ack had been sent in r1; loss =
messages neither acked in r1 nor received in r2 (must be 0); and, from r2's subscription state at the
failover, how many acked messages lie after r2's mark-delete position (in the pulsar mode, what Pulsar's
rule redelivers, derived: a check of the count; with acked ranges r2's mark-delete position also moves by
the ranges, so there it is not Pulsar's rule). Modes: `pulsar` (the acked-ranges setting off, or no
setting while it does not exist) and `acked-ranges` (`--acked-ranges-setting KEY`: KEY=true / false
passed with -c). Goal: acked-ranges duplicates <= 1% of Pulsar's rule.

**Marker overhead**: for each lag run, marker entries stored in each cluster = `entriesAddedCounter`
growth minus the data entries, and their bytes = `totalSize` growth minus the data entries' sizes (the
reader's entry bytes; only while no ledger was trimmed), per second of production. With no traffic: a
topic whose replicated subscription never saw a message, and each run's topic once its last snapshot is
done (3 x frequency + 2 s after its last message), watched for `--idle-seconds`: must be 0.

Prints tables and writes bench/results/replication_subscriptions.json.

    python bench/replication_subscriptions.py [--parts lag,dup,markers] [--frequencies 1000,100]
        [--rates 1000,10000] [--seconds 30] [--dup-seconds 30] [--scenarios uniform,slow]
        [--modes pulsar,acked-ranges] [--acked-ranges-setting KEY] [--quick]
"""

from __future__ import annotations

import argparse
import heapq
import http.client
import json
import multiprocessing
import random
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from bisect import bisect_right
from pathlib import Path
from typing import Any

import pulsar

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import cpu_seconds, load_line, machine
from magnetar.client.wire import EARLIEST, FULL_HASH_RANGE, read_range
from replication_common import (
    SIZE_BYTES,
    TENANT,
    ClusterBroker,
    admin,
    create_topic,
    log_excerpts,
    read_json,
    running_pair,
    topic_stats,
    wait_process,
    write_result,
)

NAMESPACES = {"geo": ["r1", "r2"]}
FREQUENCY_SETTING = "replicatedSubscriptionsSnapshotFrequencyMillis"
SUBSCRIPTION = "rs"
DUP_CONSUMERS = 4
UNIFORM_DELAY_S = 0.1
SLOW_EVERY = 20_000
SLOW_DELAY_S = 10.0
STOP_FRACTION = 2 / 3
CLIENT_LOGGER = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


# ------------------------------------------------------------------------------------- helpers


def topic_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def internal_stats(broker: ClusterBroker, topic: str) -> dict[str, Any]:
    return admin(broker, "GET", topic_path(topic) + "/internalStats")[1]


def parse_position(text: str) -> tuple[int, int]:
    ledger, entry = text.split(":")
    return int(ledger), int(entry)


def cursor_state(broker: ClusterBroker, topic: str) -> tuple[str, str] | None:
    cursor = internal_stats(broker, topic).get("cursors", {}).get(SUBSCRIPTION)
    if cursor is None:
        return None
    return cursor["markDeletePosition"], cursor["individuallyDeletedMessages"]


def wait_for(condition, what: str, timeout_s: float, detail=lambda: "", poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    raise RuntimeError(f"{what}: not in {timeout_s:.0f} s {detail()}")


def prepare_topic(
    brokers: dict[str, ClusterBroker], clients: dict[str, pulsar.Client], topic: str, consumer_type: pulsar.ConsumerType
) -> None:
    """The topic on r1 (its replicator to r2 connected), the replicated subscription in r2 (subscribed and
    closed there, which also creates the topic in r2), r2's replicator back to r1 connected."""
    create_topic(brokers, topic, replicated=True)
    clients["r2"].subscribe(
        topic,
        SUBSCRIPTION,
        consumer_type=consumer_type,
        replicate_subscription_state_enabled=True,
        initial_position=pulsar.InitialPosition.Earliest,
    ).close()

    def back_connected() -> bool:
        replication = (topic_stats(brokers["r2"], topic) or {}).get("replication") or {}
        return bool((replication.get("r1") or {}).get("connected"))

    wait_for(back_connected, f"r2's replicator of {topic} connected to r1", 30, lambda: log_excerpts(brokers))


def produce(
    brokers: dict[str, ClusterBroker], directory: Path, topic: str, messages: int, rate: float, run_id: str
) -> tuple[subprocess.Popen, Path]:
    json_path = directory / f"produce-{run_id}.json"
    command = [
        sys.executable,
        "-m",
        "magnetar.cli.main",
        "perf",
        "produce",
        "--service-url",
        brokers["r1"].url,
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--size",
        str(SIZE_BYTES),
        "--keys",
        "100",
        "--no-batching",
        "--rate",
        str(rate),
        "--client",
        "magnetar",
        "--json",
        str(json_path),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL), json_path


def read_topic(broker: ClusterBroker, topic: str) -> tuple[list[tuple[int, int]], list[int], int]:
    """Every data entry of `topic` on `broker` in order: (positions, indexes from the payloads, total bytes).
    The admin's lastMessageId is the last entry, a marker as often as not (as Pulsar's admin answers);
    the reader never receives markers."""
    _, last = admin(broker, "GET", topic_path(topic) + "/lastMessageId")
    end = (last["ledgerId"], last["entryId"])
    positions, indexes, size = [], [], 0
    for received in read_range(broker.url, topic, EARLIEST, end, FULL_HASH_RANGE, timeout_s=120):
        positions.append(received.position)
        indexes.append(int.from_bytes(received.entry.payload[:8], "big"))
        size += len(received.entry.entry)
    return positions, indexes, size


def snapshot_metrics(broker: ClusterBroker) -> dict[str, float]:
    """The broker's replicated-subscription snapshot counters (one cluster label; one busy topic at a time)."""
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=15) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("pulsar_replicated_subscriptions_"):
            name, value = line.rsplit(" ", 1)
            found[name.split("{")[0]] = float(value)
    return found


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
    }


# ------------------------------------------------------------------------------------- poller


def poll_positions(targets: dict[str, tuple[str, str]], out_path: str, interval_s: float, stop) -> None:
    """Process body: for each cluster (http url, internalStats path) one thread reading the subscription's
    cursor every `interval_s` over a kept-alive HTTP connection; writes [read time, previous read time,
    markDeletePosition, individuallyDeletedMessages] for every change, and the number of polls."""
    results: dict[str, Any] = {}

    def poll(name: str, url: str, path: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        changes, polls, errors, last, previous = [], 0, 0, None, None
        while not stop.is_set():
            start = time.monotonic()
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                body = response.read()
                end = time.monotonic()
                cursor = json.loads(body).get("cursors", {}).get(SUBSCRIPTION) if response.status == 200 else None
            except (OSError, http.client.HTTPException, ValueError):
                errors += 1
                connection.close()
                connection = http.client.HTTPConnection(host, int(port), timeout=10)
                continue
            polls += 1
            read_at = (start + end) / 2
            if cursor is not None:
                state = (cursor["markDeletePosition"], cursor["individuallyDeletedMessages"])
                if state != last:
                    changes.append([read_at, previous if previous is not None else read_at, *state])
                    last = state
            previous = read_at
            time.sleep(max(0.0, start + interval_s - time.monotonic()))
        results[name] = {"changes": changes, "polls": polls, "errors": errors}

    threads = [threading.Thread(target=poll, args=(name, url, path)) for name, (url, path) in targets.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Path(out_path).write_text(json.dumps(results))


class Poller:
    def __init__(self, brokers: dict[str, ClusterBroker], topic: str, out_path: Path, interval_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop_event = context.Event()
        self.out_path = out_path
        targets = {name: (broker.http_url, topic_path(topic) + "/internalStats") for name, broker in brokers.items()}
        self.process = context.Process(
            target=poll_positions, args=(targets, str(out_path), interval_s, self.stop_event)
        )
        self.process.start()

    def finish(self) -> dict[str, Any]:
        self.stop_event.set()
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
            raise RuntimeError("poller did not stop")
        return json.loads(self.out_path.read_text())


def passing_times(changes: list[list], positions: list[tuple[int, int]], indexes: list[int]) -> dict[int, float]:
    """k -> when the subscription's mark-delete position first covered k's position (midpoint between the
    poll that saw it and the previous poll)."""
    passed: dict[int, float] = {}
    covered = 0
    for read_at, previous, mark_delete, _ranges in changes:
        count = bisect_right(positions, parse_position(mark_delete))
        when = (read_at + previous) / 2
        for i in range(covered, count):
            passed[indexes[i]] = when
        covered = max(covered, count)
    return passed


# ------------------------------------------------------------------------------------- sync lag


def lag_run(
    brokers: dict[str, ClusterBroker],
    clients: dict[str, pulsar.Client],
    directory: Path,
    frequency_ms: int,
    rate: float,
    seconds: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    run_id = f"lag-{frequency_ms}-{int(rate)}-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{TENANT}/geo/{run_id}"
    messages = int(rate * seconds)
    print(
        f"--- sync lag, frequency {frequency_ms} ms, {rate:,.0f} msg/s for {seconds:g} s ({messages:,} messages)",
        flush=True,
    )
    prepare_topic(brokers, clients, topic, pulsar.ConsumerType.Exclusive)
    consumer = clients["r1"].subscribe(
        topic,
        SUBSCRIPTION,
        consumer_type=pulsar.ConsumerType.Exclusive,
        replicate_subscription_state_enabled=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    before = {name: internal_stats(broker, topic) for name, broker in brokers.items()}
    metrics_before = {name: snapshot_metrics(broker) for name, broker in brokers.items()}
    acked: list[tuple[int, int, int, float, int]] = []  # k, ledger, entry, ack time, publish ms
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            while len(acked) < messages:
                message = consumer.receive(timeout_millis=int(args.timeout * 1000))
                consumer.acknowledge(message)
                now = time.monotonic()
                message_id = message.message_id()
                acked.append(
                    (
                        int.from_bytes(message.data()[:8], "big"),
                        message_id.ledger_id(),
                        message_id.entry_id(),
                        now,
                        message.publish_timestamp(),
                    )
                )
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failure.append(error)

    poller = Poller(brokers, topic, directory / f"poll-{run_id}.json", args.poll_ms / 1000)
    cpu_start = {name: cpu_seconds(broker.pid) for name, broker in brokers.items()}
    wall_offset = time.time() - time.monotonic()
    consumer_thread = threading.Thread(target=consume)
    consumer_thread.start()
    producer, produce_json = produce(brokers, directory, topic, messages, rate, run_id)
    backlogs: dict[str, list[int]] = {"r1": [], "r2": []}  # each replicator's backlog, every 0.5 s
    try:
        deadline = time.monotonic() + seconds + args.timeout
        while producer.poll() is None or consumer_thread.is_alive():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{topic}: producer or r1's consumer still running after {seconds + args.timeout:.0f} s"
                )
            for name, remote in (("r1", "r2"), ("r2", "r1")):
                replicator = ((topic_stats(brokers[name], topic) or {}).get("replication") or {}).get(remote) or {}
                backlogs[name].append(replicator.get("replicationBacklog") or 0)
            time.sleep(0.5)
        if producer.returncode != 0:
            raise RuntimeError(f"perf produce exited with {producer.returncode}")
        consumer_thread.join(timeout=args.timeout)
        if failure or consumer_thread.is_alive():
            raise RuntimeError(f"r1's consumer got {len(acked):,} of {messages:,}: {failure}\n{log_excerpts(brokers)}")
        produced_at = time.monotonic()
        wait_for(
            lambda: ((topic_stats(brokers["r2"], topic) or {}).get("msgInCounter") or 0) >= messages,
            f"r2 stored {messages:,} messages of {topic}",
            args.timeout,
        )
        tables = {"r2": read_topic(brokers["r2"], topic)}
        last_r2 = tables["r2"][0][-1]  # the last data entry (the admin's lastMessageId may name a marker)

        def synced() -> bool:
            state = cursor_state(brokers["r2"], topic)
            return state is not None and parse_position(state[0]) >= last_r2

        wait_for(
            synced,
            f"r2's subscription of {topic} at its last message {last_r2}",
            10 + 5 * frequency_ms / 1000,
            lambda: f"r1 {cursor_state(brokers['r1'], topic)}, r2 {cursor_state(brokers['r2'], topic)}",
        )
        sync_wait_s = time.monotonic() - produced_at
        cpu = {name: cpu_seconds(broker.pid) - cpu_start[name] for name, broker in brokers.items()}
    finally:
        polled = poller.finish()
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    consumer.close()
    snapshots = {}
    for name, broker in brokers.items():
        now, then = snapshot_metrics(broker), metrics_before[name]
        completed = now.get("pulsar_replicated_subscriptions_snapshot_ms_count", 0) - then.get(
            "pulsar_replicated_subscriptions_snapshot_ms_count", 0
        )
        took = now.get("pulsar_replicated_subscriptions_snapshot_ms_sum", 0) - then.get(
            "pulsar_replicated_subscriptions_snapshot_ms_sum", 0
        )
        timed_out = now.get("pulsar_replicated_subscriptions_timedout_snapshots_total", 0) - then.get(
            "pulsar_replicated_subscriptions_timedout_snapshots_total", 0
        )
        if "pulsar_replicated_subscriptions_snapshot_ms_count" not in now:  # a broker without these metrics
            snapshots[name] = None
            continue
        snapshots[name] = {
            "completed": completed,
            "mean_ms": took / completed if completed else None,
            "timed_out": timed_out,
        }
    # The last snapshot (data arrived since the previous one) is done within a frequency or two.
    time.sleep(3 * frequency_ms / 1000 + 2)
    after = {name: internal_stats(broker, topic) for name, broker in brokers.items()}
    idle_start = after
    time.sleep(args.idle_seconds)
    idle_end = {name: internal_stats(broker, topic) for name, broker in brokers.items()}

    tables["r1"] = read_topic(brokers["r1"], topic)
    positions_r2, indexes_r2, _ = tables["r2"]
    if indexes_r2 != list(range(messages)) or tables["r1"][1] != list(range(messages)):
        raise RuntimeError(
            f"{topic}: the data entries are not the {messages:,} messages in order "
            f"(r1 {len(tables['r1'][1]):,}, r2 {len(indexes_r2):,})"
        )
    passed_r2 = passing_times(polled["r2"]["changes"], positions_r2, indexes_r2)
    passed_r1 = passing_times(polled["r1"]["changes"], tables["r1"][0], tables["r1"][1])
    from_ack, from_r1, missing = [], [], 0
    for k, _ledger, _entry, acked_at, _publish in acked:
        if k not in passed_r2:
            missing += 1
            continue
        from_ack.append((passed_r2[k] - acked_at) * 1000)
        if k in passed_r1:
            from_r1.append((passed_r2[k] - passed_r1[k]) * 1000)
    consumer_e2e = [(acked_at + wall_offset) * 1000 - publish for _k, _l, _e, acked_at, publish in acked]
    produced = read_json(produce_json) or {}
    seconds_produced = produced.get("seconds") or produced.get("duration_s") or seconds
    markers = {}
    for name in brokers:
        entries = after[name]["entriesAddedCounter"] - before[name]["entriesAddedCounter"]
        size = after[name]["totalSize"] - before[name]["totalSize"]
        trimmed = after[name]["numberOfEntries"] != after[name]["entriesAddedCounter"]
        marker_entries = entries - messages
        marker_bytes = None if trimmed else size - tables[name][2]
        markers[name] = {
            "marker_entries": marker_entries,
            "marker_bytes": marker_bytes,
            "marker_entries_per_s": marker_entries / seconds_produced,
            "marker_bytes_per_s": None if marker_bytes is None else marker_bytes / seconds_produced,
            "bytes_per_marker": None if marker_bytes is None or not marker_entries else marker_bytes / marker_entries,
            "data_bytes": tables[name][2],
            "idle_entries": idle_end[name]["entriesAddedCounter"] - idle_start[name]["entriesAddedCounter"],
        }
    result = {
        "frequency_ms": frequency_ms,
        "rate": rate,
        "seconds": seconds,
        "messages": messages,
        "topic": topic,
        "produce": produced,
        "lag_from_ack_ms": summary(from_ack),
        "lag_from_r1_mark_delete_ms": summary(from_r1),
        "not_passed_in_r2": missing,
        "r1_consumer_e2e_ms": summary(consumer_e2e),
        "r2_mark_delete_changes": len(polled["r2"]["changes"]),
        "polls": {name: {"polls": p["polls"], "errors": p["errors"]} for name, p in polled.items()},
        "sync_wait_s": sync_wait_s,
        "snapshots": snapshots,
        "replicator_backlog_entries": {
            name: {"mean": sum(b) / len(b) if b else None, "max": max(b, default=None)} for name, b in backlogs.items()
        },
        "broker_cpu_us_per_msg": {name: s / messages * 1e6 for name, s in cpu.items()},
        "markers": markers,
    }
    goal = 1.5 * frequency_ms
    print(
        f"    lag from ack p50 {result['lag_from_ack_ms']['p50']:.0f} p99 {result['lag_from_ack_ms']['p99']:.0f} ms, "
        f"from r1 mark-delete p50 {result['lag_from_r1_mark_delete_ms']['p50']:.0f} "
        f"p99 {result['lag_from_r1_mark_delete_ms']['p99']:.0f} ms (goal {goal:.0f}); r2 moved "
        f"{result['r2_mark_delete_changes']} times; markers r1 {markers['r1']['marker_entries']} "
        f"r2 {markers['r2']['marker_entries']}, "
        f"idle {markers['r1']['idle_entries']}/{markers['r2']['idle_entries']}; replicator backlogs (entries) "
        f"{result['replicator_backlog_entries']}",
        flush=True,
    )
    return result


def idle_topic(brokers: dict[str, ClusterBroker], clients: dict[str, pulsar.Client], seconds: float) -> dict[str, Any]:
    """A topic with a replicated subscription in both clusters (a consumer connected in r1) and no message
    ever: entries added in `seconds`, per cluster."""
    topic = f"persistent://{TENANT}/geo/idle-{uuid.uuid4().hex[:6]}"
    prepare_topic(brokers, clients, topic, pulsar.ConsumerType.Exclusive)
    consumer = clients["r1"].subscribe(topic, SUBSCRIPTION, replicate_subscription_state_enabled=True)
    try:
        before = {name: internal_stats(broker, topic)["entriesAddedCounter"] for name, broker in brokers.items()}
        time.sleep(seconds)
        after = {name: internal_stats(broker, topic)["entriesAddedCounter"] for name, broker in brokers.items()}
    finally:
        consumer.close()
    return {"topic": topic, "seconds": seconds, "entries_added": {name: after[name] - before[name] for name in after}}


# ------------------------------------------------------------------------------------- duplicates


def ack_delays(messages: int, scenario: str, seed: int) -> list[float]:
    rng = random.Random(seed)
    delays = [rng.uniform(0, UNIFORM_DELAY_S) for _ in range(messages)]
    if scenario == "slow":
        for k in range(messages):
            if rng.randrange(SLOW_EVERY) == 0:
                delays[k] = SLOW_DELAY_S
    return delays


def dup_run(
    brokers: dict[str, ClusterBroker],
    clients: dict[str, pulsar.Client],
    directory: Path,
    frequency_ms: int,
    mode: str,
    scenario: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    run_id = f"dup-{mode}-{scenario}-{frequency_ms}-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{TENANT}/geo/{run_id}"
    messages = int(args.dup_rate * args.dup_seconds)
    stop_at = int(messages * STOP_FRACTION)
    print(
        f"--- duplicates, {mode}, {scenario}, frequency {frequency_ms} ms: {messages:,} messages at "
        f"{args.dup_rate:,.0f} msg/s, {DUP_CONSUMERS} Shared consumers in r1 stop after {stop_at:,}",
        flush=True,
    )
    delays = ack_delays(messages, scenario, args.seed)
    prepare_topic(brokers, clients, topic, pulsar.ConsumerType.Shared)
    consumers = [
        clients["r1"].subscribe(
            topic,
            SUBSCRIPTION,
            consumer_type=pulsar.ConsumerType.Shared,
            replicate_subscription_state_enabled=True,
            consumer_name=f"c{i}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i in range(DUP_CONSUMERS)
    ]
    stop = threading.Event()
    received: list[list[int]] = [[] for _ in consumers]
    acked: list[list[int]] = [[] for _ in consumers]
    failure: list[BaseException] = []

    def consume(i: int) -> None:
        consumer, mine, done, pending = consumers[i], received[i], acked[i], []
        try:
            while not stop.is_set():
                try:
                    message = consumer.receive(timeout_millis=5)
                except pulsar.Timeout:
                    message = None
                now = time.monotonic()
                if message is not None:
                    k = int.from_bytes(message.data()[:8], "big")
                    mine.append(k)
                    heapq.heappush(pending, (now + delays[k], k, message))
                while pending and pending[0][0] <= now and not stop.is_set():
                    _, k, due = heapq.heappop(pending)
                    consumer.acknowledge(due)
                    done.append(k)
        except BaseException as error:  # noqa: BLE001
            failure.append(error)
            stop.set()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(consumers))]
    for thread in threads:
        thread.start()
    producer, produce_json = produce(brokers, directory, topic, messages, args.dup_rate, run_id)
    try:
        deadline = time.monotonic() + args.dup_seconds + args.timeout
        while sum(map(len, received)) < stop_at and not stop.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError(f"r1's consumers received {sum(map(len, received)):,} of {stop_at:,}")
            time.sleep(0.005)
        stop.set()
        for thread in threads:
            thread.join()
        for consumer in consumers:  # sends the acks the client still groups
            consumer.close()
        stopped_at = time.monotonic()
        if failure:
            raise RuntimeError(f"r1's consumers failed: {failure}")
        wait_process(producer, "perf produce", args.dup_seconds + args.timeout)
    finally:
        stop.set()
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    acked_r1 = set().union(*map(set, acked))
    received_r1 = set().union(*map(set, received))
    wait_for(
        lambda: ((topic_stats(brokers["r2"], topic) or {}).get("msgInCounter") or 0) >= messages,
        f"r2 stored {messages:,} messages of {topic}",
        args.timeout,
    )
    # r2's subscription settles: no change for max(5 x frequency, 3 s).
    quiet_s = max(5 * frequency_ms / 1000, 3.0)
    state, since = cursor_state(brokers["r2"], topic), time.monotonic()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise RuntimeError(f"r2's subscription of {topic} still moving after {args.timeout:.0f} s")
        time.sleep(0.1)
        now_state = cursor_state(brokers["r2"], topic)
        if now_state != state:
            state, since = now_state, time.monotonic()
    settled_s = time.monotonic() - stopped_at
    r1_state = cursor_state(brokers["r1"], topic)
    positions_r2, indexes_r2, _ = read_topic(brokers["r2"], topic)
    r2_mark_delete = parse_position(state[0])
    after_mark_delete = {indexes_r2[i] for i in range(bisect_right(positions_r2, r2_mark_delete), len(positions_r2))}
    pulsar_rule_duplicates = len(after_mark_delete & acked_r1)

    failover = clients["r2"].subscribe(
        topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared, replicate_subscription_state_enabled=True
    )
    got: list[int] = []
    try:
        while True:
            try:
                message = failover.receive(timeout_millis=3000)
            except pulsar.Timeout:
                break
            got.append(int.from_bytes(message.data()[:8], "big"))
            failover.acknowledge(message)
    finally:
        failover.close()
    received_r2 = set(got)
    duplicates = len(received_r2 & acked_r1)
    lost = messages - len(acked_r1 | received_r2)
    result = {
        "mode": mode,
        "scenario": scenario,
        "frequency_ms": frequency_ms,
        "topic": topic,
        "messages": messages,
        "produce": read_json(produce_json),
        "received_r1": len(received_r1),
        "acked_r1": len(acked_r1),
        "received_unacked_r1": len(received_r1 - acked_r1),
        "settled_after_stop_s": settled_s,
        "r1_subscription": r1_state,
        "r2_subscription_at_failover": state,
        "received_r2": len(got),
        "received_r2_distinct": len(received_r2),
        "duplicates": duplicates,
        "lost": lost,
        "pulsar_rule_duplicates_derived": pulsar_rule_duplicates,
    }
    print(
        f"    acked in r1 {len(acked_r1):,} (received {len(received_r1):,}); r2 at failover md {state[0]}, "
        f"ranges {state[1][:120]}; received in r2 {len(got):,}: duplicates {duplicates:,}, lost {lost:,}; "
        f"acked after r2's mark-delete {pulsar_rule_duplicates:,}",
        flush=True,
    )
    return result


# ------------------------------------------------------------------------------------- main


def magnetar_source() -> dict[str, Any]:
    """Which magnetar the brokers run: the package's directory and its commit. Run against a clean copy of a
    commit (`git archive <commit> src | tar -x -C DIR`, a COMMIT file beside src, PYTHONPATH=DIR/src) when
    others have uncommitted broker edits in the working tree: the brokers would run those."""
    import magnetar

    root = Path(magnetar.__file__).resolve().parents[2]
    if (root / "COMMIT").exists():
        return {"path": str(root), "commit": (root / "COMMIT").read_text().strip(), "uncommitted_changes": False}
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "src"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"path": str(root), "commit": None, "uncommitted_changes": None}
    return {"path": str(root), "commit": commit, "uncommitted_changes": bool(dirty)}


def pair_settings(frequency_ms: int, mode: str | None, args: argparse.Namespace) -> dict[str, str]:
    settings = {FREQUENCY_SETTING: str(frequency_ms)}
    if mode is not None and args.acked_ranges_setting:
        settings[args.acked_ranges_setting] = "true" if mode == "acked-ranges" else "false"
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="lag,dup", help="lag (with its marker overhead), dup")
    parser.add_argument("--frequencies", default="1000,100", help="snapshot frequencies (ms) of the lag runs")
    parser.add_argument("--rates", default="1000,10000", help="msg/s published in r1 in the lag runs")
    parser.add_argument("--seconds", type=float, default=30, help="length of each lag run")
    parser.add_argument("--poll-ms", type=float, default=10, help="how often the subscription's position is read")
    parser.add_argument("--idle-seconds", type=float, default=10, help="how long a topic without traffic is watched")
    parser.add_argument("--dup-rate", type=float, default=10_000)
    parser.add_argument("--dup-seconds", type=float, default=30)
    parser.add_argument("--dup-frequencies", default="1000", help="snapshot frequencies (ms) of the duplicate runs")
    parser.add_argument("--scenarios", default="uniform,slow", help="ack delays: uniform, slow")
    parser.add_argument("--modes", default="pulsar,acked-ranges")
    parser.add_argument(
        "--acked-ranges-setting",
        default=None,
        metavar="KEY",
        help="the broker setting that turns acked-ranges replication on (true) or off (false)",
    )
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--timeout", type=float, default=60, help="seconds any wait may take beyond the run")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 s runs, 3 s idle, 100 ms frequency")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.dup_seconds, args.idle_seconds = 5, 6, 3
        args.frequencies, args.dup_frequencies = "100", "100"
    parts = args.parts.split(",")
    modes = args.modes.split(",")
    if "acked-ranges" in modes and not args.acked_ranges_setting:
        print(
            "no --acked-ranges-setting: the acked-ranges mode is skipped, the pulsar mode runs with the "
            "brokers' default",
            flush=True,
        )
        modes = [m for m in modes if m != "acked-ranges"]
    source = magnetar_source()
    print(
        f"magnetar from {source['path']} at {source['commit']}"
        + (" WITH UNCOMMITTED CHANGES in src/" if source["uncommitted_changes"] else ""),
        flush=True,
    )
    load_before = machine()
    lag_runs: list[dict[str, Any]] = []
    idle_runs: list[dict[str, Any]] = []
    dup_runs: list[dict[str, Any]] = []
    if "lag" in parts:
        for frequency_ms in map(int, args.frequencies.split(",")):
            settings = pair_settings(frequency_ms, None, args)
            with running_pair(NAMESPACES, args.dir, args.keep, settings) as (brokers, directory):
                clients = {name: pulsar.Client(broker.url, logger=CLIENT_LOGGER) for name, broker in brokers.items()}
                try:
                    idle = idle_topic(brokers, clients, args.idle_seconds)
                    idle_runs.append({"frequency_ms": frequency_ms, **idle})
                    for rate in map(float, args.rates.split(",")):
                        lag_runs.append(lag_run(brokers, clients, directory, frequency_ms, rate, args.seconds, args))
                finally:
                    for client in clients.values():
                        client.close()
    if "dup" in parts:
        for frequency_ms in map(int, args.dup_frequencies.split(",")):
            for mode in modes:
                settings = pair_settings(frequency_ms, mode, args)
                with running_pair(NAMESPACES, args.dir, args.keep, settings) as (brokers, directory):
                    clients = {
                        name: pulsar.Client(broker.url, logger=CLIENT_LOGGER) for name, broker in brokers.items()
                    }
                    try:
                        for scenario in args.scenarios.split(","):
                            dup_runs.append(
                                {
                                    "settings": settings,
                                    **dup_run(brokers, clients, directory, frequency_ms, mode, scenario, args),
                                }
                            )
                    finally:
                        for client in clients.values():
                            client.close()
    load_after = machine()
    result = {
        "bench": "replication_subscriptions",
        "quick": args.quick,
        "args": vars(args),
        "magnetar": source,
        "machine_before": load_before,
        "machine_after": load_after,
        "lag_runs": lag_runs,
        "idle_topics": idle_runs,
        "dup_runs": dup_runs,
    }
    print()
    print(load_line(load_before, load_after) + (" [--quick: smoke run, numbers not meaningful]" if args.quick else ""))
    if lag_runs:
        print("sync lag (ack in r1 -> r2's subscription passed the message), per message, ms:")
        print(
            "frequency ms | msg/s | from ack() p50 | p99 | max | from r1 mark-delete p50 | p99 | max | goal p99 | "
            "r2 moves | r1 consumer e2e p99 | replicator backlog mean/max r1->r2, r2->r1"
        )

        def verdict(value: float, goal: float) -> str:
            return "met" if value <= goal else "NOT met"

        for r in lag_runs:
            a, b, goal = r["lag_from_ack_ms"], r["lag_from_r1_mark_delete_ms"], 1.5 * r["frequency_ms"]
            print(
                f"{r['frequency_ms']} | {r['rate']:,.0f} | {a['p50']:.0f} | {a['p99']:.0f} ({verdict(a['p99'], goal)}) | "
                f"{a['max']:.0f} | {b['p50']:.0f} | {b['p99']:.0f} ({verdict(b['p99'], goal)}) | {b['max']:.0f} | "
                f"{goal:.0f} | {r['r2_mark_delete_changes']} | {r['r1_consumer_e2e_ms']['p99']:.0f} | "
                + ", ".join(
                    f"{b['mean']:,.0f}/{b['max']:,}" if b["max"] is not None else "-"
                    for b in r["replicator_backlog_entries"].values()
                )
                + (f" | {r['not_passed_in_r2']} never passed" if r["not_passed_in_r2"] else "")
            )
        print(
            "marker overhead: frequency ms | msg/s | cluster | marker entries/s | bytes/s | bytes/marker | "
            "after traffic, in idle s: entries"
        )
        for r in lag_runs:
            for name, m in r["markers"].items():
                per_s = "n/a" if m["marker_bytes_per_s"] is None else f"{m['marker_bytes_per_s']:,.0f}"
                per_marker = "n/a" if m["bytes_per_marker"] is None else f"{m['bytes_per_marker']:.0f}"
                print(
                    f"{r['frequency_ms']} | {r['rate']:,.0f} | {name} | {m['marker_entries_per_s']:.2f} | {per_s} | "
                    f"{per_marker} | {m['idle_entries']}"
                )
        for i in idle_runs:
            print(
                f"never any traffic, frequency {i['frequency_ms']} ms, {i['seconds']:g} s: entries added "
                f"{i['entries_added']}"
            )
    if dup_runs:
        print(
            "duplicates after failover: frequency ms | scenario | mode | acked in r1 | received in r2 | duplicates | "
            "lost | acked after r2's mark-delete (derived)"
        )
        for r in dup_runs:
            print(
                f"{r['frequency_ms']} | {r['scenario']} | {r['mode']} | {r['acked_r1']:,} | {r['received_r2']:,} | "
                f"{r['duplicates']:,} | {r['lost']:,} | {r['pulsar_rule_duplicates_derived']:,}"
            )
    print(f"wrote {write_result('replication_subscriptions', result)}")


if __name__ == "__main__":
    main()
