"""The payload section of SEND and MESSAGE frames: checksum, message metadata, batches and ack sets.

Owns: the byte layout after a SEND/MESSAGE command, its CRC-32C, what the broker reads out of an entry's
`MessageMetadata` to index it (sticky key and hash, message count, times, producer and sequence ids,
marker type), the split of a batch payload into single messages, and the Java-BitSet arithmetic of batch
ack sets. The section a replicator forwards to another cluster is forwarding.py's.
Must not touch: frames and their size limits (framing.py), storage, dispatch, sockets or clocks.
The sticky key rules belong to `magnetar.core.sticky_key`; this module only feeds them the fields.

Layout (Pulsar's binary protocol specification and the C++ client's `Commands.cc`; big-endian):

    [u16 0x0e02][u32 size][BrokerEntryMetadata]     optional, written by a broker, never by a client
    [u16 0x0e01][u32 crc32c]                        present whenever the server speaks protocol >= 6
    [u32 metadata_size][MessageMetadata][payload]   the CRC covers exactly these bytes

No ambiguity arises between a magic and a bare metadata size: a size starting 0x0e01 or 0x0e02 would be
over 235 MB, far beyond any frame the decoder accepts.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple, TypeVar

import crc32c
from google.protobuf.message import DecodeError, Message

from magnetar.core.sticky_key import key_hash, sticky_key
from magnetar.protocol.framing import ProtocolError, missing_fields
from magnetar.protocol.pulsar_api_pb2 import BrokerEntryMetadata, MessageMetadata, SingleMessageMetadata

__all__ = [
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "ChecksumError",
    "ParsedEntry",
    "SingleMessage",
    "and_ack_sets",
    "encode_batch",
    "encode_entry",
    "full_ack_set",
    "index_send",
    "parse_entry",
    "split_batch",
    "unacked_count",
]

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MAGIC_CRC32C_BYTES = _U16.pack(MAGIC_CRC32C)
_MAGIC_BROKER_ENTRY_METADATA_BYTES = _U16.pack(MAGIC_BROKER_ENTRY_METADATA)
_MAGIC_AND_CRC_BYTES = _U16.size + _U32.size
# A client's section starts with the checksum magic, the CRC-32C and the metadata size.
_CHECKSUMMED_HEAD = struct.Struct(">HII")
_CHECKSUMMED_HEAD_BYTES = _CHECKSUMMED_HEAD.size

# Ack-set words are Java longs: signed 64-bit on the wire (protobuf int64), 64 batch indexes each.
_BITS_PER_WORD = 64
_WORD_MASK = (1 << _BITS_PER_WORD) - 1
_WORD_SIGN = 1 << (_BITS_PER_WORD - 1)

_M = TypeVar("_M", bound=Message)


class ChecksumError(Exception):
    """The CRC-32C of a payload section does not match its content; the broker answers
    SEND_ERROR{ChecksumError} for that one message and keeps the connection (the client fails only it)."""

    def __init__(self, expected: int, computed: int) -> None:
        super().__init__(f"CRC-32C mismatch: the message carries {expected:#010x}, its bytes hash to {computed:#010x}")
        self.expected = expected
        self.computed = computed


class ParsedEntry(NamedTuple):
    """What the broker indexes about one entry (a single message or a whole batch)."""

    metadata: MessageMetadata
    # The bytes to store and to replay behind MESSAGE: from the 0x0e01 magic (or the metadata size when
    # the sender wrote no checksum) to the end, without any broker-entry-metadata prefix.
    entry: bytes
    # The message body after the metadata (a batch payload for batches; compressed if `compression` is set).
    payload: bytes
    broker_entry_metadata: BrokerEntryMetadata | None
    sticky_key: bytes
    key_hash: int
    # Messages in the entry: the permit cost and the dispatch count (1 unless the entry is a batch).
    num_messages: int
    is_batch: bool
    publish_time: int
    producer_name: str
    sequence_id: int
    highest_sequence_id: int | None
    deliver_at_time: int | None
    marker_type: int | None


class SingleMessage(NamedTuple):
    metadata: SingleMessageMetadata
    payload: bytes


def parse_entry(section: bytes) -> ParsedEntry:
    """Parse the payload section of a SEND (or MESSAGE), verifying its checksum when it carries one.

    Raises ChecksumError on a CRC mismatch, ProtocolError when the section is malformed (truncated,
    metadata that does not parse or lacks required fields).
    """
    view = memoryview(section)
    broker_entry_metadata = None
    offset = 0
    if view[:2] == _MAGIC_BROKER_ENTRY_METADATA_BYTES:
        size = _unpack_u32(view, 2, "broker entry metadata size")
        start = 2 + _U32.size
        broker_entry_metadata = _parse(BrokerEntryMetadata, view, start, start + size, "BrokerEntryMetadata")
        offset = start + size
    entry_start = offset
    if view[offset : offset + 2] == _MAGIC_CRC32C_BYTES:
        expected = _unpack_u32(view, offset + 2, "checksum")
        offset += _MAGIC_AND_CRC_BYTES
        computed = crc32c.crc32c(view[offset:])
        if computed != expected:
            raise ChecksumError(expected, computed)
    metadata_size = _unpack_u32(view, offset, "metadata size")
    metadata_start = offset + _U32.size
    metadata_end = metadata_start + metadata_size
    metadata = _parse(MessageMetadata, view, metadata_start, metadata_end, "MessageMetadata")
    key = sticky_key(
        metadata.ordering_key if metadata.HasField("ordering_key") else None,
        metadata.partition_key if metadata.HasField("partition_key") else None,
        metadata.partition_key_b64_encoded,
        metadata.producer_name,
        metadata.sequence_id,
    )
    is_batch = metadata.HasField("num_messages_in_batch")
    # Permits and dispatch counts subtract this; a batch of none or fewer would corrupt that arithmetic.
    if metadata.num_messages_in_batch < 1:
        raise ProtocolError(f"batch of {metadata.num_messages_in_batch} messages")
    return ParsedEntry(
        metadata=metadata,
        entry=section if entry_start == 0 else bytes(view[entry_start:]),
        payload=bytes(view[metadata_end:]),
        broker_entry_metadata=broker_entry_metadata,
        sticky_key=key,
        key_hash=key_hash(key),
        num_messages=metadata.num_messages_in_batch,
        is_batch=is_batch,
        publish_time=metadata.publish_time,
        producer_name=metadata.producer_name,
        sequence_id=metadata.sequence_id,
        highest_sequence_id=metadata.highest_sequence_id if metadata.HasField("highest_sequence_id") else None,
        deliver_at_time=metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None,
        marker_type=metadata.marker_type if metadata.HasField("marker_type") else None,
    )


def index_send(section: bytes) -> tuple[bytes, int, int, int, int, bool, str]:
    """What the broker needs of a SEND's payload section to store it, read once and nothing more:
    (entry bytes, key hash, message count, publish time, deliver_at_time or 0, carries a marker type,
    producer name in the metadata: for a replicator's SENDs, the original producer's).

    The same checks and the same sticky key as `parse_entry`, which this is the per-message fast path of:
    a client's checksummed section is stored as it came (no copy of the payload), and of the metadata
    only the fields above are read, each once, since every access to a upb field costs a C call.
    Raises ChecksumError and ProtocolError as `parse_entry` does.
    """
    if len(section) < _CHECKSUMMED_HEAD_BYTES or section[:2] != _MAGIC_CRC32C_BYTES:
        # Broker entry metadata in front, or no checksum (protocol < 6): rare enough for the full parse.
        parsed = parse_entry(section)
        return (
            parsed.entry,
            parsed.key_hash,
            parsed.num_messages,
            parsed.publish_time,
            parsed.deliver_at_time or 0,
            parsed.marker_type is not None,
            parsed.producer_name,
        )
    _, expected, metadata_size = _CHECKSUMMED_HEAD.unpack_from(section)
    view = memoryview(section)
    computed = crc32c.crc32c(view[_MAGIC_AND_CRC_BYTES:])
    if computed != expected:
        raise ChecksumError(expected, computed)
    metadata = _parse(
        MessageMetadata, view, _CHECKSUMMED_HEAD_BYTES, _CHECKSUMMED_HEAD_BYTES + metadata_size, "MessageMetadata"
    )
    # A non-empty value proves presence; only an empty one needs HasField (proto2 presence).
    ordering_key = metadata.ordering_key
    partition_key = metadata.partition_key
    producer_name = metadata.producer_name
    key = sticky_key(
        ordering_key if ordering_key or metadata.HasField("ordering_key") else None,
        partition_key if partition_key or metadata.HasField("partition_key") else None,
        metadata.partition_key_b64_encoded,
        producer_name,
        metadata.sequence_id,
    )
    num_messages = metadata.num_messages_in_batch
    if num_messages < 1:
        raise ProtocolError(f"batch of {num_messages} messages")
    return (
        section,
        key_hash(key),
        num_messages,
        metadata.publish_time,
        metadata.deliver_at_time,
        metadata.HasField("marker_type"),
        producer_name,
    )


def encode_entry(
    metadata: MessageMetadata, payload: bytes, broker_entry_metadata: BrokerEntryMetadata | None = None
) -> bytes:
    """A payload section as a client writes it (checksummed), optionally behind broker entry metadata.

    For entries the broker writes itself (markers) and for tests; client entries are stored as received.
    """
    serialized: bytes = metadata.SerializeToString()
    checked = _U32.pack(len(serialized)) + serialized + payload
    section = _MAGIC_CRC32C_BYTES + _U32.pack(crc32c.crc32c(checked)) + checked
    if broker_entry_metadata is None:
        return section
    prefix: bytes = broker_entry_metadata.SerializeToString()
    return _MAGIC_BROKER_ENTRY_METADATA_BYTES + _U32.pack(len(prefix)) + prefix + section


def split_batch(payload: bytes, num_messages: int) -> list[SingleMessage]:
    """The messages of an uncompressed batch payload, `[u32 size][SingleMessageMetadata][payload_size bytes]`
    repeated `num_messages` times (`MessageMetadata.num_messages_in_batch`).

    A compressed batch must be decompressed by the caller first. Raises ProtocolError when the payload
    does not hold exactly `num_messages` well-formed messages.
    """
    view = memoryview(payload)
    messages: list[SingleMessage] = []
    offset = 0
    for index in range(num_messages):
        size = _unpack_u32(view, offset, f"size of batch message {index}")
        start = offset + _U32.size
        metadata = _parse(SingleMessageMetadata, view, start, start + size, f"SingleMessageMetadata {index}")
        body_start = start + size
        body_end = body_start + metadata.payload_size
        if metadata.payload_size < 0 or body_end > len(view):
            raise ProtocolError(
                f"batch message {index} declares {metadata.payload_size} payload bytes, {len(view) - body_start} remain"
            )
        messages.append(SingleMessage(metadata, bytes(view[body_start:body_end])))
        offset = body_end
    if offset != len(view):
        raise ProtocolError(f"batch payload has {len(view) - offset} bytes after its {num_messages} messages")
    return messages


def encode_batch(messages: Iterable[tuple[SingleMessageMetadata, bytes]]) -> bytes:
    """A batch payload from (metadata, payload) pairs; each metadata's payload_size is set from its payload."""
    parts: list[bytes] = []
    for metadata, body in messages:
        metadata.payload_size = len(body)
        serialized = metadata.SerializeToString()
        parts += (_U32.pack(len(serialized)), serialized, body)
    return b"".join(parts)


