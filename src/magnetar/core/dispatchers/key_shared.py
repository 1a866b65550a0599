"""The Key_Shared dispatcher in its three ordering modes.

Owns: which consumer gets each entry (the selector), and when an entry must wait so that per-key order
holds while consumers come and go:
- `pip379` (default): draining hashes (PIP-379). A hash whose owner changed while the old owner still
  holds unacked messages of it is blocked, and only that hash, until those messages are acked or the
  old owner leaves. Contract: a sticky hash has unacked messages on at most one consumer at a time.
- `pip282`: a joining consumer records the last sent position (PIP-282) and receives only entries at
  or below it until the mark-delete position passes it.
- `classic`: the same with the cursor's read position at join time (Pulsar 3.x). Kept to compare and
  for users who depend on it; the simulator shows how it reorders keys (PIP-282 issue-1, issue-2,
  Pulsar #23307).
With `allowOutOfOrderDelivery` none of this applies; STICKY mode never moves hashes between consumers
and so never drains.
Must not touch: storage, sockets, the clock.

Per entry on the hot path: one slot computation, one `select`, a permits check, and a draining lookup
only while some hash drains (PIP-379: "when the draining hashes are empty, lookups will essentially be
no-ops").
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Container
from dataclasses import replace

from sortedcontainers import SortedDict

from magnetar.core.consumers import Consumer
from magnetar.core.dispatchers.shared import NORMAL, Group, SharedDispatcher
from magnetar.core.draining_hashes import ConsumerDrainingStats, DrainingHashesTracker
from magnetar.core.errors import NotAllowedError
from magnetar.core.events import Entry, KeySharedMeta
from magnetar.core.explain import (
    CONSUMER_BLOCKED_ON_UNACKED,
    DELAYED,
    DRAINING,
    IN_REPLAY_QUEUE,
    LOOK_AHEAD_LIMIT,
    NO_CONSUMER_FOR_HASH,
    NO_CONSUMERS,
    NO_PERMITS,
    RECENTLY_JOINED,
    SUBSCRIPTION_BLOCKED_ON_UNACKED,
    DrainingState,
    HashExplanation,
    PendingMessage,
)
from magnetar.core.selectors import (
    ConsistentHashingSelector,
    HashRangeAutoSplitSelector,
    HashRangeExclusiveSelector,
    ImpactedConsumers,
    Range,
    StickyKeyConsumerSelector,
)
from magnetar.core.settings import DispatcherSettings
from magnetar.core.stats import ConsumerStats, DrainingTotals, SubscriptionStats, SubscriptionSummary
from magnetar.core.sticky_key import key_hash as hash_of_key
from magnetar.positions import EARLIEST, Position, PositionRangeSet

__all__ = ["KeySharedDispatcher"]

_NO_LIMIT = 2**31 - 1


def _in_ranges(starts: list[int], ranges: list[Range], value: int) -> bool:
    index = bisect_right(starts, value) - 1
    return index >= 0 and value <= ranges[index][1]


def admission_block(  # noqa: C901 - the one Key_Shared admission rule, per entry: left whole until measured
    consumer: Consumer | None,
    available: int,
    position: Position,
    key_hash: int,
    sticky_hash: int,
    queued: Container[int] | None,
    older: dict[int, Position] | None,
    draining_blocks: Callable[[Consumer, int], bool] | None,
    joined: dict[Consumer, Position] | None,
    replay_floor: Position | None,
    every: list[str] | None = None,
) -> str | None:
    """The Key_Shared admission rule: why the entry at `position` (of `key_hash`, selector slot
    `sticky_hash`) cannot go to `consumer`, the hash's owner, now; None when it can.

    The one home of the rule: dispatch (`_assign`), the replay filter (`_replayable`) and `explain_hash`
    all ask it, so an explanation cannot disagree with dispatch. Pure, but for what `draining_blocks` does.
    - `available`: what the consumer may still take in this pass (its permits less what the pass gave it);
    - `queued`: a normal read's check for older messages of the key in the replay queue (key hashes);
    - `older`: a replay read's oldest queued position of each key that is not part of the read (#12885);
    - `draining_blocks`: while some hash drains (pip379), whether it drains from another consumer than the
      one asked: dispatch passes the tracker's `should_block`, which also counts the blocked attempt and
      drops a hash that came back home (PIP-379 point 6), the explainers its side-effect-free `blocks`;
    - `joined`: classic/pip282's join positions of recently joined consumers, capped by `replay_floor`
      (the oldest of them) on a replay read.
    Checks run in dispatch's order and the first that holds is the answer; with `every`, each reason that
    holds is appended to it in that order (for the explainers).
    """
    if consumer is None:
        if every is not None:
            every.append(NO_CONSUMER_FOR_HASH)
        return NO_CONSUMER_FOR_HASH
    if available <= 0:
        reason = CONSUMER_BLOCKED_ON_UNACKED if consumer.blocked_on_unacked else NO_PERMITS
        if every is None:
            return reason
        every.append(reason)
    if (queued is not None and key_hash in queued) or (older is not None and older.get(key_hash, position) < position):
        if every is None:
            return IN_REPLAY_QUEUE
        every.append(IN_REPLAY_QUEUE)
    if draining_blocks is not None and draining_blocks(consumer, sticky_hash):
        if every is None:
            return DRAINING
        every.append(DRAINING)
    if joined is not None:
        limit = joined.get(consumer)
        if limit is not None:
            if replay_floor is not None and replay_floor < limit:
                limit = replay_floor
            if position > limit:
                if every is None:
                    return RECENTLY_JOINED
                every.append(RECENTLY_JOINED)
    return every[0] if every else None


class KeySharedDispatcher(SharedDispatcher):
    """Invariants (beyond the Shared ones):
    - pip379 with draining: a sticky hash has pending acks on at most one consumer;
    - every pending hash of a consumer is either served by it now or draining from it;
    - a draining hash's consumer holds at least as many pending messages of it as the reference count;
    - classic/pip282: only connected consumers are recently joined.
    """

    subscription_type = "Key_Shared"

    def __init__(self, settings: DispatcherSettings | None = None, mark_delete_position: Position = EARLIEST) -> None:
        super().__init__(settings, mark_delete_position)
        self.ordering_mode = self.settings.key_shared_ordering_mode
        self.meta: KeySharedMeta | None = None
        self.selector: StickyKeyConsumerSelector[Consumer] = self._new_selector(KeySharedMeta())
        self._slot = self.selector.slot
        self.draining: DrainingHashesTracker[Consumer] = DrainingHashesTracker(on_unblocked=self._hash_unblocked)
        self.draining_required = False
        self._ordered = True  # not allowOutOfOrderDelivery
        self._unblock_read_at_ms: int | None = None
        self._sending_type: str | None = None
        # classic and pip282: consumer -> the position it waits for, in join order (sorted, #23795).
        self.recently_joined: dict[Consumer, Position] = {}
        # pip282: entries read but never sent -> the entry read just before each (PIP-282's
        # "last sent position" is the predecessor of the oldest unsent entry).
        self._unsent: SortedDict = SortedDict()
        self._membership_changes = 0
        self._selector_checked = -1
        # (membership changes when computed, ranges by consumer): the ranges only change when consumers
        # come and go, and walking the ring for them costs milliseconds per stats read.
        self._ranges: tuple[int, dict[Consumer, list[Range]]] | None = None

    # ------------------------------------------------------------------------------- consumers

    def _new_selector(self, meta: KeySharedMeta) -> StickyKeyConsumerSelector[Consumer]:
        if meta.mode == "STICKY":
            return HashRangeExclusiveSelector[Consumer]()
        if self.settings.use_consistent_hashing:
            return ConsistentHashingSelector[Consumer](self.settings.consistent_hashing_replica_points)
        return HashRangeAutoSplitSelector[Consumer]()

    def _attach(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta or KeySharedMeta()
        if meta.mode not in ("AUTO_SPLIT", "STICKY"):
            raise NotAllowedError(f"unknown Key_Shared mode {meta.mode!r}")
        current = self.meta
        if self.consumers and current is not None:
            if (meta.mode, meta.allow_out_of_order_delivery) != (current.mode, current.allow_out_of_order_delivery):
                raise NotAllowedError(
                    f"Key_Shared policy {meta.mode} allowOutOfOrderDelivery={meta.allow_out_of_order_delivery} "
                    f"differs from the subscription's {current.mode} "
                    f"allowOutOfOrderDelivery={current.allow_out_of_order_delivery} while consumers are connected"
                )
        elif current is None or (meta.mode, meta.allow_out_of_order_delivery) != (
            current.mode,
            current.allow_out_of_order_delivery,
        ):
            # The policy may change once every consumer left (testSelectorChangedAfterAllConsumerDisconnected).
            self.selector = self._new_selector(meta)
            self._slot = self.selector.slot
            self.draining.clear()
            self._ordered = not meta.allow_out_of_order_delivery
            self.draining_required = meta.mode == "AUTO_SPLIT" and self._ordered and self.ordering_mode == "pip379"
        self.meta = meta
        ranges = meta.sticky_ranges if meta.mode == "STICKY" else None
        impacted = self.selector.add_consumer(consumer, consumer.name, ranges)
        self._membership_changes += 1
        if self.draining_required:
            consumer.pending_acks.add_handler = self._allow_pending_ack
            consumer.pending_acks.remove_handler = self._pending_ack_removed
            self._update_draining(impacted, skip=consumer)
        elif self._ordered and self.ordering_mode != "pip379" and self.consumers:
            joined_at = self.last_read_position if self.ordering_mode == "classic" else self.last_sent_position()
            if joined_at > self.mark_delete_position:
                consumer.join_position = joined_at
                self.recently_joined[consumer] = joined_at
                self.recently_joined = dict(sorted(self.recently_joined.items(), key=lambda item: item[1]))

    def _detach(self, consumer: Consumer) -> None:
        # Selector first, then the pending acks, then draining for the moved ranges, in the order of Pulsar's
        # PersistentStickyKeyDispatcherMultipleConsumers.removeConsumer (PIP-379).
        impacted = self.selector.remove_consumer(consumer)
        self._membership_changes += 1
        self.recently_joined.pop(consumer, None)
        self._close_pending_acks(consumer)
        if self.draining_required:
            self._update_draining(impacted, skip=consumer)
            self.draining.forget_consumer(consumer)
        if not self.consumers:
            self.draining.clear()
            self.recently_joined.clear()

    def _update_draining(self, impacted: ImpactedConsumers[Consumer], skip: Consumer) -> None:
        """PIP-379 point 1 and #24736: pending hashes in lost ranges start draining; a draining hash that
        came back to its consumer stops."""
        draining, slot = self.draining, self._slot
        draining.start_batch()
        try:
            for other, changes in impacted.items():
                if other is skip or not len(other.pending_acks):
                    continue
                lost = changes.removed
                lost_starts = [r[0] for r in lost]
                # Gained ranges matter only to release hashes this consumer drains; most drain none.
                gained = changes.added if draining.count_of(other) else []
                gained_starts = [r[0] for r in gained]
                if not lost and not gained:
                    continue
                for _size, key_hash, _sent in list(other.pending_acks.values()):
                    sticky_hash = slot(key_hash)
                    if lost and _in_ranges(lost_starts, lost, sticky_hash):
                        draining.add_entry(other, sticky_hash)
                    elif (
                        gained
                        and _in_ranges(gained_starts, gained, sticky_hash)
                        and draining.draining_consumer(sticky_hash) is other
                    ):
                        draining.reduce_ref_count(other, sticky_hash)
        finally:
            draining.end_batch()

    def _allow_pending_ack(self, consumer: Consumer, position: Position, key_hash: int) -> bool:
        """PIP-379 point 7: the last check before an entry becomes pending and is sent."""
        draining = self.draining
        if len(draining):
            owner = draining.draining_consumer(self._slot(key_hash))
            if owner is not None and owner is not consumer:
                return False
        return not (self._sending_type == NORMAL and self.replay.contains_hash(key_hash))

    def _add_veto_possible(self, is_replay: bool) -> bool:
        if not self.draining_required:
            return False
        return bool(len(self.draining)) or (not is_replay and bool(self.replay))

    def _remove_hook_needed(self) -> bool:
        return self.draining_required and bool(len(self.draining))

    def _pending_ack_removed(self, consumer: Consumer, _position: Position, key_hash: int, closing: bool) -> None:
        if len(self.draining):
            self.draining.reduce_ref_count(consumer, self._slot(key_hash), closing)

    def _hash_unblocked(self, _sticky_hash: int) -> None:
        """PIP-379 point 5: one re-read for all hashes unblocked within `keySharedUnblockingIntervalMs`."""
        self._schedule_unblock_read()

    def _schedule_unblock_read(self) -> None:
        if self._unblock_read_at_ms is None:
            self._unblock_read_at_ms = self.now_ms + self.settings.key_shared_unblocking_interval_ms
            self._wake_up_at(self._unblock_read_at_ms)

    def _timers_due(self) -> None:
        if self._unblock_read_at_ms is not None and self.now_ms >= self._unblock_read_at_ms:
            self._unblock_read_at_ms = None
            # An unblock is news: retry now rather than after the backoff of an earlier empty round.
            self._retry_at_ms = None

    def _timer_deadlines(self) -> list[int]:
        deadlines = super()._timer_deadlines()
        if self._unblock_read_at_ms is not None:
            deadlines.append(self._unblock_read_at_ms)
        return deadlines

    def _mark_delete_moved(self) -> None:
        released = False
        if self.recently_joined:
            mark_delete = self.mark_delete_position
            for consumer, joined_at in list(self.recently_joined.items()):
                if joined_at > mark_delete:
                    break
                del self.recently_joined[consumer]
                consumer.join_position = None
                released = True
        if released or self.replay:
            self._schedule_unblock_read()

    # ------------------------------------------------------------------------------- dispatching

    def _entries_read(self, entries: tuple[Entry, ...], previous: Position) -> None:
        if self.ordering_mode == "pip282" and self._ordered:
            unsent = self._unsent
            for entry in entries:
                unsent[entry.position] = previous
                previous = entry.position

    def _sent(self, entries: list[Entry]) -> None:
        unsent = self._unsent
        if unsent:
            for entry in entries:
                unsent.pop(entry.position, None)

    def _dispatch(self, entries: tuple[Entry, ...], is_replay: bool) -> int:
        self._sending_type = "replay" if is_replay else NORMAL
        try:
            return super()._dispatch(entries, is_replay)
        finally:
            self._sending_type = None

    def _assign(self, entries: tuple[Entry, ...], is_replay: bool) -> tuple[dict[Consumer, Group], Group]:
        slot, select = self._slot, self.selector.select
        ordered = self._ordered
        draining = self.draining.should_block if self.draining_required and len(self.draining) else None
        queued = self.replay.queued_hashes() if ordered and not is_replay and self.replay else None
        older = (self._older_queued(entries) or None) if ordered and is_replay else None
        joined = self.recently_joined if ordered and self.recently_joined else None
        replay_floor = min(joined.values()) if joined and is_replay else None
        # Without them, the rule holds an entry only for its owner's permits: the common case skips the call.
        whole_rule = queued is not None or older is not None or draining is not None or joined is not None
        permits: dict[Consumer, int] = {}
        groups: dict[Consumer, Group] = {}
        to_replay: Group = []
        blocked: set[int] = set()
        for entry in entries:
            key_hash = entry.key_hash
            sticky_hash = slot(key_hash)
            if blocked and sticky_hash in blocked:
                to_replay.append((entry, key_hash))
                continue
            consumer = select(sticky_hash)
            if consumer is None:
                available = 0
            else:
                cached = permits.get(consumer)
                available = self._available_permits(consumer) if cached is None else cached
            if whole_rule or available <= 0:
                reason = admission_block(
                    consumer,
                    available,
                    entry.position,
                    key_hash,
                    sticky_hash,
                    queued,
                    older,
                    draining,
                    joined,
                    replay_floor,
                )
            else:
                reason = None
            if reason is None and consumer is not None:
                permits[consumer] = available - entry.message_count
                group = groups.get(consumer)
                if group is None:
                    group = groups[consumer] = []
                group.append((entry, key_hash))
                continue
            to_replay.append((entry, key_hash))
            blocked.add(sticky_hash)
        return groups, to_replay

    def _older_queued(self, entries: tuple[Entry, ...]) -> dict[int, Position]:
        """For a replay read: the oldest queued position of each key that is not part of the read.

        Such positions entered the replay queue while the read was in flight (a consumer closed or
        nacked); a read entry of the same key above one of them must wait for it. It is the replay-read
        side of Pulsar's order repair for normal reads (#12885), found by the simulator (seed 9).
        Only the read's keys are asked about, each by its own queued positions.
        """
        in_read = {e.position for e in entries}
        last = entries[-1].position
        positions_of = self.replay.positions_of
        older: dict[int, Position] = {}
        for key_hash in {e.key_hash for e in entries}:
            for position in positions_of(key_hash):
                if position >= last:
                    break
                if position not in in_read:
                    older[key_hash] = position
                    break
        return older

    # ---------------------------------------------------------------------------------- reading

    def look_ahead_limit(self) -> int:
        """How many entries the replay queue may hold before normal reads stop (getEffectiveLookAheadLimit)."""
        s = self.settings
        per_consumer = s.look_ahead_msg_in_replay_threshold_per_consumer * len(self.consumers)
        per_subscription = s.look_ahead_msg_in_replay_threshold_per_subscription
        enabled = [v for v in (per_consumer, per_subscription) if v > 0]
        if enabled:
            return min(enabled)
        fallback = [
            v
            for v in (
                s.max_unacked_messages_per_subscription,
                s.max_unacked_messages_per_consumer * len(self.consumers),
            )
            if v > 0
        ]
        return min(fallback) if fallback else _NO_LIMIT

    def _normal_read_size(self) -> int:
        if not self._ordered:
            return super()._normal_read_size()
        room = self.look_ahead_limit() - len(self.replay)
        if room <= 0:
            return 0
        size = super()._normal_read_size()
        return min(size, room) if size > 0 else 0

    def _replayable(self, max_positions: int) -> list[Position]:
        """Pulsar's ReplayPositionFilter: a queued position is read only if its hash is not blocked in this
        pass and `admission_block` admits it, each admitted position taking one of its consumer's permits."""
        permits: dict[Consumer, int] = {}
        for consumer in self.consumers.values():
            available = self._available_permits(consumer)
            if available > 0:
                permits[consumer] = available
        if not permits:
            return []
        slot, select = self._slot, self.selector.select
        draining = self.draining.should_block if self.draining_required and len(self.draining) else None
        joined = self.recently_joined if self._ordered and self.recently_joined else None
        replay_floor = min(joined.values()) if joined else None
        blocked: set[int] = set()
        positions: list[Position] = []
        # The queue's positions in order, merged from each key's own list: once a hash is blocked every
        # later position of it is, so a blocked key leaves the merge whole, unvisited (the queue holds
        # many positions of few keys: a soak's walk of all of them on every dispatch took a core). A key
        # whose owner has no permits (or that has no owner) is blocked at its first position, as is every
        # key of its slot (same owner), and permits only fall in a pass: such keys are left out before the
        # merge, so that the check on every event while a normal read is out (#23845) visits only the
        # keys of the consumers that could take something.
        heads = [
            (queued[0], key_hash, queued, 0, sticky_hash, owner)
            for key_hash, queued in self.replay.by_hash()
            if (owner := select(sticky_hash := slot(key_hash))) in permits
        ]
        heapq.heapify(heads)
        while heads:
            position, key_hash, queued, index, sticky_hash, consumer = heads[0]
            if sticky_hash in blocked:
                heapq.heappop(heads)
                continue
            available = permits[consumer]
            reason = admission_block(
                consumer, available, position, key_hash, sticky_hash, None, None, draining, joined, replay_floor
            )
            if reason is None:
                permits[consumer] = available - 1
                positions.append(position)
                if len(positions) >= max_positions:
                    break
                index += 1
                if index < len(queued):
                    heapq.heapreplace(heads, (queued[index], key_hash, queued, index, sticky_hash, consumer))
                else:
                    heapq.heappop(heads)
                continue
            blocked.add(sticky_hash)
            heapq.heappop(heads)
        return positions

    # ------------------------------------------------------------------------------- pip282 state

    def last_sent_position(self) -> Position:
        """Every entry at or below it has been sent at least once (PIP-282)."""
        if self._unsent:
            previous: Position = self._unsent.peekitem(0)[1]
            return previous
        return self.last_read_position

    def individually_sent_positions(self) -> PositionRangeSet:
        """Sent ranges above the last sent position, as PIP-282's stats show them."""
        sent = PositionRangeSet()
        unsent = list(self._unsent.items())
        for index, (position, _previous) in enumerate(unsent):
            upper = unsent[index + 1][1] if index + 1 < len(unsent) else self.last_read_position
            if upper > position:
                sent.add_range(position, upper)
        return sent

    # ------------------------------------------------------------------------------------- stats

    def consumer_stats(
        self,
        consumer: Consumer,
        ranges: dict[Consumer, list[Range]] | None = None,
        draining_stats: dict[Consumer, ConsumerDrainingStats] | None = None,
    ) -> ConsumerStats:
        mine_ranges = (ranges if ranges is not None else self.ranges_by_consumer()).get(consumer, [])
        draining = read_when_joining = sent_when_joining = None
        if self.draining_required:
            mine = (draining_stats if draining_stats is not None else self.draining.stats_by_consumer()).get(consumer)
            draining = mine if mine is not None else ConsumerDrainingStats()
        elif self.ordering_mode == "classic" and consumer.join_position is not None:
            joined = consumer.join_position
            read_when_joining = Position(joined[0], joined[1] + 1)
        elif self.ordering_mode == "pip282" and consumer.join_position is not None:
            sent_when_joining = Position(*consumer.join_position)
        return replace(
            super().consumer_stats(consumer),
            hash_ranges=mine_ranges,
            draining=draining,
            read_position_when_joining=read_when_joining,
            last_sent_position_when_joining=sent_when_joining,
        )

    def stats(self) -> SubscriptionStats:
        draining_stats = self.draining.stats_by_consumer() if self.draining_required else None
        ranges = self.ranges_by_consumer()
        meta = self.meta or KeySharedMeta()
        summary = super().summary()
        if draining_stats is not None:
            mine = [s for s in map(draining_stats.get, self.consumers.values()) if s is not None]
            totals = DrainingTotals(
                sum(s.count for s in mine), sum(s.unacked_messages for s in mine), sum(s.cleared_total for s in mine)
            )
            summary = replace(summary, draining=totals)
        ordered_mode = self.ordering_mode in ("classic", "pip282") and self._ordered
        pip282 = self.ordering_mode == "pip282" and self._ordered
        return SubscriptionStats(
            type=self.subscription_type,
            msg_out_counter=sum(c.msg_out_counter for c in self.consumers.values()),
            consumers=[self.consumer_stats(c, ranges, draining_stats) for c in self.consumers.values()],
            summary=summary,
            ordering_mode=self.ordering_mode,
            key_shared_mode=meta.mode,
            allow_out_of_order_delivery=meta.allow_out_of_order_delivery,
            consumers_after_mark_delete=(
                {(c.name, c.consumer_id): Position(*p) for c, p in self.recently_joined.items()}
                if ordered_mode
                else None
            ),
            last_sent_position=Position(*self.last_sent_position()) if pip282 else None,
            individually_sent_positions=self.individually_sent_positions() if pip282 else None,
        )

    def summary(self) -> SubscriptionSummary:
        summary = super().summary()
        if self.draining_required:
            count, unacked, cleared = self.draining.totals()
            summary = replace(summary, draining=DrainingTotals(count, unacked, cleared))
        return summary

    # ----------------------------------------------------------------------------------- queries

    def _sticky_hash_of(self, key_hash: int) -> int | None:
        return self._slot(key_hash)

    def ranges_by_consumer(self) -> dict[Consumer, list[Range]]:
        """The selector's ranges of each consumer (inclusive, merged); do not modify the answer."""
        cached = self._ranges
        if cached is None or cached[0] != self._membership_changes:
            cached = self._ranges = (self._membership_changes, self.selector.ranges_by_consumer())
        return cached[1]

    def sticky_hash_of_key(self, key: bytes) -> tuple[int, int]:
        """(key hash, sticky hash) of a message key under this subscription's selector."""
        key_hash = hash_of_key(key)
        return key_hash, self._slot(key_hash)

    def explain_hash(self, sticky_hash: int, key_hash: int | None = None) -> HashExplanation:
        """What decides, right now, whether messages of `sticky_hash` flow: every reason `admission_block`
        finds for a newly read message of `key_hash` (when None, of the key of the hash's oldest queued
        message, so that a waiting key shows), then what holds back reading itself (the subscription's
        unacked limit, the look-ahead limit) and the hash's delayed messages.

        Asks the rule dispatch asks, without the side effects: asking is not a blocked attempt.
        """
        slot = self._slot
        ordered = self._ordered
        owner = self.selector.select(sticky_hash) if self.consumers else None
        replay = tuple((position, queued) for position, queued in self.replay.items() if slot(queued) == sticky_hash)
        reasons: list[str] = []
        if not self.consumers:
            reasons.append(NO_CONSUMERS)
        else:
            last = self.last_read_position
            probe_key = key_hash if key_hash is not None else (replay[0][1] if replay else 0)
            admission_block(
                owner,
                self._available_permits(owner) if owner is not None else 0,
                Position(last[0], last[1] + 1),
                probe_key,
                sticky_hash,
                {queued for _position, queued in replay} if ordered and replay else None,
                None,
                self.draining.blocks if self.draining_required and len(self.draining) else None,
                self.recently_joined if ordered and self.recently_joined else None,
                None,
                reasons,
            )
        draining = None
        if self.draining_required:
            entry = self.draining.get_entry(sticky_hash)
            if entry is not None:
                draining = DrainingState(
                    entry.consumer.consumer_id, entry.consumer.name, entry.ref_count, entry.blocked_count
                )
        join_position = self.recently_joined.get(owner) if owner is not None and ordered else None
        if self.blocked_on_unacked:
            reasons.append(SUBSCRIPTION_BLOCKED_ON_UNACKED)
        counts = self.redelivery_counts
        pending = []
        for consumer in self.consumers.values():
            partial = consumer.partially_acked
            for position, batch_size, pending_hash, sent_at_ms in consumer.pending_acks.entries():
                if slot(pending_hash) == sticky_hash:
                    pending.append(
                        PendingMessage(
                            consumer.consumer_id,
                            consumer.name,
                            position,
                            batch_size,
                            batch_size - partial.get(position, 0),
                            pending_hash,
                            sticky_hash,
                            counts.get(position, 0),
                            sent_at_ms,
                        )
                    )
        if self._ordered and self.consumers and len(self.replay) >= self.look_ahead_limit():
            reasons.append(LOOK_AHEAD_LIMIT)
        delayed = tuple(
            (position, held, at_ms) for (at_ms, position), held in self.delayed.items() if slot(held) == sticky_hash
        )
        if delayed:
            reasons.append(DELAYED)
        return HashExplanation(
            sticky_hash=sticky_hash,
            key_hash=key_hash,
            ordering_mode=self.ordering_mode,
            owner_id=owner.consumer_id if owner is not None else None,
            owner_name=owner.name if owner is not None else None,
            owner_available_permits=self._available_permits(owner) if owner is not None else 0,
            owner_unacked_messages=owner.unacked_messages if owner is not None else 0,
            draining=draining,
            pending=tuple(pending),
            replay=replay,
            delayed=delayed,
            owner_join_position=join_position,
            mark_delete_position=self.mark_delete_position,
            reasons=tuple(reasons),
        )

    # -------------------------------------------------------------------------------- invariants

    def check_invariants(self) -> None:
        super().check_invariants()
        # The selector only changes when consumers come and go; its full check walks the whole ring.
        if self._selector_checked != self._membership_changes:
            self.selector.check_invariants()
            self._selector_checked = self._membership_changes
        self.draining.check_invariants()
        for consumer in self.recently_joined:
            assert consumer.consumer_id in self.consumers, f"{consumer!r} recently joined but gone"
        if not self.draining_required:
            return
        slot, select = self._slot, self.selector.select
        holder: dict[int, Consumer] = {}
        held: dict[tuple[int, int], int] = {}
        for consumer in self.consumers.values():
            for _size, key_hash, _sent in consumer.pending_acks.values():
                sticky_hash = slot(key_hash)
                other = holder.setdefault(sticky_hash, consumer)
                assert other is consumer, (
                    f"hash {sticky_hash} has unacked messages on {other!r} and {consumer!r} at once"
                )
                held[id(consumer), sticky_hash] = held.get((id(consumer), sticky_hash), 0) + 1
                owner = select(sticky_hash)
                assert owner is consumer or self.draining.draining_consumer(sticky_hash) is consumer, (
                    f"{consumer!r} holds hash {sticky_hash}, served by {owner!r}, without draining it"
                )
        for sticky_hash, entry in self.draining.items():
            count = held.get((id(entry.consumer), sticky_hash), 0)
            assert count >= entry.ref_count, (
                f"hash {sticky_hash} drains {entry.ref_count} messages from {entry.consumer!r}, which holds {count}"
            )
