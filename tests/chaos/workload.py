"""Cluster chaos with the official clients: topics spread over a cluster's brokers, a keyed producer and a
Key_Shared subscription on each, kept running through a fault that the test module brings about; then
tests/e2e/churn.py's checkers on each topic's delivery log, progress after the fault, the drain, and where
the test asks, the silence of a broker after the others took its topics over.

Owns: the plan a seed gives (topic names spread over the namespace's bundles, keys, consumers per topic,
their receiver queues and ack delays), the clients (churn.py's Publisher, or the Go client's producer in
compat/go's chaos-produce; churn.py's ConsumerWorker, each consumer on a client of its own), what their
logs say, the marks of a fault in every topic's log, and the verdict; all of it in a child process
(WorkloadProcess, `serve`). Must not touch: the cluster's processes (test_cluster_chaos.py kills, pauses
and restarts them through the fixture) or the broker's code.

What the clients' logs say. The official Python client does not tell the application which broker a
consumer is on; its C++ core logs it, through the logger of the first client made in the process, for
every client (ClientLogs). So the workload runs in a process of its own, whose first client is made with
that logger, and tells the clients apart by the thread that logs: each client has its own I/O thread. Each
consumer's lines go into its topic's delivery log, in order with its receives and acks: `connected` when
the consumer is created on a broker ("Created consumer on broker [local -> broker]"), `released` when it
loses that broker ("Schedule reconnection": the connection closed, or the broker closed the consumer).
Deliveries then count as churn.py's module doc says: a hold ends when its incarnation is released, so a
key may go to another consumer once the broker that delivered it no longer serves the topic, as Pulsar's
new owner does, knowing nothing of what the old one gave out. With `trace_frames` the logger also notes
the arrival of every MESSAGE frame and the broker that sent it (the client's debug line "Received a
message from the server"): the one place where a delivery is attributed to a broker.

The seed fixes the plan, not the interleaving: a failing seed shows the same kind of failure again, not
necessarily the same log.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import pulsar

# tests/e2e is not a package: churn.py imports its neighbours as top-level modules, as bench/ does churn.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

import churn
from churn import (
    ADMIN_ERRORS,
    ConsumerWorker,
    DeliveryLog,
    Event,
    Publisher,
    check_first_delivery_order,
    check_no_loss,
    check_one_consumer_per_key,
    check_operations,
    stats_line,
    subscription_stats,
)

REPOSITORY = Path(__file__).resolve().parents[2]
GO_PROGRAM = REPOSITORY / "build" / "go" / "bin" / "compat-go"

NAMESPACE = "public/default"
TOPICS = 6  # each in a bundle of its own where the namespace has as many (spread_topics): two per broker of 3
CONSUMERS = (2, 3)  # per topic, drawn from the seed
PUBLISH_RATE_PER_S = 40  # per topic: 240 msg/s in all, which 2 shared cores carry beside 3 brokers and 5 JVMs
WARM_RECEIVES = 40  # per topic, before a fault: every subscription flows
START_S = 60  # for the clients' subscribes and the warm-up on a loaded machine
PROGRESS_S = 30  # after a fault settled, the longest wait for a message sent since to be delivered
DRAIN_S = 60  # after publishing stopped, the longest wait for every receipted message to be acked
QUIET_S = 15  # ...cut short once no topic's log changed for this long: a subscription is stuck
BACKLOG_S = 10  # grouped acks reach the broker within 100 ms; this is for a busy machine
GO_STOP_S = 60  # the Go producer's flush after its input ended waits for its sends' timeouts (30 s)

RULES = (
    "operations",
    "one-consumer-per-key",
    "first-delivery-order",
    "no-loss",
    "progress",
    "drained",
    "silent-after-takeover",
)

# The C++ client's log lines (pulsar-client 3.13): the consumer's creation on a broker, the handler's
# reconnection (its connection closed, or the broker closed the consumer), a MESSAGE frame's arrival.
CREATED = re.compile(r"Created consumer on broker \[[^\]]* -> ([\d.]+:\d+)\]")
RECONNECTING = "Schedule reconnection"
FRAME = re.compile(r"^\[[^\]]* -> ([\d.]+:\d+)\] Received a message from the server")


def broker_address(url: str) -> str:
    """host:port of a pulsar:// URL, as the client's log names the remote end."""
    return url.removeprefix("pulsar://")


