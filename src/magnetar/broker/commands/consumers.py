"""The consumer commands: SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, CLOSE_CONSUMER,
UNSUBSCRIBE, SEEK and GET_LAST_MESSAGE_ID.

Owns: subscribing a consumer once its role may consume and its subscription type is allowed (Key_Shared
metadata, replicated subscriptions, a consumer's schema), and handing a consumer's permits,
acknowledgements and redelivery requests to it; the positions on the wire (uint64 ids, -1 as 2**64-1).
Must not touch: ordering (the subscription's dispatcher decides what goes where).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from magnetar.broker.connection import CommandHandler, ServerConnection
from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.logs import consumer_changed
from magnetar.broker.schemas import from_wire
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_name import TopicName
from magnetar.core.errors import CoreError
from magnetar.core.events import KeySharedMeta
from magnetar.positions import EARLIEST, LATEST, Position
from magnetar.protocol import commands
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandAck,
    CommandCloseConsumer,
    CommandFlow,
    CommandGetLastMessageId,
    CommandRedeliverUnacknowledgedMessages,
    CommandSeek,
    CommandSubscribe,
    CommandUnsubscribe,
)

__all__ = ["handlers"]

log = logging.getLogger("magnetar.broker.connection")

_SUB_TYPES = {
    CommandSubscribe.Exclusive: "Exclusive",
    CommandSubscribe.Shared: "Shared",
    CommandSubscribe.Failover: "Failover",
    CommandSubscribe.Key_Shared: "Key_Shared",
}
_INT64_SIGN = 1 << 63
# Position(ledger, entry) without the Python-level __new__ NamedTuple generates: one per acked id.
# Measured with bench/e2e_throughput.py (the event loop's CPU µs per message, commit c201da2).
_new_position = partial(tuple.__new__, Position)


class _NotAllowed(CoreError):
    server_error = "NotAllowedError"


def handlers(connection: ServerConnection) -> dict[int, CommandHandler]:
    spawn = connection.spawn
    return {
        BaseCommand.ACK: lambda command: on_ack(connection, command.ack),
        BaseCommand.FLOW: lambda command: on_flow(connection, command.flow),
        BaseCommand.SUBSCRIBE: lambda command: spawn(on_subscribe(connection, command.subscribe), "subscribe"),
        BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES: lambda command: on_redeliver(
            connection, command.redeliverUnacknowledgedMessages
        ),
        BaseCommand.CLOSE_CONSUMER: lambda command: on_close_consumer(connection, command.close_consumer),
        BaseCommand.UNSUBSCRIBE: lambda command: spawn(on_unsubscribe(connection, command.unsubscribe), "unsubscribe"),
        BaseCommand.SEEK: lambda command: spawn(on_seek(connection, command.seek), "seek"),
        BaseCommand.GET_LAST_MESSAGE_ID: lambda command: spawn(
            on_get_last_message_id(connection, command.getLastMessageId), "get last message id"
        ),
    }


def _signed(value: int) -> int:
    """Ledger and entry ids are uint64 on the wire; -1 travels as 2**64 - 1."""
    return value - (1 << 64) if value >= _INT64_SIGN else value


def _position(message_id: Any) -> Position:
    return Position(_signed(message_id.ledgerId), _signed(message_id.entryId))


def _consumer_of(connection: ServerConnection, consumer_id: int, request_id: int) -> ServerConsumer | None:
    """The connection's consumer of that id; None, with ConsumerNotFound answered, for an unknown one."""
    consumer = connection.consumers.get(consumer_id)
    if consumer is None:
        log.info("[%s] Request %d failed: ConsumerNotFound: unknown consumer", connection.remote_address, request_id)
        connection.write(commands.error(request_id, "ConsumerNotFound", "unknown consumer"))
    return consumer


def on_flow(connection: ServerConnection, request: CommandFlow) -> None:
    consumer = connection.consumers.get(request.consumer_id)
    if consumer is not None:
        consumer.flow(request.messagePermits)


def on_redeliver(connection: ServerConnection, request: CommandRedeliverUnacknowledgedMessages) -> None:
    consumer = connection.consumers.get(request.consumer_id)
    if consumer is None:
        return
    ids = [_position(m) for m in request.message_ids]
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "[%s] Redelivering %s unacknowledged messages on topic %s / %s for consumer %s (consumerId=%d)",
            connection.remote_address,
            len(ids) if ids else "all",
            consumer.subscription.topic.name,
            consumer.subscription.name,
            consumer.name,
            request.consumer_id,
        )
    epoch = request.consumer_epoch if request.HasField("consumer_epoch") else None
    consumer.redeliver(ids or None, epoch)


