"""Admin routes: topics at Pulsar's `/admin/v2/persistent/{tenant}/{namespace}` and
`/admin/v2/non-persistent/{tenant}/{namespace}` paths (one set of routes; the path names the domain).

Owns: topics (list, create, delete, unload, last message id), partitioned topics (create, update, delete,
metadata, list), subscriptions (list, create, delete, skip, skip all, expire, reset by time or message
id), peeking and examining messages with Pulsar's `X-Pulsar-*` headers, and the topic-level deduplication
policy. Operations on a partitioned topic go to each of its partitions, as Pulsar's do.
Must not touch: state, except through the broker's services (BrokerContext, PersistentTopic,
PersistentSubscription); stats (stats.py).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from magnetar.admin.clusters import Int32, Int64, check_namespace, check_replication_clusters
from magnetar.admin.errors import (
    UNSET_POLICY,
    Responses,
    RestError,
    conflict,
    error_responses,
    not_found,
    precondition_failed,
    unset_policy,
)
from magnetar.broker.context import BrokerContext
from magnetar.broker.operations import TopicBusyError
from magnetar.broker.registry import TopicNotFoundError
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.topic import PersistentTopic, SubscriptionBusyError
from magnetar.broker.topic_name import PARTITION_SUFFIX, InvalidTopicName, TopicName
from magnetar.positions import LATEST, Position
from magnetar.protocol import messages
from magnetar.protocol.pulsar_api_pb2 import CompressionType
from magnetar.replication.replicator import cursor_cluster
from magnetar.storage.metadata import AlreadyExistsError

__all__ = ["MessageIdData", "PartitionedTopicMetadata", "ResetCursorData", "router"]

log = logging.getLogger(__name__)

# Mounted by app.py at /admin/v2/persistent and at NON_PERSISTENT_PREFIX: the handlers name topics of
# the domain of the path they were reached by (topic_domain).
router = APIRouter(tags=["persistent topic"])
PERSISTENT_PREFIX = "/admin/v2/persistent"
NON_PERSISTENT_PREFIX = "/admin/v2/non-persistent"

_NO_CONTENT: Responses = {204: {"description": "Done"}}
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
PathInt32 = Annotated[int, Path(ge=-(2**31), le=2**31 - 1)]
PathCount = Annotated[int, Path(ge=0, le=2**31 - 1)]
PathLong = Annotated[int, Path(ge=_LONG_MIN, le=_LONG_MAX)]

# A peeked message travels as its payload with its metadata in headers (PersistentTopicsBase
# .generateResponseWithEntry). A property whose key is not an HTTP token, or whose value would not
# survive as a header, has no X-Pulsar-PROPERTY-<key> header; the JSON X-Pulsar-PROPERTY header of
# newer Pulsar versions carries every property.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_PEEK_RESPONSE: Responses = {
    200: {
        "description": "The message payload; its id and metadata are in X-Pulsar-* headers",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "headers": {
            "X-Pulsar-Message-ID": {"description": "ledgerId:entryId", "schema": {"type": "string"}},
            "X-Pulsar-publish-time": {"description": "ISO-8601 publish time", "schema": {"type": "string"}},
        },
    }
}


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


# ------------------------------------------------------------------------------------- models


class MessageIdData(BaseModel):
    """Pulsar's MessageIdImpl JSON; (-1, -1) is the earliest position, (2^63-1, 2^63-1) the latest."""

    model_config = ConfigDict(extra="ignore")

    ledgerId: Int64
    entryId: Int64
    partitionIndex: Int32 = -1


