"""The Key_Shared soak: an hour of consumer churn at 5,000 msg/s against one broker process, with the
churn suite's contract checked over every delivery and the broker's RSS and descriptors watched.

Owns: the soak's plan (the churn of its consumers, the pace, when to sample), the broker's samples and
the verdict, the table and bench/results/soak_key_shared.json. Must not touch: the broker's code, the
contract's rules. The consumers, the publisher, the delivery log and the rules are the churn suite's
(tests/e2e/churn.py, imported from there so that the soak checks exactly what the suite checks, fed one
event at a time so that an hour's deliveries are never kept); the broker is bench/broker_process.py's.

One `magnetar standalone` (pip379, its own data directory, free ports) and one unbatched producer, in a
child process of its own, at `--rate` over `--keys` keys. Six consumers on their own clients, two of them
slow (each message held 0.3-1.5 s before its ack); about once a second one of them closes with its client
and subscribes again on a new one, or stops receiving for 1-3 s; and now and then a consumer in a child
process takes its share of the keys, holds everything it receives, and is killed (SIGKILL, no close) 2-6 s
later.
Every `--sample-s` the broker's VmRSS, open descriptors (/proc/<pid>/fd) and CPU time, and the
delivered rate. A stall is no delivery for `STALL_S` while messages are unacked. At the end: publishing
and churn stop, the consumers drain, and the rules are checked.

Growth is the median of the `--window-minutes` after the warm-up against the median of the last
`--window-minutes`: medians, because the descriptors move by one with every connection that comes and
goes, and windows of the same length under the same churn, so that both hold the same mix of it.

    python bench/soak_key_shared.py [--minutes 60] [--warmup-minutes 10] [--window-minutes 5]

With `--pulsar URL --pulsar-http URL --pulsar-pid PID` the same plan runs against a broker already running
(Apache Pulsar's standalone, for the comparison), its process's RSS and descriptors watched instead.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))

import churn

from broker_process import Broker, cpu_seconds, machine

RESULTS = Path(__file__).parent / "results"
RATE = 5_000
KEYS = 500
WORKERS = 6
SLOW_WORKERS = 2
CHILDREN = 2  # killed consumers alive at once, at most
STALL_S = 15.0
GROWTH_LIMIT_PCT = 5.0
CHILD_POLL_S = 0.05
# The workers' receiver queues. The churn suite's smallest (5, 10, 50) starve a consumer of its share: one
# seen with 4 permits delivered ~320 msg/s through the flow round trips where its sixth of the keys brings
# 833, its keys filled the replay queue to the look-ahead limit and normal reads stopped for everyone, so
# the backlog grew under magnetar and Apache Pulsar 4.0.7 alike (docs/performance.md, "Soak"). A soak
# measures what an hour does to a subscription that keeps up; the killed consumers keep the small ones.
QUEUE_SIZES = (100, 500, 1000)
PROGRESS_S = 60
JSON_VIOLATIONS = 20
REQUIRED = (*churn.Contract().violations(), "drained", "stall", "growth")


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float  # since the soak started
    rss_kb: int
    fds: int
    cpu_s: float  # the broker's, cumulative
    delivered: int  # receives, cumulative
    published: int
    acked: int


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Tally:
    """What the log and the publisher report, under one lock: the contract's checkers, counts, latency.
    The log calls `feed` under its own lock, so `feed` sees events in seq order."""

    def __init__(self) -> None:
        self.contract = churn.Contract()
        self.lock = threading.Lock()
        self.delivered = 0
        self.published = 0
        self.latency_ms: Counter[int] = Counter()  # first deliveries, whole milliseconds
        self.last_delivery_at = time.monotonic()

    def feed(self, event: churn.Event) -> None:
        with self.lock:
            if event.kind == "received":
                self.delivered += 1
                self.last_delivery_at = time.monotonic()
                if event.index not in self.contract.first_delivery_order.delivered:
                    self.latency_ms[max(0, int(event.e2e_ms))] += 1
            self.contract.feed(event)

    def on_published(self, index: int, key: str) -> None:
        with self.lock:
            self.published += 1
            self.contract.no_loss.published(index, key)

    def counts(self) -> tuple[int, int, int, int]:
        """delivered, published, acked, unacked"""
        with self.lock:
            no_loss = self.contract.no_loss
            return self.delivered, self.published, no_loss.acked.low + no_loss.acked.stored(), no_loss.unacked()


class KilledConsumer:
    """A consumer in a child process (this file with `--child`) that prints every message it receives
    and never acks; `kill` ends it without a close. Its receives are logged as they are read from the
    pipe; before the kill the child is stopped (SIGSTOP) and the pipe read to its end, so that every
    message it received is logged before its `closing`, and that before the broker can see it gone."""

    def __init__(self, name: str, url: str, topic: str, queue_size: int, log: churn.DeliveryLog) -> None:
        self.identity = f"{name}#1"
        self.log = log
        self.lock = threading.Lock()
        self.held = 0
        self._partial = b""
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", url, topic, name, str(queue_size)], stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        self._fd = self.process.stdout.fileno()
        os.set_blocking(self._fd, False)

    def pump(self) -> None:
        with self.lock:
            if self.process.returncode is None:  # else killed, and its pipe read to the end and closed
                self._read()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                self._record(line.decode())

    def _record(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind != "received":
            self.log.record(kind, self.identity, detail=rest)
            return
        index, key, message_id, redelivery, e2e_ms = rest.split(" ")
        self.held += 1
        self.log.record(
            "received",
            self.identity,
            index=int(index),
            key=key,
            message_id=message_id,
            redelivery_count=int(redelivery),
            e2e_ms=float(e2e_ms),
        )

    def kill(self) -> None:
        with self.lock:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGSTOP)
                os.waitpid(self.process.pid, os.WUNTRACED)
            self._read()
            self.log.record("closing", self.identity, detail=f"killed holding {self.held}")
            self.process.kill()
            self.process.wait()
            assert self.process.stdout is not None
            self.process.stdout.close()
            self.log.record("closed", self.identity)


class ChildPublisher:
    """The unbatched producer in a child process (this file with `--publisher`): in this process it shares
    the interpreter lock with six consumers and the checkers, and reached 4,100 of the 5,000 msg/s it was
    paced to. Each receipt comes back as a line `published <index> <key>`, each failure as `failed ...`,
    and goes to `on_published` from a reader thread."""

    def __init__(
        self, url: str, topic: str, args: argparse.Namespace, seconds: float, on_published: Callable[[int, str], None]
    ) -> None:
        self.on_published = on_published
        self.failed: list[str] = []
        command = [sys.executable, __file__, "--publisher", url, topic, str(args.keys), str(args.rate)]
        self.process = subprocess.Popen([*command, str(args.seed), str(seconds)], stdout=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, daemon=True, name="publisher-receipts")
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, _, rest = line.decode().rstrip("\n").partition(" ")
            if kind == "published":
                index, key = rest.split(" ")
                self.on_published(int(index), key)
            else:
                self.failed.append(rest)

    def wait(self, timeout_s: float) -> None:
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.failed.append(f"the publisher was still running {timeout_s:.0f} s after its end; killed")
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout_s)
        if self.process.returncode:
            self.failed.append(f"the publisher exited with {self.process.returncode}")


def publisher_main(url: str, topic: str, keys: int, rate: float, seed: int, seconds: float) -> int:
    """The publisher's process: the churn suite's Publisher for `seconds`, its receipts printed."""
    # The protocol goes to the parent on its own descriptor: the client's logger writes to fd 1.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    lock = threading.Lock()

    def published(index: int, key: str) -> None:
        with lock:
            out.write(f"published {index} {key}\n")

    publisher = churn.Publisher(url, topic, False, published)
    publisher.publish(keys_forever(random.Random(seed + 1), keys, time.monotonic() + seconds), rate)
    publisher.wait(seconds + churn.DRAIN_S)
    with lock:
        for failure in publisher.failed:
            out.write(f"failed {failure}\n")
        if publisher.publishing():
            out.write(f"failed still publishing {churn.DRAIN_S} s after the end\n")
        out.flush()
    publisher.close()
    return 0


def child_main(url: str, topic: str, name: str, queue_size: int) -> int:
    """The killed consumer's process: subscribe, print each message received, never ack, until killed."""
    import pulsar

    # The protocol goes to the parent on its own descriptor: the client's logger writes to fd 1.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    client = pulsar.Client(
        url, operation_timeout_seconds=churn.OPERATION_TIMEOUT_S, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        consumer = client.subscribe(
            topic,
            churn.SUBSCRIPTION,
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=name,
            receiver_queue_size=queue_size,
            initial_position=pulsar.InitialPosition.Earliest,
        )
    except pulsar.PulsarException as error:
        out.write(f"error subscribe: {error!r}\n")
        out.flush()
        return 1
    out.write(f"subscribed receiver_queue_size={queue_size}\n")
    out.flush()
    while True:
        try:
            message = consumer.receive(timeout_millis=100)
        except pulsar.Timeout:
            continue
        mid = message.message_id()
        e2e_ms = time.time() * 1000 - message.publish_timestamp()
        out.write(
            f"received {message.properties()['i']} {message.partition_key()} "
            f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()} {message.redelivery_count()} {e2e_ms:.1f}\n"
        )
        out.flush()


