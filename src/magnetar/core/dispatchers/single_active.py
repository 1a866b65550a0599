"""Exclusive and Failover dispatchers: one active consumer receives everything, in order.

Owns: the choice of the active consumer, its permits, and the rewind that follows a change of active
consumer or a request to redeliver.
Must not touch: storage, sockets, the clock.

Failover picks the active consumer as Pulsar does: consumers sorted by priority level, then name; for
a partition of a partitioned topic, `partition_index % n` over the highest-priority consumers; for a
non-partitioned topic, a hash ring of 100 points per consumer (`name + str(i)`) probed with the topic
name's hash, so that each topic of a namespace lands on a different consumer.

As in Pulsar, these dispatchers keep no pending acks and no redelivery counts: redelivery is a rewind
of the cursor to the first unacknowledged entry.

An Exclusive consumer that declares STICKY key hash ranges (Pulsar's `ReaderBuilder.keyHashRange`: a
reader whose subscribe carries `keySharedMeta`) receives only the entries whose sticky hash falls in
its ranges; the others are acknowledged on the cursor (`AckFiltered`) and cost no permits, as in
Pulsar's `AbstractDispatcherSingleActiveConsumer` (`isKeyHashRangeFiltered`). N such readers with
disjoint ranges split a topic by key without any of them receiving another's entries.
"""

from __future__ import annotations

from bisect import bisect_left

from magnetar.core.consumers import Consumer
from magnetar.core.errors import ConsumerBusyError, CoreError
from magnetar.core.events import (
    HANDLER_NAMES,
    Acked,
    AckFiltered,
    ActiveConsumerChanged,
    BatchIndexAcked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    CumulativeAcked,
    Decision,
    Dispatch,
    DispatchDue,
    Entry,
    Event,
    Flow,
    MarkDeleteAdvanced,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    RedeliverRequested,
    RewindCursor,
    Tick,
)
from magnetar.core.selectors import HashRangeExclusiveSelector
from magnetar.core.settings import DispatcherSettings
from magnetar.core.stats import ConsumerStats, SubscriptionStats
from magnetar.core.sticky_key import key_hash
from magnetar.positions import EARLIEST, Position

__all__ = ["SingleActiveConsumerDispatcher", "CONSUMER_CONSISTENT_HASH_REPLICAS"]

# Pulsar's AbstractDispatcherSingleActiveConsumer: ring points per consumer for non-partitioned topics.
CONSUMER_CONSISTENT_HASH_REPLICAS = 100