class ResetCursorData(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ledgerId: Int64
    entryId: Int64
    partitionIndex: Int32 = -1
    isExcluded: bool = Field(default=False, strict=True)
    batchIndex: Int32 = -1
    properties: dict[str, str] | None = None


class PartitionedTopicMetadata(BaseModel):
    partitions: int
    deleted: bool = False


class PartitionedTopicCreation(BaseModel):
    """The body of a partitioned topic's creation sent as `application/vnd.partitioned-topic-metadata+json`
    (Pulsar's PartitionedTopicMetadata, which the Go and Java admin clients send) rather than a bare
    number of partitions."""

    model_config = ConfigDict(extra="ignore")

    partitions: Int32
    properties: dict[str, str] | None = None


# ----------------------------------------------------------------------------------- checks


def topic_domain(request: Request) -> str:
    """The domain of the topics a request's path names: the routes of this module and of stats.py serve
    both /admin/v2/persistent and /admin/v2/non-persistent (app.py mounts them at both)."""
    # The path routing matched: FastAPI's scope["route"] is the route as declared, without the prefix.
    return "non-persistent" if request.scope["path"].startswith(f"{NON_PERSISTENT_PREFIX}/") else "persistent"


def _name(request: Request, tenant: str, namespace: str, topic: str) -> TopicName:
    try:
        return TopicName.parse(f"{topic_domain(request)}://{tenant}/{namespace}/{topic}")
    except InvalidTopicName as error:
        raise precondition_failed("Topic name is not valid") from error


def _existing_namespace_topic(request: Request, tenant: str, namespace: str, topic: str) -> TopicName:
    """The topic's name, in a namespace that exists (412 for a bad name, 404 for a missing namespace)."""
    name = _name(request, tenant, namespace, topic)
    check_namespace(_context(request), tenant, namespace)
    return name


async def _topic(context: BrokerContext, name: TopicName) -> PersistentTopic:
    """A stored non-partitioned topic (or partition), loaded; 404 when there is none."""
    if not context.registry.topic_exists(name):
        raise not_found(f"Topic {name} not found")
    try:
        return await context.registry.get_topic(name, create=False)
    except TopicNotFoundError as error:
        raise not_found(f"Topic {name} not found") from error


async def _topics(context: BrokerContext, name: TopicName) -> list[PersistentTopic]:
    """The topic itself, or the stored partitions of a partitioned topic (404 when there is nothing)."""
    partitions = context.registry.partitions(name)
    if partitions == 0:
        return [await _topic(context, name)]
    return [
        await _topic(context, p)
        for p in (name.partition(i) for i in range(partitions))
        if context.registry.topic_exists(p)
    ]


def _subscription(topic: PersistentTopic, subscription: str) -> PersistentSubscription:
    found = topic.subscriptions.get(subscription)
    if found is None:
        raise not_found(f"Subscription {subscription} not found for topic {topic.name}")
    return found


async def _subscriptions(context: BrokerContext, name: TopicName, subscription: str) -> list[PersistentSubscription]:
    """The subscription on the topic, or on each partition of a partitioned topic that has it."""
    found = [t.subscriptions[subscription] for t in await _topics(context, name) if subscription in t.subscriptions]
    if not found:
        raise not_found(f"Subscription {subscription} not found for topic {name}")
    return found


def _not_partitioned(context: BrokerContext, name: TopicName, reason: str) -> None:
    if context.registry.partitions(name) > 0:
        raise RestError(405, reason)


def _check_partitions(context: BrokerContext, partitions: int) -> None:
    if partitions <= 0:
        raise RestError(406, "Number of partitions should be more than 0")
    most = int(context.config["maxNumPartitionsPerPartitionedTopic"])
    if 0 < most < partitions:
        raise RestError(406, f"Number of partitions should be less than or equal to {most}")


# ----------------------------------------------------------------------------------- topics


@router.get("/{tenant}/{namespace}", response_model=list[str], responses=error_responses(404, 412))
async def get_list(request: Request, tenant: str, namespace: str) -> list[str]:
    context = _context(request)
    return context.registry.topics_of_namespace(check_namespace(context, tenant, namespace), (topic_domain(request),))


@router.get("/{tenant}/{namespace}/partitioned", response_model=list[str], responses=error_responses(404, 412))
async def get_partitioned_topic_list(request: Request, tenant: str, namespace: str) -> list[str]:
    context = _context(request)
    prefix = f"{topic_domain(request)}://"
    topics = context.metadata.partitioned_topics(check_namespace(context, tenant, namespace))
    return sorted(topic for topic in topics if topic.startswith(prefix))


@router.put("/{tenant}/{namespace}/{topic}", status_code=204, responses=_NO_CONTENT | error_responses(404, 409, 412))
async def create_non_partitioned_topic(request: Request, tenant: str, namespace: str, topic: str) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    if context.registry.partitions(name) > 0 or context.registry.topic_exists(name):
        raise conflict("This topic already exists")
    if name.partition_index >= 0 and context.registry.partitions(name.partitioned_base) == 0:
        raise precondition_failed(f"{name} ends in {PARTITION_SUFFIX}N but {name.partitioned_base} is not partitioned")
    await context.operations.create_topic(name)
    return Response(status_code=204)


@router.delete("/{tenant}/{namespace}/{topic}", status_code=204, responses=_NO_CONTENT | error_responses(404, 412))
async def delete_topic(request: Request, tenant: str, namespace: str, topic: str, force: bool = False) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    if not context.registry.topic_exists(name):
        raise not_found(f"Topic {name} not found")
    try:
        await context.operations.delete_topic(name, force)
    except TopicBusyError as error:
        raise precondition_failed(str(error)) from error
    return Response(status_code=204)


@router.put("/{tenant}/{namespace}/{topic}/unload", status_code=204, responses=_NO_CONTENT | error_responses(404, 412))
async def unload_topic(request: Request, tenant: str, namespace: str, topic: str) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    for loaded in await _topics(context, name):
        await context.operations.unload_topic(loaded.name)
    return Response(status_code=204)


@router.get(
    "/{tenant}/{namespace}/{topic}/lastMessageId", response_model=MessageIdData, responses=error_responses(404, 412)
)
async def get_last_message_id(request: Request, tenant: str, namespace: str, topic: str) -> MessageIdData:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    last = (await _topic(context, name)).last_message_id()
    return MessageIdData(ledgerId=last[0], entryId=last[1], partitionIndex=name.partition_index)


# ------------------------------------------------------------------------------ partitioned


@router.put(
    "/{tenant}/{namespace}/{topic}/partitions",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 406, 409, 412),
)
async def create_partitioned_topic(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    metadata: Annotated[Int32 | PartitionedTopicCreation, Body()],
) -> Response:
    """The body is the number of partitions, or Pulsar's PartitionedTopicMetadata."""
    context = _context(request)
    name = _name(request, tenant, namespace, topic)
    if PARTITION_SUFFIX in topic:
        raise precondition_failed("Partitioned Topic Name should not contain '-partition-'")
    partitions = metadata if isinstance(metadata, int) else metadata.partitions
    if isinstance(metadata, PartitionedTopicCreation) and metadata.properties:
        raise precondition_failed("Topic properties are not supported by magnetar")
    _check_partitions(context, partitions)
    check_namespace(context, tenant, namespace)
    if context.registry.partitions(name) > 0:
        raise conflict("Partitioned topic already exists")
    if context.registry.topic_exists(name):
        raise conflict("This topic already exists")
    try:
        await context.operations.create_partitioned_topic(name, partitions)
    except AlreadyExistsError as error:  # created meanwhile
        raise conflict("Partitioned topic already exists") from error
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/partitions",
    status_code=204,
    responses=_NO_CONTENT | error_responses(409, 412, 422),
)
async def update_partitioned_topic(
    request: Request, tenant: str, namespace: str, topic: str, partitions: Annotated[Int32, Body()]
) -> Response:
    """PersistentTopicsBase.internalUpdatePartitionedTopicAsync (Pulsar 4.0.7), in its order: 409 when the
    topic is not a partitioned one (whether or not its namespace exists), 422 for fewer partitions than it
    has (0 and negative numbers included) or more than maxNumPartitionsPerPartitionedTopic. The number it
    has already answers 204: nothing changes here, and the other clusters get it again."""
    context = _context(request)
    name = _name(request, tenant, namespace, topic)
    if name.partition_index >= 0:
        raise precondition_failed("Partitioned Topic Name should not contain '-partition-'")
    current = context.registry.partitions(name)
    if current <= 0:
        raise conflict(f"Topic {name} is not the partitioned topic.")
    if partitions < current:
        raise RestError(422, f"Desired partitions {partitions} can't be less than the current partitions {current}.")
    most = int(context.config["maxNumPartitionsPerPartitionedTopic"])
    if 0 < most < partitions:
        raise RestError(
            422, f"Desired partitions {partitions} can't be greater than the maximum partitions per topic {most}."
        )
    await context.operations.update_partitioned_topic(name, partitions)
    return Response(status_code=204)


