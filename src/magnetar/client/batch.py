"""Batch entries from pre-encoded metadata fields: what a producer sends, at a cost per batch, not per message.

Owns: the bytes of a batch payload (`[u32 size][SingleMessageMetadata][payload]` per message, as the C++
client's `Commands.cc` serializes a batch) written from `SingleMessageMetadata` fields encoded once per
distinct value (a key, a payload size), and the payload section of an entry (its `MessageMetadata`,
checksum) around such a payload.
Must not touch: sockets, clocks (publish times are parameters) or anything about sending.

Why not `protocol.messages.encode_batch`: it builds and serializes a protobuf object per message, which
costs microseconds each; a producer sending 100,000 messages a second cannot afford Python bytecode per
message where a `bytes.join`, a bytes repetition or a `struct` pack does the work in C. Messages of one
key and one payload size share their metadata bytes, so those are encoded once and reused.
"""

from __future__ import annotations

import itertools
import struct
from functools import lru_cache

from magnetar.protocol.commands import varint
from magnetar.protocol.messages import encode_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata

__all__ = [
    "EVENT_TIME_TAG",
    "KEY_TAG",
    "ORDERING_KEY_TAG",
    "PAYLOAD_SIZE_TAG",
    "PROPERTY_TAG",
    "bytes_field",
    "entry_section",
    "indexed_messages",
    "size_prefix",
    "varint",
]

# SingleMessageMetadata tags (field number << 3 | wire type): properties 1, partition_key 2,
# payload_size 3 (varint), event_time 5 (varint), ordering_key 7.
PROPERTY_TAG = b"\x0a"
KEY_TAG = b"\x12"
PAYLOAD_SIZE_TAG = b"\x18"
EVENT_TIME_TAG = b"\x28"
ORDERING_KEY_TAG = b"\x3a"

_U32 = struct.Struct(">I")
# The size prefixes of small metadata (most are a few to a few dozen bytes), packed once.
_SIZES = tuple(_U32.pack(n) for n in range(256))


def bytes_field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited protobuf field (string, bytes, sub-message)."""
    return tag + varint(len(data)) + data


def size_prefix(length: int) -> bytes:
    """The u32 that precedes a message's SingleMessageMetadata in a batch payload."""
    return _SIZES[length] if length < 256 else _U32.pack(length)


def entry_section(
    producer_name: str,
    sequence_id: int,
    payload: bytes,
    publish_time_ms: int,
    *,
    batch_count: int | None = None,
    key: str | bytes | None = None,
) -> bytes:
    """The payload section of one entry (checksum, MessageMetadata, payload).

    `batch_count` None: `payload` is one message. Otherwise it is a batch payload of that many messages
    with sequence ids `sequence_id` up to `sequence_id + batch_count - 1`. `key`: a str is the partition
    key, bytes the ordering key; either is the entry's sticky key (a batch carries its messages' key).
    """
    metadata = MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time_ms)
    if batch_count is not None:
        metadata.num_messages_in_batch = batch_count
        metadata.highest_sequence_id = sequence_id + batch_count - 1
    if isinstance(key, bytes):
        metadata.ordering_key = key
    elif key is not None:
        metadata.partition_key = key
    return encode_entry(metadata, payload)


@lru_cache(maxsize=256)
def _indexed_struct(count: int, head_size: int, zeros: int) -> struct.Struct:
    return struct.Struct(">" + f"{head_size}sQ{zeros}x" * count)


def indexed_messages(metadata: bytes, indexes: range, payload_size: int) -> bytes:
    """A batch payload of one message per index, all with the SingleMessageMetadata `metadata` (its
    payload_size field must say `payload_size`), whose payload is the index as a big-endian u64 followed
    by zeros: distinct payloads, so a consumer can check order, packed by one `struct` call."""
    if payload_size < 8:
        raise ValueError(f"a payload carrying its index needs at least 8 bytes, not {payload_size}")
    head = size_prefix(len(metadata)) + metadata
    packer = _indexed_struct(len(indexes), len(head), payload_size - 8)
    return packer.pack(*itertools.chain.from_iterable(zip(itertools.repeat(head), indexes)))
