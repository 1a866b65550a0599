"""Ready-to-write frames for every command the broker sends, and the signed view of Pulsar's 64-bit ids.

Owns: one builder per command in the list the official C++ client accepts from a broker (its
`ClientConnection::handleIncomingCommand`: anything else, REACHED_END_OF_TOPIC included, makes pulsar-client
4.2.0 drop the connection), and the conversion between the uint64 wire form and the signed ids magnetar
uses. Must not touch: decoding (framing.py, messages.py), connection state, sockets or clocks. Builders
take plain values, so callers never handle protobuf objects; MESSAGE, sent once per dispatched entry, is
encoded by hand.

Ids: ledger, entry and request ids are uint64 on the wire, but clients mean -1 by 2^64-1 (cumulative ack
of "nothing", seek to earliest, empty GetLastMessageId, broker-initiated CLOSE_*). Builders accept signed
values; `signed_id` reads a received one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from magnetar.protocol.framing import encode_frame
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandLookupTopicResponse,
    CommandPartitionedTopicMetadataResponse,
    CommandPing,
    CommandPong,
    MessageIdData,
    Schema,
    ServerError,
)

__all__ = [
    "BROKER_REQUEST_ID",
    "ack_response",
    "active_consumer_change",
    "close_consumer",
    "close_producer",
    "connected",
    "consumer_stats_response",
    "error",
    "get_last_message_id_response",
    "get_or_create_schema_response",
    "get_schema_response",
    "get_topics_of_namespace_response",
    "lookup_response",
    "message_frame",
    "message_frames",
    "partitioned_metadata_response",
    "ping",
    "pong",
    "producer_success",
    "send_error",
    "send_receipt",
    "send_receipts",
    "signed_id",
    "success",
    "wire_id",
    "varint",
]

_U64 = (1 << 64) - 1
_INT64_SIGN = 1 << 63

# The request id of a command the broker starts on its own (CLOSE_* after SEEK or on unload): Java's -1.
BROKER_REQUEST_ID = -1


def signed_id(wire: int) -> int:
    """A received uint64 id as the int64 Pulsar means (2^64-1 -> -1; INT64_MAX stays "latest")."""
    return wire - (1 << 64) if wire & _INT64_SIGN else wire


def wire_id(value: int) -> int:
    """A signed id as the uint64 the wire carries (-1 -> 2^64-1)."""
    return value & _U64


def _error_code(code: int | str) -> ServerError.ValueType:
    """A ServerError given by value or by name ("ChecksumError"), as core errors carry it."""
    return ServerError.Value(code) if isinstance(code, str) else ServerError.ValueType(code)


def _message_id(
    target: MessageIdData, ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1
) -> None:
    target.ledgerId = wire_id(ledger_id)
    target.entryId = wire_id(entry_id)
    # -1 is the schema default for both, so leaving them unset keeps the frame as small as Java's.
    if partition != -1:
        target.partition = partition
    if batch_index != -1:
        target.batch_index = batch_index


def _frame(command_type: BaseCommand.Type.ValueType, field: str, **fields: object) -> bytes:
    # The sub-message as a mapping: protobuf builds it from the field values, so a command is built in one
    # call (the stubs type each sub-message argument as its class).
    sub_message: dict[str, Any] = {field: fields}
    command = BaseCommand(type=command_type, **sub_message)
    return encode_frame(command)


# ---------------------------------------------------------------------------------------------------
# Connection


def connected(server_version: str, protocol_version: int, max_message_size: int) -> bytes:
    """CONNECTED: the first frame a broker sends; `server_version` must be present or the client fails."""
    return _frame(
        BaseCommand.CONNECTED,
        "connected",
        server_version=server_version,
        protocol_version=protocol_version,
        max_message_size=max_message_size,
    )


# PING and PONG carry an empty sub-message (fields 18 and 19 of BaseCommand), which the client expects to
# be present: the C++ client sets it on its own PINGs.
_PING = encode_frame(BaseCommand(type=BaseCommand.PING, ping=CommandPing()))
_PONG = encode_frame(BaseCommand(type=BaseCommand.PONG, pong=CommandPong()))


def ping() -> bytes:
    return _PING


def pong() -> bytes:
    return _PONG


# ---------------------------------------------------------------------------------------------------
# Generic replies


def success(request_id: int, schema: Schema | None = None) -> bytes:
    fields: dict[str, object] = {"request_id": wire_id(request_id)}
    if schema is not None:
        fields["schema"] = schema
    return _frame(BaseCommand.SUCCESS, "success", **fields)


def error(request_id: int, code: int | str, message: str) -> bytes:
    """ERROR: fails the client's pending request; all three fields are required by the client."""
    return _frame(BaseCommand.ERROR, "error", request_id=wire_id(request_id), error=_error_code(code), message=message)