@router.delete(
    "/{tenant}/{namespace}/{topic}/partitions", status_code=204, responses=_NO_CONTENT | error_responses(404, 412)
)
async def delete_partitioned_topic(
    request: Request, tenant: str, namespace: str, topic: str, force: bool = False
) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    if context.registry.partitions(name) == 0:
        raise not_found(f"Partitioned Topic {name} not found")
    try:
        await context.operations.delete_partitioned_topic(name, force)
    except TopicBusyError as error:
        raise precondition_failed(str(error)) from error
    return Response(status_code=204)


@router.get(
    "/{tenant}/{namespace}/{topic}/partitions",
    response_model=PartitionedTopicMetadata,
    responses=error_responses(404, 412),
)
async def get_partitioned_metadata(
    request: Request, tenant: str, namespace: str, topic: str, checkAllowAutoCreation: bool = False
) -> PartitionedTopicMetadata:
    """With `checkAllowAutoCreation` (the HTTP lookup of the Go and Java clients asks it), a topic that
    does not exist yet is answered as the binary protocol's PARTITIONED_METADATA answers it when
    auto-creation is on: 0 partitions, or a partitioned topic created now if that is the type created."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    if checkAllowAutoCreation and context.config["allowAutoTopicCreation"]:
        return PartitionedTopicMetadata(partitions=await context.lookup.partitions(name))
    partitions = context.registry.partitions(name)
    if partitions == 0 and not context.registry.topic_exists(name):
        raise not_found(f"Topic {name} not found")
    return PartitionedTopicMetadata(partitions=partitions)


# ---------------------------------------------------------------------------- subscriptions


@router.get(
    "/{tenant}/{namespace}/{topic}/subscriptions", response_model=list[str], responses=error_responses(404, 412)
)
async def get_subscriptions(request: Request, tenant: str, namespace: str, topic: str) -> list[str]:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    return sorted({s for t in await _topics(context, name) for s in t.subscriptions})


@router.put(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 409, 412),
)
async def create_subscription(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    subName: str,
    message_id: Annotated[MessageIdData | None, Body()] = None,
    replicated: bool = False,
) -> Response:
    """A subscription at the given message id (latest when none), on every partition of a partitioned
    topic; 409 only when it exists everywhere already. `replicated=true` makes it a replicated
    subscription (PIP-33) on each partition, unless enableReplicatedSubscriptions is off: then, as for a
    consumer's flag (Pulsar #9523), a warning and a subscription that is not replicated."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    if replicated and not context.config["enableReplicatedSubscriptions"]:
        log.warning(
            "[%s][%s] replicated=true while enableReplicatedSubscriptions is false: not replicated", name, subName
        )
        replicated = False
    start = LATEST if message_id is None else Position(message_id.ledgerId, message_id.entryId)
    partitions = context.registry.partitions(name)
    targets = [name.partition(i) for i in range(partitions)] if partitions else [name]
    created = 0
    for target in targets:
        try:
            loaded = await context.registry.get_topic(target, create=True, explicit=partitions > 0)
        except TopicNotFoundError as error:
            raise precondition_failed("Topic does not exist and cannot be auto-created") from error
        if subName in loaded.subscriptions:
            continue
        subscription = await loaded.create_subscription(subName, loaded.position_at_or_after(start))
        if replicated:
            await loaded.set_subscription_replicated(subscription, True)
        created += 1
    if created == 0:
        raise conflict("Subscription already exists for topic")
    return Response(status_code=204)