class Churn:
    """The plan, drawn from one seeded generator: which consumer restarts or pauses, when a killed
    consumer starts and when it dies."""

    def __init__(self, load: churn.Workload, rnd: random.Random, max_children: int) -> None:
        self.load = load
        self.max_children = max_children
        self.rnd = rnd
        self.children: list[tuple[float, KilledConsumer]] = []  # (kill at, child)
        self.unpause_at: dict[str, float] = {}
        self.spawned = 0
        self.actions: Counter[str] = Counter()
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._pump_children, daemon=True, name="children")

    def run_until(self, end: float) -> None:
        self._pump.start()
        while time.monotonic() < end:
            time.sleep(self.rnd.uniform(0.7, 1.3))
            self._due(time.monotonic())
            self._act()
        self.stop()

    def stop(self) -> None:
        for _at, child in self.children:
            child.kill()
        self.children = []
        for name in self.unpause_at:
            self.load.workers[name].paused.clear()
        self.unpause_at = {}
        self._stop.set()

    def _pump_children(self) -> None:
        while not self._stop.wait(CHILD_POLL_S):
            for _at, child in list(self.children):
                child.pump()

    def _due(self, now: float) -> None:
        for at, child in [c for c in self.children if c[0] <= now]:
            child.kill()
            self.children.remove((at, child))
            self.actions["killed"] += 1
        for name in [n for n, at in self.unpause_at.items() if at <= now]:
            self.load.workers[name].paused.clear()
            del self.unpause_at[name]

    def _act(self) -> None:
        draw = self.rnd.random()
        if draw < 0.25 and len(self.children) < self.max_children:
            self.spawned += 1
            child = KilledConsumer(
                f"k{self.spawned}", self.load.url, self.load.topic, self.rnd.choice(churn.QUEUE_SIZES), self.load.log
            )
            self.children.append((time.monotonic() + self.rnd.uniform(2, 6), child))
            self.actions["spawned"] += 1
        elif draw < 0.45:
            name = self.rnd.choice([n for n in self.load.workers if n not in self.unpause_at])
            self.load.workers[name].paused.set()
            self.unpause_at[name] = time.monotonic() + self.rnd.uniform(1, 3)
            self.actions["paused"] += 1
        else:
            worker = self.load.workers[self.rnd.choice(list(self.load.workers))]
            worker.restart()
            self.actions["restarted"] += 1