# ---------------------------------------------------------------------------------------------------
# Lookup and discovery


def partitioned_metadata_response(
    request_id: int, partitions: int = 0, *, error_code: int | str | None = None, message: str = ""
) -> bytes:
    """PARTITIONED_METADATA_RESPONSE with `response` always set (the client reads its absence as failure).

    With `error_code` the answer is Failed, carrying the code and `message`.
    """
    command = BaseCommand(type=BaseCommand.PARTITIONED_METADATA_RESPONSE)
    response = command.partitionMetadataResponse
    response.request_id = wire_id(request_id)
    if error_code is None:
        response.response = CommandPartitionedTopicMetadataResponse.Success
        response.partitions = partitions
    else:
        response.response = CommandPartitionedTopicMetadataResponse.Failed
        response.error = _error_code(error_code)
        response.message = message
    return encode_frame(command)


def lookup_response(
    request_id: int,
    broker_service_url: str = "",
    *,
    broker_service_url_tls: str | None = None,
    authoritative: bool = True,
    redirect: bool = False,
    proxy_through_service_url: bool = False,
    error_code: int | str | None = None,
    message: str = "",
) -> bytes:
    """LOOKUP_RESPONSE: Connect (or Redirect) to `broker_service_url`, or Failed with `error_code`.

    The client refuses a Connect without a URL ("Invalid Url"), so one is required unless failing.
    """
    command = BaseCommand(type=BaseCommand.LOOKUP_RESPONSE)
    response = command.lookupTopicResponse
    response.request_id = wire_id(request_id)
    if error_code is not None:
        response.response = CommandLookupTopicResponse.Failed
        response.error = _error_code(error_code)
        response.message = message
        return encode_frame(command)
    if not broker_service_url:
        raise ValueError("a Connect or Redirect lookup answer needs broker_service_url")
    response.response = CommandLookupTopicResponse.Redirect if redirect else CommandLookupTopicResponse.Connect
    response.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        response.brokerServiceUrlTls = broker_service_url_tls
    response.authoritative = authoritative
    if proxy_through_service_url:
        response.proxy_through_service_url = True
    return encode_frame(command)


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    *,
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> bytes:
    fields: dict[str, object] = {"request_id": wire_id(request_id), "topics": list(topics)}
    if filtered:
        fields["filtered"] = True
    if topics_hash is not None:
        fields["topics_hash"] = topics_hash
    if not changed:
        fields["changed"] = False
    return _frame(BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE, "getTopicsOfNamespaceResponse", **fields)


def get_schema_response(
    request_id: int,
    schema: Schema | None = None,
    schema_version: bytes | None = None,
    *,
    error_code: int | str | None = None,
    message: str = "",
) -> bytes:
    """GET_SCHEMA_RESPONSE with the schema, or with `error_code` (TopicNotFound when there is none)."""
    fields: dict[str, object] = {"request_id": wire_id(request_id)}
    if error_code is not None:
        fields["error_code"] = _error_code(error_code)
        fields["error_message"] = message
    if schema is not None:
        fields["schema"] = schema
    if schema_version is not None:
        fields["schema_version"] = schema_version
    return _frame(BaseCommand.GET_SCHEMA_RESPONSE, "getSchemaResponse", **fields)


def get_or_create_schema_response(
    request_id: int, schema_version: bytes | None = None, *, error_code: int | str | None = None, message: str = ""
) -> bytes:
    """GET_OR_CREATE_SCHEMA_RESPONSE with the schema's version, or with `error_code` (IncompatibleSchema,
    TopicNotFound)."""
    fields: dict[str, object] = {"request_id": wire_id(request_id)}
    if error_code is not None:
        fields["error_code"] = _error_code(error_code)
        fields["error_message"] = message
    if schema_version is not None:
        fields["schema_version"] = schema_version
    return _frame(BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE, "getOrCreateSchemaResponse", **fields)


# ---------------------------------------------------------------------------------------------------
# Producers


def producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int = -1,
    *,
    schema_version: bytes | None = None,
    topic_epoch: int | None = None,
    producer_ready: bool = True,
) -> bytes:
    """PRODUCER_SUCCESS; `last_sequence_id` >= 0 seeds the client's next sequence id (deduplication)."""
    fields: dict[str, object] = {
        "request_id": wire_id(request_id),
        "producer_name": producer_name,
        "last_sequence_id": last_sequence_id,
    }
    if schema_version is not None:
        fields["schema_version"] = schema_version
    if topic_epoch is not None:
        fields["topic_epoch"] = topic_epoch
    if not producer_ready:
        fields["producer_ready"] = False
    return _frame(BaseCommand.PRODUCER_SUCCESS, "producer_success", **fields)