def full_ack_set(batch_size: int) -> list[int]:
    """The ack set of a batch none of whose `batch_size` messages is acked: bits 0..batch_size-1 set."""
    words = []
    for first_bit in range(0, batch_size, _BITS_PER_WORD):
        words.append(_signed_word((1 << min(_BITS_PER_WORD, batch_size - first_bit)) - 1))
    return words


def and_ack_sets(left: Sequence[int], right: Sequence[int]) -> list[int]:
    """The messages unacked in both sets: a client acks batch indexes with a new set each time, and the
    broker ANDs it with the set it holds.

    Words missing from the shorter set count as zero, as in Java's `BitSet.and`; trailing zero words are
    dropped, as `BitSet.toLongArray` does, so an empty result means every message is acked.
    """
    words = [a & b for a, b in zip(left, right, strict=False)]
    while words and words[-1] == 0:
        words.pop()
    return words


def unacked_count(ack_set: Sequence[int]) -> int:
    """How many messages of the batch the ack set still holds unacked (its set bits)."""
    return sum((word & _WORD_MASK).bit_count() for word in ack_set)


def ack_set_of(batch_size: int, acked_mask: int) -> list[int]:
    """The ack set of a batch of `batch_size` messages whose acknowledged indexes are the set bits of
    `acked_mask` (bit i for index i, as cursors keep them): empty when every message is acked."""
    unacked = ((1 << batch_size) - 1) & ~acked_mask
    words = []
    while unacked:
        words.append(_signed_word(unacked & _WORD_MASK))
        unacked >>= _BITS_PER_WORD
    return words