class Sampler(threading.Thread):
    """Every `interval_s`: the broker's RSS, descriptors, CPU time, and the tally's counts; a stall is
    recorded once per episode."""

    def __init__(self, pid: int, tally: Tally, interval_s: float, start: float) -> None:
        super().__init__(daemon=True, name="sampler")
        self.pid = pid
        self.tally = tally
        self.interval_s = interval_s
        self.start_at = start
        self.samples: list[Sample] = []
        self.stalls: list[str] = []
        self._stalled = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self.sample()
            if len(self.samples) % max(1, round(PROGRESS_S / self.interval_s)) == 0:
                self.progress()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def progress(self) -> None:
        """One line a minute, so that a long run shows how it goes."""
        last = self.samples[-1]
        recent = figures(self.samples[-max(2, round(PROGRESS_S / self.interval_s)) :])
        print(
            f"t={last.t_s:5.0f} s rss {last.rss_kb / 1024:.1f} MB fds {last.fds} "
            f"delivered {recent['delivered_per_s']:,.0f}/s published {recent['published_per_s']:,.0f}/s "
            f"broker cpu {recent['broker_cpu_per_s']:.2f} unacked {last.published - last.acked} "
            f"stalls {len(self.stalls)}",
            flush=True,
        )

    def sample(self) -> None:
        delivered, published, acked, unacked = self.tally.counts()
        now = time.monotonic()
        self.samples.append(
            Sample(
                now - self.start_at,
                rss_kb(self.pid),
                open_fds(self.pid),
                cpu_seconds(self.pid),
                delivered,
                published,
                acked,
            )
        )
        quiet_s = now - self.tally.last_delivery_at
        stalled = unacked > 0 and quiet_s > STALL_S
        if stalled and not self._stalled:
            self.stalls.append(f"t={now - self.start_at:.0f} s: no delivery for {quiet_s:.0f} s, {unacked} unacked")
        self._stalled = stalled