def on_close_consumer(connection: ServerConnection, request: CommandCloseConsumer) -> None:
    consumer = connection.consumers.pop(request.consumer_id, None)
    if consumer is not None:
        connection.detach_consumer(consumer)
    connection.write(commands.success(request.request_id))


async def on_subscribe(connection: ServerConnection, request: CommandSubscribe) -> None:
    try:
        subscription_type = _SUB_TYPES[request.subType]
        name = TopicName.parse(request.topic)
        _check_subscribe(connection, request, name, subscription_type)
        if request.consumer_id in connection.consumers:
            connection.write(commands.success(request.request_id))
            return
        topic = await connection.context.registry.get_topic(name, create=request.force_topic_creation)
        schema = from_wire(request.schema) if request.HasField("schema") else None
        if schema is not None and schema.type != "AUTO_CONSUME":
            await connection.context.schemas.add_schema_if_idle_or_check_compatible(
                name, topic.idle_for_schema(), schema
            )
        subscription = await _subscription(connection, request, topic)
        consumer = ServerConsumer(
            connection, subscription, request.consumer_id, request.consumer_name, name.partition_index
        )
        if request.HasField("consumer_epoch"):
            consumer.epoch = request.consumer_epoch
        if schema is not None:
            consumer.schema_type = schema.type
        subscription.read_compacted = request.read_compacted
        if subscription_type == "Exclusive":
            # Refused by the core if a holder answers; a holder whose connection does not is gone first.
            holders = {c.connection for c in subscription.consumers.values() if c.connection is not connection}
            await asyncio.gather(*(holder.check_liveness() for holder in holders))
        meta = _key_shared_meta(request, subscription_type)
        consumer.consumer_id = subscription.add_consumer(consumer, subscription_type, request.priority_level, meta)
    except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
        connection.error(request.request_id, error)
        return
    if connection.closed:
        consumer.detach()
        return
    connection.consumers[request.consumer_id] = consumer
    log.info(
        "[%s] Created consumer on topic %s / %s: subscriptionType=%s, consumerName=%s, consumerId=%d",
        connection.remote_address,
        name,
        request.subscription,
        subscription_type,
        request.consumer_name,
        request.consumer_id,
    )
    consumer_changed(subscription, consumer, "joined")
    connection.write(commands.success(request.request_id))


def _check_subscribe(
    connection: ServerConnection, request: CommandSubscribe, name: TopicName, subscription_type: str
) -> None:
    """What refuses a SUBSCRIBE before the topic is loaded: the role's permission, a subscription type the
    namespace (or broker) disabled, readCompacted on a type that cannot have it."""
    connection.context.authorization.check_consume(name, connection.auth.role, request.subscription)
    if not connection.context.policies.subscription_type_allowed(name, subscription_type):
        raise _NotAllowed(f"{subscription_type} subscriptions are disabled for {name.namespace_name}")
    if request.read_compacted and subscription_type not in ("Exclusive", "Failover"):
        raise _NotAllowed("readCompacted only allowed on failover or exclusive subscriptions")


async def _subscription(
    connection: ServerConnection, request: CommandSubscribe, topic: PersistentTopic
) -> PersistentSubscription[PersistentTopic]:
    """The subscription the consumer joins, created at its initial position if new, and made replicated
    when the client asks (PIP-33: for good, false never unmakes it)."""
    start = _position(request.start_message_id) if request.HasField("start_message_id") else None
    initial = "earliest" if request.initialPosition == 1 else "latest"
    known = topic.subscriptions.get(request.subscription)
    subscription = await topic.subscribe(request.subscription, request.durable, initial, start)
    if known is None and not subscription.consumers:
        # New, and not joined by a consumer that subscribed at the same time and came back first.
        log.info(
            "[%s] Created subscription on topic %s / %s (%s, initial position %s)",
            connection.remote_address,
            topic.name,
            request.subscription,
            "durable" if request.durable else "non-durable",
            initial,
        )
    if request.replicate_subscription_state and subscription.durable:
        if connection.context.config["enableReplicatedSubscriptions"]:
            await topic.set_subscription_replicated(subscription, True)
        else:
            log.warning(
                "[%s] Replicated subscription requested on %s / %s while enableReplicatedSubscriptions "
                "is false: not replicated",
                connection.remote_address,
                topic.name,
                request.subscription,
            )
    return subscription


def _key_shared_meta(request: CommandSubscribe, subscription_type: str) -> KeySharedMeta | None:
    """A Key_Shared consumer's mode and ranges; an Exclusive consumer may declare STICKY ranges too (a
    reader with key hash ranges)."""
    declares_ranges = subscription_type == "Exclusive" and request.HasField("keySharedMeta")
    if subscription_type != "Key_Shared" and not declares_ranges:
        return None
    ksm = request.keySharedMeta
    return KeySharedMeta(
        "STICKY" if ksm.keySharedMode == 1 else "AUTO_SPLIT",
        ksm.allowOutOfOrderDelivery,
        tuple((r.start, r.end) for r in ksm.hashRanges),
    )


