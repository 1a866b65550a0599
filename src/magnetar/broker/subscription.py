"""A persistent subscription: a storage cursor, a core dispatcher, and the consumers attached to it.

Owns: carrying out the dispatcher's decisions (reads from the cursor or the ledger, MESSAGE frames via
the consumers, timers, rewinds) and turning what consumers do (flow, acks, redelivery requests) into
cursor updates and dispatcher events.
Must not touch: ordering decisions (the dispatcher makes them) or the wire format (consumers write).

The dispatcher is created with the first consumer, with that consumer's subscription type. When the
last consumer leaves it is dropped and the cursor rewound to the first unacknowledged entry, as
Pulsar's dispatchers do, so a later consumer (of any type) receives everything still unacknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, assert_never

from magnetar.broker.logs import draining_ended
from magnetar.core.dispatchers import Dispatcher, new_dispatcher
from magnetar.core.errors import ConsumerBusyError
from magnetar.core.events import (
    Acked,
    AckFiltered,
    ActiveConsumerChanged,
    BatchIndexAcked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    CumulativeAcked,
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
from magnetar.positions import EARLIEST, Position
from magnetar.protocol import messages
from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.markers import MARKER_PRODUCER_NAME, is_marker, parse_marker
from magnetar.protocol.pulsar_markers_pb2 import ReplicatedSubscriptionsSnapshot
from magnetar.replication.acked_ranges import positions_in, subscription_acked_ranges, uncovered
from magnetar.replication.snapshots import ReplicatedSubscriptionSnapshotCache, cached_snapshot
from magnetar.storage import ManagedCursor

if TYPE_CHECKING:
    from magnetar.broker.consumer import ServerConsumer
    from magnetar.broker.topic_context import TopicContext
    from magnetar.broker.topic_name import TopicName
    from magnetar.replication.controller import ReplicatedSubscriptionsController
    from magnetar.storage import Entry as StoredEntry
    from magnetar.storage import ManagedLedger


class _CompactedReads(Protocol):
    async def read_entries(self, cursor: ManagedCursor, count: int) -> list[StoredEntry] | None: ...


class SubscriptionTopic(Protocol):
    """What a subscription reaches of its topic (topic.PersistentTopic, which names this module's class,
    not the other way round)."""

    @property
    def name(self) -> TopicName: ...

    @property
    def context(self) -> TopicContext: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def compaction(self) -> _CompactedReads: ...

    @property
    def replicated_subscriptions(self) -> ReplicatedSubscriptionsController | None: ...

    @property
    def uses_delayed_delivery(self) -> bool: ...


T = TypeVar("T", bound=SubscriptionTopic)

__all__ = [
    "PersistentSubscription",
    "MARKER_PRODUCER_NAME",
    "REPLICATED_PROPERTY",
    "SubscriptionFencedError",
    "entry_after",
    "is_marker_entry",
]

# The cursor property that makes a subscription replicated (PIP-33), kept across restarts as Pulsar keeps it.
REPLICATED_PROPERTY = "pulsar.replicated.subscription"

# The consumer id acknowledgements carry when another cluster's subscription made them: none of this
# subscription's consumers (their ids start at 1), so the dispatcher releases them from whoever holds them.
REPLICATED_ACKS_CONSUMER_ID = 0

log = logging.getLogger(__name__)


class SubscriptionFencedError(Exception):
    """A consumer subscribes while the subscription's cursor is being reset (Pulsar's
    SubscriptionFencedException): answered ServiceNotReady, and the client subscribes again later."""

    server_error = "ServiceNotReady"


def is_marker_entry(stored: Any) -> bool:
    """A stored entry is a marker (its metadata carries `marker_type`, Pulsar's isServerOnlyMarker): the
    broker's, never dispatched. Every marker is stored under `pulsar.marker` (protocol/markers.py), so
    only entries of that producer name are parsed, and a client's data under that name stays data.
    Clients cannot store markers: connections refuse SENDs with a marker type from anyone but another
    cluster's replicator. One whose metadata no longer parses is the broker's too, as in Pulsar."""
    if stored.producer_name != MARKER_PRODUCER_NAME:
        return False
    try:
        return is_marker(stored.data)
    except (ProtocolError, messages.ChecksumError):
        return True


# Entry(...) without the Python-level __new__ NamedTuple generates: one per entry read, on the
# dispatch path bench/e2e_throughput.py measures (commit 6766574).
_new_entry = partial(tuple.__new__, Entry)


# Entries read for this subscription and not yet acknowledged are held (stored entries, by position)
# so that a replay of them does not read them again. Key_Shared replays most entries once: a read
# takes as many entries as all consumers have permits for, and those of consumers without permits
# wait in the replay queue (as in Pulsar). Re-reading them from the entry cache, one lookup per run
# of consecutive positions and a new Entry per entry, was a tenth of the event loop's time at
# 100,000 batched msg/s. Bounded by payload bytes: entries are held while there is room, and those
# read when there is none are not (their replay reads them). What is held is the oldest part of the
# replay queue, the part dispatched next. Emptying the whole set when a read overflowed it, as
# magnetar did before, threw away the replay queue's head at every read once entries were large
# (pulsar-perf's batches of 1,000 messages are ~110 KB, so 8 MB is ~75 of them, less than one read
# of 100): every replay then went to the entry cache or the disk, and at saturation the consumers'
# FLOWs waited for those reads (docs/performance.md, "Key_Shared at saturation").
# Only Shared and Key_Shared subscriptions replay in the normal course; the others (cumulative acks,
# which would leave acknowledged entries held until the bound) only on redelivery.
HELD_BYTES_MAX = 8 * 1024 * 1024
_REPLAYING_TYPES = ("Shared", "Key_Shared")


class _ReadCancelledBeforeWaiting(Exception):
    """A normal read found nothing new after the dispatcher asked to cancel it."""


class PersistentSubscription(Generic[T]):
    """Invariants:
    - a dispatcher exists exactly while consumers are attached;
    - at most one read task runs, and only while the dispatcher has a read in flight.
    """

    def __init__(self, topic: T, name: str, cursor: ManagedCursor) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        # The dispatcher's clock: epoch milliseconds, the unit of a message's deliver_at_time.
        self._now_ms = topic.context.clock.time_ms
        self.dispatcher: Dispatcher | None = None
        self.subscription_type: str | None = None
        self.consumers: dict[int, ServerConsumer] = {}
        self._next_consumer_id = 1
        self._read_task: asyncio.Task[None] | None = None
        self._read_waiting = False
        self._cancel_requested = False
        self._wakeup: asyncio.TimerHandle | None = None
        self._wakeup_at_ms: int | None = None
        self._held: dict[Position, Any] = {}
        self._held_bytes = 0
        # sticky hash -> draining consumer, as last logged; empty unless DEBUG is on (logs.py).
        self.draining_logged: dict[int, Any] = {}
        # Pulsar's subscription stats beyond the dispatcher's: what consumers that left had received,
        # and when a consumer last asked for messages and the mark-delete position last moved (epoch
        # ms). Consumers keep them up to date (consumer.py).
        self.msg_out_from_removed_consumers = 0
        self.bytes_out_from_removed_consumers = 0
        self.last_consumed_flow_ms = 0
        self.last_mark_delete_advanced_ms = 0
        # PIP-33: the SNAPSHOT markers read and not yet passed, while the subscription is replicated; and
        # the last snapshot an UPDATE went out for (Pulsar #16651: never the same one twice).
        self.snapshot_cache: ReplicatedSubscriptionSnapshotCache | None = None
        if cursor.durable and cursor.properties.get(REPLICATED_PROPERTY):
            self.snapshot_cache = self._new_snapshot_cache()
        self._last_update_snapshot_id: str | None = None
        # magnetar's acked ranges (replication/acked_ranges.py): whether consumers acknowledged something
        # since the last ACKED_RANGES, what that one carried, and below which local position the other
        # clusters' subscriptions already are (the REQUEST of the snapshot the last UPDATE carried).
        self.acks_changed = False
        self.acked_ranges_sent: dict[str, Any] | None = None
        self.acked_ranges_floor = EARLIEST
        # Reads see the topic's compacted view up to its horizon (a consumer or reader that subscribed
        # with read_compacted; Exclusive and Failover only).
        self.read_compacted = False
        # True while the cursor is reset (a seek): consumers that come back in the meantime are refused.
        self._fenced = False

    @property
    def durable(self) -> bool:
        return self.cursor.durable

    @property
    def replicated(self) -> bool:
        return self.snapshot_cache is not None

    def _new_snapshot_cache(self) -> ReplicatedSubscriptionSnapshotCache:
        return ReplicatedSubscriptionSnapshotCache(
            self.topic.context.config["replicatedSubscriptionsSnapshotMaxCachedPerSubscription"]
        )

    async def set_replicated(self, replicated: bool) -> None:
        """Mark (or unmark) the subscription replicated in its cursor's properties, durably (the topic's
        `set_subscription_replicated` is the entry point)."""
        if not self.durable:
            raise ValueError(f"a non-durable subscription ({self.name}) is never replicated")
        if replicated:
            self.cursor.properties[REPLICATED_PROPERTY] = 1
            self.snapshot_cache = self._new_snapshot_cache()
        else:
            self.cursor.properties.pop(REPLICATED_PROPERTY, None)
            self.snapshot_cache = None
        await self.cursor.flush()

    # --------------------------------------------------------------------------- consumers

    def add_consumer(
        self, consumer: ServerConsumer, subscription_type: str, priority_level: int, meta: KeySharedMeta | None
    ) -> int:
        """Attach a consumer; returns its id within the subscription. Raises CoreError subclasses, and
        SubscriptionFencedError while the cursor is being reset."""
        if self._fenced:
            raise SubscriptionFencedError("Subscription is fenced")
        if self.dispatcher is not None and subscription_type != self.subscription_type:
            raise ConsumerBusyError(
                f"Subscription {self.name} is of type {self.subscription_type}, not {subscription_type}"
            )
        if self.dispatcher is None:
            self.cursor.rewind()
            self.dispatcher = new_dispatcher(
                subscription_type,
                self.topic.context.dispatcher_settings,
                self.cursor.mark_delete_position,
                topic_name=str(self.topic.name),
                partition_index=self.topic.name.partition_index,
            )
            self.subscription_type = subscription_type
        consumer_id = self._next_consumer_id
        self._next_consumer_id += 1
        # Known before the core hears of it: a Failover newcomer must get the ACTIVE_CONSUMER_CHANGE that
        # its arrival decides (Pulsar tells it whether it is active; the Java client's listener waits for it).
        self.consumers[consumer_id] = consumer
        try:
            self._handle(ConsumerAdded(consumer_id, consumer.name, priority_level, meta))
        except Exception:
            del self.consumers[consumer_id]
            if not self.consumers:
                self._drop_dispatcher()
            raise
        return consumer_id

    def remove_consumer(self, consumer_id: int) -> None:
        if self.consumers.pop(consumer_id, None) is None or self.dispatcher is None:
            return
        self._handle(ConsumerRemoved(consumer_id))
        if not self.consumers:
            self._drop_dispatcher()

    def _drop_dispatcher(self) -> None:
        self._held.clear()
        self._held_bytes = 0
        self.dispatcher = None
        self.subscription_type = None
        self._cancel_read()
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
            self._wakeup_at_ms = None

    def disconnect_consumers(self) -> None:
        """Close every consumer (after a seek or reset, as Pulsar does): each reconnects on its own."""
        for consumer in list(self.consumers.values()):
            consumer.close_by_broker()

    # ------------------------------------------------------------------------- client actions

    def flow(self, consumer_id: int, permits: int) -> None:
        self._handle(Flow(consumer_id, permits))

    def acknowledge(
        self, consumer_id: int, positions: list[Position], batch_acks: list[tuple[Position, int, list[int]]]
    ) -> None:
        """Individual acks: whole entries, and batch entries of which only some indexes are acked now.

        `batch_acks` holds (position, batch size, ack_set words): a set bit means that index is still
        unacked (Java BitSet words, as the client sends them).
        """
        cursor = self.cursor
        before = cursor.mark_delete_position
        last = self.topic.ledger.last_confirmed_entry
        # Acked now, not before: what the core and the held entries hear of.
        whole = cursor.delete_positions([position for position in positions if position <= last])
        for position, size, ack_set in batch_acks:
            if position > last or cursor.is_deleted(position):
                continue
            acked = messages.acked_indexes(ack_set, size)
            previous = cursor.acked_batch_indexes(position)
            previous_mask = previous[1] if previous else 0
            if len(acked) == size:
                whole += cursor.delete_positions([position])
                continue
            cursor.delete_batch_indexes(position, size, acked)
            now = cursor.acked_batch_indexes(position)
            if now is None:
                whole.append(position)
            else:
                newly = messages.unacked_in_batch(size, previous_mask) - messages.unacked_in_batch(size, now[1])
                if newly > 0:
                    self._handle(BatchIndexAcked(consumer_id, position, newly))
        if whole:
            if self._held:
                self._release(whole)
            self._handle(Acked(consumer_id, tuple(whole)))
        if self.snapshot_cache is not None:
            self.acks_changed = True
        self._mark_delete_moved(before)

    def acknowledge_cumulative(self, consumer_id: int, position: Position) -> None:
        cursor = self.cursor
        before = cursor.mark_delete_position
        ledger = self.topic.ledger
        if position[1] < 0:
            # (ledger, -1): the client acks "nothing of this ledger" (index 0 of a batch was acked
            # cumulatively; Pulsar's clients send entry -1 for that): everything before the ledger's first entry.
            position = ledger.previous_position(Position(position[0], 0))
        position = min(position, ledger.last_confirmed_entry)
        if position > before:
            cursor.mark_delete(position)
            self._handle(CumulativeAcked(consumer_id, position))
            if self.snapshot_cache is not None:
                self.acks_changed = True
        self._mark_delete_moved(before)

    def _cache_snapshots(self, marker_entries: list[Any]) -> None:
        """SNAPSHOT markers this subscription read go into its cache (Pulsar's filterEntriesForConsumer)."""
        cache = self.snapshot_cache
        assert cache is not None, "called for replicated subscriptions only"
        for stored in marker_entries:
            try:
                marker = parse_marker(stored.data)
            except (ProtocolError, messages.ChecksumError):
                continue
            if marker is not None and isinstance(marker.body, ReplicatedSubscriptionsSnapshot):
                cache.add_new_snapshot(cached_snapshot(marker.body))

    def _mark_delete_moved(self, before: Position) -> None:
        after = self.cursor.mark_delete_position
        if after > before:
            # Trimming consumed ledgers is the cursor's business (ManagedLedger.cursor_moved).
            self._handle(MarkDeleteAdvanced(after))
            if self.snapshot_cache is not None:
                self._passed_snapshots(after)

    def _passed_snapshots(self, mark_delete: Position) -> None:
        """The newest snapshot the mark-delete position passed goes to the other clusters (UPDATE)."""
        snapshot = self.snapshot_cache.advanced_mark_delete_position(mark_delete)  # type: ignore[union-attr]
        controller = self.topic.replicated_subscriptions
        if snapshot is None or controller is None or snapshot.snapshot_id == self._last_update_snapshot_id:
            return
        self._last_update_snapshot_id = snapshot.snapshot_id
        controller.subscription_passed_snapshot(self.name, snapshot)
        if snapshot.request_position is not None:
            # The UPDATE moves the others' subscriptions past every entry stored before this REQUEST
            # (locally, or in the other cluster before it arrived there): acked ranges start above it.
            self.acked_ranges_floor = snapshot.request_position

    def acked_ranges(self) -> list[tuple[Position, Position]]:
        """What this subscription acknowledged that the other clusters' may not know yet: above the
        floor, up to the mark-delete position and the individually acknowledged ranges above it."""
        cursor = self.cursor
        return subscription_acked_ranges(
            cursor.mark_delete_position, cursor.individually_deleted.ranges(), self.acked_ranges_floor
        )

    def acknowledge_replicated(self, ranges: list[tuple[Position, Position]]) -> int:
        """Another cluster's subscription of this name acknowledged the entries of `ranges` (translated to
        this topic's positions: replication/acked_ranges.py): they are acknowledged here as a consumer's
        individual acks would be, so consumers holding them are released and nobody receives them again.
        Returns how many entries were newly acknowledged."""
        cursor, ledger = self.cursor, self.topic.ledger
        last = ledger.last_confirmed_entry
        left = uncovered(ranges, cursor.individually_deleted.ranges(), cursor.mark_delete_position)
        entries_of = {info.ledger_id: info.entries for info in ledger.ledgers}
        positions = [p for lower, upper in left for p in positions_in(lower, min(upper, last), entries_of) if p <= last]
        if not positions:
            return 0
        before = cursor.mark_delete_position
        whole = cursor.delete_positions(positions)
        if whole:
            if self._held:
                self._release(whole)
            self._handle(Acked(REPLICATED_ACKS_CONSUMER_ID, tuple(whole)))
        after = cursor.mark_delete_position
        if after > before:
            # Not `_mark_delete_moved`: an UPDATE back to the cluster these acks came from would tell it
            # what it already knows.
            self._handle(MarkDeleteAdvanced(after))
        return len(whole)

    def redeliver(self, consumer_id: int, positions: list[Position] | None) -> None:
        self._handle(RedeliverRequested(consumer_id, None if positions is None else tuple(positions)))

    def skip_to(self, position: Position) -> None:
        """Message TTL or skip: the cursor moves to `position` without consumer acks."""
        before = self.cursor.mark_delete_position
        if position <= before:
            return
        self.cursor.mark_delete(position)
        after = self.cursor.mark_delete_position
        if after > before:
            self._handle(MarkDeleteAdvanced(after, by_ack=False))

    # ----------------------------------------------------------------------- decisions

    def _handle(self, event: Event) -> None:  # noqa: C901 - every decision of the core is carried out here, per event: the dispatch path, left whole until a split is measured
        dispatcher = self.dispatcher
        if dispatcher is None:
            return
        for decision in dispatcher.handle(event, self._now_ms()):
            # One case per member of the core's `Decision` union; `assert_never` makes mypy name a new one.
            match decision:
                case Dispatch(consumer_id=consumer_id, entries=entries, redelivery_counts=counts):
                    consumer = self.consumers.get(consumer_id)
                    if consumer is not None:
                        consumer.send_entries(entries, counts)
                case ReadEntries() | ReplayEntries():
                    self._cancel_requested = False
                    self._read_task = asyncio.get_running_loop().create_task(self._read(decision))
                case CancelRead():
                    # Cancel a read that waits for new entries; one still reading will not wait afterwards.
                    log.debug(
                        "[%s][%s] Cancelling the read %s: the replay queue has work",
                        self.topic.name,
                        self.name,
                        "waiting for new entries" if self._read_waiting else "in progress (it will not wait)",
                    )
                    self._cancel_requested = True
                    if self._read_waiting and self._read_task is not None:
                        self._read_task.cancel()
                case WakeUp(at_ms=at_ms):
                    self._arm_wakeup(at_ms)
                case RewindCursor():
                    self.cursor.rewind()
                case ActiveConsumerChanged(active_consumer_id=active_id):
                    for consumer_id, consumer in self.consumers.items():
                        consumer.send_active_change(consumer_id == active_id)
                case AckFiltered(positions=positions):
                    # Outside the key hash ranges of a reader: the cursor moves past them as if acked.
                    before = self.cursor.mark_delete_position
                    self.cursor.delete(list(positions))
                    self._mark_delete_moved(before)
                case _:
                    assert_never(decision)
        if self.draining_logged:
            draining_ended(self)

    def _arm_wakeup(self, at_ms: int) -> None:
        if self._wakeup is not None and self._wakeup_at_ms is not None and self._wakeup_at_ms <= at_ms:
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup_at_ms = at_ms
        delay = max(at_ms - self._now_ms(), 0) / 1000
        self._wakeup = asyncio.get_running_loop().call_later(delay, self._on_wakeup)

    def _on_wakeup(self) -> None:
        at_ms = self._wakeup_at_ms
        self._wakeup = None
        self._wakeup_at_ms = None
        if at_ms is not None and self._now_ms() < at_ms:
            # WakeUp asks for a Tick at or after at_ms on the dispatcher's clock, and a dispatcher
            # woken before it keeps waiting for the Tick it asked for. The loop's timer can fire a
            # little early on that clock: libuv counts whole milliseconds from the start of a turn.
            self._arm_wakeup(at_ms)
            return
        self._handle(Tick())

    def _cancel_read(self) -> None:
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()
        self._read_task = None
        self._read_waiting = False

    async def _read(self, request: ReadEntries | ReplayEntries) -> None:  # noqa: C901 - the read loop of the dispatch path: left whole until a split is measured
        dispatcher = self.dispatcher
        try:
            if isinstance(request, ReplayEntries):
                stored = await self._read_replay(request.positions)
            else:
                stored = await self._read_new(request.max_entries)
        except _ReadCancelledBeforeWaiting:
            self._read_waiting = False
            if self.dispatcher is dispatcher and dispatcher is not None:
                self._handle(ReadCancelled())
            return
        except asyncio.CancelledError:
            self._read_waiting = False
            if self.dispatcher is dispatcher and dispatcher is not None:
                self._handle(ReadCancelled())
            raise
        except Exception:
            log.exception("read failed on %s/%s", self.topic.name, self.name)
            self._read_waiting = False
            if self.dispatcher is dispatcher:
                self._handle(ReadCancelled())
            return
        if self.dispatcher is not dispatcher:
            return
        if any(e.producer_name == MARKER_PRODUCER_NAME for e in stored):
            # Markers are stored but never sent, to consumers or readers: the subscription acks each
            # one individually as it reads it (Pulsar's filterEntriesForConsumer), and the dispatcher
            # never sees them (it orders what consumers receive, and they receive none of these).
            marker_entries = [e for e in stored if is_marker_entry(e)]
            if marker_entries:
                if self.snapshot_cache is not None:
                    self._cache_snapshots(marker_entries)
                before = self.cursor.mark_delete_position
                found = [e.position for e in marker_entries]
                self.cursor.delete(found)
                skipped = set(found)
                stored = [e for e in stored if e.position not in skipped]
                self._mark_delete_moved(before)
        if type(request) is ReadEntries and self.subscription_type in _REPLAYING_TYPES:
            self._hold(stored)
        delays = self._honours_delays
        if delays or any(e.message_count > 1 for e in stored):
            entries = tuple(self._core_entry(e, delays) for e in stored)
        else:
            # Single messages without delays (the common case) carry nothing to look up per entry.
            entries = tuple([_new_entry((e.position, e.sticky_key_hash, 1, e, 0)) for e in stored])
        self._handle(ReadCompleted(entries))
        self._handle(DispatchDue())

    def _hold(self, stored: list[Any]) -> None:
        held = self._held
        size = self._held_bytes
        if size + sum(len(entry.data) for entry in stored) > HELD_BYTES_MAX:
            size = self._prune_held()
        for entry in stored:
            if entry.position not in held:
                length = len(entry.data)
                if size + length > HELD_BYTES_MAX:
                    break
                held[entry.position] = entry
                size += length
        self._held_bytes = size

    def _prune_held(self) -> int:
        """Drop the held entries at or below the mark-delete position that nobody released (an ack
        filtered by hash ranges, a skip, a TTL): from the oldest held on, up to the first one above it,
        so the cost is what it drops. The payload bytes still held."""
        held = self._held
        mark_delete = self.cursor.mark_delete_position
        size = self._held_bytes
        while held:
            position = next(iter(held))
            if position > mark_delete:
                break
            size -= len(held.pop(position).data)
        return size

    def _release(self, positions: list[Position]) -> None:
        pop = self._held.pop
        size = self._held_bytes
        for position in positions:
            entry = pop(position, None)
            if entry is not None:
                size -= len(entry.data)
        self._held_bytes = size

    async def _read_replay(self, positions: tuple[Position, ...]) -> list[Any]:
        """The stored entries at `positions`, in that order: held ones as they are, the rest read."""
        held = self._held
        stored = [held.get(position) for position in positions]
        missing: list[tuple[int, int]] = [position for position, entry in zip(positions, stored) if entry is None]
        if not missing:
            return stored
        found = await self.topic.ledger.read_positions(missing)
        if self.subscription_type in _REPLAYING_TYPES:
            self._hold(found)
        read = {entry.position: entry for entry in found}
        # read_positions skips positions that no longer exist (a deleted ledger), and so does this.
        return [entry or read[p] for p, entry in zip(positions, stored) if entry is not None or p in read]

    async def _read_new(self, max_entries: int) -> list[Any]:
        """Entries from the cursor's read position, skipping acknowledged ones; waits while none."""
        cursor, ledger = self.cursor, self.topic.ledger
        while True:
            if cursor.has_more_entries():
                if self.read_compacted:
                    # The topic's compacted view up to its horizon, then the ledger (broker/compactor.py).
                    compacted = await self.topic.compaction.read_entries(cursor, max_entries)
                    if compacted:
                        return compacted
                    if compacted is not None:
                        continue
                stored = await cursor.read_entries(max_entries, self.topic.context.config["dispatcherMaxReadSizeBytes"])
                if stored:
                    fresh = cursor.undeleted_entries(stored)
                    if fresh:
                        return fresh
                    continue
                # Nothing at the read position: retention deleted the ledger it points into (readers do
                # not hold ledgers, as in Pulsar). Skip to the first entry that exists, or wait.
                first = ledger.first_position()
                if first > cursor.read_position:
                    cursor.seek(first)
                    continue
            if self._cancel_requested:
                # The dispatcher asked to cancel while this read was still reading: honour it now
                # rather than wait, or the replay work it wants to do would wait for new entries.
                raise _ReadCancelledBeforeWaiting
            self._read_waiting = True
            try:
                await ledger.wait_for_new_entries(ledger.last_confirmed_entry)
            finally:
                self._read_waiting = False

    def _core_entry(self, stored: Any, delays: bool) -> Entry:
        count = stored.message_count
        acked = self.cursor.acked_batch_indexes(stored.position) if count > 1 else None
        if acked is not None:
            count = messages.unacked_in_batch(*acked)
        deliver_at = 0
        if delays:
            deliver_at = messages.index_send(stored.data)[4]
        return Entry(stored.position, stored.sticky_key_hash, count, stored, deliver_at)

    @property
    def _honours_delays(self) -> bool:
        """deliver_at_time applies to Shared and Key_Shared (as in Pulsar) on topics that used it."""
        return (
            self.topic.uses_delayed_delivery
            and self.subscription_type in ("Shared", "Key_Shared")
            and self.topic.context.config["delayedDeliveryEnabled"]
        )

    # ------------------------------------------------------------------ admin operations
    # What an operator does to a subscription over the admin API. Each moves the cursor the way a
    # consumer's ack or seek would, so the dispatcher learns of it through the same events.

    def nth_unacked_position(self, n: int) -> Position | None:
        """The n-th entry (from 1) after the mark-delete position that is not acknowledged: what Pulsar's
        peekNthMessage and skipMessages count. None when the backlog holds fewer."""
        cursor, ledger = self.cursor, self.topic.ledger
        position: tuple[int, int] = cursor.mark_delete_position
        remaining = n
        for lower, upper in cursor.individually_deleted.ranges():
            gap = ledger.count_entries(position, lower)
            if remaining <= gap:
                return entry_after(ledger, position, remaining)
            remaining -= gap
            position = upper
        if remaining <= ledger.count_entries(position, ledger.last_confirmed_entry):
            return entry_after(ledger, position, remaining)
        return None

    def skip_messages(self, n: int) -> None:
        """skip: the next n unacknowledged entries count as acknowledged (all of them if fewer)."""
        target = self.nth_unacked_position(n)
        self.skip_to(target if target is not None else self.topic.ledger.last_confirmed_entry)

    def skip_all(self) -> None:
        """skip_all (clear backlog): everything stored so far counts as acknowledged."""
        self.skip_to(self.topic.ledger.last_confirmed_entry)

    async def reset_cursor(self, position: Position) -> None:
        """resetCursor: consumers are closed first (they re-subscribe), so no dispatcher holds the old
        positions when the cursor moves; then everything before `position` counts as acknowledged and
        nothing from it on, as a seek does.

        The subscription is fenced until the cursor is stored, as Pulsar's is: a consumer that re-subscribes
        before then is refused and comes again. Were it let in, messages from the new position could reach
        its client before the answer to the SEEK, and the C++ client clears its queue when that answer
        comes: they would be lost to it until the next redelivery. A second reset meanwhile is refused."""
        if self._fenced:
            raise ConsumerBusyError("Failed to fence subscription")
        log.info(
            "[%s][%s] Resetting cursor to %s, consumers to close: %d",
            self.topic.name,
            self.name,
            position,
            len(self.consumers),
        )
        self._fenced = True
        try:
            self.disconnect_consumers()
            await self.cursor.reset(position)
        finally:
            self._fenced = False

    # ------------------------------------------------------------------------------ stats

    def read_state(self) -> tuple[bool, bool, bool]:
        """(a normal read is pending, a replay read is pending, a read waits for new entries): what
        internalStats shows as subscriptionHavePendingRead, ...PendingReplayRead and waitingReadOp."""
        in_flight = self.dispatcher.read_in_flight if self.dispatcher is not None else None
        return in_flight == "normal", in_flight == "replay", self._read_waiting


def entry_after(ledger: Any, position: tuple[int, int], count: int) -> Position | None:
    """The `count`-th stored entry after `position` (count >= 1), walking the ledgers' entry counts."""
    for info in ledger.ledgers:
        if info.ledger_id < position[0] or not info.entries:
            continue
        first = position[1] + 1 if info.ledger_id == position[0] else 0
        available = info.entries - first
        if available <= 0:
            continue
        if count <= available:
            return Position(info.ledger_id, first + count - 1)
        count -= available
    return None
