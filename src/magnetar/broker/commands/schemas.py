"""The schema commands: GET_SCHEMA and GET_OR_CREATE_SCHEMA.

Owns: answering them from the schema registry (broker/schemas.py) with Pulsar's error codes.
Must not touch: what a schema version is or whether one is compatible (the registry decides).
"""

from __future__ import annotations

import logging

from magnetar.broker.connection import CommandHandler, ServerConnection
from magnetar.broker.schemas import from_wire, schema_id, to_wire, version_bytes, version_from_bytes
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.protocol import commands
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandGetOrCreateSchema, CommandGetSchema

__all__ = ["handlers"]

log = logging.getLogger("magnetar.broker.connection")


def handlers(connection: ServerConnection) -> dict[int, CommandHandler]:
    return {
        BaseCommand.GET_SCHEMA: lambda command: on_get_schema(connection, command.getSchema),
        BaseCommand.GET_OR_CREATE_SCHEMA: lambda command: connection.spawn(
            on_get_or_create_schema(connection, command.getOrCreateSchema), "get or create schema"
        ),
    }


def on_get_schema(connection: ServerConnection, request: CommandGetSchema) -> None:
    """A version of the topic's schema, the newest without one: the registry answers for a topic that
    is not loaded, or no longer exists, as Pulsar's does (AUTO_CONSUME asks by message version)."""
    try:
        name = TopicName.parse(request.topic)
    except InvalidTopicName as error:
        connection.write(
            commands.get_schema_response(request.request_id, error_code="InvalidTopicName", message=str(error))
        )
        return
    version = version_from_bytes(request.schema_version) if request.schema_version else None
    stored = connection.context.schemas.get(name, version)
    if stored is None:
        log.info(
            "[%s] Request %d failed: TopicNotFound: no schema version %s for %s",
            connection.remote_address,
            request.request_id,
            "latest" if version is None else version,
            name,
        )
        connection.write(
            commands.get_schema_response(
                request.request_id, error_code="TopicNotFound", message="Topic not found or no-schema"
            )
        )
        return
    connection.write(
        commands.get_schema_response(
            request.request_id, to_wire(schema_id(name), stored), version_bytes(stored.version)
        )
    )


async def on_get_or_create_schema(connection: ServerConnection, request: CommandGetOrCreateSchema) -> None:
    """The Go client's first send with a schema: the version of that schema on an existing topic,
    registered as a producer's would be (Pulsar's handleGetOrCreateSchema)."""
    try:
        name = TopicName.parse(request.topic)
        if not connection.context.registry.topic_exists(name):
            connection.write(
                commands.get_or_create_schema_response(
                    request.request_id, error_code="TopicNotFound", message="Topic not found"
                )
            )
            return
        schema = from_wire(request.schema)
        version = await connection.context.schemas.producer_schema_version(
            name, None if schema.type == "NONE" else schema
        )
    except Exception as error:  # answered with its ServerError code
        code = "InvalidTopicName" if isinstance(error, InvalidTopicName) else getattr(error, "server_error", None)
        if code is None:
            log.error(
                "[%s] Request %d failed: UnknownError: %r",
                connection.remote_address,
                request.request_id,
                error,
                exc_info=error,
            )
            code = "UnknownError"
        else:
            log.info("[%s] Request %d failed: %s: %s", connection.remote_address, request.request_id, code, error)
        connection.write(
            commands.get_or_create_schema_response(request.request_id, error_code=code, message=str(error))
        )
        return
    connection.write(commands.get_or_create_schema_response(request.request_id, version))