@router.delete(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def delete_subscription(
    request: Request, tenant: str, namespace: str, topic: str, subName: str, force: bool = False
) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    subscriptions = await _subscriptions(context, name, subName)
    if not force and any(s.consumers for s in subscriptions):
        raise precondition_failed("Subscription has active connected consumers")
    for subscription in subscriptions:
        try:
            await subscription.topic.delete_subscription(subName, force)
        except SubscriptionBusyError as error:
            raise precondition_failed(str(error)) from error
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}/skip_all",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def skip_all_messages(request: Request, tenant: str, namespace: str, topic: str, subName: str) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    cluster = cursor_cluster(subName)
    if cluster is not None:
        # A replicator's cursor: clearing it drops what was not replicated yet (Pulsar's clearBacklog).
        # Every partition's replicator is cleared (a list, not a generator any() would stop early on).
        cleared = [t.clear_replication_backlog(cluster) for t in await _topics(context, name)]
        if not any(cleared):
            raise not_found(f"Subscription {subName} not found for topic {name}")  # Pulsar 4.0.7's words
        return Response(status_code=204)
    for subscription in await _subscriptions(context, name, subName):
        subscription.skip_all()
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}/skip/{numMessages}",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 405, 412),
)
async def skip_messages(
    request: Request, tenant: str, namespace: str, topic: str, subName: str, numMessages: PathCount
) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    _not_partitioned(context, name, "Skip messages on a partitioned topic is not allowed")
    _subscription(await _topic(context, name), subName).skip_messages(numMessages)
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}/expireMessages/{expireTimeInSeconds}",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def expire_messages(
    request: Request, tenant: str, namespace: str, topic: str, subName: str, expireTimeInSeconds: PathInt32
) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    now_ms = context.clock.time_ms()
    for subscription in await _subscriptions(context, name, subName):
        await subscription.topic.expire_messages_of(subscription, expireTimeInSeconds, now_ms)
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/all_subscription/expireMessages/{expireTimeInSeconds}",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def expire_messages_for_all_subscriptions(
    request: Request, tenant: str, namespace: str, topic: str, expireTimeInSeconds: PathInt32
) -> Response:
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    now_ms = context.clock.time_ms()
    for loaded in await _topics(context, name):
        for subscription in list(loaded.subscriptions.values()):
            await loaded.expire_messages_of(subscription, expireTimeInSeconds, now_ms)
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}/resetcursor/{timestamp}",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def reset_cursor_to_time(
    request: Request, tenant: str, namespace: str, topic: str, subName: str, timestamp: PathLong
) -> Response:
    """Reset to the first message published at or after `timestamp` (epoch ms), closing the consumers."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    for subscription in await _subscriptions(context, name, subName):
        position = await subscription.topic.first_published_at_or_after(timestamp)
        await subscription.reset_cursor(position)
    return Response(status_code=204)


@router.post(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}/resetcursor",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 405, 412),
)
async def reset_cursor_to_message_id(
    request: Request, tenant: str, namespace: str, topic: str, subName: str, message_id: ResetCursorData
) -> Response:
    """Reset to the message id (after it with isExcluded). Batch indexes are not kept: the cursor
    moves to the whole entry."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    _not_partitioned(context, name, "Reset-cursor at position is not allowed for partitioned-topic")
    loaded = await _topic(context, name)
    subscription = _subscription(loaded, subName)
    entry_id = message_id.entryId
    if message_id.isExcluded and entry_id < _LONG_MAX:
        entry_id += 1
    await subscription.reset_cursor(loaded.position_at_or_after((message_id.ledgerId, entry_id)))
    return Response(status_code=204)


