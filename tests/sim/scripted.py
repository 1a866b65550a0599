"""A step-by-step driver for one Key_Shared dispatcher, for scenarios written as the seeds write them.

Reads complete only when a test says so, so each step of PIP-282's examples happens exactly where the
document puts it. Decisions are carried out as the broker would: dispatches are recorded per consumer,
replay reads and cancellations are served by `settle()`, acks move a mark-delete position.
"""

from __future__ import annotations

from collections import defaultdict

from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.events import (
    Acked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    Dispatch,
    DispatchDue,
    Entry,
    Flow,
    KeySharedMeta,
    MarkDeleteAdvanced,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    ReplayEntries,
    Tick,
    WakeUp,
)
from magnetar.core.selectors import ConsistentHashingSelector
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position

# Where a script's subscription starts unless it says otherwise.
DEFAULT_MARK_DELETE = Position(1, 5)


def keys_routed(routes: list[tuple[list[str], str]], count: int = 1, exclude: tuple[str, ...] = ()) -> list[str]:
    """The first `count` keys `key-N` that, for each (consumer names, expected owner) pair, the default
    consistent-hashing selector maps to the expected owner. Lets a scenario say "key-a goes to c1"."""
    found: list[str] = []
    selectors = []
    for names, owner in routes:
        selector = ConsistentHashingSelector()
        for name in names:
            selector.add_consumer(name, name)
        selectors.append((selector, owner))
    index = 0
    while len(found) < count:
        key = f"key-{index}"
        index += 1
        if key in exclude:
            continue
        if all(s.select(s.slot(key_hash(key.encode()))) == owner for s, owner in selectors):
            found.append(key)
    return found


class Script:
    def __init__(self, mode: str, mark_delete: Position = DEFAULT_MARK_DELETE, **settings: int) -> None:
        settings.setdefault("key_shared_unblocking_interval_ms", 0)
        self.dispatcher = KeySharedDispatcher(
            DispatcherSettings(key_shared_ordering_mode=mode, **settings), mark_delete
        )
        self.now_ms = 0
        self.mark_delete = mark_delete
        self.sequence: list[Position] = []
        self.keys: dict[Position, str] = {}
        self.acked: set[Position] = set()
        self.read: ReadEntries | ReplayEntries | None = None
        self.cancel_requested = False
        self.wakeup: int | None = None
        self.received: dict[str, list[Position]] = defaultdict(list)
        self.ids: dict[str, int] = {}
        self.next_id = 1

    # ------------------------------------------------------------------ plumbing

    def feed(self, event: object) -> None:
        for decision in self.dispatcher.handle(event, self.now_ms):
            if isinstance(decision, Dispatch):
                name = next(n for n, i in self.ids.items() if i == decision.consumer_id)
                self.received[name].extend(e.position for e in decision.entries)
            elif isinstance(decision, (ReadEntries, ReplayEntries)):
                assert self.read is None
                self.read = decision
                self.cancel_requested = False
            elif isinstance(decision, CancelRead):
                self.cancel_requested = True
            elif isinstance(decision, WakeUp):
                self.wakeup = decision.at_ms
        self.dispatcher.check_invariants()

    def entry(self, position: Position) -> Entry:
        return Entry(position, key_hash(self.keys[position].encode()))

    # ------------------------------------------------------------------ steps

    def add(
        self, name: str, permits: int = 0, meta: KeySharedMeta | None = None, consumer_name: str | None = None
    ) -> None:
        """Subscribe `name` (the test's handle; `consumer_name` is what the client calls itself)."""
        consumer_id = self.next_id
        self.next_id += 1
        self.feed(ConsumerAdded(consumer_id, consumer_name or name, 0, meta))
        self.ids[name] = consumer_id
        if permits:
            self.flow(name, permits)
        self.settle()

    def flow(self, name: str, permits: int) -> None:
        self.feed(Flow(self.ids[name], permits))
        self.settle()

    def remove(self, name: str) -> None:
        self.feed(ConsumerRemoved(self.ids.pop(name)))
        self.settle()

    def publish(self, *keys: str) -> list[tuple[Position, str]]:
        """Positions for new entries with these keys, after everything read so far."""
        last = self.sequence[-1] if self.sequence else self.mark_delete
        return [(Position(last[0], last[1] + 1 + i), key) for i, key in enumerate(keys)]

    def read_available(self, *entries: tuple[Position, str]) -> None:
        """Serve pending normal reads from `entries` (in order) until they are used up or no read waits."""
        queue = list(entries)
        while queue and isinstance(self.read, ReadEntries) and not self.cancel_requested:
            count = self.read.max_entries
            batch, queue = queue[:count], queue[count:]
            self.read_completes(*batch)
            self.dispatch()
        assert not queue, f"{len(queue)} entries left unread: no normal read was issued for them"

    def read_completes(self, *entries: tuple[Position, str]) -> None:
        """The pending normal read returns these entries; the dispatcher has not sent them yet."""
        assert isinstance(self.read, ReadEntries), f"no normal read pending but {self.read}"
        assert len(entries) <= self.read.max_entries
        for position, key in entries:
            self.sequence.append(position)
            self.keys[position] = key
        self.read = None
        self.feed(ReadCompleted(tuple(self.entry(p) for p, _k in entries)))

    def dispatch(self) -> None:
        self.feed(DispatchDue())
        self.settle()

    def ack(self, name: str, *positions: Position) -> None:
        self.feed(Acked(self.ids[name], positions))
        self.acked.update(positions)
        moved = False
        for position in self.sequence:
            if position <= self.mark_delete:
                continue
            if position not in self.acked:
                break
            self.mark_delete = position
            moved = True
        if moved:
            self.feed(MarkDeleteAdvanced(self.mark_delete))
        self.settle()

    def expire(self, up_to: Position) -> None:
        """Message TTL expired everything up to `up_to`: the cursor moves there without consumer acks."""
        self.acked.update(p for p in self.sequence if p <= up_to)
        self.mark_delete = max(self.mark_delete, up_to)
        self.feed(MarkDeleteAdvanced(up_to, by_ack=False))
        self.settle()

    def settle(self) -> None:
        """Serve replay reads, cancellations and wake-ups until the dispatcher waits for the test."""
        for _ in range(100):
            if isinstance(self.read, ReplayEntries):
                read, self.read = self.read, None
                self.feed(ReadCompleted(tuple(self.entry(p) for p in read.positions)))
                self.feed(DispatchDue())
            elif isinstance(self.read, ReadEntries) and self.cancel_requested:
                self.read = None
                self.feed(ReadCancelled())
            elif self.wakeup is not None:
                self.now_ms = max(self.now_ms, self.wakeup)
                self.wakeup = None
                self.feed(Tick())
            else:
                return
        raise AssertionError("the dispatcher did not settle")

    def key_order(self, name: str, key: str) -> list[Position]:
        return [p for p in self.received[name] if self.keys[p] == key]