def keys_forever(rnd: random.Random, keys: int, end: float) -> Iterator[str]:
    names = [f"k-{n}" for n in range(keys)]
    while time.monotonic() < end:
        yield rnd.choice(names)


def percentile(histogram: Counter[int], fraction: float) -> float:
    total = sum(histogram.values())
    if not total:
        return float("nan")
    rank, seen = fraction * total, 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return float(value)
    return float(max(histogram))


def window(samples: list[Sample], low_s: float, high_s: float) -> list[Sample]:
    return [s for s in samples if low_s <= s.t_s <= high_s]


def figures(samples: list[Sample]) -> dict:
    """The medians of a window, and its delivered rate and broker CPU per second."""
    span = samples[-1].t_s - samples[0].t_s if len(samples) > 1 else 0.0
    return {
        "from_s": samples[0].t_s,
        "to_s": samples[-1].t_s,
        "rss_mb": statistics.median(s.rss_kb for s in samples) / 1024,
        "fds": statistics.median(s.fds for s in samples),
        "delivered_per_s": (samples[-1].delivered - samples[0].delivered) / span if span else 0.0,
        "published_per_s": (samples[-1].published - samples[0].published) / span if span else 0.0,
        "broker_cpu_per_s": (samples[-1].cpu_s - samples[0].cpu_s) / span if span else 0.0,
    }


def growth(samples: list[Sample], warmup_s: float, window_s: float, end_s: float) -> dict:
    after = window(samples, warmup_s, warmup_s + window_s)
    last = window(samples, end_s - window_s, end_s)
    if not after or not last:
        raise RuntimeError(f"no samples in a window: {len(after)} after the warm-up, {len(last)} at the end")
    warm, end = figures(after), figures(last)
    return {
        "after_warmup": warm,
        "end": end,
        "rss_growth_pct": 100 * (end["rss_mb"] - warm["rss_mb"]) / warm["rss_mb"],
        "fds_growth_pct": 100 * (end["fds"] - warm["fds"]) / warm["fds"],
    }


def drain(load: churn.Workload, tally: Tally) -> list[str]:
    """After publishing and churn stop: every message acked, then the broker's backlog empty."""
    started = time.monotonic()
    while tally.counts()[3] and time.monotonic() - started < churn.DRAIN_S:
        if time.monotonic() - load.log.last_event_at > churn.QUIET_S:
            break
        time.sleep(0.1)
    unacked = tally.counts()[3]
    if unacked:
        return [f"{unacked} published messages unacked {time.monotonic() - started:.0f} s after churn stopped"]
    deadline = time.monotonic() + churn.BACKLOG_S
    while True:
        try:
            stats = churn.subscription_stats(load.http_url, load.topic)
        except churn.ADMIN_ERRORS as error:
            return [f"stats failed: {error!r}"]
        if stats.get("msgBacklog") == 0:
            return []
        if time.monotonic() > deadline:
            return [f"every message acked, but after {churn.BACKLOG_S} s msgBacklog={stats.get('msgBacklog')}"]
        time.sleep(0.1)