# ---------------------------------------------------------------------------------- messages


@router.get(
    "/{tenant}/{namespace}/{topic}/subscription/{subName}/position/{messagePosition}",
    response_class=Response,
    responses=_PEEK_RESPONSE | error_responses(404, 405, 412),
)
async def peek_nth_message(
    request: Request, tenant: str, namespace: str, topic: str, subName: str, messagePosition: PathInt32
) -> Response:
    """The n-th unacknowledged message (from 1) after the subscription's mark-delete position."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    _not_partitioned(context, name, "Peek messages on a partitioned topic is not allowed")
    loaded = await _topic(context, name)
    subscription = _subscription(loaded, subName)
    if messagePosition < 1:
        raise precondition_failed("Message position should be at least 1")
    return await _message_response(loaded, subscription.nth_unacked_position(messagePosition))


@router.get(
    "/{tenant}/{namespace}/{topic}/examinemessage",
    response_class=Response,
    responses=_PEEK_RESPONSE | error_responses(404, 405, 412),
)
async def examine_message(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    initialPosition: Literal["earliest", "latest"] = "latest",
    messagePosition: Annotated[int, Query(ge=_LONG_MIN, le=_LONG_MAX)] = 1,
) -> Response:
    """The n-th stored message counted from the first (earliest) or back from the last (latest)."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    _not_partitioned(
        context,
        name,
        "Examine messages on a partitioned topic is not allowed, please try examine message on specific topic "
        "partition",
    )
    loaded = await _topic(context, name)
    position = loaded.nth_entry_position(max(messagePosition, 1), from_latest=initialPosition == "latest")
    return await _message_response(loaded, position)


async def _message_response(topic: PersistentTopic, position: Position | None) -> Response:
    entry = None if position is None else await topic.stored_entry(position)
    if entry is None:
        raise not_found("Message not found")
    parsed = messages.parse_entry(entry.data)
    response = Response(content=_payload(parsed.metadata, parsed.payload), media_type="application/octet-stream")
    for key, value in _message_headers(entry.position, len(entry.data), parsed.metadata):
        encoded = value.encode()
        if _header_allowed(key, encoded):
            response.raw_headers.append((key.encode(), encoded))
    return response


