"""Topic compaction's decisions, pure: which messages of a run of stored entries survive, and the bytes
of the entries that hold them (Pulsar's PublishingOrderCompactor and RawBatchConverter).

Owns: phase one (the latest message id of every key, given entries in order) and phase two (each
entry's compacted form: kept as it is, rewritten as a batch whose dropped messages are `compacted_out`,
or dropped). Must not touch: storage, the event loop or the wire beyond parsing and encoding payload
sections (`protocol.messages`).

Pulsar's rules, kept here:
- the key is the message's `partition_key` (not its ordering key); a message without one is dropped,
  unless `topicCompactionRetainNullKey` (then it is kept, whatever follows it);
- a message whose payload is empty (what a null value, `null_value`, sends) deletes its key: nothing
  of the key survives, the tombstone included;
- a batch keeps every slot, so that the batch indexes (and the message ids) of the messages kept do
  not change: a slot not kept becomes `SingleMessageMetadata{compacted_out: true}` with no payload,
  which clients skip; a batch with no message kept is dropped;
- markers (the broker's entries) are dropped;
- a batch whose payload cannot be decoded (a compression this broker has no codec for) is kept whole
  and its keys are not counted, as Pulsar keeps a batch it fails to decode.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from magnetar.positions import Position
from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.messages import ChecksumError, encode_batch, encode_entry, parse_entry, split_batch
from magnetar.protocol.pulsar_api_pb2 import CompressionType, MessageMetadata, SingleMessageMetadata

__all__ = ["KeyedMessage", "compact", "compact_entry", "compacted_out_indexes", "entry_messages", "latest_for_keys"]

# A message id within the compacted view: (entry position, batch index, -1 for a single message).
MessageRef = tuple[Position, int]


@dataclass(frozen=True, slots=True)
class KeyedMessage:
    """What compaction needs of one message: its key (None without a partition key) and its payload
    size (0 for a null value: a tombstone)."""

    batch_index: int
    key: str | None
    size: int


class _Undecodable(Exception):
    """A batch payload this broker cannot decompress."""


def _decompress(metadata: MessageMetadata, payload: bytes) -> bytes:
    if metadata.compression == CompressionType.NONE:
        return payload
    if metadata.compression == CompressionType.ZLIB:
        try:
            return zlib.decompress(payload)
        except zlib.error as error:
            raise _Undecodable(str(error)) from error
    raise _Undecodable(f"no codec for compression {CompressionType.Name(metadata.compression)}")


def _compress(metadata: MessageMetadata, payload: bytes) -> bytes:
    if metadata.compression == CompressionType.ZLIB:
        return zlib.compress(payload)
    return payload


def _is_batch(metadata: MessageMetadata) -> bool:
    # RawBatchConverter.isReadableBatch: a batch is an entry that declares its count, unencrypted.
    return metadata.HasField("num_messages_in_batch") and not metadata.encryption_keys


def entry_messages(data: bytes) -> list[KeyedMessage] | None:
    """The messages of a stored entry that compaction weighs, in batch order; None for a marker or an
    entry that does not parse (never part of the compacted view) and for a batch it cannot decode."""
    try:
        parsed = parse_entry(data)
    except (ProtocolError, ChecksumError):
        return None
    metadata = parsed.metadata
    if metadata.HasField("marker_type"):
        return None
    if not _is_batch(metadata):
        if not metadata.HasField("partition_key"):
            return [KeyedMessage(-1, None, len(parsed.payload))]
        size = metadata.uncompressed_size if metadata.HasField("uncompressed_size") else len(parsed.payload)
        return [KeyedMessage(-1, metadata.partition_key, size)]
    try:
        singles = split_batch(_decompress(metadata, parsed.payload), metadata.num_messages_in_batch)
    except (_Undecodable, ProtocolError):
        return None
    return [
        KeyedMessage(
            index,
            single.metadata.partition_key if single.metadata.HasField("partition_key") else None,
            single.metadata.payload_size,
        )
        for index, single in enumerate(singles)
        if not single.metadata.compacted_out
    ]


def latest_for_keys(
    entries: Iterable[tuple[Position, bytes]], latest: dict[str, MessageRef] | None = None
) -> dict[str, MessageRef]:
    """Phase one: for every key, the id of its latest message with a value, given entries in position
    order; a key whose latest message is a tombstone is absent. `latest` carries on from what earlier
    entries gave (phase one goes through a topic a read at a time)."""
    if latest is None:
        latest = {}
    for position, data in entries:
        for message in entry_messages(data) or ():
            if message.key is None:
                continue
            if message.size > 0:
                latest[message.key] = (position, message.batch_index)
            else:
                latest.pop(message.key, None)
    return latest


def compact_entry(
    position: Position, data: bytes, latest: dict[str, MessageRef], retain_null_key: bool = False
) -> bytes | None:
    """Phase two for one entry: its bytes in the compacted view (`data` itself when it survives whole),
    or None when nothing of it survives."""
    try:
        parsed = parse_entry(data)
    except (ProtocolError, ChecksumError):
        return None
    metadata = parsed.metadata
    if metadata.HasField("marker_type"):
        return None
    if not _is_batch(metadata):
        if not metadata.HasField("partition_key"):
            return data if retain_null_key else None
        return data if latest.get(metadata.partition_key) == (position, -1) else None
    try:
        singles = split_batch(_decompress(metadata, parsed.payload), metadata.num_messages_in_batch)
    except (_Undecodable, ProtocolError):
        return data
    kept = 0
    rebatched: list[tuple[SingleMessageMetadata, bytes]] = []
    for index, single in enumerate(singles):
        single_metadata = single.metadata
        if _survives(single_metadata, single.payload, (position, index), latest, retain_null_key):
            kept += 1
            rebatched.append((single_metadata, single.payload))
        else:
            rebatched.append((SingleMessageMetadata(compacted_out=True), b""))
    if kept == 0:
        return None
    if kept == len(singles):
        return data
    batch = encode_batch(rebatched)
    rewritten = MessageMetadata()
    rewritten.CopyFrom(metadata)
    rewritten.uncompressed_size = len(batch)
    return encode_entry(rewritten, _compress(metadata, batch))


def _survives(
    metadata: SingleMessageMetadata,
    payload: bytes,
    ref: MessageRef,
    latest: dict[str, MessageRef],
    retain_null_key: bool,
) -> bool:
    """Whether a batch's message stays in the compacted view: not compacted out already, and either the
    latest of its key with a payload (an empty one deletes the key) or keyless with retain_null_key."""
    if metadata.compacted_out:
        return False
    if not metadata.HasField("partition_key"):
        return retain_null_key
    return latest.get(metadata.partition_key) == ref and len(payload) > 0


def compacted_out_indexes(data: bytes) -> list[int]:
    """The batch indexes of a compacted entry's messages that were compacted out (none for a single
    message, or a batch this broker cannot decode)."""
    try:
        parsed = parse_entry(data)
        metadata = parsed.metadata
        if not _is_batch(metadata):
            return []
        singles = split_batch(_decompress(metadata, parsed.payload), metadata.num_messages_in_batch)
    except (_Undecodable, ProtocolError, ChecksumError):
        return []
    return [index for index, single in enumerate(singles) if single.metadata.compacted_out]


def compact(entries: Iterable[tuple[Position, bytes]], retain_null_key: bool = False) -> list[tuple[Position, bytes]]:
    """Both phases over entries given in position order: the compacted view, as (position, bytes)."""
    entries = list(entries)
    latest = latest_for_keys(entries)
    view = []
    for position, data in entries:
        compacted = compact_entry(position, data, latest, retain_null_key)
        if compacted is not None:
            view.append((position, compacted))
    return view
