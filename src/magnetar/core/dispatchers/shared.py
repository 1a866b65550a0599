"""The Shared dispatcher, and the machinery every multi-consumer dispatcher shares.

Owns: the consumers of one Shared or Key_Shared subscription, their permits and unacked limits, the
replay queue, redelivery counts, and the read loop (what to read next, when to wake up).
Must not touch: storage, sockets, the clock. Events come in through `handle`, decisions go out.

Read loop. At most one read is in flight. Replayed positions go first; a normal read follows when the
replay queue has nothing that can be sent now. When a read dispatched nothing the next attempt backs
off (`dispatcherRetryBackoff*`), so a blocked subscription waits for an event instead of spinning.

Key_Shared (`key_shared.py`) changes only how entries are assigned to consumers and which reads are
allowed; everything else lives here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sortedcontainers import SortedDict

from magnetar.core.consumers import Consumer
from magnetar.core.errors import CoreError
from magnetar.core.events import (
    HANDLER_NAMES,
    Acked,
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
    ReplayEntries,
    Tick,
    WakeUp,
)
from magnetar.core.explain import PendingMessage
from magnetar.core.replay_queue import ReplayQueue
from magnetar.core.settings import DispatcherSettings
from magnetar.core.stats import ConsumerStats, SubscriptionStats, SubscriptionSummary
from magnetar.positions import EARLIEST, Position

__all__ = ["SharedDispatcher", "NORMAL", "REPLAY"]

NORMAL = "normal"
REPLAY = "replay"

# A consumer's entries of one read, each with its key hash (see `Entry.key_hash`).
Group = list[tuple[Entry, int]]


class SharedDispatcher:
    """Invariants:
    - a position is pending on at most one consumer, and never both pending and in the replay queue;
    - `total_unacked` is the sum of the consumers' unacked messages;
    - a read is in flight (`_read_type`) or its entries await dispatch (`_completed`), never both;
    - a consumer is blocked on unacked messages only while it has at least half the limit unacked.
    """

    subscription_type = "Shared"

    def __init__(self, settings: DispatcherSettings | None = None, mark_delete_position: Position = EARLIEST) -> None:
        self.settings = settings or DispatcherSettings()
        self.consumers: dict[int, Consumer] = {}
        self.replay = ReplayQueue()
        # (deliver_at_ms, position) -> key hash: messages held until their deliver_at_time.
        self.delayed: SortedDict = SortedDict()
        self.redelivery_counts: dict[Position, int] = {}
        self.mark_delete_position = mark_delete_position
        # The last entry a normal read returned: the cursor's read position is just after it.
        self.last_read_position = mark_delete_position
        self.total_unacked = 0
        self.blocked_on_unacked = False
        self.now_ms = 0
        self._read_type: str | None = None
        self._cancel_requested = False
        self._completed: tuple[Entry, ...] | None = None
        self._completed_type: str | None = None
        self._retry_at_ms: int | None = None
        self._backoff_ms = 0
        self._wakeup_at_ms: int | None = None
        self._rr_index = 0
        self._out: list[Decision] = []
        self.msg_redeliver_counter = 0

    # ------------------------------------------------------------------------------- entry point

    def handle(self, event: Event, now_ms: int) -> list[Decision]:
        """Apply one event; return the decisions it leads to, in the order they must be carried out."""
        self.now_ms = now_ms
        out = self._out = []
        getattr(self, HANDLER_NAMES[type(event)])(event)
        return out

    # ---------------------------------------------------------------------------------- consumers

    def _on_consumer_added(self, event: ConsumerAdded) -> None:
        if event.consumer_id in self.consumers:
            raise CoreError(f"consumer id {event.consumer_id} is already connected")
        consumer = Consumer(event.consumer_id, event.consumer_name, event.priority_level, event.key_shared_meta)
        self._attach(consumer)
        self.consumers[consumer.consumer_id] = consumer
        self._read_more()

    def _attach(self, consumer: Consumer) -> None:
        """Hook: accept the consumer or raise; Key_Shared assigns hash ranges here."""

    def _on_consumer_removed(self, event: ConsumerRemoved) -> None:
        consumer = self.consumers.pop(event.consumer_id, None)
        if consumer is None:
            return
        self._detach(consumer)
        self._read_more()

    def _detach(self, consumer: Consumer) -> None:
        """Hand the consumer's pending messages back without raising their redelivery counts."""
        self._close_pending_acks(consumer)

    def _close_pending_acks(self, consumer: Consumer) -> None:
        replay_add = self.replay.add
        consumer.pending_acks.for_each_and_close(lambda position, _size, key_hash: replay_add(position, key_hash))
        self.total_unacked -= consumer.unacked_messages
        consumer.unacked_messages = 0
        consumer.partially_acked.clear()
        self._update_subscription_blocked()

    def _on_flow(self, event: Flow) -> None:
        consumer = self.consumers.get(event.consumer_id)
        if consumer is None:
            return
        consumer.permits += event.permits
        self._read_more()

    # ---------------------------------------------------------------------------------------- reads

    def _on_read_completed(self, event: ReadCompleted) -> None:
        if self._read_type is None:
            raise CoreError("a read completed that the dispatcher did not ask for")
        self._completed, self._completed_type = event.entries, self._read_type
        self._read_type = None
        self._cancel_requested = False
        if self._completed_type == NORMAL and event.entries:
            previous = self.last_read_position
            self.last_read_position = event.entries[-1].position
            self._entries_read(event.entries, previous)

    def _entries_read(self, entries: tuple[Entry, ...], previous: Position) -> None:
        """Hook: a normal read returned these entries; `previous` is the entry read just before them."""

    def _on_read_cancelled(self, _event: ReadCancelled) -> None:
        if self._read_type == NORMAL:
            self._read_type = None
            self._cancel_requested = False
        self._read_more()

    def _on_dispatch_due(self, _event: DispatchDue) -> None:
        entries, read_type = self._completed, self._completed_type
        if entries is None:
            return
        self._completed = self._completed_type = None
        is_replay = read_type == REPLAY
        if is_replay:
            # Positions acknowledged while the replay read was in flight are no longer queued.
            entries = tuple(e for e in entries if e.position in self.replay)
        else:
            if entries and entries[0].position <= self.mark_delete_position:
                # Message TTL or a skip moved the cursor past part of the read while it was in flight.
                entries = tuple(e for e in entries if e.position > self.mark_delete_position)
            now_ms = self.now_ms
            if any(e.deliver_at_ms > now_ms for e in entries):
                entries = self._hold_delayed(entries)
        sent = self._dispatch(entries, is_replay) if entries else 0
        if sent or (not is_replay and entries):
            # Progress, or a look-ahead read whose entries all went to the replay queue: keep reading.
            self._backoff_ms = 0
        else:
            self._back_off()
        self._read_more()

    def _hold_delayed(self, entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        """Keep messages whose deliver_at_time is ahead until then; they join the replay queue when due.

        As in Pulsar, a delayed message does not hold back later messages of its key.
        """
        now_ms = self.now_ms
        ready = []
        for entry in entries:
            if entry.deliver_at_ms > now_ms:
                self.delayed[(entry.deliver_at_ms, entry.position)] = entry.key_hash
            else:
                ready.append(entry)
        self._wake_up_at(self.delayed.peekitem(0)[0][0])
        return tuple(ready)

    def _release_delayed(self) -> None:
        delayed, now_ms = self.delayed, self.now_ms
        while delayed and delayed.peekitem(0)[0][0] <= now_ms:
            (_at, position), key_hash = delayed.popitem(0)
            self.replay.add(position, key_hash)

    def _forget_delayed_up_to(self, position: Position) -> None:
        for key in [k for k in self.delayed if k[1] <= position]:
            del self.delayed[key]

    def _dispatch(self, entries: tuple[Entry, ...], is_replay: bool) -> int:
        groups, to_replay = self._assign(entries, is_replay)
        sent = 0
        for consumer, group in groups.items():
            sent += self._send(consumer, group, is_replay)
        # Queued after sending: the send-time check asks whether an *older* message of the key waits.
        replay_add = self.replay.add
        for entry, key_hash in to_replay:
            replay_add(entry.position, key_hash)
        return sent

    def _assign(self, entries: tuple[Entry, ...], is_replay: bool) -> tuple[dict[Consumer, Group], Group]:
        """Round robin over the consumers with permits, highest priority (lowest level) first."""
        groups: dict[Consumer, Group] = {}
        permits = {c: self._available_permits(c) for c in self.consumers.values()}
        batch_max = max(self.settings.max_round_robin_batch_size, 1)
        index, count = 0, len(entries)
        while index < count:
            consumer = self._next_consumer(permits)
            if consumer is None:
                break
            group = groups.setdefault(consumer, [])
            taken = 0
            while index < count and taken < batch_max and permits[consumer] > 0:
                entry = entries[index]
                group.append((entry, entry.key_hash))
                permits[consumer] -= entry.message_count
                index += 1
                taken += 1
        return groups, [(entry, entry.key_hash) for entry in entries[index:]]

    def _next_consumer(self, permits: dict[Consumer, int]) -> Consumer | None:
        ready = [c for c in self.consumers.values() if permits[c] > 0]
        if not ready:
            return None
        level = min(c.priority_level for c in ready)
        ready = [c for c in ready if c.priority_level == level]
        consumer = ready[self._rr_index % len(ready)]
        self._rr_index += 1
        return consumer

    def _send(self, consumer: Consumer, group: Group, is_replay: bool) -> int:  # noqa: C901 - the dispatch path, per read: left whole until a split is measured
        """Record the group as pending on the consumer and emit one `Dispatch`; returns entries sent."""
        pending = consumer.pending_acks
        replay = self.replay
        if not pending.closed and not self._add_veto_possible(is_replay):
            # Nothing could refuse an entry now (see `_add_veto_possible`): add them in one pass.
            messages = pending.add_all(group, self.now_ms)
            sent = [entry for entry, _key_hash in group]
            if is_replay:
                for entry in sent:
                    replay.remove(entry.position)
        else:
            add_if_allowed = pending.add_if_allowed
            now_ms = self.now_ms
            sent = []
            messages = 0
            for entry, key_hash in group:
                position = entry.position
                if add_if_allowed(position, entry.message_count, key_hash, now_ms):
                    sent.append(entry)
                    messages += entry.message_count
                    if is_replay:
                        replay.remove(position)
                elif not is_replay:
                    replay.add(position, key_hash)
        if not sent:
            return 0
        self._sent(sent)
        consumer.permits -= messages
        consumer.unacked_messages += messages
        consumer.sent(messages, len(sent))
        self.total_unacked += messages
        limit = self.settings.max_unacked_messages_per_consumer
        if limit and consumer.unacked_messages >= limit:
            consumer.blocked_on_unacked = True
        self._update_subscription_blocked()
        counts = None
        if self.redelivery_counts:
            get = self.redelivery_counts.get
            counts = [get(e.position, 0) for e in sent]
            if not any(counts):
                counts = None
        self._out.append(Dispatch(consumer.consumer_id, sent, counts))
        return len(sent)

    def _add_veto_possible(self, is_replay: bool) -> bool:
        """Whether a pending-ack add hook could refuse an entry now; Shared installs none."""
        return False

    def _sent(self, entries: list[Entry]) -> None:
        """Hook: these entries were just handed to a consumer."""

    # -------------------------------------------------------------------------------- read loop

    def _read_more(self) -> None:
        """Decide the next read, if any. Safe to call after any event."""
        if self._read_type is not None:
            if self._read_type == NORMAL and not self._cancel_requested and self.replay and self._replayable(1):
                # The waiting normal read would hold back messages that can be replayed now (#23845).
                self._cancel_requested = True
                self._out.append(CancelRead())
            return
        if self._completed is not None or not self.consumers or self.blocked_on_unacked:
            return
        if self._retry_at_ms is not None:
            if self.now_ms < self._retry_at_ms:
                return
            self._retry_at_ms = None
        if self.replay:
            positions = self._replayable(self.settings.max_read_batch_size)
            if positions:
                self._read_type = REPLAY
                self._out.append(ReplayEntries(tuple(positions)))
                return
        max_entries = self._normal_read_size()
        if max_entries > 0:
            self._read_type = NORMAL
            self._out.append(ReadEntries(max_entries))

    def _replayable(self, max_positions: int) -> list[Position]:
        """Queued positions that some consumer could take now, oldest first."""
        permits = sum(max(self._available_permits(c), 0) for c in self.consumers.values())
        count = min(max_positions, permits)
        if count <= 0:
            return []
        positions = []
        for position in self.replay.positions():
            positions.append(position)
            if len(positions) >= count:
                break
        return positions

    def _normal_read_size(self) -> int:
        consumers = self.consumers.values()
        permits = sum(max(self._available_permits(c), 0) for c in consumers)
        if self.settings.precise_dispatcher_flow_control and permits > 0:
            # Pulsar divides by one random consumer's average; the mean of all of them keeps this deterministic.
            per_entry = max(int(sum(c.avg_messages_per_entry for c in consumers) / len(consumers) + 0.5), 1)
            permits = -(-permits // per_entry)
        return min(permits, self.settings.max_read_batch_size)

    def _available_permits(self, consumer: Consumer) -> int:
        """Messages the consumer may get now: its flow permits, capped by what its unacked limit leaves
        (Pulsar's getMaxEntriesInThisBatch), so that one read cannot carry it past the limit."""
        if consumer.blocked_on_unacked or consumer.pending_acks.closed:
            return 0
        limit = self.settings.max_unacked_messages_per_consumer
        if limit:
            return min(consumer.permits, limit - consumer.unacked_messages)
        return consumer.permits

    def _back_off(self) -> None:
        initial, maximum = self.settings.retry_backoff_initial_ms, self.settings.retry_backoff_max_ms
        self._backoff_ms = min(max(self._backoff_ms * 2, initial), maximum)
        self._retry_at_ms = self.now_ms + self._backoff_ms
        self._wake_up_at(self._retry_at_ms)

    def _wake_up_at(self, at_ms: int) -> None:
        if self._wakeup_at_ms is None or at_ms < self._wakeup_at_ms or self._wakeup_at_ms <= self.now_ms:
            self._wakeup_at_ms = at_ms
            self._out.append(WakeUp(at_ms))

    def _on_tick(self, _event: Tick) -> None:
        if self._wakeup_at_ms is not None and self.now_ms >= self._wakeup_at_ms:
            self._wakeup_at_ms = None
        if self.delayed:
            self._release_delayed()
        self._timers_due()
        self._read_more()
        # One WakeUp is outstanding at a time: re-arm it for the earliest timer still ahead.
        ahead = [t for t in self._timer_deadlines() if t > self.now_ms]
        if ahead:
            self._wake_up_at(min(ahead))

    def _timers_due(self) -> None:
        """Hook: run timers that came due (Key_Shared's batched unblock re-read)."""

    def _timer_deadlines(self) -> list[int]:
        """Every time at which a timer of this dispatcher is due."""
        deadlines = [] if self._retry_at_ms is None else [self._retry_at_ms]
        if self.delayed:
            deadlines.append(self.delayed.peekitem(0)[0][0])
        return deadlines

    # ---------------------------------------------------------------------------------------- acks

    def _owner_of(self, consumer_id: int, position: Position) -> Consumer | None:
        """The consumer holding `position`: normally the acking one, else whoever it was redelivered to."""
        consumer = self.consumers.get(consumer_id)
        if consumer is not None and position in consumer.pending_acks:
            return consumer
        for other in self.consumers.values():
            if position in other.pending_acks:
                return other
        return None

    def _on_acked(self, event: Acked) -> None:
        positions = event.positions
        if self.replay:
            for position in positions:
                self.replay.remove(position)
        if self.redelivery_counts:
            for position in positions:
                self.redelivery_counts.pop(position, None)
        unblocked = False
        others: Sequence[Position]
        consumer = self.consumers.get(event.consumer_id)
        if consumer is not None:
            # The common case, in one pass: the acking consumer holds what it acknowledges.
            released, others = consumer.pending_acks.remove_batch(positions, self._remove_hook_needed())
            if consumer.partially_acked:
                released -= sum(consumer.partially_acked.pop(p, 0) for p in positions)
            if released:
                unblocked = self._unacked_released(consumer, released)
        else:
            others = positions
        if others:
            unblocked |= self._on_acked_elsewhere(event.consumer_id, others)
        if unblocked:
            self._read_more()

    def _on_acked_elsewhere(self, consumer_id: int, positions: Sequence[Position]) -> bool:
        """Positions acked by a consumer they are not pending on: they were redelivered to another one,
        which holds them now (or nobody does: already acked, or the holder left). Whether a consumer or
        the subscription got unblocked."""
        unblocked = False
        for position in positions:
            owner = self._owner_of(consumer_id, position)
            if owner is not None:
                removed = owner.pending_acks.remove(position)
                assert removed is not None, f"{position} is pending on {owner!r}"
                batch_size = removed[0]
                unblocked |= self._unacked_released(owner, batch_size - owner.partially_acked.pop(position, 0))
        return unblocked

    def _remove_hook_needed(self) -> bool:
        """Whether removing pending acks must call their remove hook (Key_Shared: while hashes drain)."""
        return False

    def _unacked_released(self, consumer: Consumer, messages: int) -> bool:
        consumer.unacked_messages -= messages
        self.total_unacked -= messages
        unblocked = False
        if (
            consumer.blocked_on_unacked
            and consumer.unacked_messages <= self.settings.max_unacked_messages_per_consumer // 2
        ):
            consumer.blocked_on_unacked = False
            unblocked = True
        if self.blocked_on_unacked:
            unblocked |= not self._update_subscription_blocked()
        return unblocked

    def _update_subscription_blocked(self) -> bool:
        limit = self.settings.max_unacked_messages_per_subscription
        if not limit:
            self.blocked_on_unacked = False
        elif self.total_unacked >= limit:
            self.blocked_on_unacked = True
        elif self.total_unacked <= limit // 2:
            self.blocked_on_unacked = False
        return self.blocked_on_unacked

    def _on_batch_index_acked(self, event: BatchIndexAcked) -> None:
        owner = self._owner_of(event.consumer_id, event.position)
        if owner is None:
            return
        pending = owner.pending_acks.get(event.position)
        assert pending is not None, f"{event.position} is pending on {owner!r}"
        batch_size = pending[0]
        already = owner.partially_acked.get(event.position, 0)
        count = min(event.message_count, batch_size - already - 1)
        if count <= 0:
            return
        owner.partially_acked[event.position] = already + count
        if self._unacked_released(owner, count):
            self._read_more()

    def _on_cumulative_acked(self, event: CumulativeAcked) -> None:
        consumer = self.consumers.get(event.consumer_id)
        if consumer is None:
            return
        released = 0
        for position, batch_size, _hash in consumer.pending_acks.remove_all_up_to(event.position):
            released += batch_size - consumer.partially_acked.pop(position, 0)
            if self.redelivery_counts:
                self.redelivery_counts.pop(position, None)
        self.replay.remove_up_to(event.position)
        if self.delayed:
            self._forget_delayed_up_to(event.position)
        if released and self._unacked_released(consumer, released):
            self._read_more()

    def _on_redeliver_requested(self, event: RedeliverRequested) -> None:
        consumer = self.consumers.get(event.consumer_id)
        if consumer is None:
            return
        pending = consumer.pending_acks
        if event.positions is None:
            positions = [p for p, _v in pending.items()]
        else:
            positions = sorted(p for p in event.positions if p in pending)
        released = 0
        counts = self.redelivery_counts
        for position in positions:
            removed = pending.remove(position)
            assert removed is not None, f"{position} is pending on {consumer!r}"
            batch_size, key_hash, _sent = removed
            released += batch_size - consumer.partially_acked.pop(position, 0)
            counts[position] = counts.get(position, 0) + 1
            self.replay.add(position, key_hash)
            self.msg_redeliver_counter += batch_size
        consumer.redelivered_counter += len(positions)
        if released:
            self._unacked_released(consumer, released)
        self._read_more()

    def _on_mark_delete_advanced(self, event: MarkDeleteAdvanced) -> None:
        if event.position <= self.mark_delete_position:
            return
        self.mark_delete_position = event.position
        self.replay.remove_up_to(event.position)
        if self.delayed:
            self._forget_delayed_up_to(event.position)
        if not event.by_ack:
            # Message TTL or a skip acknowledged messages consumers still hold: they are no longer
            # pending, so their hashes stop draining and their consumers' unacked counts fall.
            unblocked = False
            for consumer in self.consumers.values():
                released = 0
                for position, batch_size, _hash in consumer.pending_acks.remove_all_up_to(event.position):
                    released += batch_size - consumer.partially_acked.pop(position, 0)
                    self.redelivery_counts.pop(position, None)
                if released:
                    unblocked |= self._unacked_released(consumer, released)
            if unblocked:
                self._read_more()
        self._mark_delete_moved()

    def _mark_delete_moved(self) -> None:
        """Hook: Key_Shared's classic and pip282 modes release joining consumers here."""

    # --------------------------------------------------------------------------------------- stats

    @property
    def read_in_flight(self) -> str | None:
        return self._read_type

    @property
    def awaiting_dispatch(self) -> bool:
        return self._completed is not None

    def consumer_stats(self, consumer: Consumer) -> ConsumerStats:
        return ConsumerStats(
            name=consumer.name,
            permits=consumer.permits,
            msg_out_counter=consumer.msg_out_counter,
            unacked_messages=consumer.unacked_messages,
            blocked_on_unacked=consumer.blocked_on_unacked,
            avg_messages_per_entry=round(consumer.avg_messages_per_entry, 3),
        )

    def stats(self) -> SubscriptionStats:
        """The subscription's stats this dispatcher knows; `consumers` follows `self.consumers` order."""
        return SubscriptionStats(
            type=self.subscription_type,
            msg_out_counter=sum(c.msg_out_counter for c in self.consumers.values()),
            consumers=[self.consumer_stats(c) for c in self.consumers.values()],
            summary=self.summary(),
        )

    def summary(self) -> SubscriptionSummary:
        """The subscription-wide counters of `stats()` without the per-consumer work: what a metrics
        scrape reads for every subscription."""
        return SubscriptionSummary(
            msg_in_replay=len(self.replay),
            msg_delayed=len(self.delayed),
            unacked_messages=self.total_unacked,
            blocked_on_unacked=self.blocked_on_unacked,
        )

    # ------------------------------------------------------------------------------------ queries

    def _sticky_hash_of(self, key_hash: int) -> int | None:
        """The hash a selector routes `key_hash` by; Shared routes by none."""
        return None

    def pending_messages(self) -> list[PendingMessage]:
        """Every consumer's pending messages: consumers in join order, each in position order."""
        counts = self.redelivery_counts
        sticky_hash_of = self._sticky_hash_of
        found = []
        for consumer in self.consumers.values():
            partial = consumer.partially_acked
            for position, batch_size, key_hash, sent_at_ms in consumer.pending_acks.entries():
                found.append(
                    PendingMessage(
                        consumer.consumer_id,
                        consumer.name,
                        position,
                        batch_size,
                        batch_size - partial.get(position, 0),
                        key_hash,
                        sticky_hash_of(key_hash),
                        counts.get(position, 0),
                        sent_at_ms,
                    )
                )
        return found

    # ---------------------------------------------------------------------------------- invariants

    def check_invariants(self) -> None:
        owners: dict[Position, Consumer] = {}
        total = 0
        for consumer in self.consumers.values():
            consumer.check_invariants()
            assert not consumer.pending_acks.closed, f"{consumer!r} is connected but its pending acks are closed"
            for position in consumer.pending_acks.positions():
                assert position not in owners, f"{position} pending on {owners[position]!r} and {consumer!r}"
                assert position not in self.replay, f"{position} pending on {consumer!r} and in the replay queue"
                owners[position] = consumer
            total += consumer.unacked_messages
            limit = self.settings.max_unacked_messages_per_consumer
            if consumer.blocked_on_unacked:
                assert limit and consumer.unacked_messages > limit // 2, f"{consumer!r} blocked below half the limit"
        assert total == self.total_unacked, f"total_unacked {self.total_unacked} but consumers hold {total}"
        assert not (self._read_type and self._completed is not None), "a read in flight while entries await dispatch"
        self.replay.check_invariants()
        for _at, position in self.delayed:
            assert position not in owners and position not in self.replay, f"{position} delayed and queued or pending"