def _message_headers(position: tuple[int, int], entry_size: int, metadata: Any) -> list[tuple[str, str]]:
    """The `X-Pulsar-*` headers of a peeked or examined message, as Pulsar's PersistentTopicsBase answers
    them: the message id, the properties, then the metadata's fields; an optional field that is not set
    has no header."""
    headers = [("X-Pulsar-Message-ID", f"{position[0]}:{position[1]}")]
    headers += _property_headers(metadata)
    headers.append(("X-Pulsar-publish-time", _date(metadata.publish_time)))
    headers += _optional_headers(metadata, _TIME_HEADERS)
    if metadata.HasField("num_messages_in_batch"):
        headers.append(("X-Pulsar-num-batch-message", str(metadata.num_messages_in_batch)))
        headers.append(("X-Pulsar-batch-size", str(entry_size - metadata.ByteSize())))
    headers += _optional_headers(metadata, _NULL_VALUE_HEADER)
    headers.append(("X-Pulsar-Is-Encrypted", _bool(len(metadata.encryption_keys) > 0)))
    headers.append(("X-Pulsar-producer-name", metadata.producer_name))
    headers.append(("X-Pulsar-sequence-id", str(metadata.sequence_id)))
    headers += _optional_headers(metadata, _REPLICATED_FROM_HEADER)
    headers += (("X-Pulsar-replicated-to", cluster) for cluster in metadata.replicate_to)
    headers += _optional_headers(metadata, _DESCRIPTION_HEADERS)
    return headers


def _property_headers(metadata: Any) -> list[tuple[str, str]]:
    """One `X-Pulsar-PROPERTY-{key}` header per property, then all of them as JSON in `X-Pulsar-PROPERTY`."""
    properties = {p.key: p.value for p in metadata.properties}
    headers = [(f"X-Pulsar-PROPERTY-{key}", value) for key, value in properties.items()]
    if properties:
        headers.append(("X-Pulsar-PROPERTY", json.dumps(properties)))
    return headers


def _optional_headers(
    metadata: Any, fields: tuple[tuple[str, str, Callable[[Any], str]], ...]
) -> list[tuple[str, str]]:
    return [(header, text(getattr(metadata, name))) for name, header, text in fields if metadata.HasField(name)]


def _header_allowed(key: str, encoded: bytes) -> bool:
    """HTTP forbids control characters and surrounding blanks in a header value; such a property stays
    in the JSON header only (json.dumps escapes everything outside ASCII)."""
    return bool(_TOKEN.match(key)) and encoded == encoded.strip() and not any(b < 0x20 or b == 0x7F for b in encoded)


def _payload(metadata: Any, payload: bytes) -> bytes:
    """Pulsar answers the payload uncompressed. ZLIB is undone here; LZ4, ZSTD and SNAPPY would need
    codecs magnetar does not depend on, so those payloads go out as stored, with X-Pulsar-compression
    and X-Pulsar-uncompressed-size saying how to undo them."""
    if metadata.compression == CompressionType.ZLIB:
        return zlib.decompress(payload)
    return payload


