"""A persistent topic: its managed ledger, producers, subscriptions, replicators and compaction.

Owns: which producers may publish (names, epochs, access modes), deduplication by producer name and
sequence id (what the producers' appends count as sent), the topic's subscriptions (durable cursors and
readers' non-durable ones), its replicators to the other clusters and the replicated-subscriptions
controller (PIP-33), its compaction, message expiry, and the entries the admin API and GET_LAST_MESSAGE_ID
ask for. Appending and the receipts are the producers' (producer.py).
Must not touch: the wire (producers and consumers write frames) or ordering (subscriptions' dispatchers).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from magnetar.broker.compactor import TopicCompaction
from magnetar.broker.subscription import MARKER_PRODUCER_NAME, PersistentSubscription, entry_after, is_marker_entry
from magnetar.broker.topic_name import TopicName
from magnetar.positions import EARLIEST, LATEST, Position
from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.markers import Marker, parse_marker
from magnetar.protocol.messages import ChecksumError, parse_entry
from magnetar.replication.acked_ranges import AckedRangesContent, acked_ranges_to_send, ranges_to_acknowledge
from magnetar.replication.controller import ReplicatedSubscriptionsController
from magnetar.replication.replicator import Replicator, cursor_cluster, cursor_name
from magnetar.storage import Entry, ManagedLedger

if TYPE_CHECKING:
    from magnetar.broker.producer import ServerProducer
    from magnetar.broker.topic_context import TopicContext

__all__ = [
    "PersistentTopic",
    "ProducerBusyError",
    "ProducerFencedError",
    "ReservedSubscriptionName",
    "SubscriptionBusyError",
    "SubscriptionExistsError",
    "delayed_delivery_path",
]

log = logging.getLogger(__name__)

_EXCLUSIVE_MODES = ("Exclusive", "ExclusiveWithFencing", "WaitForExclusive")
# Pulsar's deduplication cursor name, reserved like the replicators' (magnetar keeps no such cursor).
DEDUPLICATION_CURSOR = "pulsar.dedup"
# A restart rebuilds deduplication state from at most this many of the newest entries: producers
# silent for longer lose it (Pulsar snapshots it every brokerDeduplicationEntriesInterval instead).
DEDUP_SCAN_ENTRIES_MAX = 100_000


class ProducerBusyError(Exception):
    server_error = "ProducerBusy"


class ProducerFencedError(Exception):
    server_error = "ProducerFenced"


def delayed_delivery_path(name: TopicName) -> str:
    """The metadata record noting that a topic received delayed messages."""
    return f"/delayed-delivery/{name.tenant}/{name.namespace}/{name.domain}/{name.local}"


class SubscriptionExistsError(Exception):
    """An operator creates a subscription that exists already."""


class ReservedSubscriptionName(Exception):
    """A subscription named like a replicator's cursor (`pulsar.repl.…`) or the deduplication cursor.
    Pulsar refuses it with a NamingException, which its BrokerServiceException.getClientErrorCode answers
    as ProducerBusy (a Pulsar 4.0.7 standalone does so)."""

    server_error = "ProducerBusy"


def is_reserved_subscription(name: str) -> bool:
    return cursor_cluster(name) is not None or name == DEDUPLICATION_CURSOR


class SubscriptionBusyError(Exception):
    """An operator deletes a subscription that has consumers, without force."""


class PersistentTopic:
    """Invariants:
    - at most one live producer per producer name;
    - an Exclusive producer is the only producer while it lives;
    - every subscription's cursor belongs to this topic's ledger.
    """

    def __init__(self, context: TopicContext, name: TopicName, ledger: ManagedLedger) -> None:
        self.context = context
        self.name = name
        self.ledger = ledger
        self.producers: dict[str, ServerProducer] = {}
        self.subscriptions: dict[str, PersistentSubscription[PersistentTopic]] = {}
        # Set once a message with deliver_at_time is stored: from then on reads look for it (stored
        # entries do not index it, and parsing every entry's metadata for it would cost every topic).
        self.uses_delayed_delivery = context.metadata.get(self._delayed_path) is not None
        # Highest sequence id per producer name that is durable, and the highest accepted (appended or
        # appending): Pulsar's highestSequencedPersisted / highestSequencedPushed.
        self.sequence_persisted: dict[str, int] = {}
        self.sequence_pushed: dict[str, int] = {}
        # Pulsar's msgInCounter and bytesInCounter: published since the topic was loaded, producers
        # that left included (producers add to them per socket read).
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        # brokerDeduplicationEnabled, unless the namespace's or the topic's policy says otherwise.
        self.deduplication_enabled = context.policies.deduplication_enabled(name)
        self._exclusive_waiters: deque[asyncio.Future[None]] = deque()
        # PIP-68's topic epoch: each producer that gains exclusive access moves it on, and a producer that
        # comes back with an older one was fenced in between. None until the first exclusive producer.
        # Kept in memory (Pulsar keeps it in the ledger's properties): after a restart the first exclusive
        # producer back sets it from the epoch it carries.
        self.topic_epoch: int | None = None
        # remote cluster -> its replicator; their cursors are not subscriptions (`check_replication`).
        self.replicators: dict[str, Replicator] = {}
        # PIP-33: runs while some subscription is replicated, the feature is on and the topic replicates to
        # another cluster, or once a marker came from one (`check_replicated_subscriptions`).
        self.replicated_subscriptions: ReplicatedSubscriptionsController | None = None
        self._marker_received = False
        # When the last data entry (not a marker), local or replicated, was stored (epoch ms; None since
        # the topic loaded): a snapshot is taken only if data arrived since the last one started.
        self.last_data_ms: int | None = None
        # (last confirmed entry, the last entry a consumer can receive at or before it), as last found.
        self._last_dispatchable: tuple[Position, Position] | None = None
        # Its compacted view, the compaction in progress and its status (broker/compactor.py).
        self.compaction = TopicCompaction(self)
        for name_ in ledger.cursors:
            cursor = ledger.cursors[name_]
            if cursor.durable and not is_reserved_subscription(name_):
                self.subscriptions[name_] = PersistentSubscription(self, name_, cursor)

    # ----------------------------------------------------------------------------- producers

    def add_producer(self, producer: ServerProducer, access_mode: str, epoch: int | None = None) -> int | None:
        """Admit a producer as its access mode allows (PIP-68); `epoch` is the topic epoch it carries when
        it reconnects. Returns the topic epoch its PRODUCER_SUCCESS carries."""
        existing = self.producers.get(producer.name)
        if existing is not None and existing is not producer:
            if existing.connection.is_alive():
                raise ProducerBusyError(f"Producer with name '{producer.name}' is already connected to topic")
            existing.close_silently()
        others = [p for p in self.producers.values() if p.name != producer.name]
        exclusive = access_mode in _EXCLUSIVE_MODES
        if exclusive and epoch is not None and self.topic_epoch is not None and epoch < self.topic_epoch:
            # Checked before fencing (Pulsar checks after): a fenced producer that reconnects must not
            # fence in turn the producer that replaced it.
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {self.topic_epoch}, Producer epoch: {epoch}"
            )
        if access_mode == "ExclusiveWithFencing" and others:
            self._fence_out(others)
            others = []
        if exclusive and others:
            raise ProducerFencedError(f"Topic has {len(others)} other producers; Exclusive access refused")
        if any(p.access_mode in _EXCLUSIVE_MODES for p in others):
            raise ProducerBusyError(f"Topic {self.name} has an exclusive producer")
        if exclusive:
            self.topic_epoch = (
                epoch if epoch is not None else (-1 if self.topic_epoch is None else self.topic_epoch) + 1
            )
        self.producers[producer.name] = producer
        return self.topic_epoch

    def _fence_out(self, others: list[ServerProducer]) -> None:
        """ExclusiveWithFencing takes the topic: parked WaitForExclusive producers fail, the connected ones
        are closed, and when they reconnect their older epoch (or the new exclusive producer) keeps them
        out. The waiters go first: closing the last producer would otherwise promote one of them."""
        waiters, self._exclusive_waiters = self._exclusive_waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(ProducerFencedError("Fenced out"))
        for other in others:
            log.info("[%s] Fencing out producer %s", self.name, other.name)
            other.close_by_broker()

    async def wait_until_free(self) -> None:
        """WaitForExclusive: return once no other producer is connected (first come, first served)."""
        while self.producers:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._exclusive_waiters.append(waiter)
            await waiter

    def waiting_publishers(self) -> int:
        """Producers waiting in `wait_until_free` (Pulsar's waitingPublishers)."""
        return len(self._exclusive_waiters)

    def remove_producer(self, producer: ServerProducer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        while not self.producers and self._exclusive_waiters:
            waiter = self._exclusive_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def restore_deduplication(self) -> None:
        """Rebuild the highest sequence id per producer from the newest entries (at most the last
        `DEDUP_SCAN_ENTRIES_MAX`): what a restart needs to keep dropping resends."""
        ledger = self.ledger
        if ledger.number_of_entries == 0:
            return
        last = ledger.last_confirmed_entry
        # Where the newest DEDUP_SCAN_ENTRIES_MAX entries start; all of them when there are fewer.
        position = self.nth_entry_position(DEDUP_SCAN_ENTRIES_MAX, from_latest=True) or ledger.first_position()
        highest: dict[str, int] = {}
        while position <= last:
            entries = await ledger.read_entries(position, 10_000)
            if not entries:
                break
            for entry in entries:
                if entry.sequence_id > highest.get(entry.producer_name, -1):
                    highest[entry.producer_name] = entry.sequence_id
            position = ledger.next_valid_position(entries[-1].position)
        # Merged, not replaced: when deduplication is switched on at run time, producers may have
        # appended beyond what this scan saw.
        for producer_name, sequence_id in highest.items():
            for known in (self.sequence_persisted, self.sequence_pushed):
                known[producer_name] = max(known.get(producer_name, -1), sequence_id)

    async def expire_messages(self, ttl_seconds: int, now_ms: int) -> None:
        """Message TTL: every subscription skips what was published more than `ttl_seconds` ago."""
        expired_up_to = await self._expired_up_to(ttl_seconds, now_ms)
        for subscription in list(self.subscriptions.values()):
            if expired_up_to > subscription.cursor.mark_delete_position:
                subscription.skip_to(expired_up_to)

    async def _expired_up_to(self, ttl_seconds: int, now_ms: int) -> Position:
        first_alive = await self.ledger.find_first_published_at_or_after(now_ms - ttl_seconds * 1000)
        return self.ledger.previous_position(first_alive)

    async def set_deduplication(self, enabled: bool) -> None:
        """A deduplication policy changed: switching on rebuilds the producers' sequence ids first."""
        if enabled and not self.deduplication_enabled:
            await self.restore_deduplication()
        self.deduplication_enabled = enabled

    def last_sequence_id(self, producer_name: str) -> int:
        if not self.deduplication_enabled:
            return -1
        return self.sequence_persisted.get(producer_name, -1)

    @property
    def _delayed_path(self) -> str:
        return delayed_delivery_path(self.name)

    def note_delayed_delivery(self) -> None:
        """A message with deliver_at_time arrived: reads look for it from now on (set before the append,
        so its own read sees it), and the fact is persisted for restarts."""
        if self.uses_delayed_delivery:
            return
        self.uses_delayed_delivery = True
        self.context.tasks.spawn(
            self.context.metadata.put(self._delayed_path, {"used": True}), f"[{self.name}] delayed delivery record"
        )

    # ------------------------------------------------------------------------- subscriptions

    async def subscribe(
        self,
        name: str,
        durable: bool,
        initial_position: str,
        start_message_id: Position | None,
    ) -> PersistentSubscription:
        if is_reserved_subscription(name):
            raise ReservedSubscriptionName("Subscription with reserved subscription name attempted")
        subscription = self.subscriptions.get(name)
        if subscription is not None:
            return subscription
        if durable:
            cursor = await self.ledger.open_cursor(name, initial_position)
            # Consumers that subscribe at once to a new subscription all wait for its cursor to be
            # persisted: the first one back creates the subscription, the others join it. Two of them
            # would be two dispatchers on one cursor, each sending what the other's consumers hold.
            subscription = self.subscriptions.get(name)
            if subscription is not None:
                return subscription
        else:
            cursor = self.ledger.new_non_durable_cursor(self._reader_start(start_message_id, initial_position), name)
        subscription = PersistentSubscription(self, name, cursor)
        self.subscriptions[name] = subscription
        return subscription

    def _reader_start(self, start: Position | None, initial_position: str) -> Position:
        """Where a reader's cursor starts: earliest, latest, or at the given id."""
        if start is None:
            return EARLIEST if initial_position == "earliest" else LATEST
        if start == EARLIEST or start[0] < 0:
            return EARLIEST
        if start == LATEST:
            return LATEST
        # Pulsar starts at the entry itself and the client drops it unless the reader is inclusive
        # (the flag never reaches the wire); a batch index >= 0 needs the entry for its later messages.
        return Position(*start)

    async def unsubscribe(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is None:
            return
        subscription.disconnect_consumers()
        await self.ledger.delete_cursor(name)

    async def drop_reader(self, subscription: PersistentSubscription) -> None:
        """A non-durable subscription goes with its last consumer."""
        if (
            not subscription.durable
            and not subscription.consumers
            and self.subscriptions.get(subscription.name) is subscription
        ):
            del self.subscriptions[subscription.name]
            await self.ledger.delete_cursor(subscription.name)

    def last_message_id(self) -> Position:
        return self.ledger.last_confirmed_entry

    async def last_dispatchable_position(self) -> Position:
        """GET_LAST_MESSAGE_ID's answer: the newest entry a consumer can receive, skipping the markers
        after it, or the position before the first entry when none is left. With the last confirmed entry
        instead, a marker at the end would make a reader's has_message_available() true for good
        (Pulsar #22571, fixed by getLastDispatchablePosition). Only the entries stored since the last
        call are read, newest first, until one is data."""
        ledger = self.ledger
        last = ledger.last_confirmed_entry
        known = self._last_dispatchable
        if known is not None and known[0] == last:
            found = known[1]
        else:
            found = None
            first = ledger.first_position()
            position = last
            while position >= first:
                if known is not None and position <= known[0]:
                    found = known[1]  # what was stored after it are markers
                    break
                stored = await ledger.read_positions([position])
                if stored and not is_marker_entry(stored[0]):
                    found = position
                    break
                position = ledger.previous_position(position)
            self._last_dispatchable = (last, found) if found is not None else None
        first = ledger.first_position()
        if found is None or found < first:
            # Nothing a consumer can receive is stored (any more): before the first entry.
            return ledger.previous_position(first)
        return found

    async def largest_batch_index(self, position: Position) -> int:
        """The batch index of the last message of the entry at `position`, -1 unless it is a batch of more
        than one (Pulsar's getLargestBatchIndexWhenPossible). GET_LAST_MESSAGE_ID carries it: without it a
        reader started inside the last batch, or inclusive of the latest message, finds nothing to read."""
        if position[1] < 0:
            return -1
        stored = await self.ledger.read_positions([position])
        count = stored[0].message_count if stored else 1
        return count - 1 if count > 1 else -1

    def append_marker(self, entry: bytes) -> asyncio.Future[Position]:
        """Store a marker entry the broker wrote (`protocol.markers`); the future resolves to its position
        once it is durable. Markers are not data: no producer, no deduplication, no msgIn counts."""
        parsed = parse_entry(entry)
        if parsed.marker_type is None or parsed.producer_name != MARKER_PRODUCER_NAME:
            raise ValueError("not a marker entry")
        return self.ledger.append(
            parsed.entry, parsed.key_hash, 1, parsed.publish_time, MARKER_PRODUCER_NAME, parsed.sequence_id
        )

    # ----------------------------------------------------------------------------- replication

    async def check_replication(self, clusters: list[str]) -> None:
        """Start a replicator for each cluster of `clusters` other than this one that has none, stop and
        forget (cursor included) those of clusters no longer listed. A topic of a namespace that does
        not list this cluster replicates nothing (Pulsar deletes such a topic; magnetar keeps it)."""
        context = self.context
        local = context.config["clusterName"]
        if clusters and local not in clusters:
            log.warning(
                "[%s] Replication clusters %s do not include this cluster %s: not replicating",
                self.name,
                clusters,
                local,
            )
            clusters = []
        wanted = [cluster for cluster in clusters if cluster != local]
        for cluster in [c for c in self.replicators if c not in wanted]:
            await self.replicators.pop(cluster).stop()
            await self.ledger.delete_cursor(cursor_name(cluster))
            log.info("[%s] Removed replicator to %s", self.name, cluster)
        # Cursors of replicators that went while the topic was not loaded.
        for name in [n for n in self.ledger.cursors if cursor_cluster(n) not in (None, *wanted)]:
            await self.ledger.delete_cursor(name)
        for cluster in wanted:
            if cluster in self.replicators:
                continue
            cursor = await self.ledger.open_cursor(cursor_name(cluster), "latest")
            if cluster in self.replicators:
                continue  # another check started it while the cursor was being persisted
            replicator = Replicator(
                str(self.name),
                local,
                cluster,
                self.ledger,
                cursor,
                context.clusters,
                context.clock,
                context.config["replicationProducerQueueSize"],
                self._partitions_of_base(),
                record_positions=self._acked_ranges_enabled(),
            )
            self.replicators[cluster] = replicator
            replicator.start()
            log.info("[%s] Started replicator to %s, backlog %d entries", self.name, cluster, replicator.backlog())
        await self.check_replicated_subscriptions()

    def _partitions_of_base(self) -> int:
        """The partitions of the partitioned topic this one is a partition of, 0 for a plain topic."""
        if self.name.partition_index < 0:
            return 0
        return self.context.metadata.partitioned_topic_metadata(str(self.name.partitioned_base))

    async def stop_replicators(self) -> None:
        """The topic is unloaded or deleted: replicators and the replicated-subscription controller stop,
        the replicators' cursors stay with the ledger."""
        replicators, self.replicators = self.replicators, {}
        for replicator in replicators.values():
            await replicator.stop()
        await self.check_replicated_subscriptions()

    # ------------------------------------------------------------------ replicated subscriptions (PIP-33)

    async def check_replicated_subscriptions(self) -> None:
        """Start or stop the controller as Pulsar's checkReplicatedSubscriptionControllerState: it runs
        while `enableReplicatedSubscriptions` is on, the topic replicates to another cluster, and some
        subscription is replicated or a marker came from another cluster (a cluster without replicated
        subscriptions still answers snapshot requests and applies updates)."""
        wanted = self._marker_received or any(s.replicated for s in self.subscriptions.values())
        if wanted:
            self._start_replicated_subscriptions()
        controller = self.replicated_subscriptions
        if controller is not None and not (wanted and self._controller_allowed()):
            self.replicated_subscriptions = None
            await controller.stop()
            log.info("[%s] Replicated subscriptions controller stopped", self.name)

    def _acked_ranges_enabled(self) -> bool:
        config = self.context.config
        return bool(config["enableReplicatedSubscriptions"] and config["replicatedSubscriptionsAckedRangesEnabled"])

    def _controller_allowed(self) -> bool:
        return bool(self.context.config["enableReplicatedSubscriptions"] and self.replicators)

    def replicator_states(self) -> dict[str, bool]:
        """Each remote cluster this topic replicates to, and whether its replicator is connected."""
        return {cluster: replicator.connected for cluster, replicator in self.replicators.items()}

    def _start_replicated_subscriptions(self) -> None:
        if self.replicated_subscriptions is not None or not self._controller_allowed():
            return
        config = self.context.config
        controller = self.replicated_subscriptions = ReplicatedSubscriptionsController(
            self,
            str(self.name),
            config["clusterName"],
            config["replicatedSubscriptionsSnapshotFrequencyMillis"],
            config["replicatedSubscriptionsSnapshotTimeoutSeconds"] * 1000,
            self.context.clock,
            self._acked_ranges_enabled(),
        )
        controller.start()

    async def set_subscription_replicated(self, subscription: PersistentSubscription, replicated: bool) -> None:
        """Pulsar's setReplicated: the cursor property `pulsar.replicated.subscription` marks it (kept across
        restarts), the subscription keeps a snapshot cache while it is set."""
        if subscription.replicated == replicated:
            return
        await subscription.set_replicated(replicated)
        log.info(
            "[%s][%s] Subscription %s replicated", self.name, subscription.name, "now" if replicated else "no longer"
        )
        await self.check_replicated_subscriptions()

    def replicated_entries_stored(self, first: Position, last: Position) -> None:
        """Another cluster's replicator stored `first` to `last` here: this topic's replicators never
        forward them, and pass them without reading them back when they can."""
        for replicator in self.replicators.values():
            replicator.pass_replicated(first, last)

    def replicated_marker_stored(self, origin: str, position: Position, data: bytes) -> None:
        """A marker cluster `origin` wrote, stored here by its replicator. Taken into account, as Pulsar does,
        only while this topic replicates back to `origin`: a cluster that does not could not answer."""
        if origin not in self.replicators:
            return
        try:
            marker = parse_marker(data)
        except (ProtocolError, ChecksumError) as error:
            log.warning("[%s] Marker from %s at %s unreadable: %s", self.name, origin, position, error)
            return
        if marker is not None:
            self._on_replicated_marker(position, marker)

    def _on_replicated_marker(self, position: Position, marker: Marker) -> None:
        """A marker another cluster wrote, stored here."""
        # Pulsar's receivedReplicatedSubscriptionMarker starts the controller, and this marker is its first.
        self._marker_received = True
        self._start_replicated_subscriptions()
        controller = self.replicated_subscriptions
        if controller is not None:
            controller.marker_received(position, marker)

    async def apply_replicated_update(self, name: str, position: Position) -> None:
        """Another cluster's replicated subscription `name` moved: this one moves to `position`
        (cumulatively, never back), created first at the earliest position if it does not exist here
        (Pulsar #20767)."""
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = await self.subscribe(name, True, "earliest", None)
            await self.set_subscription_replicated(subscription, True)
        subscription.skip_to(min(Position(*position), self.ledger.last_confirmed_entry))

    def acked_ranges_due(self) -> list[tuple[str, AckedRangesContent]]:
        """Every half snapshot period: the ACKED_RANGES content of each replicated subscription whose consumers
        acknowledged something since the last time and whose translation changed (magnetar, Pulsar
        #10054). Receipts below every replicated subscription's floor are forgotten on the way."""
        replicated = [s for s in self.subscriptions.values() if s.replicated]
        positions = {c: r.positions for c, r in self.replicators.items() if r.positions is not None}
        if replicated:
            floor = min(s.acked_ranges_floor for s in replicated)
            for translated in positions.values():
                translated.forget_up_to(floor)
        due = []
        local = self.context.config["clusterName"]
        for subscription in replicated:
            if not subscription.acks_changed:
                continue
            subscription.acks_changed = False
            content = acked_ranges_to_send(local, subscription.acked_ranges(), positions)
            if content != subscription.acked_ranges_sent:
                subscription.acked_ranges_sent = content
                due.append((subscription.name, content))
        return due

    async def apply_acked_ranges(self, name: str, source: str, content: AckedRangesContent) -> None:
        """Another cluster's replicated subscription `name` acknowledged `content` (ACKED_RANGES): this one
        acknowledges the copies of that cluster's entries and its own entries among them, created first
        at the earliest position if it does not exist here (as an UPDATE creates it, Pulsar #20767)."""
        replicator = self.replicators.get(source)
        ranges = ranges_to_acknowledge(
            self.context.config["clusterName"],
            source,
            content,
            replicator.positions if replicator is not None else None,
        )
        if not ranges:
            return
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = await self.subscribe(name, True, "earliest", None)
            await self.set_subscription_replicated(subscription, True)
        acknowledged = subscription.acknowledge_replicated(ranges)
        log.debug("[%s][%s] %d entries acknowledged as %s's subscription did", self.name, name, acknowledged, source)

    def clear_replication_backlog(self, cluster: str) -> bool:
        """skip_all on `pulsar.repl.<cluster>`: the replicator forgets what it had not sent yet."""
        replicator = self.replicators.get(cluster)
        if replicator is None:
            return False
        replicator.cursor.mark_delete(self.ledger.last_confirmed_entry)
        replicator.cursor.rewind()
        return True

    # ------------------------------------------------------------------ admin operations

    def idle_for_schema(self) -> bool:
        """No producer, no consumer (AUTO_CONSUME ones aside) and no data: a consumer's schema may be
        registered (PersistentTopic.addSchemaIfIdleOrCheckCompatible)."""
        return (
            not self.producers
            and self.ledger.number_of_entries == 0
            and all(
                consumer.schema_type == "AUTO_CONSUME"
                for subscription in self.subscriptions.values()
                for consumer in subscription.consumers.values()
            )
        )

    def has_clients(self) -> bool:
        """Producers or consumers are connected: a topic Pulsar will not delete without `force`."""
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    def close_clients(self) -> None:
        """Close every producer and consumer the way a broker does (they reconnect on their own)."""
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        for subscription in list(self.subscriptions.values()):
            subscription.disconnect_consumers()

    async def create_subscription(self, name: str, start: Position) -> PersistentSubscription:
        """A durable subscription with no consumer, its cursor at `start` (Pulsar creates it at the
        latest position, then resets it). Raises SubscriptionExistsError."""
        if is_reserved_subscription(name):
            raise ReservedSubscriptionName("Subscription with reserved subscription name attempted")
        if name in self.subscriptions:
            raise SubscriptionExistsError(f"Subscription {name} already exists for topic {self.name}")
        cursor = await self.ledger.open_cursor(name, "latest")
        if name in self.subscriptions:
            # A consumer subscribed while the cursor was being persisted (see `subscribe`).
            raise SubscriptionExistsError(f"Subscription {name} already exists for topic {self.name}")
        subscription = PersistentSubscription(self, name, cursor)
        self.subscriptions[name] = subscription
        log.info("[%s][%s] Created subscription (admin API, durable, at %s)", self.name, name, start)
        if start != self.ledger.next_valid_position(self.ledger.last_confirmed_entry):
            await subscription.reset_cursor(start)
        return subscription

    async def delete_subscription(self, name: str, force: bool) -> None:
        """Unsubscribe on an operator's behalf; without `force` only a subscription nobody consumes."""
        subscription = self.subscriptions[name]
        if subscription.consumers and not force:
            raise SubscriptionBusyError("Subscription has active connected consumers")
        await self.unsubscribe(name)
        log.info("[%s][%s] Deleted subscription (admin API%s)", self.name, name, ", force" if force else "")

    async def expire_messages_of(self, subscription: PersistentSubscription, ttl_seconds: int, now_ms: int) -> None:
        """expireMessages: one subscription skips what was published more than `ttl_seconds` ago."""
        expired_up_to = await self._expired_up_to(ttl_seconds, now_ms)
        if expired_up_to > subscription.cursor.mark_delete_position:
            subscription.skip_to(expired_up_to)

    def nth_entry_position(self, n: int, from_latest: bool = False) -> Position | None:
        """The n-th stored entry (from 1), counted from the first or back from the last (examinemessage)."""
        if from_latest:
            n = self.ledger.number_of_entries - n + 1
        return entry_after(self.ledger, EARLIEST, n) if n >= 1 else None

    async def stored_entry(self, position: tuple[int, int]) -> Entry | None:
        """The entry stored at `position` (peek, examine), None if there is none."""
        stored = await self.ledger.read_positions([position])
        return stored[0] if stored else None

    async def first_published_at_or_after(self, publish_time_ms: int) -> Position:
        """The first entry published at or after `publish_time_ms`; past the end if none (reset by time)."""
        return await self.ledger.find_first_published_at_or_after(publish_time_ms)

    def position_at_or_after(self, position: tuple[int, int]) -> Position:
        """Where a cursor given `position` goes, as Pulsar's resetCursor normalises it: the earliest
        sentinel or a negative ledger id means the first stored entry, the latest sentinel or anything
        past the end means after the last one, and a position that is not stored means the next one."""
        ledger = self.ledger
        end = ledger.next_valid_position(ledger.last_confirmed_entry)
        first = ledger.first_position()
        ledger_id, entry_id = position
        if ledger_id < 0:
            return first
        target = ledger.next_valid_position(Position(ledger_id, max(entry_id, 0) - 1))
        return max(first, min(target, end))
