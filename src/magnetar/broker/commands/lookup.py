"""The lookup commands: PARTITIONED_METADATA, LOOKUP and GET_TOPICS_OF_NAMESPACE.

Owns: checking that the client's role may look a topic up or list a namespace, and answering with what
the broker's lookup (broker/lookup.py) and topic registry say, or with Pulsar's error codes.
Must not touch: loaded topics.
"""

from __future__ import annotations

import logging

from magnetar.broker.cluster.ownership import BundleNotOwnedError
from magnetar.broker.config import UnknownListener
from magnetar.broker.connection import CommandHandler, ServerConnection
from magnetar.broker.registry import TOPIC_DOMAINS
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.protocol import commands
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandGetTopicsOfNamespace,
    CommandLookupTopic,
    CommandPartitionedTopicMetadata,
)

__all__ = ["handlers"]

log = logging.getLogger("magnetar.broker.connection")

# GET_TOPICS_OF_NAMESPACE modes: PERSISTENT (the default), NON_PERSISTENT, ALL.
_NAMESPACE_MODE_DOMAINS = {0: ("persistent",), 1: ("non-persistent",), 2: TOPIC_DOMAINS}


def handlers(connection: ServerConnection) -> dict[int, CommandHandler]:
    return {
        BaseCommand.PARTITIONED_METADATA: lambda command: connection.spawn(
            on_partitioned_metadata(connection, command.partitionMetadata), "partitioned metadata"
        ),
        BaseCommand.LOOKUP: lambda command: on_lookup(connection, command.lookupTopic),
        BaseCommand.GET_TOPICS_OF_NAMESPACE: lambda command: on_get_topics_of_namespace(
            connection, command.getTopicsOfNamespace
        ),
    }


async def on_partitioned_metadata(connection: ServerConnection, request: CommandPartitionedTopicMetadata) -> None:
    try:
        name = TopicName.parse(request.topic)
        refusal = _lookup_refusal(connection, name, "Get Partition Metadata")
        if refusal is not None:
            connection.write(
                commands.partitioned_metadata_response(request.request_id, error_code=refusal[0], message=refusal[1])
            )
            return
        partitions = await connection.context.lookup.partitions(name)
    except InvalidTopicName as error:
        log.info("[%s] Request %d failed: InvalidTopicName: %s", connection.remote_address, request.request_id, error)
        connection.write(
            commands.partitioned_metadata_response(
                request.request_id, error_code="InvalidTopicName", message=str(error)
            )
        )
        return
    connection.write(commands.partitioned_metadata_response(request.request_id, partitions))


def on_lookup(connection: ServerConnection, request: CommandLookupTopic) -> None:
    try:
        name = TopicName.parse(request.topic)
    except InvalidTopicName as error:
        log.info("[%s] Request %d failed: InvalidTopicName: %s", connection.remote_address, request.request_id, error)
        connection.write(
            commands.lookup_response(request.request_id, error_code="InvalidTopicName", message=str(error))
        )
        return
    refusal = _lookup_refusal(connection, name, "Lookup")
    if refusal is not None:
        connection.write(commands.lookup_response(request.request_id, error_code=refusal[0], message=refusal[1]))
        return
    if connection.context.cluster is not None:
        connection.spawn(on_cluster_lookup(connection, request, name), "lookup")
        return
    try:
        # The listener the client names (Java's listenerName, Go's ListenerName, Python's listener_name),
        # else the internal one; Pulsar answers a name it does not have with ServiceNotReady.
        url, url_tls = connection.context.lookup.broker_urls(request.advertised_listener_name)
    except UnknownListener as error:
        log.info("[%s] Request %d failed: ServiceNotReady: %s", connection.remote_address, request.request_id, error)
        connection.write(commands.lookup_response(request.request_id, error_code="ServiceNotReady", message=str(error)))
        return
    # TLS clients read brokerServiceUrlTls (the C++ client's BinaryProtoLookupService); both are answered, as Pulsar does.
    connection.write(commands.lookup_response(request.request_id, url, broker_service_url_tls=url_tls))


async def on_cluster_lookup(connection: ServerConnection, request: CommandLookupTopic, name: TopicName) -> None:
    """A broker of a cluster: Connect to the owner or Redirect to the broker that decides, with Pulsar's
    `authoritative` flags (TopicLookupBase); ServiceNotReady when no broker can take the topic now."""
    try:
        result = await connection.context.lookup.lookup(name, request.advertised_listener_name, request.authoritative)
    except (UnknownListener, BundleNotOwnedError) as error:
        log.info("[%s] Request %d failed: ServiceNotReady: %s", connection.remote_address, request.request_id, error)
        connection.write(commands.lookup_response(request.request_id, error_code="ServiceNotReady", message=str(error)))
        return
    connection.write(
        commands.lookup_response(
            request.request_id,
            result.broker_url,
            broker_service_url_tls=result.broker_url_tls,
            authoritative=result.authoritative,
            redirect=result.redirect,
        )
    )


def _lookup_refusal(connection: ServerConnection, name: TopicName, operation: str) -> tuple[str, str] | None:
    """(error code, message) when the client's role may not look `name` up, None when it may. A role that
    is no super user asking for a topic of a namespace (or tenant) that does not exist gets TopicNotFound,
    as Pulsar's ServerCnx answers when its authorization provider finds no namespace policies."""
    authorization, role = connection.context.authorization, connection.auth.role
    if not authorization.enabled or authorization.can_lookup(name, role):
        return None
    if not connection.context.registry.namespace_exists(name.namespace_name):
        log.info("[%s] %s of %s: its namespace does not exist", connection.remote_address, operation, name)
        return "TopicNotFound", f"Tenant or namespace or topic does not exist: {name.namespace_name}"
    log.info("[%s] Role %s is not authorized to %s %s", connection.remote_address, role, operation, name)
    return "AuthorizationError", f"Client is not authorized to {operation}"


def on_get_topics_of_namespace(connection: ServerConnection, request: CommandGetTopicsOfNamespace) -> None:
    authorization = connection.context.authorization
    if authorization.enabled and not authorization.can_list_topics(request.namespace, connection.auth.role):
        log.info(
            "[%s] Role %s may not list the topics of %s",
            connection.remote_address,
            connection.auth.role,
            request.namespace,
        )
        connection.write(
            commands.error(request.request_id, "AuthorizationError", "Client is not authorized to GetTopicsOfNamespace")
        )
        return
    registry = connection.context.registry
    topics = registry.topics_of_namespace(request.namespace, _NAMESPACE_MODE_DOMAINS[request.mode])
    connection.write(commands.get_topics_of_namespace_response(request.request_id, topics))