def _date(epoch_ms: int) -> str:
    """Pulsar's DateFormatter: ISO-8601 with an offset."""
    moment = datetime.fromtimestamp(min(epoch_ms, 253402300799999) / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


# MessageMetadata's optional fields and the header each becomes when it is set (name, header, text),
# in four tables because other headers go out between them.
_TIME_HEADERS = (
    ("event_time", "X-Pulsar-event-time", _date),
    ("deliver_at_time", "X-Pulsar-deliver-at-time", _date),
)
_NULL_VALUE_HEADER = (("null_value", "X-Pulsar-null-value", _bool),)
_REPLICATED_FROM_HEADER = (("replicated_from", "X-Pulsar-replicated-from", str),)
_DESCRIPTION_HEADERS = (
    ("partition_key", "X-Pulsar-partition-key", str),
    ("compression", "X-Pulsar-compression", CompressionType.Name),
    ("uncompressed_size", "X-Pulsar-uncompressed-size", str),
    ("encryption_algo", "X-Pulsar-encryption-algo", str),
    ("schema_version", "X-Pulsar-Base64-schema-version", _b64),
    ("partition_key_b64_encoded", "X-Pulsar-partition-key-b64-encoded", _bool),
    ("ordering_key", "X-Pulsar-Base64-ordering-key", _b64),
    ("highest_sequence_id", "X-Pulsar-highest-sequence-id", str),
    ("uuid", "X-Pulsar-uuid", str),
    ("num_chunks_from_msg", "X-Pulsar-num-chunks-from-msg", str),
    ("total_chunk_msg_size", "X-Pulsar-total-chunk-msg-size", str),
    ("chunk_id", "X-Pulsar-chunk-id", str),
)


# ----------------------------------------------------------------------- topic-level policies


@router.get(
    "/{tenant}/{namespace}/{topic}/deduplicationEnabled",
    response_model=bool,
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_deduplication(request: Request, tenant: str, namespace: str, topic: str, applied: bool = False) -> Any:
    """The topic's own policy; with `applied`, the one in force (topic, else namespace, else broker), as
    Pulsar's `topicPolicies().getDeduplicationStatus(topic, true)` asks."""
    context = _context(request)
    name = _policy_topic(request, tenant, namespace, topic)
    if applied:
        return context.policies.deduplication_enabled(name)
    enabled = context.policies.topic_policies(name).get("deduplicationEnabled")
    return unset_policy() if enabled is None else enabled


@router.post(
    "/{tenant}/{namespace}/{topic}/deduplicationEnabled",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_deduplication(
    request: Request, tenant: str, namespace: str, topic: str, enabled: Annotated[bool, Body(strict=True)]
) -> Response:
    context = _context(request)
    name = _policy_topic(request, tenant, namespace, topic)
    await context.operations.set_topic_policies(name, {"deduplicationEnabled": enabled})
    return Response(status_code=204)


@router.delete(
    "/{tenant}/{namespace}/{topic}/deduplicationEnabled",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_deduplication(request: Request, tenant: str, namespace: str, topic: str) -> Response:
    context = _context(request)
    await context.operations.set_topic_policies(
        _policy_topic(request, tenant, namespace, topic), {"deduplicationEnabled": None}
    )
    return Response(status_code=204)


@router.get(
    "/{tenant}/{namespace}/{topic}/replication",
    response_model=list[str],
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_replication_clusters(
    request: Request, tenant: str, namespace: str, topic: str, applied: bool = False
) -> Any:
    """The topic's own replication clusters; with `applied`, the ones in force (topic, else namespace)."""
    context = _context(request)
    name = _policy_topic(request, tenant, namespace, topic)
    if applied:
        return context.policies.replication_clusters(name)
    clusters = context.policies.topic_policies(name).get("replicationClusters")
    return unset_policy() if clusters is None else clusters


@router.post(
    "/{tenant}/{namespace}/{topic}/replication",
    status_code=204,
    responses=_NO_CONTENT | error_responses(400, 403, 404, 412),
)
async def set_replication_clusters(
    request: Request, tenant: str, namespace: str, topic: str, clusters: Annotated[list[str], Body()]
) -> Response:
    context = _context(request)
    name = _policy_topic(request, tenant, namespace, topic)
    check_replication_clusters(context, tenant, clusters)
    if context.config["clusterName"] not in clusters:
        # Pulsar 4.0.7: a topic policy cannot stop the topic being in the cluster that holds it.
        raise precondition_failed("Can not remove local cluster from the local topic-level replication clusters policy")
    await context.operations.set_topic_policies(name, {"replicationClusters": sorted(set(clusters))})
    return Response(status_code=204)


@router.delete(
    "/{tenant}/{namespace}/{topic}/replication", status_code=204, responses=_NO_CONTENT | error_responses(404, 412)
)
async def remove_replication_clusters(request: Request, tenant: str, namespace: str, topic: str) -> Response:
    context = _context(request)
    await context.operations.set_topic_policies(
        _policy_topic(request, tenant, namespace, topic), {"replicationClusters": None}
    )
    return Response(status_code=204)


def _policy_topic(request: Request, tenant: str, namespace: str, topic: str) -> TopicName:
    """The topic whose policies these are: a stored topic or a partitioned topic. A partition's policies
    are its partitioned topic's, as in Pulsar."""
    context = _context(request)
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    if not (context.registry.partitions(name) or context.registry.topic_exists(name)):
        raise not_found(f"Topic {name} not found")
    return name.partitioned_base
