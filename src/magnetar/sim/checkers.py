"""The properties a schedule is judged by, each named for its invariant.

Owns: the black-box view of ordering, built only from what clients saw (deliveries, acks, nacks,
disconnects), and the checks that read the dispatcher's state after every step.
Must not touch: the world's scheduling.

Kinds of violation:
- `one-consumer-per-hash` (PIP-379 contract): a sticky hash has unacked messages on two consumers;
- `consumer-order`: a consumer received a key's message below one it already received, not as a
  redelivery it asked for (nack / redeliverUnacknowledged are excepted, as PIP-379 says);
- `first-delivery-order`: a key's first deliveries went backwards;
- `look-ahead`: a normal read started at or read past the look-ahead limit of the replay queue;
- `invariant`: a state machine's `check_invariants` failed, or it raised;
- `loss-or-stall`: the liveness phase did not drain the subscription;
- `dispatch-of-acked`: an acknowledged message was dispatched again;
- `hash-range`: a reader with key hash ranges received an entry outside them, or the cursor
  acknowledged as filtered an entry inside them.
The first two are what `classic` and `pip282` are known to break; every kind is a failure for pip379.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.events import ReadEntries
from magnetar.core.sticky_key import key_hash, range_slot
from magnetar.positions import Position
from magnetar.sim.world import Client, Delivery, World

__all__ = ["OrderingChecker", "Violation", "ORDERING_KINDS", "check_state", "check_drained"]

ORDERING_KINDS = frozenset({"one-consumer-per-hash", "consumer-order"})


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    step: int
    trace: tuple[str, ...]

    def report(self) -> str:
        lines = [f"{self.kind} at step {self.step}: {self.message}", "last events:"]
        lines.extend(f"  {line}" for line in self.trace)
        return "\n".join(lines)


class OrderingChecker:
    """Listens to the world's clients and checks ordering as a user of Pulsar would see it."""

    def __init__(self, world: World) -> None:
        options = world.options
        self.keyed = options.subscription_type == "Key_Shared"
        self.ordered = self.keyed and not options.allow_out_of_order_delivery
        self.violations: list[Violation] = []
        self.first_max: dict[str, tuple[int, int]] = {}
        self.session_max: dict[tuple[int, str], tuple[int, int]] = {}
        # sticky hash -> {session: unacked deliveries}, and each counted delivery, so a release
        # (ack, nack, expiry, disconnect) is counted once whatever order they come in.
        self.holders: dict[int, dict[int, int]] = {}
        self.counted: set[tuple[int, tuple[int, int]]] = set()

    def fail(self, world: World, kind: str, message: str) -> None:
        """Record the first violation of each kind; later ones of the same kind add nothing to read."""
        if any(v.kind == kind for v in self.violations):
            return
        self.violations.append(Violation(kind, message, world.steps, world.formatted_trace()))

    def _sticky_hash(self, world: World, key: str) -> int:
        dispatcher = world.dispatcher
        assert isinstance(dispatcher, KeySharedDispatcher)
        return dispatcher.selector.slot(key_hash(key.encode()))

    def _in_reader_ranges(self, world: World, key: str) -> bool:
        slot = range_slot(key_hash(key.encode()))
        return any(start <= slot <= end for start, end in world.options.reader_hash_ranges)

    def on_filtered(self, world: World, positions: tuple[Position, ...]) -> None:
        for position in positions:
            key = world.log_keys[world.index_of[position]]
            if self._in_reader_ranges(world, key):
                self.fail(
                    world, "hash-range", f"{position} ({key}) acknowledged as filtered inside the reader's ranges"
                )

    def on_delivery(self, world: World, client: Client, delivery: Delivery, first: bool) -> None:
        if world.options.reader_hash_ranges and not self._in_reader_ranges(world, delivery.key):
            self.fail(
                world, "hash-range", f"{delivery.position} ({delivery.key}) delivered outside the reader's ranges"
            )
        # A delayed message arrives when it is due, after newer messages of its key, by design.
        ordered_delivery = not (delivery.delayed and self.keyed)
        if (
            first
            and ordered_delivery
            and (self.ordered or (not self.keyed and world.options.subscription_type != "Shared"))
        ):
            highest = self.first_max.get(delivery.key)
            if highest is not None and delivery.position < highest:
                self.fail(
                    world,
                    "first-delivery-order",
                    f"first delivery of {delivery.key} at {delivery.position} after {highest}",
                )
            if highest is None or delivery.position > highest:
                self.first_max[delivery.key] = delivery.position
        if not self.ordered:
            return
        slot = (delivery.session, delivery.key)
        highest = self.session_max.get(slot)
        if ordered_delivery and delivery.redelivery_count == 0 and highest is not None and delivery.position < highest:
            self.fail(
                world,
                "consumer-order",
                f"consumer {client.name} (id {client.consumer_id}) got {delivery.key} at {delivery.position} "
                f"after {highest}",
            )
        if ordered_delivery and (highest is None or delivery.position > highest):
            self.session_max[slot] = delivery.position
        sticky_hash = self._sticky_hash(world, delivery.key)
        holders = self.holders.setdefault(sticky_hash, {})
        if (delivery.session, delivery.position) not in self.counted:
            self.counted.add((delivery.session, delivery.position))
            holders[delivery.session] = holders.get(delivery.session, 0) + 1
        if len(holders) > 1:
            self.fail(
                world,
                "one-consumer-per-hash",
                f"hash {sticky_hash} ({delivery.key}) unacked on sessions {sorted(holders)} at once",
            )

    def _release(self, world: World, delivery: Delivery) -> None:
        if not self.ordered or (delivery.session, delivery.position) not in self.counted:
            return
        self.counted.discard((delivery.session, delivery.position))
        sticky_hash = self._sticky_hash(world, delivery.key)
        holders = self.holders[sticky_hash]
        holders[delivery.session] -= 1
        if not holders[delivery.session]:
            del holders[delivery.session]
        if not holders:
            del self.holders[sticky_hash]

    def on_read_issued(self, world: World, read: object) -> None:
        """Look-ahead (getEffectiveLookAheadLimit): a normal read starts only below the limit, never reads past it."""
        dispatcher = world.dispatcher
        if not (self.ordered and isinstance(read, ReadEntries) and isinstance(dispatcher, KeySharedDispatcher)):
            return
        limit, queued = dispatcher.look_ahead_limit(), len(dispatcher.replay)
        if queued >= limit or read.max_entries > limit - queued:
            self.fail(
                world, "look-ahead", f"normal read of {read.max_entries} with {queued} queued for replay, limit {limit}"
            )

    def on_receive(self, world: World, client: Client, delivery: Delivery) -> None:
        """The application took the message; it stays unacked until acked or nacked."""

    def on_ack(self, world: World, client: Client, delivery: Delivery) -> None:
        self._release(world, delivery)

    def on_nack(self, world: World, client: Client, delivery: Delivery) -> None:
        self._release(world, delivery)

    def on_expire(self, world: World, up_to: object) -> None:
        """TTL acknowledged everything up to `up_to`: what clients hold of it is no longer unacked."""
        for client in world.clients.values():
            for delivery in list(client.incoming) + [d for d, _at in client.held.values()]:
                if delivery.position <= up_to:
                    self._release(world, delivery)

    def on_disconnect(self, world: World, client: Client) -> None:
        for delivery in list(client.incoming) + [d for d, _at in client.held.values()]:
            self._release(world, delivery)


def check_state(world: World, checker: OrderingChecker) -> None:
    """After every step: the dispatcher's own invariants."""
    dispatcher = world.dispatcher
    try:
        dispatcher.check_invariants()
    except AssertionError as error:
        checker.fail(world, "invariant", str(error))
        return


def check_drained(world: World, checker: OrderingChecker) -> None:
    """After the liveness phase: everything delivered and acknowledged, nothing left behind."""
    dispatcher = world.dispatcher
    if not world.drained():
        unacked = len(world.log) - len(world.acked)
        checker.fail(
            world,
            "loss-or-stall",
            f"{unacked} of {len(world.log)} messages never acknowledged; mark-delete at index "
            f"{world.mark_delete_index}; stats {dispatcher.stats()}",
        )
        return
    if isinstance(dispatcher, KeySharedDispatcher) and (
        len(dispatcher.replay) or dispatcher.total_unacked or len(dispatcher.draining)
    ):
        checker.fail(world, "loss-or-stall", f"drained but state left behind: {dispatcher.stats()}")