def add_workers(load: churn.Workload, rnd: random.Random, seed: int) -> None:
    for n in range(WORKERS):
        own = random.Random(seed * 1000 + n)  # one generator per thread: Random is not shared
        slow = n < SLOW_WORKERS
        delay = churn.ack_delays(own, 0.3, 1.5) if slow else churn.ack_delays(own, 0.0, 0.05, immediate=0.5)
        load.add(
            f"{'slow' if slow else 'w'}{n}",
            queue_size=rnd.choice(QUEUE_SIZES),
            ack_delay_s=delay,
            new_client_per_incarnation=True,
        )


def soak(args: argparse.Namespace, broker: Broker | RunningBroker) -> dict:
    rnd = random.Random(args.seed)
    tally = Tally()
    log = churn.DeliveryLog(observer=tally.feed, keep=False)
    topic = f"persistent://public/default/soak-{args.seed}"
    started = time.monotonic()
    end = started + args.minutes * 60
    sampler = Sampler(broker.pid, tally, args.sample_s, started)
    with churn.Workload(broker.url, broker.http_url, topic, False, log, tally.on_published) as load:
        add_workers(load, rnd, args.seed)
        load.start()
        sampler.start()
        plan = Churn(load, rnd, args.children)
        publisher = ChildPublisher(broker.url, topic, args, end - time.monotonic(), tally.on_published)
        try:
            plan.run_until(end)
        finally:
            plan.stop()
        publisher.wait(churn.DRAIN_S + 10)
        sampler.sample()
        drained = drain(load, tally)
        for worker in load.workers.values():
            worker.stop()
        sampler.stop()
    violations = tally.contract.violations()
    violations["operations"] += publisher.failed
    violations["drained"] = drained
    violations["stall"] = sampler.stalls
    delivered, published, acked, _unacked = tally.counts()
    return {
        "samples": sampler.samples,
        "violations": violations,
        "published": published,
        "delivered": delivered,
        "acked": acked,
        "actions": dict(plan.actions),
        "latency_ms": {
            "p50": percentile(tally.latency_ms, 0.5),
            "p99": percentile(tally.latency_ms, 0.99),
            "max": float(max(tally.latency_ms, default=0)),
        },
    }


def report(result: dict) -> None:
    g = result["growth"]
    warm, end = g["after_warmup"], g["end"]
    print()
    print(
        f"soak: {result['minutes']} min at {result['rate']:,} msg/s over {result['keys']} keys, seed {result['seed']}"
    )
    print(
        f"published {result['published']:,}, delivered {result['delivered']:,}, acked {result['acked']:,}; "
        f"churn {result['actions']}"
    )
    print("figure | after warm-up (median) | end (median) | growth")
    print(f"broker RSS MB | {warm['rss_mb']:.1f} | {end['rss_mb']:.1f} | {g['rss_growth_pct']:+.1f}%")
    print(f"broker open fds | {warm['fds']:.0f} | {end['fds']:.0f} | {g['fds_growth_pct']:+.1f}%")
    print(f"delivered msg/s | {warm['delivered_per_s']:,.0f} | {end['delivered_per_s']:,.0f} |")
    print(f"broker CPU s/s | {warm['broker_cpu_per_s']:.2f} | {end['broker_cpu_per_s']:.2f} |")
    lat = result["latency_ms"]
    print(f"e2e latency of first deliveries ms: p50 {lat['p50']:.0f}, p99 {lat['p99']:.0f}, max {lat['max']:.0f}")
    print(f"stalls: {len(result['violations']['stall'])}")
    for rule in REQUIRED:
        found = result["violations"].get(rule, [])
        print(f"{rule}: {'ok' if not found else f'FAILED ({len(found)})'}")
        for violation in found[:3]:
            print(f"  {violation}")
    print(
        f"load average before {' '.join(result['machine_before']['loadavg'])}, "
        f"after {' '.join(result['machine_after']['loadavg'])}"
    )