def send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int | None = None
) -> bytes:
    """SEND_RECEIPT echoing the SEND's sequence id (a batch's first; the client also accepts its last).

    One per published message, so encoded by hand like MESSAGE: the bytes protobuf would write, without
    building its objects (tests compare the two).
    """
    message_id = b"\x08" + varint(ledger_id & _U64) + b"\x10" + varint(entry_id & _U64)
    body = b"\x08" + varint(producer_id) + b"\x10" + varint(sequence_id & _U64) + b"\x1a" + varint(len(message_id))
    body += message_id
    if highest_sequence_id is not None:
        body += b"\x20" + varint(highest_sequence_id & _U64)
    command = _SEND_RECEIPT_PREFIX + varint(len(body)) + body
    return _HEADER.pack(4 + len(command), len(command)) + command


def send(
    producer_id: int,
    sequence_id: int,
    highest_sequence_id: int | None,
    num_messages: int,
    section: bytes,
    marker: bool = False,
) -> bytes:
    """A SEND frame carrying one entry's payload section: `num_messages` is its batch size (omitted when
    1, protobuf's default), `highest_sequence_id` its last message's sequence id if given, `marker` set
    for a marker entry (as Pulsar's clients set it whenever the metadata has a marker type).

    Encoded by hand: the bytes protobuf would write (tests compare the two). A replicator's SENDs are
    these bytes: `forwarding.forwarded_sends` builds the usual ones in one piece with their section (its
    tests compare them with this), and calls this for a section it had to write again.
    """
    body = b"\x08" + varint(producer_id) + b"\x10" + varint(sequence_id & _U64)
    if num_messages != 1:
        body += b"\x18" + varint(num_messages & _U64)
    if highest_sequence_id is not None:
        body += b"\x30" + varint(highest_sequence_id & _U64)
    if marker:
        body += b"\x40\x01"
    command = _SEND_PREFIX + varint(len(body)) + body
    return _HEADER.pack(4 + len(command) + len(section), len(command)) + command + section


def send_receipts(
    producer_id: int, sends: Iterable[tuple[int, int, *tuple[object, ...]]], positions: Iterable[tuple[int, int]]
) -> bytes:
    """The SEND_RECEIPTs of consecutive SENDs, joined: for each send of `sends` (its sequence id and
    highest sequence id first; anything may follow) and (ledger id, entry id) of `positions`, the bytes
    `send_receipt` writes for them.

    A producer's receipts leave in runs (every SEND of a socket read becomes durable at once), within
    which only the three varints of sequence id, entry id and highest sequence id change. Everything
    else of a receipt depends only on their lengths, so it is encoded once per run and length shape.
    """
    head = b"\x08" + varint(producer_id) + b"\x10"
    frames: list[bytes] = []
    append = frames.append
    last_ledger = None
    ledger = b""
    # (length of sequence id, entry id, highest) -> (bytes before the sequence id, bytes between it and the entry id)
    templates: dict[int, tuple[bytes, bytes]] = {}
    for send, (ledger_id, entry_id) in zip(sends, positions):
        sequence_id = send[0]
        highest_sequence_id = send[1]
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger = varint(ledger_id & _U64)
            templates = {}
        sequence = varint(sequence_id & _U64)
        entry = varint(entry_id & _U64)
        highest = varint(highest_sequence_id & _U64)
        shape = len(sequence) | len(entry) << 4 | len(highest) << 8
        template = templates.get(shape)
        if template is None:
            message_id_size = 2 + len(ledger) + len(entry)
            middle = b"\x1a" + varint(message_id_size) + b"\x08" + ledger + b"\x10"
            body_size = len(head) + len(sequence) + len(middle) + len(entry) + 1 + len(highest)
            command_size = len(_SEND_RECEIPT_PREFIX) + len(varint(body_size)) + body_size
            prefix = _HEADER.pack(4 + command_size, command_size) + _SEND_RECEIPT_PREFIX + varint(body_size) + head
            template = templates[shape] = (prefix, middle)
        append(template[0] + sequence + template[1] + entry + b"\x20" + highest)
    return b"".join(frames)


def send_error(producer_id: int, sequence_id: int, code: int | str, message: str) -> bytes:
    """SEND_ERROR. Only ChecksumError fails just that message; any other code makes the client reconnect."""
    return _frame(
        BaseCommand.SEND_ERROR,
        "send_error",
        producer_id=producer_id,
        sequence_id=sequence_id,
        error=_error_code(code),
        message=message,
    )


