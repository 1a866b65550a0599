"""A consumer on a connection: the bridge between a client's consumer id and its subscription.

Owns: writing MESSAGE frames for what the dispatcher sends it (with redelivery counts and the ack set
of partly acknowledged batches), remembering the batch size of batch entries it sent (to read ack sets),
turning the client's ACK / FLOW / REDELIVER into subscription calls, and the counters and timestamps of
Pulsar's consumer stats (counted per frame batch or command, never per message; the admin API derives
rates from them when asked).
Must not touch: the dispatcher, or the cursor's state: it reads the cursor (the acked batch indexes of
the ack sets it sends, the mark-delete position it compares around an ack for Pulsar's
lastMarkDeleteAdvancedTimestamp) and acknowledges only through the subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from magnetar.broker.logs import consumer_changed
from magnetar.core.events import Entry
from magnetar.positions import Position
from magnetar.protocol import commands
from magnetar.protocol.messages import ack_set_of, and_ack_sets

if TYPE_CHECKING:
    from magnetar.broker.compactor import TopicCompaction
    from magnetar.broker.peer import ClientConnection
    from magnetar.broker.topic_context import TopicContext
    from magnetar.broker.topic_name import TopicName
    from magnetar.storage import ManagedCursor

__all__ = ["ConsumerSubscription", "ServerConsumer"]


class _ConsumerTopic(Protocol):
    @property
    def name(self) -> TopicName: ...

    @property
    def context(self) -> TopicContext: ...

    @property
    def compaction(self) -> TopicCompaction: ...


class ConsumerSubscription(Protocol):
    """What a consumer reaches of its subscription (subscription.PersistentSubscription, which names this
    module's class, not the other way round)."""

    # Pulsar's stats of a subscription that consumers update: the counters of consumers that left,
    # when the last FLOW came, when an ack last moved the mark-delete position.
    msg_out_from_removed_consumers: int
    bytes_out_from_removed_consumers: int
    last_consumed_flow_ms: int
    last_mark_delete_advanced_ms: int
    # The hashes the DEBUG lines reported draining (logs.py).
    draining_logged: dict[int, Any]

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> _ConsumerTopic: ...

    @property
    def cursor(self) -> ManagedCursor: ...

    @property
    def read_compacted(self) -> bool: ...

    @property
    def subscription_type(self) -> str | None: ...

    @property
    def dispatcher(self) -> Any: ...

    @property
    def consumers(self) -> Mapping[int, Any]: ...

    def flow(self, consumer_id: int, permits: int) -> None: ...

    def acknowledge(
        self, consumer_id: int, positions: list[Position], batch_acks: list[tuple[Position, int, list[int]]]
    ) -> None: ...

    def acknowledge_cumulative(self, consumer_id: int, position: Position) -> None: ...

    def redeliver(self, consumer_id: int, positions: list[Position] | None) -> None: ...

    def remove_consumer(self, consumer_id: int) -> None: ...


S = TypeVar("S", bound=ConsumerSubscription)

log = logging.getLogger(__name__)


class ServerConsumer(Generic[S]):
    def __init__(
        self,
        connection: ClientConnection,
        subscription: S,
        client_consumer_id: int,
        name: str,
        partition_index: int,
    ) -> None:
        self.connection = connection
        self.subscription = subscription
        self.client_consumer_id = client_consumer_id
        self.name = name
        self.partition_index = partition_index
        self.consumer_id = 0  # the subscription's id for it, set once attached
        # position -> batch size, for batch entries sent and not yet fully acked
        self.batch_sizes: dict[Position, int] = {}
        self.closed = False
        # PIP-84: the consumer epoch of a client that keeps one (it sent consumer_epoch); every MESSAGE
        # carries it, so that the client drops those sent before a redelivery it asked for.
        self.epoch: int | None = None
        # The SchemaType it subscribed with, if any: AUTO_CONSUME consumers leave a topic "idle", so the
        # first consumer with a schema may still register it (PersistentTopic.addSchemaIfIdleOrCheckCompatible).
        self.schema_type: str | None = None
        # The broker's wall clock, epoch milliseconds: the unit of Pulsar's stats timestamps.
        self._now_ms = subscription.topic.context.clock.time_ms
        self.connected_since_ms = self._now_ms()
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_ack_counter = 0  # message ids acknowledged (a whole batch entry counts once)
        self.last_consumed_ms = 0
        self.last_acked_ms = 0
        self.last_consumed_flow_ms = 0

    def send_entries(self, entries: list[Entry], redelivery_counts: list[int] | None) -> None:
        """MESSAGE frames for a `Dispatch`: the stored SEND bytes follow each command verbatim. They go
        through `connection.deliver`, which drops them if the broker may no longer serve when they would
        leave (a lapsed lease: cluster/lease.py)."""
        stored: list[Any] = [entry.payload for entry in entries]
        datas = [entry.data for entry in stored]
        ack_sets: dict[int, list[int]] = {}
        if any(entry.message_count > 1 for entry in stored):
            cursor = self.subscription.cursor
            for index, entry in enumerate(stored):
                if entry.message_count > 1:
                    self.batch_sizes[entry.position] = entry.message_count
                    partial = cursor.acked_batch_indexes(entry.position)
                    if self.subscription.read_compacted:
                        partial = self.subscription.topic.compaction.hidden_batch_indexes(
                            entry.data, partial, entry.message_count
                        )
                    if partial is not None:
                        ack_sets[index] = ack_set_of(*partial)
        self.msg_out_counter += sum(entry.message_count for entry in entries)
        self.bytes_out_counter += sum(map(len, datas))
        self.last_consumed_ms = self._now_ms()
        self.connection.deliver(
            commands.message_frames(
                self.client_consumer_id,
                [entry.position for entry in entries],
                datas,
                redelivery_counts,
                ack_sets,
                self.partition_index,
                self.epoch,
            )
        )

    def send_active_change(self, is_active: bool) -> None:
        # Failover consumers only, as Pulsar's notifyActiveConsumerChanged: an Exclusive one (a reader, a
        # compacted consumer) is not told, and the Go client warns of a change for a consumer it does not
        # know yet, since this comes before the SUBSCRIBE's SUCCESS.
        if self.subscription.subscription_type == "Failover":
            self.connection.write(commands.active_consumer_change(self.client_consumer_id, is_active))

    def acknowledge(self, whole: list[Position], with_ack_sets: list[tuple[Position, list[int]]]) -> None:
        """Individual acks: entries acked whole, and batch entries with the ack set the client sent
        (a set bit is an index still unacked)."""
        subscription = self.subscription
        self.msg_ack_counter += len(whole) + len(with_ack_sets)
        self.last_acked_ms = now_ms = self._now_ms()
        before = subscription.cursor.mark_delete_position
        partial: list[tuple[Position, int, list[int]]] = []
        if with_ack_sets:
            whole = whole + self._merge_ack_sets(with_ack_sets, partial)
        if self.batch_sizes:
            for position in whole:
                self.batch_sizes.pop(position, None)
        subscription.acknowledge(self.consumer_id, whole, partial)
        if subscription.cursor.mark_delete_position != before:
            subscription.last_mark_delete_advanced_ms = now_ms

    def acknowledge_cumulative(self, position: Position) -> None:
        subscription = self.subscription
        self.msg_ack_counter += 1
        self.last_acked_ms = now_ms = self._now_ms()
        before = subscription.cursor.mark_delete_position
        for sent in [p for p in self.batch_sizes if p <= position]:
            del self.batch_sizes[sent]
        subscription.acknowledge_cumulative(self.consumer_id, position)
        if subscription.cursor.mark_delete_position != before:
            subscription.last_mark_delete_advanced_ms = now_ms

    def _merge_ack_sets(
        self, with_ack_sets: list[tuple[Position, list[int]]], partial: list[tuple[Position, int, list[int]]]
    ) -> list[Position]:
        """Fills `partial` with (position, batch size, ack set) of batch entries still partly unacked;
        returns the batch entries the ack sets leave wholly acked."""
        whole: list[Position] = []
        merged: dict[Position, list[int]] = {}
        for position, ack_set in with_ack_sets:
            if position not in self.batch_sizes:
                continue
            # Several ack sets for one entry in one ACK are ANDed: a bit stays set (unacked) only if
            # every one of them leaves it unacked (as Pulsar's broker ANDs a client's successive ack sets).
            if position in merged:
                merged[position] = and_ack_sets(merged[position], ack_set)
            else:
                merged[position] = ack_set
        for position, ack_set in merged.items():
            if not any(ack_set):
                whole.append(position)
            else:
                partial.append((position, self.batch_sizes[position], ack_set))
        return whole

    def flow(self, permits: int) -> None:
        self.last_consumed_flow_ms = self.subscription.last_consumed_flow_ms = self._now_ms()
        self.subscription.flow(self.consumer_id, permits)

    def redeliver(self, positions: list[Position] | None, epoch: int | None = None) -> None:
        """`epoch`: the client moved to this consumer epoch (a redelivery of everything); what is sent
        from now on carries it."""
        if epoch is not None and (self.epoch is None or epoch > self.epoch):
            self.epoch = epoch
        self.subscription.redeliver(self.consumer_id, positions)

    def detach(self, by: str | None = None) -> None:
        """The consumer goes (closed by the client, or its connection dropped; `by`, for the log, says
        who when neither)."""
        if not self.closed:
            self.closed = True
            subscription = self.subscription
            log.info(
                "[%s] Closed consumer on topic %s / %s: subscriptionType=%s, consumerName=%s, consumerId=%d, %s",
                self.connection.remote_address,
                subscription.topic.name,
                subscription.name,
                subscription.subscription_type,
                self.name,
                self.client_consumer_id,
                f"closed by {by}" if by else "connection closed" if self.connection.closed else "closed by client",
            )
            # Pulsar's subscription counters keep what consumers that left had received.
            subscription.msg_out_from_removed_consumers += self.msg_out_counter
            subscription.bytes_out_from_removed_consumers += self.bytes_out_counter
            subscription.remove_consumer(self.consumer_id)
            consumer_changed(subscription, self, "left")

    def close_by_broker(self) -> None:
        """Pulsar's way to make a client re-subscribe (after a seek): CLOSE_CONSUMER with request id -1."""
        self.detach(by="broker")
        self.connection.forget_consumer(self.client_consumer_id)
        self.connection.write(commands.close_consumer(self.client_consumer_id))