def on_ack(connection: ServerConnection, ack: CommandAck) -> None:
    consumer = connection.consumers.get(ack.consumer_id)
    if consumer is None:
        return
    if ack.ack_type == 1:
        if ack.message_id:
            consumer.acknowledge_cumulative(_position(ack.message_id[0]))
    else:
        # A grouped ACK carries hundreds of ids: each is read once, and only batch entries' ack sets
        # are copied out (an entry acked whole has none).
        whole: list[Position] = []
        with_ack_sets: list[tuple[Position, list[int]]] = []
        for message_id in ack.message_id:
            ledger_id, entry_id = message_id.ledgerId, message_id.entryId
            if ledger_id >= _INT64_SIGN or entry_id >= _INT64_SIGN:
                position = Position(_signed(ledger_id), _signed(entry_id))
            else:
                position = _new_position((ledger_id, entry_id))
            ack_set = message_id.ack_set
            if ack_set:
                with_ack_sets.append((position, list(ack_set)))
            else:
                whole.append(position)
        consumer.acknowledge(whole, with_ack_sets)
    if ack.HasField("request_id"):
        connection.write(commands.ack_response(ack.consumer_id, ack.request_id))


async def on_unsubscribe(connection: ServerConnection, request: CommandUnsubscribe) -> None:
    consumer = _consumer_of(connection, request.consumer_id, request.request_id)
    if consumer is None:
        return
    subscription = consumer.subscription
    others = [c for c in subscription.consumers.values() if c is not consumer]
    if others:
        log.info(
            "[%s] Request %d failed: UnknownError: Subscription %s has other connected consumers",
            connection.remote_address,
            request.request_id,
            subscription.name,
        )
        connection.write(
            commands.error(
                request.request_id,
                "UnknownError",
                f"Subscription {subscription.name} has other connected consumers",
            )
        )
        return
    connection.consumers.pop(request.consumer_id, None)
    consumer.detach()
    await subscription.topic.unsubscribe(subscription.name)
    log.info(
        "[%s] Deleted subscription on topic %s / %s: unsubscribed by consumer %s (consumerId=%d)",
        connection.remote_address,
        subscription.topic.name,
        subscription.name,
        consumer.name,
        request.consumer_id,
    )
    connection.write(commands.success(request.request_id))


async def on_seek(connection: ServerConnection, request: CommandSeek) -> None:
    consumer = _consumer_of(connection, request.consumer_id, request.request_id)
    if consumer is None:
        return
    subscription = consumer.subscription
    topic = subscription.topic
    by_time = request.HasField("message_publish_time")
    try:
        if by_time:
            target = await topic.first_published_at_or_after(request.message_publish_time)
        else:
            target = _position(request.message_id)
            if target == EARLIEST or target[0] < 0:
                target = topic.ledger.first_position()
            elif target == LATEST:
                target = topic.ledger.next_valid_position(topic.ledger.last_confirmed_entry)
        log.info(
            "[%s] Seek by consumer %s on topic %s / %s to %s",
            connection.remote_address,
            consumer.name,
            topic.name,
            subscription.name,
            f"publish time {request.message_publish_time} ({target})" if by_time else target,
        )
        # The subscription's consumers are closed before the cursor moves, as Pulsar's resetCursor does:
        # an ack the client sends after its SEEK then finds no consumer, instead of moving the reset
        # cursor past messages that must come again; each consumer re-subscribes from the new position.
        # They are closed before the answer too: answered first, the Java client completes the seek while
        # still connected, keeps its old start (a seek by time's is earliest) and drops what comes next.
        await subscription.reset_cursor(target)
    except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
        connection.error(request.request_id, error)
        return
    connection.write(commands.success(request.request_id))


async def on_get_last_message_id(connection: ServerConnection, request: CommandGetLastMessageId) -> None:
    consumer = _consumer_of(connection, request.consumer_id, request.request_id)
    if consumer is None:
        return
    topic = consumer.subscription.topic
    try:
        # Not a trailing marker: consumers never receive those (Pulsar #22571).
        last = await topic.last_dispatchable_position()
        compacted = await topic.compaction.last_message_id(last) if consumer.subscription.read_compacted else None
        if compacted is not None:
            last, batch_index = compacted
        else:
            batch_index = await topic.largest_batch_index(last)
    except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
        connection.error(request.request_id, error)
        return
    mark_delete = consumer.subscription.cursor.mark_delete_position
    connection.write(
        commands.get_last_message_id_response(
            request.request_id,
            last[0],
            last[1],
            batch_index=batch_index,
            partition=consumer.partition_index,
            mark_delete_position=mark_delete,
        )
    )