# ------------------------------------------------------------------------------------- the plan


def bundle_index(topic: str, boundaries: list[int]) -> int:
    """The bundle a topic falls in: the unsigned CRC-32 of its full name (docs/cluster.md, "Bundles"); the
    last bundle holds its upper bound too."""
    code = zlib.crc32(topic.encode())
    for index in range(len(boundaries) - 1):
        if code < boundaries[index + 1]:
            return index
    return len(boundaries) - 2


def bundle_range(topic: str, boundaries: list[int]) -> str:
    index = bundle_index(topic, boundaries)
    return f"0x{boundaries[index]:08x}_0x{boundaries[index + 1]:08x}"


def spread_topics(label: str, count: int, boundaries: list[int]) -> list[str]:
    """`count` topic names `{label}-{n}-chaos`, as evenly over the bundles as names allow: the load manager
    gives each bundle nobody owns to the broker owning the fewest, so the topics land on every broker. The
    suffix is the one compat/go's chaos-produce puts after its -name."""
    bundles = len(boundaries) - 1
    per_bundle: dict[int, int] = defaultdict(int)
    chosen: list[str] = []
    n = 0
    while len(chosen) < count:
        topic = f"persistent://{NAMESPACE}/{label}-{n}-chaos"
        index = bundle_index(topic, boundaries)
        if per_bundle[index] < -(-count // bundles):
            per_bundle[index] += 1
            chosen.append(topic)
        n += 1
    return chosen


def go_name(topic: str) -> str:
    """compat-go's -name for a topic of `spread_topics`."""
    return topic.removeprefix(f"persistent://{NAMESPACE}/").removesuffix("-chaos")


@dataclass
class ConsumerPlan:
    name: str
    queue_size: int
    holder: bool  # holds every message 0.2-1 s before its ack; the others ack at once or within 50 ms


@dataclass
class TopicPlan:
    topic: str
    consumers: list[ConsumerPlan]
    key_seed: int


def plan_topics(rnd: random.Random, topics: list[str]) -> list[TopicPlan]:
    plans = []
    for topic in topics:
        names = [f"c{n + 1}" for n in range(rnd.choice(CONSUMERS))]
        holder = rnd.choice(names)
        consumers = [ConsumerPlan(name, rnd.choice(churn.QUEUE_SIZES), name == holder) for name in names]
        plans.append(TopicPlan(topic, consumers, rnd.randrange(2**32)))
    return plans


def keys_until(stop: threading.Event, rnd: random.Random) -> Iterator[str]:
    """Keys drawn from `rnd` until `stop` is set: the publisher runs through the fault until told to end."""
    while not stop.is_set():
        yield f"k-{rnd.randrange(churn.KEYS)}"


# ---------------------------------------------------------------------------------- the clients


@dataclass(frozen=True)
class Frame:
    at: float  # time.monotonic()
    broker: str  # host:port
    consumer: str  # the incarnation whose client it reached, "-" for another client
    topic: str


class ConnectionTrace:
    """What one consumer's client logs about it: `connected` and `released` into its topic's delivery
    log (the module's doc), as the client's I/O thread reports them."""

    def __init__(self, worker: ConsumerWorker, topic: str) -> None:
        self.worker = worker
        self.topic = topic
        self.broker = ""  # the broker the consumer is on, "" while it is on none
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        if created := CREATED.search(text):
            with self._lock:
                self.broker = created.group(1)
                self.worker.log.record("connected", self.worker.identity, detail=f"broker {self.broker}")
        elif RECONNECTING in text:
            self.lose_broker(text)

    def lose_broker(self, why: str) -> bool:
        """Record that the consumer lost its broker; False if it was on none."""
        with self._lock:
            if not self.broker:
                return False
            self.worker.log.record("released", self.worker.identity, detail=f"broker {self.broker}: {why}")
            self.broker = ""
            return True


class ClientLogs(logging.Handler):
    """The logger of every client of the process. The C++ client keeps the logger of the first client
    made in a process for all later ones (LogUtils::setLoggerFactory: the first factory wins), so one
    handler takes every line and tells the clients apart by the thread that logs it: each client has its
    own I/O thread, which logs what happens to its connections and consumers. A thread is learnt while its
    client is made and subscribes (`opening`), one client at a time; a line of interest from a thread
    nobody opened is kept in `unattributed`, so that a blind spot shows instead of hiding a release."""

    def __init__(self, out: Path, frames: bool) -> None:
        super().__init__(logging.DEBUG)
        self.frames: list[Frame] | None = [] if frames else None
        self.unattributed: list[str] = []
        self._out = open(out, "a")  # noqa: SIM115 - open for the process's life, closed by close()
        self._threads: dict[int, ConnectionTrace | None] = {}
        self._opening: list[ConnectionTrace | None] = []  # the one client being made, if any
        self._map_lock = threading.Lock()
        self.logger = logging.getLogger("chaos.clients")
        self.logger.handlers = [self]
        self.logger.propagate = False
        # A client reads the level once: debug lines cost only where frames are noted.
        self.logger.setLevel(logging.DEBUG if frames else logging.INFO)

    @contextmanager
    def opening(self, trace: ConnectionTrace | None) -> Iterator[None]:
        """While a client is made (and its consumer subscribes): every new thread that logs is its own."""
        with self._map_lock:
            self._opening.append(trace)
        try:
            yield
        finally:
            with self._map_lock:
                self._opening.clear()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        thread = threading.get_ident()
        with self._map_lock:
            known = thread in self._threads
            if not known and self._opening:
                self._threads[thread] = self._opening[0]
                known = True
            trace = self._threads.get(thread)
        if self.frames is not None and (frame := FRAME.match(text)):
            consumer = trace.worker.identity if trace else "-"
            self.frames.append(Frame(time.monotonic(), frame.group(1), consumer, trace.topic if trace else "-"))
            if not known:
                self.unattributed.append(text)
            return
        if record.levelno >= logging.INFO:
            who = f"{trace.topic.rsplit('/', 1)[-1]} {trace.worker.identity}" if trace else "-"
            self._out.write(f"{time.monotonic():.3f} {record.levelname} [{who}] {text}\n")
        if trace is not None:
            trace.line(text)
        elif CREATED.search(text) or (not known and RECONNECTING in text):
            self.unattributed.append(text)

    def close(self) -> None:
        self._out.close()
        super().close()


class GoPublisher:
    """The Go client's producer (compat/go, chaos-produce) with churn.Publisher's face: keys go to its
    stdin, paced; its stdout says which were receipted."""

    def __init__(
        self, service_url: str, http_url: str, topic: str, on_published: Callable[[int, str], None], log_path: Path
    ) -> None:
        if not GO_PROGRAM.exists():
            raise RuntimeError(f"{GO_PROGRAM} is missing: run `make compat-go` (make test does)")
        self.on_published = on_published
        self.failed: list[str] = []
        self.next_index = 0
        self.report: dict[str, object] = {}
        command = [str(GO_PROGRAM), "-service-url", service_url, "-admin-url", http_url, "-name", go_name(topic)]
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [*command, "chaos-produce"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
        self._reader = threading.Thread(target=self._read, daemon=True, name="go-publisher-out")
        self._reader.start()
        self._thread: threading.Thread | None = None

    def publish(self, keys: Iterable[str], rate_per_s: float) -> None:
        self._thread = threading.Thread(
            target=self._send_all, args=(keys, rate_per_s), daemon=True, name="go-publisher"
        )
        self._thread.start()

    def publishing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._reader.join(max(0.0, deadline - time.monotonic()))
        return not self.publishing() and not self._reader.is_alive()

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass  # the program ended already: nothing is left to flush
        try:
            self.process.wait(GO_STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _send_all(self, keys: Iterable[str], rate_per_s: float) -> None:
        assert self.process.stdin is not None
        start = time.monotonic()
        try:
            for n, key in enumerate(keys):
                self.process.stdin.write(key + "\n")
                self.process.stdin.flush()
                self.next_index += 1
                ahead = start + (n + 1) / rate_per_s - time.monotonic()
                if ahead > 0.005:
                    time.sleep(ahead)
            self.process.stdin.close()
        except BrokenPipeError:
            self.failed.append(f"compat-go exited ({self.process.poll()}) at i={self.next_index}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            answer = json.loads(line)
            if "i" not in answer:
                self.report = answer  # the last line: what it sent, receipted and failed
            elif "key" in answer:
                self.on_published(int(answer["i"]), str(answer["key"]))
            else:
                self.failed.append(f"send i={answer['i']}: {answer['failed']}")


class TopicLoad:
    """One topic's producer, consumers and delivery log."""

    def __init__(self, plan: TopicPlan) -> None:
        self.plan = plan
        self.topic = plan.topic
        self.log = DeliveryLog(observer=self._observe)
        self.received = 0
        self.newest_received = -1
        self.workers: dict[str, ConsumerWorker] = {}
        self.traces: dict[str, ConnectionTrace] = {}
        self.publisher: Publisher | GoPublisher | None = None
        self.published: dict[int, str] = {}
        self._published_lock = threading.Lock()
        self.stop_publishing = threading.Event()
        self.marks: list[tuple[Event, int]] = []  # (mark, the index the publisher would send next)

    def _observe(self, event: Event) -> None:
        if event.kind == "received":
            self.received += 1
            self.newest_received = max(self.newest_received, event.index)

    def on_published(self, index: int, key: str) -> None:
        with self._published_lock:
            self.published[index] = key

    def receipts(self) -> dict[int, str]:
        with self._published_lock:
            return dict(self.published)


# ------------------------------------------------------------------------------------- the run


@dataclass
class TopicOutcome:
    topic: str
    published: dict[int, str]
    events: list[Event]
    violations: dict[str, list[str]]
    failed_sends: list[str]

    def summary(self) -> str:
        received = [e for e in self.events if e.kind == "received"]
        counts = ", ".join(f"{rule} {len(found)}" for rule, found in self.violations.items() if found)
        return (
            f"{self.topic}: {len(self.published)} receipted, {len(self.failed_sends)} sends failed, "
            f"{len(received)} deliveries ({len(received) - len({e.index for e in received})} repeated), "
            f"{sum(1 for e in self.events if e.kind == 'released')} released, "
            f"{sum(1 for e in self.events if e.kind == 'connected')} connected; violations: {counts or 'none'}"
        )


@dataclass
class ChaosOutcome:
    title: str
    topics: list[TopicOutcome]
    violations: dict[str, list[str]]  # the scenario's own (silent-after-takeover), over every topic
    notes: list[str] = field(default_factory=list)

    def failed_rules(self) -> list[str]:
        return [
            rule
            for rule in RULES
            if self.violations.get(rule) or any(topic.violations.get(rule) for topic in self.topics)
        ]

    def report(self, limit: int = 5) -> str:
        lines = [self.title, *self.notes, *(topic.summary() for topic in self.topics)]
        for rule in RULES:
            found = list(self.violations.get(rule, []))
            for topic in self.topics:
                found += [f"{topic.topic}: {v}" for v in topic.violations.get(rule, [])]
            if found:
                lines.append(f"FAILED {rule}: {len(found)}, first {min(limit, len(found))}:")
                lines += [f"  {v}" for v in found[:limit]]
        return "\n".join(lines)

    def write_logs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "report.txt").write_text(self.report(limit=50) + "\n")
        for topic in self.topics:
            with open(directory / f"{topic.topic.rsplit('/', 1)[-1]}.log", "w") as out:
                out.write(topic.summary() + "\n")
                out.writelines(f"  {v}\n" for found in topic.violations.values() for v in found[:50])
                out.writelines(f"{e}\n" for e in topic.events)


class ChaosWorkload:
    """Every topic's clients, in the process whose clients `logs` hears. `start` runs them until every
    subscription flows; the test marks the fault (`mark`), may release consumers whose broker lost its
    topics (`release`) and add consumers (`add`); `finish` stops publishing, drains and checks. `close`
    stops every client, whatever happened."""

    def __init__(
        self,
        logs: ClientLogs,
        service_url: str,
        http_urls: list[str],
        topics: list[str],
        seed: int,
        log_dir: Path,
        go_producer_topics: Iterable[str] = (),
    ) -> None:
        self.logs = logs
        self.service_url = service_url
        self.http_urls = http_urls  # every broker's: the admin API of any that runs answers for any topic
        self.log_dir = log_dir
        self.loads = [TopicLoad(plan) for plan in plan_topics(random.Random(seed), topics)]
        self.go_producer_topics = set(go_producer_topics)
        self.notes: list[str] = []
        self.mark_times: list[float] = []  # time.monotonic() of each mark

    def close(self) -> None:
        for load in self.loads:
            load.stop_publishing.set()
            for worker in load.workers.values():
                worker.stop()
            if load.publisher is not None:
                load.publisher.close()

    def load(self, topic: str) -> TopicLoad:
        return next(load for load in self.loads if load.topic == topic)

    # ------------------------------------------------------------------ clients

    def add(
        self, topic: str, name: str, *, url: str | None = None, queue_size: int = 100, holder: bool = False
    ) -> ConsumerWorker:
        """A consumer of `topic`'s subscription on its own client (of `url`, the service URL by default);
        returns once it subscribed, or failed to (its log says which)."""
        load = self.load(topic)
        own = random.Random(f"{load.plan.key_seed}-{name}")  # one generator per thread: Random is not shared
        delay = churn.ack_delays(own, 0.2, 1.0) if holder else churn.ack_delays(own, 0.0, 0.05, immediate=0.5)
        worker = ConsumerWorker(
            name, url or self.service_url, topic, load.log, queue_size=queue_size, ack_delay_s=delay
        )
        trace = load.traces[name] = ConnectionTrace(worker, topic)
        load.workers[name] = worker
        with self.logs.opening(trace):
            worker.start()
            worker.ready.wait(churn.COMMAND_TIMEOUT_S)
        return worker

    def start(self) -> None:
        """Subscribe every consumer, create every producer, publish; return once each topic delivered
        WARM_RECEIVES messages."""
        for load in self.loads:
            for consumer in load.plan.consumers:
                self.add(load.topic, consumer.name, queue_size=consumer.queue_size, holder=consumer.holder)
        for load in self.loads:
            if load.topic in self.go_producer_topics:
                out = self.log_dir / f"{load.topic.rsplit('/', 1)[-1]}.go-producer.log"
                load.publisher = GoPublisher(self.service_url, self.http_urls[0], load.topic, load.on_published, out)
            else:
                with self.logs.opening(None):
                    load.publisher = Publisher(self.service_url, load.topic, False, load.on_published)
            load.publisher.publish(
                keys_until(load.stop_publishing, random.Random(load.plan.key_seed)), PUBLISH_RATE_PER_S
            )
        self._wait(
            lambda: all(load.received >= WARM_RECEIVES for load in self.loads),
            START_S,
            lambda: (
                "topics not flowing: "
                + ", ".join(
                    f"{load.topic} ({load.received} received)" for load in self.loads if load.received < WARM_RECEIVES
                )
            ),
        )
        self.notes.append(
            "plan: "
            + "; ".join(
                f"{load.topic.rsplit('/', 1)[-1]} "
                + ("go producer, " if load.topic in self.go_producer_topics else "")
                + ", ".join(
                    f"{c.name} queue {c.queue_size}{' holder' if c.holder else ''}" for c in load.plan.consumers
                )
                for load in self.loads
            )
        )

    @staticmethod
    def _wait(done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"after {timeout_s} s: {what()}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ the fault

    def mark(self, kind: str, detail: str) -> int:
        """Note `kind` ("fault", or "settled": where progress is measured from) in every topic's log, with
        the index each publisher sends next; returns the mark's number."""
        self.mark_times.append(time.monotonic())
        for load in self.loads:
            assert load.publisher is not None
            event = load.log.record(kind, "-", detail=detail)
            load.marks.append((event, load.publisher.next_index))
        self.notes.append(f"{kind}: {detail}")
        return len(self.mark_times) - 1

    def release(self, topics: Iterable[str], broker: str, why: str) -> int:
        """Release every consumer of `topics` that is on `broker` (host:port): that broker lost the topics
        while its consumers cannot know it (it is paused). Returns how many were."""
        released = 0
        for topic in topics:
            load = self.load(topic)
            for trace in load.traces.values():
                if trace.broker == broker:
                    released += trace.lose_broker(why)
        return released

    def brokers_of(self, topic: str) -> dict[str, str]:
        """Each consumer of `topic` (its incarnation) and the broker it is on ("" for none)."""
        return {trace.worker.identity: trace.broker for trace in self.load(topic).traces.values()}

    def wait_flowing(self, timeout_s: float = PROGRESS_S) -> bool:
        """Wait until every topic delivered a second's worth of messages sent after the latest mark; False
        at the timeout (the progress check then says which topic did not)."""
        since = {load.topic: load.marks[-1][1] + PUBLISH_RATE_PER_S for load in self.loads}
        deadline = time.monotonic() + timeout_s
        while any(load.newest_received < since[load.topic] for load in self.loads):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    # ------------------------------------------------------------------ the end

    def finish(self, title: str, silent: tuple[str, int, str] | None = None) -> ChaosOutcome:
        """Stop publishing, drain, check. `silent` = (broker, mark, what): that broker must have sent no
        message to any consumer after the mark (`what` says why, for the report)."""
        for load in self.loads:
            load.stop_publishing.set()
        for load in self.loads:
            assert load.publisher is not None
            load.publisher.wait(DRAIN_S)
        drained = self._drain()
        for load in self.loads:
            for worker in load.workers.values():
                worker.stop()
        topics = [self._check(load, drained.get(load.topic, [])) for load in self.loads]
        violations: dict[str, list[str]] = {
            "operations": [f"a client's log line no client was opened for: {line}" for line in self.logs.unattributed]
        }
        for load in self.loads:
            if isinstance(load.publisher, GoPublisher):
                report = load.publisher.report
                self.notes.append(f"{load.topic}: the Go producer says {report}")
                if report.get("receipted") != len(load.receipts()):
                    violations["operations"].append(
                        f"{load.topic}: the Go producer counted {report.get('receipted')} receipts, its lines "
                        f"{len(load.receipts())}"
                    )
        if silent is not None:
            broker, mark, what = silent
            assert self.logs.frames is not None, "a broker's silence needs the frames noted (trace_frames)"
            violations["silent-after-takeover"] = check_silent_after(
                self.logs.frames, broker, self.mark_times[mark], what
            )
            self.notes.append(f"{len(self.logs.frames)} MESSAGE frames noted")
        return ChaosOutcome(title, topics, violations, self.notes)

    def _drain(self) -> dict[str, list[str]]:
        """Wait until every receipted message is acked, then until every backlog is empty."""
        started = time.monotonic()
        found: dict[str, list[str]] = {}
        while True:
            missing = {load.topic: self._unacked(load) for load in self.loads}
            now = time.monotonic()
            quiet_since = max([started, *(load.log.last_event_at for load in self.loads)])
            if not any(missing.values()) or now > started + DRAIN_S or now - quiet_since > QUIET_S:
                break
            time.sleep(0.1)
        waited = time.monotonic() - started
        for load in self.loads:
            if missing[load.topic]:
                found[load.topic] = [self._not_drained(load, missing[load.topic], waited)]
            elif problem := self._backlog_left(load):
                found[load.topic] = [problem]
        return found

    @staticmethod
    def _unacked(load: TopicLoad) -> list[int]:
        acked = load.log.acked()
        return sorted(i for i in load.receipts() if i not in acked)

    def _not_drained(self, load: TopicLoad, missing: list[int], waited_s: float) -> str:
        published = load.receipts()
        detail = [
            f"{len(missing)} of {len(published)} receipted messages unacked {waited_s:.1f} s after publishing "
            f"stopped (last event {time.monotonic() - load.log.last_event_at:.1f} s ago); first "
            + ", ".join(f"i={i} key={published[i]}" for i in missing[:5])
        ]
        try:
            detail.append("stats: " + stats_line(self._stats(load.topic)))
        except ADMIN_ERRORS as error:
            detail.append(f"stats failed: {error!r}")
        keys = list(dict.fromkeys(published[i] for i in missing))
        detail += [churn.explain_key(self._admin_url(), load.topic, key) for key in keys[:3]]
        return "\n      ".join(detail)

    def _backlog_left(self, load: TopicLoad) -> str:
        deadline = time.monotonic() + BACKLOG_S
        while True:
            try:
                stats = self._stats(load.topic)
            except ADMIN_ERRORS as error:
                return f"stats failed: {error!r}"
            if stats.get("msgBacklog") == 0:
                return ""
            if time.monotonic() > deadline:
                return f"every receipted message acked, but after {BACKLOG_S} s: " + stats_line(stats)
            time.sleep(0.1)

    def _admin_url(self) -> str:
        """The first broker whose admin API answers: the fault may have taken another down."""
        for url in self.http_urls:
            try:
                with urllib.request.urlopen(f"{url}/admin/v2/brokers/health", timeout=2):
                    return url
            except OSError:
                continue
        return self.http_urls[0]

    def _stats(self, topic: str) -> dict:
        return subscription_stats(self._admin_url(), topic)

    def _check(self, load: TopicLoad, drained: list[str]) -> TopicOutcome:
        assert load.publisher is not None
        events = load.log.events()
        published = load.receipts()
        return TopicOutcome(
            load.topic,
            published,
            events,
            {
                "operations": check_operations(events) + check_traced(events),
                "one-consumer-per-key": check_one_consumer_per_key(events),
                "first-delivery-order": check_first_delivery_order(events),
                "no-loss": check_no_loss(events, published),
                "progress": check_progress(events, load.marks),
                "drained": drained,
            },
            list(load.publisher.failed),
        )


def check_traced(events: list[Event]) -> list[str]:
    """Every incarnation that subscribed was seen `connected` first: its client's log reached this
    workload, so its releases did too."""
    connected = {e.consumer for e in events if e.kind == "connected"}
    return [
        f"{e.consumer} subscribed, but its client's log never said on which broker ({e})"
        for e in events
        if e.kind == "subscribed" and e.consumer not in connected
    ]


def check_progress(events: list[Event], marks: list[tuple[Event, int]]) -> list[str]:
    """After each `settled` mark, a message sent since (its index at or past the publisher's next one at
    the mark) is delivered within PROGRESS_S: no subscription stays stuck once the fault is over."""
    found = []
    for mark, next_index in marks:
        if mark.kind != "settled":
            continue
        first = next((e for e in events if e.seq > mark.seq and e.kind == "received" and e.index >= next_index), None)
        if first is None or first.t > mark.t + PROGRESS_S:
            when = "never" if first is None else f"only {first.t - mark.t:.1f} s later ({first})"
            found.append(
                f"nothing sent after '{mark.detail}' (seq {mark.seq}, from i={next_index}) delivered within "
                f"{PROGRESS_S} s: {when}"
            )
    return found


def check_silent_after(frames: Iterable[Frame], broker: str, since: float, what: str) -> list[str]:
    """No MESSAGE frame from `broker` reached any consumer after `since` (time.monotonic())."""
    late = [frame for frame in frames if frame.broker == broker and frame.at > since]
    if not late:
        return []
    by_consumer: dict[tuple[str, str], list[Frame]] = defaultdict(list)
    for frame in late:
        by_consumer[(frame.topic, frame.consumer)].append(frame)
    return [
        f"{broker} sent {len(sent)} messages to {consumer} of {topic} after {what}, the first "
        f"{sent[0].at - since:.3f} s after"
        for (topic, consumer), sent in sorted(by_consumer.items())
    ]


# ------------------------------------------------------------------------------- the child process

# The longest each command may take in the child, past which the parent gives up on it: a start makes
# every client one at a time (each subscribe within the client's operation timeout) and waits for flow; a
# finish waits for the publishers, the drain and each topic's backlog.
ANSWER_TIMEOUT_S = {
    "start": START_S + TOPICS * max(CONSUMERS) * churn.COMMAND_TIMEOUT_S,
    "add": 2 * churn.COMMAND_TIMEOUT_S,
    "wait_flowing": 2 * PROGRESS_S,
    "finish": GO_STOP_S + DRAIN_S + QUIET_S + TOPICS * BACKLOG_S + (TOPICS * max(CONSUMERS) + 1) * churn.JOIN_S,
}
ANSWER_TIMEOUT_S_DEFAULT = 30


def serve(commands: TextIO, answers: TextIO) -> None:
    """The child's side of WorkloadProcess: one JSON command a line in, one JSON answer a line out; the
    first command is `start`, with what ChaosWorkload takes."""
    start = json.loads(commands.readline())
    log_dir = Path(start["log_dir"])
    logs = ClientLogs(log_dir / "clients.log", start["trace_frames"])
    # The first client of the process decides where every client logs: this one, before any other. It
    # lives as long as the process: a thread of a closed client could leave its id to a new one.
    with logs.opening(None):
        first = pulsar.Client(start["service_url"], logger=logs.logger)
    workload = ChaosWorkload(
        logs,
        start["service_url"],
        start["http_urls"],
        start["topics"],
        start["seed"],
        log_dir,
        start["go_producer_topics"],
    )
    try:
        _answer(answers, lambda: workload.start() or {"notes": workload.notes})
        for line in commands:
            command = json.loads(line)
            _answer(answers, lambda command=command: _run(workload, log_dir, command))
            if command["op"] == "finish":
                break
    finally:
        workload.close()
        first.close()
        logs.close()


def _answer(answers: TextIO, run: Callable[[], dict[str, object]]) -> None:
    try:
        answer = run()
    except Exception:  # noqa: BLE001 - the parent gets every failure with its traceback, and goes on or stops
        answer = {"error": traceback.format_exc()}
    answers.write(json.dumps(answer) + "\n")
    answers.flush()


def _run(workload: ChaosWorkload, log_dir: Path, command: dict) -> dict[str, object]:
    op = command["op"]
    if op == "mark":
        return {"mark": workload.mark(command["kind"], command["detail"])}
    if op == "release":
        return {"released": workload.release(command["topics"], command["broker"], command["why"])}
    if op == "add":
        worker = workload.add(command["topic"], command["name"], url=command["url"])
        subscribed = any(e.kind == "subscribed" and e.consumer == worker.identity for e in worker.log.events())
        return {"identity": worker.identity, "subscribed": subscribed}
    if op == "brokers":
        return {"brokers": workload.brokers_of(command["topic"])}
    if op == "wait_flowing":
        return {"flowing": workload.wait_flowing(command["timeout_s"])}
    if op == "finish":
        silent = command["silent"]
        outcome = workload.finish(command["title"], (silent[0], silent[1], silent[2]) if silent else None)
        outcome.write_logs(log_dir)
        return {"report": outcome.report(), "failed": outcome.failed_rules()}
    raise ValueError(f"unknown command {op!r}")


class WorkloadError(AssertionError):
    """The child failed a command, or stopped answering; the message carries its traceback or log."""


class WorkloadProcess:
    """A ChaosWorkload in a child process of its own, driven by the test. The C++ client logs every client
    of a process to the logger of the first one made there (ClientLogs), and a test run makes many before
    this suite: the child makes its first. Its clients, logs and verdict stay in the child; the logs
    land in `log_dir`."""

    def __init__(
        self,
        log_dir: Path,
        service_url: str,
        http_urls: list[str],
        topics: list[str],
        seed: int,
        *,
        go_producer_topics: Iterable[str] = (),
        trace_frames: bool = False,
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "workload.log"
        # The child writes to its own copy of the descriptor: ours is closed once it is started.
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_answers, daemon=True, name="workload-answers").start()
        start = {
            "log_dir": str(log_dir),
            "service_url": service_url,
            "http_urls": http_urls,
            "topics": topics,
            "seed": seed,
            "go_producer_topics": list(go_producer_topics),
            "trace_frames": trace_frames,
        }
        try:
            self.notes: list[str] = self._call("start", start)["notes"]
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> WorkloadProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _call(self, op: str, command: dict[str, object]) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **command}) + "\n")
        self.process.stdin.flush()
        timeout_s = ANSWER_TIMEOUT_S.get(op, ANSWER_TIMEOUT_S_DEFAULT)
        try:
            line = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise WorkloadError(f"no answer to {op} in {timeout_s} s\n{self._log_tail()}") from None
        if line is None:
            raise WorkloadError(f"the workload exited ({self.process.poll()}) during {op}\n{self._log_tail()}")
        answer: dict = json.loads(line)
        if "error" in answer:
            raise WorkloadError(f"{op}: {answer['error']}\n{self._log_tail()}")
        return answer

    def _log_tail(self, lines: int = 40) -> str:
        return "workload log (tail):\n" + "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def mark(self, kind: str, detail: str) -> int:
        mark: int = self._call("mark", {"kind": kind, "detail": detail})["mark"]
        return mark

    def release(self, topics: list[str], broker: str, why: str) -> int:
        released: int = self._call("release", {"topics": topics, "broker": broker, "why": why})["released"]
        return released

    def add(self, topic: str, name: str, url: str) -> dict:
        return self._call("add", {"topic": topic, "name": name, "url": url})

    def brokers(self, topic: str) -> dict[str, str]:
        brokers: dict[str, str] = self._call("brokers", {"topic": topic})["brokers"]
        return brokers

    def wait_flowing(self, timeout_s: float = PROGRESS_S) -> bool:
        flowing: bool = self._call("wait_flowing", {"timeout_s": timeout_s})["flowing"]
        return flowing

    def finish(self, title: str, silent: tuple[str, int, str] | None = None) -> dict:
        """The verdict: {"report": text, "failed": [rules]}."""
        return self._call("finish", {"title": title, "silent": list(silent) if silent else None})

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass  # the child exited already
        try:
            self.process.wait(ANSWER_TIMEOUT_S["finish"])
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    # The answers keep the real stdout; whatever else writes there (a client's console) goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, answers)