def acked_indexes(ack_set: Sequence[int], batch_size: int) -> list[int]:
    """The indexes of a batch of `batch_size` messages that the ack set leaves acknowledged (bits clear;
    words beyond the set's end count as zero)."""
    unacked = 0
    for index, word in enumerate(ack_set):
        unacked |= (word & _WORD_MASK) << (_BITS_PER_WORD * index)
    return [i for i in range(batch_size) if not (unacked >> i) & 1]


def unacked_in_batch(batch_size: int, acked_mask: int) -> int:
    """How many of a batch's `batch_size` messages are unacked when the set bits of `acked_mask` are acked."""
    return batch_size - acked_mask.bit_count()


def _signed_word(word: int) -> int:
    return word - (1 << _BITS_PER_WORD) if word & _WORD_SIGN else word


def _unpack_u32(view: memoryview, offset: int, what: str) -> int:
    if offset < 0 or offset + _U32.size > len(view):
        raise ProtocolError(f"payload section truncated: no room for the {what} at byte {offset}")
    value: int = _U32.unpack_from(view, offset)[0]
    return value


def _parse(message_type: type[_M], view: memoryview, start: int, end: int, what: str) -> _M:
    if end > len(view):
        raise ProtocolError(f"{what} of {end - start} bytes overruns the payload section ({len(view) - start} remain)")
    message: _M = message_type()
    try:
        # upb parses any buffer: the memoryview saves a copy (the stub says bytes).
        message.ParseFromString(view[start:end])  # type: ignore[arg-type]
    except DecodeError as error:
        raise ProtocolError(f"unparsable {what}: {error}") from error
    if not message.IsInitialized():
        raise ProtocolError(f"{what} lacks required fields: {missing_fields(message)}")
    return message