@dataclass
class RunningBroker:
    """A broker this script did not start (`--pulsar`): sampled, never stopped."""

    url: str
    http_url: str
    pid: int


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, topic, name, queue_size = sys.argv[2:6]
        return child_main(url, topic, name, int(queue_size))
    if len(sys.argv) > 1 and sys.argv[1] == "--publisher":
        url, topic, keys, rate, seed, seconds = sys.argv[2:8]
        return publisher_main(url, topic, int(keys), float(rate), int(seed), float(seconds))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--warmup-minutes", type=float, default=None, help="default: 10, or a sixth of a shorter run")
    parser.add_argument("--window-minutes", type=float, default=None, help="default: 5, or a twelfth of a shorter run")
    parser.add_argument("--rate", type=float, default=RATE)
    parser.add_argument("--keys", type=int, default=KEYS)
    parser.add_argument("--children", type=int, default=CHILDREN, help="killed consumers alive at once, at most")
    parser.add_argument("--sample-s", type=float, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where the broker's data directory goes")
    parser.add_argument("--pulsar", help="a running broker's service URL, instead of starting magnetar")
    parser.add_argument("--pulsar-http", help="that broker's web service URL")
    parser.add_argument("--pulsar-pid", type=int, help="that broker's process, for its RSS and descriptors")
    args = parser.parse_args()
    if args.pulsar and not (args.pulsar_http and args.pulsar_pid):
        parser.error("--pulsar needs --pulsar-http and --pulsar-pid")
    warmup_min = args.warmup_minutes if args.warmup_minutes is not None else min(10, args.minutes / 6)
    window_min = args.window_minutes if args.window_minutes is not None else min(5, args.minutes / 12)
    before = machine()
    if args.pulsar:
        run = soak(args, RunningBroker(args.pulsar, args.pulsar_http, args.pulsar_pid))
        log_path = "(the running broker's)"
    else:
        directory = Path(tempfile.mkdtemp(prefix="magnetar-soak-", dir=args.dir))
        broker = Broker(directory / "data", {"keySharedOrderingMode": "pip379"})
        broker.start()
        try:
            run = soak(args, broker)
        finally:
            broker.stop()
            shutil.rmtree(broker.data_dir, ignore_errors=True)  # gigabytes after an hour; the log stays
        log_path = str(broker.log_path)
    samples = run.pop("samples")
    end_s = samples[-1].t_s
    result = {
        "bench": "soak_key_shared",
        "minutes": args.minutes,
        "rate": args.rate,
        "keys": args.keys,
        "seed": args.seed,
        "warmup_minutes": warmup_min,
        "window_minutes": window_min,
        "machine_before": before,
        "machine_after": machine(),
        "broker": args.pulsar or "magnetar",
        "broker_log": log_path,
        **run,
        "growth": growth(samples, warmup_min * 60, window_min * 60, end_s),
        "samples": [asdict(s) for s in samples],
    }
    g = result["growth"]
    result["violations"]["growth"] = [
        f"{what} grew {g[f'{what}_growth_pct']:+.1f}% after the warm-up (limit {GROWTH_LIMIT_PCT}%)"
        for what in ("rss", "fds")
        if g[f"{what}_growth_pct"] > GROWTH_LIMIT_PCT
    ]
    result["failed"] = [rule for rule in REQUIRED if result["violations"].get(rule)]
    report(result)
    # A run that did not drain has millions of messages unacked: the JSON keeps counts and the first few.
    result["violations"] = {
        rule: {"count": len(found), "first": found[:JSON_VIOLATIONS]} for rule, found in result["violations"].items()
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak_key_shared.json").write_text(json.dumps(result, indent=2) + "\n")
    print("FAILED: " + ", ".join(result["failed"]) if result["failed"] else "passed")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