def close_producer(
    producer_id: int, request_id: int = BROKER_REQUEST_ID, assigned_broker_service_url: str | None = None
) -> bytes:
    """CLOSE_PRODUCER from the broker: the client reconnects (to the assigned URL if given)."""
    fields: dict[str, object] = {"producer_id": producer_id, "request_id": wire_id(request_id)}
    if assigned_broker_service_url is not None:
        fields["assignedBrokerServiceUrl"] = assigned_broker_service_url
    return _frame(BaseCommand.CLOSE_PRODUCER, "close_producer", **fields)


# ---------------------------------------------------------------------------------------------------
# Consumers


def close_consumer(
    consumer_id: int, request_id: int = BROKER_REQUEST_ID, assigned_broker_service_url: str | None = None
) -> bytes:
    """CLOSE_CONSUMER from the broker (after SEEK, as Pulsar's broker does): the client re-subscribes."""
    fields: dict[str, object] = {"consumer_id": consumer_id, "request_id": wire_id(request_id)}
    if assigned_broker_service_url is not None:
        fields["assignedBrokerServiceUrl"] = assigned_broker_service_url
    return _frame(BaseCommand.CLOSE_CONSUMER, "close_consumer", **fields)


def active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    return _frame(
        BaseCommand.ACTIVE_CONSUMER_CHANGE, "active_consumer_change", consumer_id=consumer_id, is_active=is_active
    )


def get_last_message_id_response(
    request_id: int,
    ledger_id: int,
    entry_id: int,
    *,
    batch_index: int = -1,
    partition: int = -1,
    mark_delete_position: tuple[int, int] | None = None,
) -> bytes:
    """GET_LAST_MESSAGE_ID_RESPONSE; entry_id -1 tells a reader the topic is empty."""
    command = BaseCommand(type=BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE)
    response = command.getLastMessageIdResponse
    response.request_id = wire_id(request_id)
    _message_id(response.last_message_id, ledger_id, entry_id, batch_index, partition)
    if mark_delete_position is not None:
        _message_id(response.consumer_mark_delete_position, *mark_delete_position)
    return encode_frame(command)


def ack_response(consumer_id: int, request_id: int, code: int | str | None = None, message: str | None = None) -> bytes:
    """ACK_RESPONSE, owed only to an ACK that carried a request_id (ack-receipt mode)."""
    fields: dict[str, object] = {"consumer_id": consumer_id, "request_id": wire_id(request_id)}
    if code is not None:
        fields["error"] = _error_code(code)
    if message is not None:
        fields["message"] = message
    return _frame(BaseCommand.ACK_RESPONSE, "ackResponse", **fields)


def consumer_stats_response(
    request_id: int,
    stats: Mapping[str, object] | None = None,
    *,
    error_code: int | str | None = None,
    message: str = "",
) -> bytes:
    """CONSUMER_STATS_RESPONSE; `stats` keys are the schema's field names (msgRateOut, availablePermits, …)."""
    fields: dict[str, object] = {"request_id": wire_id(request_id), **(stats or {})}
    if error_code is not None:
        fields["error_code"] = _error_code(error_code)
        fields["error_message"] = message
    return _frame(BaseCommand.CONSUMER_STATS_RESPONSE, "consumerStatsResponse", **fields)


# MESSAGE and SEND_RECEIPT by hand: one of each goes out per message, and concatenating a few varints
# costs a fraction of building and serialising the protobuf objects. The bytes equal protobuf's
# serialisation exactly (fields in number order, proto2's unpacked ack_set); the tests compare the two.
_HEADER = struct.Struct(">II")
# BaseCommand.type (field 1, varint) = SEND_RECEIPT, then the tag of BaseCommand.send_receipt (7, bytes).
_SEND_RECEIPT_PREFIX = bytes((0x08, BaseCommand.SEND_RECEIPT, 0x3A))
# BaseCommand.type = SEND, then the tag of BaseCommand.send (6, bytes).
_SEND_PREFIX = bytes((0x08, BaseCommand.SEND, 0x32))
# BaseCommand.type = MESSAGE, then the tag of BaseCommand.message (9, bytes).
_MESSAGE_PREFIX = bytes((0x08, BaseCommand.MESSAGE, 0x4A))
# Tags: CommandMessage.consumer_id (1, varint), message_id (2, bytes), redelivery_count (3, varint),
# ack_set (4, varint, one tag per word); MessageIdData.ledgerId (1), entryId (2), partition (3), varints.
# Varints of 0 .. 2^14-1, and the 14 low bits of larger values as two bytes that both say "more follows":
# a value below 2^28 (any sequence or entry id of a broker's lifetime, in practice) is one or two lookups
# instead of a loop. The tables hold 2 x 16,384 short bytes objects (~1 MB).
_VARINT_14 = tuple(
    bytes((value,)) if value < 0x80 else bytes(((value & 0x7F) | 0x80, value >> 7)) for value in range(0x4000)
)
_LOW_14 = tuple(bytes(((value & 0x7F) | 0x80, (value >> 7) | 0x80)) for value in range(0x4000))


