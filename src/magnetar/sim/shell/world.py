"""A seeded schedule of the real broker under consumer churn, and the checks a Pulsar user relies on.

Owns: the options a seed derives (broker settings, consumers, receiver queues, ack delays, batching,
churn, network and storage timing), the run (a producer publishing, consumers' applications taking
and acking, consumers closing and subscribing again with the same name, connections dropping and
reconnecting, negative acks; then a liveness phase that must drain the subscription), and the
checker over what the clients saw:
- `one-consumer-per-key`: a key's message reached a consumer while another open consumer held one of
  that key unacknowledged (PIP-379's contract; "held" ends when the ack is sent, the consumer sends
  CLOSE_CONSUMER or a negative ack, or its connection drops: each happens before the broker can act);
- `consumer-order`: a consumer received a key's message below one it had received, not a redelivery
  of a negatively acknowledged message (on Failover and Exclusive, where a negative ack asks for
  everything again and a change of active consumer sends everything unacked again, nothing it had
  received before);
- `first-delivery-order`: a key's first deliveries went backwards;
- `invariant`: the dispatcher's `check_invariants` failed, or the broker raised;
- `loss-or-stall`: at the end a published message was never acknowledged, or the backlog is not 0.
Must not touch: the broker's objects beyond reading the subscription's state for the report and
wrapping its event handler to trace it.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import traceback
from collections import deque
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from magnetar.broker.config import load_config
from magnetar.broker.root import open_broker
from magnetar.broker.server import Broker
from magnetar.broker.subscription import PersistentSubscription
from magnetar.clock import LoopClock
from magnetar.core.events import Event
from magnetar.positions import Position
from magnetar.sim.shell.client import ClientClosed, Delivery, Network, SimClient, SimConsumer, SimProducer
from magnetar.sim.shell.engine import SimEngine
from magnetar.sim.shell.loop import Stalled, VirtualClockLoop

__all__ = ["ShellOptions", "ShellResult", "ShellViolation", "run_shell_schedule", "SHELL_ORDERING_KINDS"]

TOPIC = "persistent://public/default/shell-sim"
SUBSCRIPTION = "sim"
EPOCH_MS = 1_767_225_600_000  # the virtual clock's 0, as epoch milliseconds (2026-01-01)
TRACE_MAX = 80
LIVENESS_S = 120.0  # virtual seconds the liveness phase may take to drain
SHELL_ORDERING_KINDS = frozenset({"one-consumer-per-key", "consumer-order", "first-delivery-order"})


@dataclass(frozen=True)
class ShellOptions:
    subscription_type: str = "Key_Shared"
    ordering_mode: str = "pip379"
    consumers: int = 4
    queue_sizes: tuple[int, ...] = (1000, 5, 50, 10)
    shared_client: bool = False
    holder: int = 0  # index of the consumer that holds each message a while; -1 for none
    hold_ms: tuple[int, int] = (300, 1500)
    ack_delay_ms: tuple[int, int] = (0, 5)
    ack_group_ms: int = 0
    keys: int = 50
    messages: int = 400
    batch_max: int = 1
    publish_gap_ms: float = 1.0
    churn_gap_ms: int = 300
    churn_steps: int = 10
    drop_percent: int = 20
    leave_percent: int = 10
    nack_percent: int = 0
    network_ms: tuple[float, float] = (0.05, 0.5)
    commit_ms: tuple[float, float] = (0.1, 2.0)
    read_ms: tuple[float, float] = (0.05, 1.0)
    max_unacked_per_consumer: int = 50000
    look_ahead_per_consumer: int = 2000
    read_batch: int = 100
    unblocking_ms: int = 10
    entries_per_ledger: int = 50000

    @classmethod
    def from_seed(cls, seed: int, ordering_mode: str = "pip379", subscription_type: str = "Key_Shared") -> ShellOptions:
        rng = random.Random(seed * 104729 + 7)
        consumers = rng.randint(2, 5)
        return cls(
            subscription_type=subscription_type,
            ordering_mode=ordering_mode,
            consumers=consumers,
            queue_sizes=tuple(rng.choice((1, 2, 5, 10, 50, 1000)) for _ in range(consumers)),
            shared_client=rng.random() < 0.25,
            holder=rng.randrange(consumers) if rng.random() < 0.7 else -1,
            hold_ms=rng.choice(((300, 1500), (20, 200))),
            ack_delay_ms=rng.choice(((0, 0), (0, 5), (0, 50))),
            ack_group_ms=rng.choice((0, 0, 10, 100)),
            keys=rng.choice((1, 3, 10, 50, 300)),
            messages=rng.randint(100, 500),
            batch_max=rng.choice((1, 1, 4)),
            publish_gap_ms=rng.choice((0.2, 1.0, 5.0)),
            churn_gap_ms=rng.choice((50, 300, 1000)),
            churn_steps=rng.randint(2, 12),
            drop_percent=rng.choice((0, 20, 50)),
            leave_percent=rng.choice((0, 10, 30)),
            nack_percent=rng.choice((0, 0, 0, 3)),
            network_ms=rng.choice(((0.05, 0.5), (0.1, 5.0))),
            commit_ms=rng.choice(((0.1, 2.0), (1.0, 20.0))),
            read_ms=rng.choice(((0.05, 1.0), (0.5, 10.0))),
            max_unacked_per_consumer=rng.choice((50000, 50000, 20)),
            look_ahead_per_consumer=rng.choice((2000, 2000, 5)),
            read_batch=rng.choice((100, 100, 5)),
            unblocking_ms=rng.choice((0, 10)),
            entries_per_ledger=rng.choice((50000, 20)),
        )


@dataclass(frozen=True)
class ShellViolation:
    kind: str
    message: str
    at_s: float
    trace: tuple[str, ...]

    def report(self) -> str:
        lines = [f"{self.kind} at t={self.at_s:.4f}s: {self.message}", "last events:"]
        lines.extend(f"  {line}" for line in self.trace)
        return "\n".join(lines)


@dataclass
class ShellResult:
    seed: int
    options: ShellOptions
    violations: list[ShellViolation]
    published: int
    steps: int  # events the subscription handled
    deliveries: int
    incarnations: int
    virtual_s: float

    def failures(self, expected: frozenset[str] = frozenset()) -> list[ShellViolation]:
        return [v for v in self.violations if v.kind not in expected]

    def header(self) -> str:
        return f"SEED={self.seed} {self.options}"


@dataclass
class _Slot:
    """A consumer name and its current incarnation (None while it is away)."""

    index: int
    name: str
    queue_size: int
    client: SimClient | None = None
    consumer: SimConsumer | None = None
    incarnations: int = 0
    app: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class ShellWorld:
    def __init__(self, seed: int, options: ShellOptions, loop: VirtualClockLoop, data_dir: str) -> None:
        self.seed = seed
        self.options = options
        self.loop = loop
        self.rng = random.Random(seed)
        self.data_dir = data_dir
        self.trace: deque[str] = deque(maxlen=TRACE_MAX)
        self.violations: list[ShellViolation] = []
        self.network = Network(loop, random.Random(seed * 31 + 1), options.network_ms)
        self.clients = 0
        self.steps = 0
        self.deliveries = 0
        self.incarnations = 0
        self.publications: dict[int, Position] = {}  # index -> position, once the receipt came
        self.acked_positions: set[Position] = set()
        self.nacked: set[int] = set()
        self.first_max: dict[str, int] = {}
        self.delivered: set[int] = set()
        self.session_max: dict[tuple[str, str], int] = {}
        self.seen_by: dict[str, set[int]] = {}  # consumer -> indexes it received
        self.holders: dict[str, dict[str, set[int]]] = {}  # key -> consumer -> indexes held
        self.liveness = False
        self.broker: Broker | None = None
        self.subscription: PersistentSubscription | None = None

    # --------------------------------------------------------------------------------- reporting

    def note(self, line: str) -> None:
        self.trace.append(f"{self.loop.time():9.4f} {line}")

    def fail(self, kind: str, message: str) -> None:
        if any(v.kind == kind for v in self.violations):
            return
        self.note(f"VIOLATION {kind}: {message}")
        self.violations.append(ShellViolation(kind, message, self.loop.time(), tuple(self.trace)))

    def _on_loop_exception(self, _loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        detail = "".join(traceback.format_exception(error)) if error is not None else context.get("message", "")
        self.fail("invariant", f"the broker raised: {detail}")

    def _check_invariants(self) -> None:
        subscription = self.subscription
        if subscription is None or subscription.dispatcher is None:
            return
        try:
            subscription.dispatcher.check_invariants()
        except AssertionError as error:
            self.fail("invariant", str(error))

    # --------------------------------------------------------------------------- client listener

    def received(self, consumer: SimConsumer, delivery: Delivery) -> None:
        self.deliveries += 1
        label, key, index = consumer.label, delivery.key, delivery.index
        self.note(
            f"{label} <- {key} i={index} @{delivery.position[0]}:{delivery.position[1]} rc={delivery.redelivery_count}"
        )
        ordered = self.options.subscription_type != "Shared"
        holders = self.holders.setdefault(key, {})
        if self.options.subscription_type == "Key_Shared":
            others = {other: sorted(held) for other, held in holders.items() if held and other != label}
            if others:
                self.fail("one-consumer-per-key", f"{key} i={index} reached {label} while {others} hold {key} unacked")
        holders.setdefault(label, set()).add(index)
        seen = self.seen_by.setdefault(label, set())
        duplicate = index in seen
        seen.add(index)
        if ordered:
            session = (label, key)
            # Failover and Exclusive send everything unacked again, in order, when the active consumer
            # changes: a consumer that was active before gets what it still holds a second time.
            again = duplicate and self.options.subscription_type in ("Failover", "Exclusive")
            if index < self.session_max.get(session, -1) and index not in self.nacked and not again:
                self.fail("consumer-order", f"{label} received {key} i={index} after i={self.session_max[session]}")
            self.session_max[session] = max(index, self.session_max.get(session, -1))
            if index not in self.delivered:
                if index < self.first_max.get(key, -1):
                    self.fail("first-delivery-order", f"{key} i={index} first delivered after i={self.first_max[key]}")
                self.first_max[key] = max(index, self.first_max.get(key, -1))
        self.delivered.add(index)
        self._check_invariants()

    def acked(self, consumer: SimConsumer, positions: list[Position], deliveries: list[Delivery]) -> None:
        """An ACK left the client: these entries are acknowledged (whatever copies the consumer holds)."""
        self.note(f"{consumer.label} ack {','.join(f'{p[0]}:{p[1]}' for p in positions)}")
        self._release(consumer, deliveries)
        self.acked_positions.update(positions)

    def released(self, consumer: SimConsumer, deliveries: list[Delivery], why: str) -> None:
        self.note(f"{consumer.label} {why} {','.join(str(d.index) for d in deliveries)}")
        self._release(consumer, deliveries)
        if why == "nack":
            self.nacked.update(d.index for d in deliveries)
        if why == "redeliver-all":
            # Everything not acked comes again, in order from the first of it: the order starts over
            # (messages sent before the broker heard of it carry the earlier epoch and are dropped).
            for session in [s for s in self.session_max if s[0] == consumer.label]:
                del self.session_max[session]

    def _release(self, consumer: SimConsumer, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            held = self.holders.get(delivery.key, {}).get(consumer.label)
            if held is not None:
                held.discard(delivery.index)

    def ended(self, consumer: SimConsumer, why: str) -> None:
        self.note(f"{consumer.label} ended: {why} (held {len(consumer.held)})")
        for holders in self.holders.values():
            holders.pop(consumer.label, None)
        self._check_invariants()

    def published(self, index: int, key: str, position: Position) -> None:
        self.publications[index] = position

    # ------------------------------------------------------------------------------------ actors

    def _new_client(self, name: str) -> SimClient:
        assert self.broker is not None
        self.clients += 1
        return SimClient(name, self.broker.context, self.network, self, self.clients)

    async def _connect(self, slot: _Slot, shared: SimClient | None) -> None:
        """Subscribe the slot's next incarnation; on its own client unless one is shared."""
        options = self.options
        client = shared if shared is not None and shared.open else slot.client
        if client is None or not client.open:
            client = self._new_client(f"client-{slot.name}")
            try:
                await client.connected
            except ClientClosed:
                return
        slot.client = client
        slot.incarnations += 1
        self.incarnations += 1
        label = f"{slot.name}#{slot.incarnations}"
        consumer = SimConsumer(
            client,
            slot.name,
            label,
            SUBSCRIPTION,
            options.subscription_type,
            slot.queue_size,
            options.ack_group_ms,
            TOPIC,
        )
        consumer.on_available = slot.wake.set
        slot.consumer = consumer
        self.note(f"{label} subscribe (queue {slot.queue_size})")
        try:
            await consumer.subscribe()
        except (ClientClosed, RuntimeError) as error:
            self.note(f"{label} subscribe failed: {error}")
            slot.consumer = None
            return
        if self.broker is not None and self.subscription is None:
            self._watch_subscription()
        slot.app = self.loop.create_task(self._app(slot, consumer))

    def _watch_subscription(self) -> None:
        """Trace the subscription's events and the dispatcher's decisions (an instance-level wrapper)."""
        assert self.broker is not None
        topic = self.broker.context.registry.topics.get(TOPIC)
        if topic is None or SUBSCRIPTION not in topic.subscriptions:
            return
        subscription = self.subscription = topic.subscriptions[SUBSCRIPTION]
        handle = subscription._handle

        def traced(event: Event) -> None:
            self.steps += 1
            name = type(event).__name__
            if name not in ("Flow", "DispatchDue"):
                self.note(f"  broker: {_short(event)}")
            handle(event)

        subscription._handle = traced  # type: ignore[method-assign]

    async def _app(self, slot: _Slot, consumer: SimConsumer) -> None:
        """The consumer's application: takes messages one by one and acks each after a while."""
        options, rng, loop = self.options, self.rng, self.loop
        holder = slot.index == options.holder
        while consumer.open:
            delivery = consumer.take()
            if delivery is None:
                slot.wake.clear()
                await slot.wake.wait()
                continue
            nack = not self.liveness and options.nack_percent and rng.randrange(100) < options.nack_percent
            if nack and delivery.batch_index < 0:
                loop.call_later(rng.uniform(0.01, 0.2), consumer.negative_acknowledge, delivery)
            else:
                if holder and not self.liveness:
                    delay = rng.uniform(*options.hold_ms) / 1000
                else:
                    delay = rng.uniform(*options.ack_delay_ms) / 1000
                loop.call_later(delay, consumer.acknowledge, delivery)
            await asyncio.sleep(rng.uniform(0, 2) / 1000)

    async def _produce(self, producer: SimProducer) -> None:
        options, rng = self.options, self.rng
        keys = [f"k{n}" for n in range(options.keys)]
        index = 0
        while index < options.messages:
            key = rng.choice(keys)
            count = rng.randint(1, options.batch_max) if options.batch_max > 1 else 1
            count = min(count, options.messages - index)
            producer.send([(index + n, key) for n in range(count)], EPOCH_MS + int(self.loop.time() * 1000))
            index += count
            await asyncio.sleep(rng.expovariate(1 / options.publish_gap_ms) / 1000)

    async def _churn(self, slots: list[_Slot], shared: SimClient | None) -> None:
        options, rng = self.options, self.rng
        for _step in range(options.churn_steps):
            await asyncio.sleep(rng.uniform(0.2, 1.8) * options.churn_gap_ms / 1000)
            slot = rng.choice(slots)
            roll = rng.randrange(100)
            consumer = slot.consumer
            if consumer is None or not consumer.open:
                await self._connect(slot, shared)
            elif roll < options.drop_percent and slot.client is not None:
                self.note(f"{consumer.label} drop connection of {slot.client.name}")
                slot.client.drop()
                await asyncio.sleep(rng.uniform(0, 0.2))
                await self._reconnect_all(slots, shared)
            elif roll < options.drop_percent + options.leave_percent:
                self.note(f"{consumer.label} close and stay away")
                await consumer.close()
            else:
                self.note(f"{consumer.label} close and subscribe again")
                await consumer.close()
                await asyncio.sleep(rng.uniform(0, 0.05))
                await self._connect(slot, shared)

    async def _reconnect_all(self, slots: list[_Slot], shared: SimClient | None) -> None:
        """Consumers whose connection dropped come back, as the client's reconnection does."""
        for slot in slots:
            if slot.consumer is None or not slot.consumer.open:
                await self._connect(slot, shared)

    # ------------------------------------------------------------------------------------- run

    async def run(self) -> None:
        options = self.options
        self.loop.set_exception_handler(self._on_loop_exception)
        overrides = {
            "keySharedOrderingMode": options.ordering_mode,
            "maxUnackedMessagesPerConsumer": options.max_unacked_per_consumer,
            "keySharedLookAheadMsgInReplayThresholdPerConsumer": options.look_ahead_per_consumer,
            "dispatcherMaxReadBatchSize": options.read_batch,
            "keySharedUnblockingIntervalMs": options.unblocking_ms,
            "managedLedgerMaxEntriesPerLedger": options.entries_per_ledger,
            "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        }
        engine = SimEngine(self.data_dir, random.Random(self.seed * 17 + 3), options.commit_ms, options.read_ms)
        loop = self.loop
        self.broker = await open_broker(
            load_config(overrides=overrides),
            self.data_dir,
            clock=LoopClock(loop, lambda: EPOCH_MS + int(loop.time() * 1000)),
            storage_engine=engine,
        )
        try:
            await self._run_clients()
        finally:
            await self.broker.stop()

    async def _run_clients(self) -> None:
        options = self.options
        producer_client = self._new_client("producer")
        await producer_client.connected
        producer = SimProducer(producer_client, TOPIC, "sim-producer")
        await producer.create()
        shared = self._new_client("shared") if options.shared_client else None
        if shared is not None:
            await shared.connected
        slots = [_Slot(n, f"c{n}", options.queue_sizes[n]) for n in range(options.consumers)]
        # Consumers subscribe together, as several clients starting at once do.
        await asyncio.gather(*(self._connect(slot, shared) for slot in slots))
        churn = self.loop.create_task(self._churn(slots, shared))
        await self._produce(producer)
        await churn
        # Liveness: no more churn; every name comes back and acks promptly; everything must drain.
        self.liveness = True
        self.note("liveness phase")
        await self._reconnect_all(slots, shared)
        deadline = self.loop.time() + LIVENESS_S
        while self.loop.time() < deadline and not self._drained():
            await asyncio.sleep(0.05)
            if any(slot.consumer is None or not slot.consumer.open for slot in slots):
                await self._reconnect_all(slots, shared)
        if not self._drained():
            missing = sorted(i for i, p in self.publications.items() if p not in self.acked_positions)
            self.fail(
                "loss-or-stall",
                f"{len(missing)} published messages never acknowledged (first {missing[:10]}); {self._state()}",
            )
        for slot in slots:
            if slot.consumer is not None:
                await slot.consumer.close()
            if slot.app is not None:
                slot.app.cancel()
        for client in {id(s.client): s.client for s in slots if s.client is not None}.values():
            client.drop()
        producer_client.drop()
        await asyncio.sleep(0.1)

    def _drained(self) -> bool:
        if len(self.publications) < self.options.messages:
            return False
        if any(position not in self.acked_positions for position in self.publications.values()):
            return False
        subscription = self.subscription
        return subscription is not None and subscription.cursor.number_of_entries_in_backlog() == 0

    def _state(self) -> str:
        subscription = self.subscription
        if subscription is None:
            return "no subscription"
        cursor = subscription.cursor
        state = f"backlog {cursor.number_of_entries_in_backlog()}, mark-delete {cursor.mark_delete_position}"
        dispatcher = subscription.dispatcher
        if dispatcher is not None:
            stats = dispatcher.stats()
            state += f", read in flight {dispatcher.read_in_flight}, dispatcher {stats}"
        return state


def _short(event: object) -> str:
    """An event for the trace, without the entries' payloads."""
    fields = asdict(event) if is_dataclass(event) and not isinstance(event, type) else {}
    parts = []
    for name, value in fields.items():
        if name == "entries":
            value = [tuple(e[0]) for e in value]
        elif name == "key_shared_meta":
            continue
        parts.append(f"{name}={value}")
    return f"{type(event).__name__}({', '.join(parts)})"


def run_shell_schedule(
    seed: int,
    ordering_mode: str = "pip379",
    subscription_type: str = "Key_Shared",
    options: ShellOptions | None = None,
) -> ShellResult:
    """Run one schedule on a fresh virtual loop and data directory; the same seed replays exactly."""
    options = options or ShellOptions.from_seed(seed, ordering_mode, subscription_type)
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="magnetar-shell-sim-", dir=base) as data_dir:
        loop = VirtualClockLoop()
        world = ShellWorld(seed, options, loop, data_dir)
        try:
            loop.run_until_complete(world.run())
        except Stalled as error:
            world.fail("loss-or-stall", f"the broker stalled: {error}")
        except Exception as error:  # noqa: BLE001 - the run itself failed: report it with the trace
            world.fail("invariant", "".join(traceback.format_exception(error)))
        finally:
            loop.shut_down()
    return ShellResult(
        seed,
        options,
        world.violations,
        len(world.publications),
        world.steps,
        world.deliveries,
        world.incarnations,
        loop.time(),
    )
