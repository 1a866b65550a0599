"""A seeded world around one dispatcher: a topic, its cursor, clients, and a scheduler.

Owns: everything the dispatcher does not: the entries produced, the cursor (mark-delete position,
individual acks, read position), the clients (receiver queues, flow permits, acks after delays,
negative acks, reconnects), and the order in which all of that happens, chosen by one seeded RNG.
Must not touch: the dispatcher's internals, except to read what the checkers need. Imports core only;
nothing at run time imports this package.

A schedule has a safety phase (random production, reads, dispatch, acks, nacks, joins, leaves,
same-name reconnects and rolling restarts, in any order) and a liveness phase (production and churn
stop, every client acks promptly, every range is served) that must drain the subscription.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from magnetar.core.dispatchers import new_dispatcher
from magnetar.core.errors import CoreError
from magnetar.core.events import (
    Acked,
    AckFiltered,
    ActiveConsumerChanged,
    BatchIndexAcked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    Dispatch,
    DispatchDue,
    Entry,
    Event,
    Flow,
    KeySharedMeta,
    MarkDeleteAdvanced,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    RedeliverRequested,
    ReplayEntries,
    RewindCursor,
    Tick,
    WakeUp,
)
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position

__all__ = ["SimOptions", "World", "Delivery"]

TRACE_MAX = 40  # events kept for a failure report: enough to see the interleaving, short enough to read

# Key hash ranges an Exclusive reader may declare: none (a plain consumer), all, a half, two with a
# gap, and a narrow one that most keys miss.
_READER_HASH_RANGES: tuple[tuple[tuple[int, int], ...], ...] = (
    (),
    (),
    ((0, 65535),),
    ((0, 32767),),
    ((32768, 65535),),
    ((0, 9999), (40000, 65535)),
    ((100, 20000),),
)


@dataclass(frozen=True)
class SimOptions:
    """One point of the swarm: every knob a schedule can turn, derived from its seed."""

    subscription_type: str = "Key_Shared"
    ordering_mode: str = "pip379"
    key_shared_mode: str = "AUTO_SPLIT"
    allow_out_of_order_delivery: bool = False
    use_consistent_hashing: bool = True
    replica_points: int = 100
    keys: int = 8
    messages: int = 120
    batch_max: int = 1
    entries_per_ledger: int = 20
    consumer_names: int = 3
    consumers_max: int = 3
    receiver_queue: int = 10
    look_ahead_per_consumer: int = 2000
    look_ahead_per_subscription: int = 20000
    max_unacked_per_consumer: int = 50000
    unblocking_interval_ms: int = 10
    nack_percent: int = 0
    redeliver_all_percent: int = 0
    expire_percent: int = 0
    delayed_percent: int = 0
    churn_percent: int = 10
    ack_delay_ms_max: int = 50
    safety_steps: int = 400
    # Exclusive only: the consumer is a reader that declares these key hash ranges (keyHashRange).
    reader_hash_ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def from_seed(cls, seed: int, ordering_mode: str = "pip379", subscription_type: str = "Key_Shared") -> SimOptions:
        rng = random.Random(seed * 7919 + 17)
        key_shared_mode = "STICKY" if subscription_type == "Key_Shared" and rng.random() < 0.15 else "AUTO_SPLIT"
        return cls(
            subscription_type=subscription_type,
            ordering_mode=ordering_mode,
            key_shared_mode=key_shared_mode,
            allow_out_of_order_delivery=rng.random() < 0.1,
            use_consistent_hashing=rng.random() < 0.8,
            replica_points=rng.choice((1, 3, 10, 100)),
            keys=rng.choice((1, 2, 3, 5, 8, 20, 60)),
            messages=rng.randint(20, 160),
            batch_max=rng.choice((1, 1, 1, 3)),
            entries_per_ledger=rng.choice((3, 10, 50)),
            consumer_names=rng.randint(1, 4),
            consumers_max=rng.randint(1, 4),
            receiver_queue=rng.choice((1, 2, 5, 10, 50)),
            look_ahead_per_consumer=rng.choice((0, 2, 5, 2000)),
            look_ahead_per_subscription=rng.choice((3, 10, 20000)),
            max_unacked_per_consumer=rng.choice((4, 50000, 50000)),
            unblocking_interval_ms=rng.choice((0, 10)),
            nack_percent=rng.choice((0, 0, 0, 5)),
            redeliver_all_percent=rng.choice((0, 0, 0, 2)),
            expire_percent=rng.choice((0, 0, 0, 1)),
            delayed_percent=rng.choice((0, 0, 0, 10)),
            churn_percent=rng.choice((2, 5, 15)),
            ack_delay_ms_max=rng.choice((0, 20, 200)),
            safety_steps=rng.randint(100, 400),
            # Drawn last, and only for Exclusive, so that every other option of a seed stays as it was.
            reader_hash_ranges=rng.choice(_READER_HASH_RANGES) if subscription_type == "Exclusive" else (),
        )

    def settings(self) -> DispatcherSettings:
        return DispatcherSettings(
            key_shared_ordering_mode=self.ordering_mode,
            use_consistent_hashing=self.use_consistent_hashing,
            consistent_hashing_replica_points=self.replica_points,
            look_ahead_msg_in_replay_threshold_per_consumer=self.look_ahead_per_consumer,
            look_ahead_msg_in_replay_threshold_per_subscription=self.look_ahead_per_subscription,
            max_unacked_messages_per_consumer=self.max_unacked_per_consumer,
            key_shared_unblocking_interval_ms=self.unblocking_interval_ms,
        )


@dataclass
class Delivery:
    """One message as a client received it."""

    position: Position
    key: str
    message_count: int
    redelivery_count: int
    session: int
    delayed: bool = False


@dataclass
class Client:
    """A consumer session of the official client, reduced to what ordering depends on."""

    consumer_id: int
    name: str
    receiver_queue: int
    sticky_ranges: tuple[tuple[int, int], ...] = ()
    incoming: deque = field(default_factory=deque)  # received, not yet handed to the application
    held: dict = field(default_factory=dict)  # position -> (Delivery, ack_at_ms): processing, unacked
    permits_to_return: int = 0
    paused: bool = False
    partially_acked: set = field(default_factory=set)


class World:
    def __init__(self, seed: int, options: SimOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.dispatcher = new_dispatcher(
            options.subscription_type, options.settings(), topic_name="persistent://public/default/sim"
        )
        self.keys = [f"key-{i}" for i in range(options.keys)]
        # The topic: entries in order, and where each position sits in that order.
        self.log: list[Entry] = []
        self.log_keys: list[str] = []
        self.index_of: dict[Position, int] = {}
        # The cursor.
        self.acked: set[int] = set()
        self.mark_delete_index = -1
        self.read_index = 0
        self.pending_read: ReadEntries | ReplayEntries | None = None
        self.cancel_requested = False
        self.wakeups: list[int] = []
        # Clients.
        self.clients: dict[int, Client] = {}
        self.next_consumer_id = 1
        self.session_of: dict[int, int] = {}
        self.active_consumer_id: int | None = None
        self.ever_delivered: set[Position] = set()
        self.trace: deque[tuple[int | None, object]] = deque(maxlen=TRACE_MAX)
        self.steps = 0
        self.deliveries = 0
        self.listeners: list = []

    # ------------------------------------------------------------------------------- plumbing

    def feed(self, event: Event) -> None:
        """Hand one event to the dispatcher and carry out its decisions."""
        # The trace keeps the objects; they are formatted only when a violation is reported.
        self.trace.append((self.now_ms, event))
        decisions = self.dispatcher.handle(event, self.now_ms)
        for decision in decisions:
            self.trace.append((None, decision))
            self._carry_out(decision)

    def note(self, text: str) -> None:
        self.trace.append((self.now_ms, text))

    def formatted_trace(self) -> tuple[str, ...]:
        lines = []
        for now_ms, item in self.trace:
            text = self._describe(item)
            lines.append(f"    -> {text}" if now_ms is None else f"t={now_ms} {text}")
        return tuple(lines)

    def _describe(self, item: object) -> str:
        """A short line for the trace: entries as position/key, the rest as the dataclass prints."""
        entries = getattr(item, "entries", None)
        if entries is None:
            return str(item)
        shown = " ".join(f"{e.position}/{self.log_keys[self.index_of[e.position]]}" for e in entries)
        consumer = getattr(item, "consumer_id", None)
        counts = getattr(item, "redelivery_counts", None)
        head = type(item).__name__ + (f" c{consumer}" if consumer is not None else "")
        return f"{head} [{shown}]" + (f" redelivery {counts}" if counts else "")

    def _carry_out(self, decision: object) -> None:
        if isinstance(decision, Dispatch):
            self._deliver(decision)
        elif isinstance(decision, (ReadEntries, ReplayEntries)):
            assert self.pending_read is None, f"second read issued while {self.pending_read} is in flight"
            self.pending_read = decision
            for listener in self.listeners:
                listener.on_read_issued(self, decision)
            self.cancel_requested = False
        elif isinstance(decision, CancelRead):
            self.cancel_requested = True
        elif isinstance(decision, WakeUp):
            self.wakeups.append(decision.at_ms)
        elif isinstance(decision, RewindCursor):
            self.read_index = self.mark_delete_index + 1
        elif isinstance(decision, ActiveConsumerChanged):
            self.active_consumer_id = decision.active_consumer_id
        elif isinstance(decision, AckFiltered):
            self._ack_filtered(decision.positions)

    def _ack_filtered(self, positions: tuple[Position, ...]) -> None:
        """The cursor acknowledges entries no consumer of the subscription will receive."""
        for listener in self.listeners:
            listener.on_filtered(self, positions)
        for position in positions:
            self.acked.add(self.index_of[position])
        moved = False
        while self.mark_delete_index + 1 in self.acked:
            self.mark_delete_index += 1
            moved = True
        if moved:
            self.feed(MarkDeleteAdvanced(self.log[self.mark_delete_index].position))

    def _deliver(self, decision: Dispatch) -> None:
        client = self.clients.get(decision.consumer_id)
        assert client is not None, f"dispatch to unknown consumer {decision.consumer_id}"
        counts = decision.redelivery_counts or [0] * len(decision.entries)
        for entry, count in zip(decision.entries, counts):
            index = self.index_of[entry.position]
            assert index not in self.acked, f"dispatched {entry.position}, which is acknowledged"
            delivery = Delivery(
                entry.position,
                self.log_keys[index],
                entry.message_count,
                count,
                self.session_of[client.consumer_id],
                entry.deliver_at_ms > 0,
            )
            client.incoming.append(delivery)
            self.deliveries += 1
            first = entry.position not in self.ever_delivered
            self.ever_delivered.add(entry.position)
            for listener in self.listeners:
                listener.on_delivery(self, client, delivery, first)

    # ---------------------------------------------------------------------------------- actions

    def produce(self) -> None:
        count = self.rng.randint(1, 5)
        for _ in range(count):
            if len(self.log) >= self.options.messages:
                break
            delay = self.rng.randint(1, 300) if self.rng.randrange(100) < self.options.delayed_percent else 0
            self.publish(self.keys[self.rng.randrange(len(self.keys))], self.now_ms + delay if delay else 0)
        self.note(f"produced up to {self.log[-1].position}")

    def publish(self, key: str, deliver_at_ms: int = 0) -> Position:
        """Append one entry with `key` (a batch of 1..batch_max messages) to the topic."""
        index = len(self.log)
        ledger, entry_id = divmod(index, self.options.entries_per_ledger)
        position = Position(ledger + 1, entry_id)
        size = self.rng.randint(1, self.options.batch_max)
        self.log.append(Entry(position, key_hash(key.encode()), size, None, deliver_at_ms))
        self.log_keys.append(key)
        self.index_of[position] = index
        return position

    def _unread_available(self) -> bool:
        return any(i not in self.acked for i in range(self.read_index, len(self.log)))

    def can_complete_read(self) -> bool:
        read = self.pending_read
        if read is None:
            return False
        if isinstance(read, ReplayEntries):
            return True
        return self._unread_available() or self.cancel_requested

    def complete_read(self) -> None:
        read = self.pending_read
        self.pending_read = None
        if isinstance(read, ReplayEntries):
            self.feed(ReadCompleted(tuple(self.log[self.index_of[p]] for p in read.positions)))
            return
        assert read is not None, "no read in flight"
        entries: list[Entry] = []
        index = self.read_index
        while index < len(self.log) and len(entries) < read.max_entries:
            if index not in self.acked:
                entries.append(self.log[index])
            index += 1
        if not entries:
            self.feed(ReadCancelled())
            return
        self.read_index = index
        self.feed(ReadCompleted(tuple(entries)))

    def dispatch_due(self) -> None:
        self.feed(DispatchDue())

    def add_consumer(
        self, name: str | None = None, receiver_queue: int | None = None, paused: bool = False
    ) -> int | None:
        """Subscribe a consumer (a random name unless given); returns its id, or None if refused."""
        options = self.options
        connected = {c.name for c in self.clients.values()}
        if name is None:
            names = [f"c{i}" for i in range(options.consumer_names)]
            if options.key_shared_mode == "STICKY":
                names = [n for n in names if n not in connected]
                if not names:
                    return None
            name = self.rng.choice(names)
        consumer_id = self.next_consumer_id
        self.next_consumer_id += 1
        ranges: tuple[tuple[int, int], ...] = ()
        if options.key_shared_mode == "STICKY":
            ranges = (self._sticky_range(name),)
        meta = None
        if options.subscription_type == "Key_Shared":
            meta = KeySharedMeta(options.key_shared_mode, options.allow_out_of_order_delivery, ranges)
        elif options.reader_hash_ranges:
            ranges = options.reader_hash_ranges
            meta = KeySharedMeta("STICKY", False, ranges)
        client = Client(consumer_id, name, receiver_queue or options.receiver_queue, ranges, paused=paused)
        self.clients[consumer_id] = client
        self.session_of[consumer_id] = consumer_id
        try:
            self.feed(ConsumerAdded(consumer_id, name, 0, meta))
        except CoreError as refused:
            # The broker answers the subscribe with an error (ConsumerBusy, ConsumerAssignError, ...).
            del self.clients[consumer_id]
            self.note(f"subscribe of {name} refused: {refused.server_error}")
            return None
        self.feed(Flow(consumer_id, client.receiver_queue))
        return consumer_id

    def _sticky_range(self, name: str) -> tuple[int, int]:
        count = self.options.consumer_names
        index = int(name[1:])
        width = 65536 // count
        start = index * width
        end = 65535 if index == count - 1 else start + width - 1
        return (start, end)

    def remove_consumer(self, consumer_id: int) -> None:
        client = self.clients.pop(consumer_id)
        for listener in self.listeners:
            listener.on_disconnect(self, client)
        self.feed(ConsumerRemoved(consumer_id))

    def restart_consumer(self, consumer_id: int) -> int | None:
        """Close and reconnect with the same name and queue size: one step of a rolling restart."""
        client = self.clients[consumer_id]
        self.remove_consumer(consumer_id)
        return self.add_consumer(client.name, client.receiver_queue)

    def receive(self, client: Client) -> None:
        """The application takes the next message; the client returns permits at half its queue."""
        delivery = client.incoming.popleft()
        for listener in self.listeners:
            listener.on_receive(self, client, delivery)
        delay = self.rng.randint(0, self.options.ack_delay_ms_max)
        client.held[delivery.position] = (delivery, self.now_ms + delay)
        client.permits_to_return += delivery.message_count
        if client.permits_to_return >= max(client.receiver_queue // 2, 1):
            permits, client.permits_to_return = client.permits_to_return, 0
            self.feed(Flow(client.consumer_id, permits))

    def ack(self, client: Client, position: Position) -> None:
        delivery, _at = client.held[position]
        if delivery.message_count > 1 and position not in client.partially_acked and self.rng.random() < 0.5:
            # Batch-index ack of part of the batch first, as a client with batch index acks would.
            client.partially_acked.add(position)
            self.feed(BatchIndexAcked(client.consumer_id, position, delivery.message_count - 1))
            return
        del client.held[position]
        client.partially_acked.discard(position)
        for listener in self.listeners:
            listener.on_ack(self, client, delivery)
        index = self.index_of[position]
        self.acked.add(index)
        self.feed(Acked(client.consumer_id, (position,)))
        moved = False
        while self.mark_delete_index + 1 in self.acked:
            self.mark_delete_index += 1
            moved = True
        if moved:
            self.feed(MarkDeleteAdvanced(self.log[self.mark_delete_index].position))

    def nack(self, client: Client, position: Position) -> None:
        delivery, _at = client.held.pop(position)
        client.partially_acked.discard(position)
        for listener in self.listeners:
            listener.on_nack(self, client, delivery)
        self.feed(RedeliverRequested(client.consumer_id, (position,)))

    def redeliver_all(self, client: Client) -> None:
        """redeliverUnacknowledgedMessages (or an ack timeout): the client drops what it has not acked."""
        dropped = list(client.incoming) + [d for d, _at in client.held.values()]
        cleared = sum(d.message_count for d in client.incoming)
        client.incoming.clear()
        client.held.clear()
        client.partially_acked.clear()
        for listener in self.listeners:
            for delivery in dropped:
                listener.on_nack(self, client, delivery)
        self.feed(RedeliverRequested(client.consumer_id, None))
        if cleared:
            self.feed(Flow(client.consumer_id, cleared))

    def expire(self) -> None:
        """Message TTL: the cursor skips to a produced entry; everything up to it counts as acknowledged."""
        index = self.rng.randrange(self.mark_delete_index + 1, len(self.log))
        for i in range(self.mark_delete_index + 1, index + 1):
            self.acked.add(i)
        while self.mark_delete_index + 1 in self.acked:
            self.mark_delete_index += 1
        position = self.log[self.mark_delete_index].position
        for listener in self.listeners:
            listener.on_expire(self, position)
        self.feed(MarkDeleteAdvanced(position, by_ack=False))

    def tick(self) -> None:
        due = [t for t in self.wakeups if t > self.now_ms]
        acks = [at for c in self.clients.values() for _d, at in c.held.values() if at > self.now_ms]
        candidates = due + acks
        self.now_ms = min(candidates) if candidates else self.now_ms + 1
        self.wakeups = [t for t in self.wakeups if t > self.now_ms]
        self.feed(Tick())

    # ------------------------------------------------------------------------------- scheduling

    def enabled_actions(self, liveness: bool) -> list[tuple[int, Callable[[], object]]]:
        """(weight, action) pairs for this step."""
        options = self.options
        actions: list[tuple[int, Callable[[], object]]] = []
        if not liveness and len(self.log) < options.messages:
            actions.append((6, self.produce))
        if self.can_complete_read():
            actions.append((10, self.complete_read))
        if self.dispatcher.awaiting_dispatch:
            actions.append((10, self.dispatch_due))
        for client in self.clients.values():
            actions += self._client_actions(client, liveness)
        if not liveness and options.expire_percent and self.mark_delete_index + 1 < len(self.log):
            actions.append((options.expire_percent, self.expire))
        if not liveness and options.churn_percent:
            actions += self._churn_actions(options.churn_percent)
        if self.wakeups or any(c.held for c in self.clients.values()):
            actions.append((2, self.tick))
        return actions

    def _client_actions(self, client: Client, liveness: bool) -> list[tuple[int, Callable[[], object]]]:
        """What one consumer's application may do: receive, ack (or nack) up to three held messages, ask
        for everything again."""
        options = self.options
        actions: list[tuple[int, Callable[[], object]]] = []
        if client.incoming and not client.paused:
            actions.append((8, partial(self.receive, client)))
        for position, (_delivery, at) in list(client.held.items())[:3]:
            if at <= self.now_ms or liveness:
                actions.append((8, partial(self.ack, client, position)))
            if not liveness and options.nack_percent and client.held:
                actions.append((options.nack_percent, partial(self.nack, client, position)))
        if not liveness and options.redeliver_all_percent and (client.held or client.incoming):
            actions.append((options.redeliver_all_percent, partial(self.redeliver_all, client)))
        return actions

    def _churn_actions(self, churn: int) -> list[tuple[int, Callable[[], object]]]:
        """Consumers joining, leaving, restarting, pausing: one victim drawn per step."""
        actions: list[tuple[int, Callable[[], object]]] = []
        if len(self.clients) < self.options.consumers_max:
            actions.append((churn, self.add_consumer))
        if self.clients:
            victim = self.rng.choice(sorted(self.clients))
            actions.append((churn, partial(self.remove_consumer, victim)))
            actions.append((churn, partial(self.restart_consumer, victim)))
            actions.append((churn, partial(self._toggle_pause, victim)))
        return actions

    def _toggle_pause(self, consumer_id: int) -> None:
        self.set_paused(consumer_id, not self.clients[consumer_id].paused)

    def set_paused(self, consumer_id: int, paused: bool) -> None:
        """A paused client keeps what it received but hands nothing to the application."""
        self.clients[consumer_id].paused = paused
        self.note(f"consumer {consumer_id} {'paused' if paused else 'resumed'}")

    def step(self, liveness: bool) -> bool:
        actions = self.enabled_actions(liveness)
        if not actions:
            return False
        total = sum(w for w, _a in actions)
        pick = self.rng.randrange(total)
        chosen = actions[-1][1]
        for weight, action in actions:
            pick -= weight
            if pick < 0:
                chosen = action
                break
        chosen()
        self.steps += 1
        return True

    def prepare_liveness(self) -> None:
        """Stop churn: resume everyone, and make sure the subscription can be served."""
        for client in self.clients.values():
            client.paused = False
        options = self.options
        if options.key_shared_mode == "STICKY":
            connected = {c.name for c in self.clients.values()}
            for i in range(options.consumer_names):
                if f"c{i}" not in connected:
                    self.add_consumer(f"c{i}")
        elif not self.clients:
            self.add_consumer()
        if self.wakeups:
            self.tick()

    def drained(self) -> bool:
        return self.mark_delete_index == len(self.log) - 1