def varint(value: int) -> bytes:
    """The base-128 varint of `value`, which must lie in [0, 2^64) (negatives come as `& 2^64-1`)."""
    if value < 0x4000:
        return _VARINT_14[value]
    if value < 0x10000000:
        return _LOW_14[value & 0x3FFF] + _VARINT_14[value >> 14]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def message_frame(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    payload: bytes,
    redelivery_count: int = 0,
    ack_set: Iterable[int] | None = None,
    partition: int = -1,
    epoch: int | None = None,
) -> bytes:
    """MESSAGE for one entry, with its stored payload section appended verbatim.

    `ack_set` holds the batch's still-unacked bits (Java long words) so the client skips acked indexes
    on redelivery; `partition` is the partition index of a partitioned topic, as the Java broker sets it;
    `epoch` the consumer epoch (PIP-84) for a client that keeps one.
    """
    message_id = b"\x08" + varint(ledger_id & _U64) + b"\x10" + varint(entry_id & _U64)
    if partition != -1:
        message_id += b"\x18" + varint(partition & _U64)
    body = b"\x08" + varint(consumer_id) + b"\x12" + varint(len(message_id)) + message_id
    if redelivery_count:
        body += b"\x18" + varint(redelivery_count)
    if ack_set:
        body += b"".join([b"\x20" + varint(word & _U64) for word in ack_set])
    if epoch is not None:
        body += b"\x28" + varint(epoch)
    command = _MESSAGE_PREFIX + varint(len(body)) + body
    return _HEADER.pack(4 + len(command) + len(payload), len(command)) + command + payload


def message_frames(
    consumer_id: int,
    positions: Sequence[tuple[int, int]],
    payloads: Sequence[bytes],
    redelivery_counts: Sequence[int] | None = None,
    ack_sets: Mapping[int, Iterable[int]] | None = None,
    partition: int = -1,
    epoch: int | None = None,
) -> bytes:
    """The MESSAGE frames of one dispatch, joined: entry i at `positions[i]` with `payloads[i]`, its
    redelivery count `redelivery_counts[i]` (all 0 when None) and ack set `ack_sets.get(i)`; every
    frame carries the consumer `epoch` unless it is None.

    The bytes `message_frame` writes for each. Within a dispatch only the entry id changes between
    entries delivered for the first time, so the rest of their command is encoded once per ledger and
    entry-id length; redelivered and partly acked entries take `message_frame`.
    """
    consumer = b"\x08" + varint(consumer_id) + b"\x12"
    after_entry = b"\x18" + varint(partition & _U64) if partition != -1 else b""
    epoch_field = b"\x28" + varint(epoch) if epoch is not None else b""
    frames: list[bytes] = []
    append = frames.append
    pack = _HEADER.pack
    last_ledger = None
    ledger = b""
    # entry-id length -> (command size, bytes between the frame header and the entry id)
    templates: dict[int, tuple[int, bytes]] = {}
    for index, (ledger_id, entry_id) in enumerate(positions):
        payload = payloads[index]
        redelivery_count = redelivery_counts[index] if redelivery_counts else 0
        ack_set = ack_sets.get(index) if ack_sets else None
        if redelivery_count or ack_set:
            append(
                message_frame(consumer_id, ledger_id, entry_id, payload, redelivery_count, ack_set, partition, epoch)
            )
            continue
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger = varint(ledger_id & _U64)
            templates = {}
        entry = varint(entry_id & _U64)
        template = templates.get(len(entry))
        if template is None:
            message_id_size = 2 + len(ledger) + len(entry) + len(after_entry)
            body_size = len(consumer) + len(varint(message_id_size)) + message_id_size + len(epoch_field)
            head = _MESSAGE_PREFIX + varint(body_size) + consumer + varint(message_id_size) + b"\x08" + ledger + b"\x10"
            template = templates[len(entry)] = (len(_MESSAGE_PREFIX) + len(varint(body_size)) + body_size, head)
        command_size, head = template
        append(pack(4 + command_size + len(payload), command_size) + head + entry + after_entry + epoch_field + payload)
    return b"".join(frames)