class SingleActiveConsumerDispatcher:
    """Invariants:
    - the active consumer is connected, and is None only when no consumer is;
    - Exclusive has at most one consumer;
    - a read is in flight or its entries await dispatch, never both;
    - a key hash filter exists only on Exclusive, while its one consumer is connected, and entries
      awaiting dispatch all fall in its ranges.
    """

    def __init__(
        self,
        subscription_type: str,
        settings: DispatcherSettings | None = None,
        mark_delete_position: Position = EARLIEST,
        topic_name: str = "",
        partition_index: int = -1,
    ) -> None:
        if subscription_type not in ("Exclusive", "Failover"):
            raise ValueError(f"not a single-active-consumer subscription type: {subscription_type}")
        self.subscription_type = subscription_type
        self.settings = settings or DispatcherSettings()
        self.topic_name = topic_name
        self.partition_index = partition_index
        self.consumers: dict[int, Consumer] = {}
        self.active: Consumer | None = None
        self.mark_delete_position = mark_delete_position
        self.now_ms = 0
        self._read_in_flight = False
        # Entries of a read issued before a rewind are stale: they are dropped, not dispatched.
        self._read_stale = False
        self._completed: tuple[Entry, ...] | None = None
        # The Exclusive consumer's declared key hash ranges, when it declared some.
        self.key_hash_filter: HashRangeExclusiveSelector[Consumer] | None = None
        self._out: list[Decision] = []

    def handle(self, event: Event, now_ms: int) -> list[Decision]:
        self.now_ms = now_ms
        out = self._out = []
        getattr(self, HANDLER_NAMES[type(event)])(event)
        return out

    # ------------------------------------------------------------------------------- consumers

    def _on_consumer_added(self, event: ConsumerAdded) -> None:
        if self.subscription_type == "Exclusive" and self.consumers:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        if event.consumer_id in self.consumers:
            raise CoreError(f"consumer id {event.consumer_id} is already connected")
        consumer = Consumer(event.consumer_id, event.consumer_name, event.priority_level)
        meta = event.key_shared_meta
        if self.subscription_type == "Exclusive" and meta is not None and meta.sticky_ranges:
            selector = HashRangeExclusiveSelector[Consumer]()
            # Refuses bad ranges with ConsumerAssignError before the consumer is registered.
            selector.add_consumer(consumer, consumer.name, meta.sticky_ranges)
            self.key_hash_filter = selector
        self.consumers[consumer.consumer_id] = consumer
        if not self._pick_active():
            # Unchanged: only the newcomer needs to learn who is active.
            self._out.append(ActiveConsumerChanged(self.active.consumer_id if self.active else None))
        self._read_more()

    def _on_consumer_removed(self, event: ConsumerRemoved) -> None:
        if self.consumers.pop(event.consumer_id, None) is None:
            return
        if not self.consumers:
            self.key_hash_filter = None
        self._pick_active()
        self._read_more()

    def _pick_active(self) -> bool:
        """Choose the active consumer; on a change rewind and announce it. Returns whether it changed."""
        if not self.consumers:
            chosen = None
        else:
            ordered = sorted(self.consumers.values(), key=lambda c: (c.priority_level, c.name))
            top = sum(1 for c in ordered if c.priority_level == ordered[0].priority_level)
            if self.partition_index >= 0:
                chosen = ordered[self.partition_index % top]
            else:
                chosen = ordered[self._ring_index(ordered[:top])]
        if chosen is self.active:
            return False
        self.active = chosen
        self._rewind()
        self._out.append(ActiveConsumerChanged(chosen.consumer_id if chosen else None))
        return True

    def _ring_index(self, consumers: list[Consumer]) -> int:
        ring: dict[int, int] = {}
        for index, consumer in enumerate(consumers):
            for point in range(CONSUMER_CONSISTENT_HASH_REPLICAS):
                # Later consumers overwrite earlier ones on a colliding point, as a TreeMap.put does.
                ring[key_hash(f"{consumer.name}{point}".encode())] = index
        points = sorted(ring)
        topic_hash = key_hash(self.topic_name.encode())
        at = bisect_left(points, topic_hash)
        return ring[points[at if at < len(points) else 0]]

    def _rewind(self) -> None:
        """Everything unacknowledged goes again to the (new) active consumer, from the first unacked entry."""
        if self._read_in_flight:
            self._read_stale = True
            self._out.append(CancelRead())
        self._completed = None
        self._out.append(RewindCursor())

    def _on_flow(self, event: Flow) -> None:
        consumer = self.consumers.get(event.consumer_id)
        if consumer is None:
            return
        consumer.permits += event.permits
        if consumer is self.active:
            self._read_more()

    # ------------------------------------------------------------------------------- reading

    def _read_more(self) -> None:
        active = self.active
        if self._read_in_flight or self._completed is not None or active is None or active.permits <= 0:
            return
        self._read_in_flight = True
        self._read_stale = False
        permits = active.permits
        if self.settings.precise_dispatcher_flow_control:
            permits = -(-permits // max(int(active.avg_messages_per_entry + 0.5), 1))
        self._out.append(ReadEntries(min(permits, self.settings.max_read_batch_size)))

    def _on_read_completed(self, event: ReadCompleted) -> None:
        if not self._read_in_flight:
            raise CoreError("a read completed that the dispatcher did not ask for")
        self._read_in_flight = False
        if self._read_stale:
            # The cursor moved past these entries after the rewind was asked for: rewind again.
            self._read_stale = False
            self._out.append(RewindCursor())
            self._read_more()
            return
        entries = event.entries
        selector = self.key_hash_filter
        if selector is not None:
            # One check per entry, not per message: a batch entry is routed by its first key, as Key_Shared does.
            kept = tuple(e for e in entries if selector.select(selector.slot(e.key_hash)) is not None)
            if len(kept) < len(entries):
                kept_positions = {e.position for e in kept}
                self._out.append(AckFiltered(tuple(e.position for e in entries if e.position not in kept_positions)))
            entries = kept
        self._completed = entries

    def _on_read_cancelled(self, _event: ReadCancelled) -> None:
        self._read_in_flight = False
        self._read_stale = False
        self._read_more()

    def _on_dispatch_due(self, _event: DispatchDue) -> None:
        entries, self._completed = self._completed, None
        active = self.active
        if entries and active is not None:
            messages = sum(e.message_count for e in entries)
            active.permits -= messages
            active.sent(messages, len(entries))
            self._out.append(Dispatch(active.consumer_id, list(entries)))
        elif entries:
            # Nobody to send to: read these again when a consumer arrives.
            self._out.append(RewindCursor())
        self._read_more()

    # ---------------------------------------------------------------------------------- acks

    def _on_acked(self, event: Acked) -> None:
        """Acks move the cursor, which the broker owns; here they only spare entries that wait for
        dispatch from being sent again."""
        if self._completed:
            acked = set(event.positions)
            self._completed = tuple(e for e in self._completed if e.position not in acked)

    def _on_cumulative_acked(self, event: CumulativeAcked) -> None:
        if self._completed:
            self._completed = tuple(e for e in self._completed if e.position > event.position)

    def _on_batch_index_acked(self, _event: BatchIndexAcked) -> None:
        """The entry stays unacknowledged as a whole; the cursor records the indexes."""

    def _on_redeliver_requested(self, event: RedeliverRequested) -> None:
        if self.active is not None and event.consumer_id == self.active.consumer_id:
            self._rewind()
            self._read_more()

    def _on_mark_delete_advanced(self, event: MarkDeleteAdvanced) -> None:
        if event.position > self.mark_delete_position:
            self.mark_delete_position = event.position
            if self._completed:
                # Message TTL or a skip moved the cursor past entries that wait for dispatch.
                self._completed = tuple(e for e in self._completed if e.position > event.position)

    def _on_tick(self, _event: Tick) -> None:
        self._read_more()

    # --------------------------------------------------------------------------------- stats

    @property
    def read_in_flight(self) -> str | None:
        return "normal" if self._read_in_flight else None

    @property
    def awaiting_dispatch(self) -> bool:
        return self._completed is not None

    def stats(self) -> SubscriptionStats:
        return SubscriptionStats(
            type=self.subscription_type,
            msg_out_counter=sum(c.msg_out_counter for c in self.consumers.values()),
            consumers=[ConsumerStats(c.name, c.permits, c.msg_out_counter) for c in self.consumers.values()],
            active_consumer_name=self.active.name if self.active else None,
        )

    def check_invariants(self) -> None:
        if self.consumers:
            assert self.active is not None, "consumers connected but none active"
            assert self.active.consumer_id in self.consumers, "the active consumer is not connected"
        else:
            assert self.active is None, "an active consumer with no consumer connected"
        if self.subscription_type == "Exclusive":
            assert len(self.consumers) <= 1, "an Exclusive subscription with several consumers"
        assert not (self._read_in_flight and self._completed is not None), "read in flight while entries wait"
        selector = self.key_hash_filter
        if selector is not None:
            assert self.subscription_type == "Exclusive" and self.consumers, "a key hash filter without its consumer"
            selector.check_invariants()
            for entry in self._completed or ():
                assert selector.select(selector.slot(entry.key_hash)) is not None, (
                    f"{entry.position} awaits dispatch outside the consumer's key hash ranges"
                )
