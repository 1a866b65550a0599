"""The producer commands: PRODUCER and CLOSE_PRODUCER (a producer's SENDs are read by the connection,
which hands them to the producer in one call per socket read).

Owns: creating a producer on a topic once its role may produce there and its schema is registered or
matched: the name it gets, its access mode (PIP-68: Exclusive, WaitForExclusive, ExclusiveWithFencing),
a retried create answered as the first, the liveness check of a connection that holds the name.
Must not touch: which producers a topic admits (the topic decides), storage.
"""

from __future__ import annotations

import itertools
import logging

from magnetar.broker.connection import CommandHandler, ServerConnection
from magnetar.broker.producer import ServerProducer
from magnetar.broker.schema_compatibility import SchemaData
from magnetar.broker.schemas import from_wire
from magnetar.broker.topic_name import TopicName
from magnetar.protocol import commands
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandCloseProducer, CommandProducer

__all__ = ["handlers"]

log = logging.getLogger("magnetar.broker.connection")

_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}
_producer_names = itertools.count()


def handlers(connection: ServerConnection) -> dict[int, CommandHandler]:
    return {
        BaseCommand.PRODUCER: lambda command: connection.spawn(on_producer(connection, command.producer), "producer"),
        BaseCommand.CLOSE_PRODUCER: lambda command: on_close_producer(connection, command.close_producer),
    }


async def on_producer(connection: ServerConnection, request: CommandProducer) -> None:
    try:
        name = TopicName.parse(request.topic)
        connection.context.authorization.check_produce(name, connection.auth.role)
        topic = await connection.context.registry.get_topic(name)
        # Registered or matched before the producer joins, as Pulsar's tryAddSchema; a retried
        # create matches the version it registered.
        schema_version = await connection.context.schemas.producer_schema_version(name, _declared_schema(request))
        existing = connection.producers.get(request.producer_id)
        if existing is not None:
            # The client retried a create that already succeeded: answer the same way again.
            connection.write(
                commands.producer_success(
                    request.request_id,
                    existing.name,
                    topic.last_sequence_id(existing.name),
                    topic_epoch=topic.topic_epoch,
                    schema_version=schema_version,
                )
            )
            return
        producer_name = request.producer_name or f"{connection.context.config['clusterName']}-0-{next(_producer_names)}"
        access_mode = _ACCESS_MODES.get(request.producer_access_mode, "Shared")
        producer = ServerProducer(connection, topic, request.producer_id, producer_name, access_mode)
        if access_mode == "WaitForExclusive" and topic.producers:
            # Parked: the client waits for a second PRODUCER_SUCCESS with producer_ready=true.
            log.info(
                "[%s] Producer %s waits for exclusive access to topic %s",
                connection.remote_address,
                producer_name,
                name,
            )
            connection.write(
                commands.producer_success(
                    request.request_id,
                    producer_name,
                    topic.last_sequence_id(producer_name),
                    schema_version=schema_version,
                    producer_ready=False,
                )
            )
            await topic.wait_until_free()
        holder = topic.producers.get(producer_name)
        if holder is not None and holder.connection is not connection:
            # Refused below if its connection answers; closed (and its producer with it) if it does not.
            await holder.connection.check_liveness()
        epoch = topic.add_producer(
            producer, access_mode, request.topic_epoch if request.HasField("topic_epoch") else None
        )
    except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
        connection.error(request.request_id, error)
        return
    if connection.closed:
        producer.close_silently()
        return
    connection.producers[request.producer_id] = producer
    log.info(
        "[%s] Created producer on topic %s: producerName=%s, producerId=%d, accessMode=%s",
        connection.remote_address,
        name,
        producer_name,
        request.producer_id,
        access_mode,
    )
    connection.write(
        commands.producer_success(
            request.request_id,
            producer_name,
            topic.last_sequence_id(producer_name),
            topic_epoch=epoch,
            schema_version=schema_version,
        )
    )


def on_close_producer(connection: ServerConnection, request: CommandCloseProducer) -> None:
    producer = connection.producers.pop(request.producer_id, None)
    if producer is not None:
        producer.close_silently(by="client")
    connection.write(commands.success(request.request_id))


def _declared_schema(request: CommandProducer) -> SchemaData | None:
    """The schema a PRODUCER declares; none for no schema or type None (the clients send BYTES so)."""
    if not request.HasField("schema"):
        return None
    schema = from_wire(request.schema)
    return None if schema.type == "NONE" else schema
