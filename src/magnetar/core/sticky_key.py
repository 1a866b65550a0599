"""Sticky keys and their hashes: which bytes of an entry decide its Key_Shared consumer.

Owns: the sticky key of an entry (Pulsar's `Commands.resolveStickyKey`), its 31-bit Murmur3 hash and the
two ways a selector folds that hash into its slot space. Golden vectors live in this module's tests.
Must not touch: selectors, dispatchers, metadata parsing (the caller passes the fields it read from
the entry's `MessageMetadata`; a batch entry carries its first message's keys), asyncio, files or the
wall clock.

The hash that flows through the core as an entry's `key_hash` is `key_hash(sticky_key(...))`; each
selector folds it into its own space with `consistent_hashing_slot` or `range_slot`.
"""

from __future__ import annotations

import base64
import re

import mmh3

__all__ = [
    "HASH_RANGE_SIZE",
    "NONE_KEY",
    "STICKY_KEY_HASH_NOT_SET",
    "consistent_hashing_slot",
    "key_hash",
    "range_slot",
    "sticky_key",
]

# Pulsar's `StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE = 2 << 15`: STICKY ranges and the auto-split
# selector live in [0, 65535], and clients send STICKY ranges in that space, so it cannot change.
HASH_RANGE_SIZE = 65536

# Pulsar reserves 0 as "no hash computed yet" (`STICKY_KEY_HASH_NOT_SET`); no slot function returns it,
# so pending acks and draining hashes can use 0 as "absent".
STICKY_KEY_HASH_NOT_SET = 0

# The key of an entry that carries no key at all, and of one whose base64 partition key is malformed.
NONE_KEY = b"NONE_KEY"

# Consistent hashing (PIP-379) works on [1, 65535]: 65535 slots, so a point or a message lands on
# `hash % 65535 + 1` and never on 0.
_CONSISTENT_HASHING_RANGE_SIZE = HASH_RANGE_SIZE - 1

_MURMUR_MASK = 0x7FFFFFFF  # Pulsar masks with Integer.MAX_VALUE to keep the hash a non-negative Java int.

_BASE64_ALPHABET = re.compile(r"[A-Za-z0-9+/]*")


def sticky_key(
    ordering_key: bytes | None,
    partition_key: str | None,
    partition_key_b64_encoded: bool,
    producer_name: str | None,
    sequence_id: int | None,
) -> bytes:
    """The bytes an entry is routed by, exactly as Pulsar 4.x resolves them.

    A field counts as present when it was set (not None), even if empty, as proto2's `has_*` does.
    The producer/sequence fallback (Pulsar #23219, 4.0.0) spreads key-less messages over consumers
    instead of sending them all to the owner of "NONE_KEY" (#23212).
    """
    if ordering_key is not None:
        return ordering_key
    if partition_key is not None:
        if partition_key_b64_encoded:
            return _decode_base64_as_java(partition_key)
        return partition_key.encode()
    if producer_name is not None and sequence_id is not None:
        return f"{producer_name}-{sequence_id}".encode()
    return NONE_KEY


def _decode_base64_as_java(text: str) -> bytes:
    """Decode like `java.util.Base64.getDecoder()`, falling back to NONE_KEY where Java would throw.

    Java's basic decoder accepts missing padding but rejects a wrong amount of it, anything after it,
    a dangling single character in the last unit, and any character outside the alphabet (whitespace
    included). Python's `b64decode` differs on padding, so the checks are explicit.
    """
    body = text.rstrip("=")
    padding = len(text) - len(body)
    padding_needed = -len(body) % 4
    if not _BASE64_ALPHABET.fullmatch(body) or len(body) % 4 == 1 or padding not in (0, padding_needed):
        return NONE_KEY
    return base64.b64decode(body + "=" * padding_needed)


def key_hash(key: bytes) -> int:
    """Murmur3 x86_32, seed 0, masked to 31 bits: Pulsar's `Murmur3_32Hash.makeHash`."""
    return mmh3.hash(key, 0, signed=False) & _MURMUR_MASK


def consistent_hashing_slot(key_hash: int) -> int:
    """The slot in [1, 65535] of the consistent-hashing ring (messages and ring points alike)."""
    return key_hash % _CONSISTENT_HASHING_RANGE_SIZE + 1


def range_slot(key_hash: int) -> int:
    """The slot in [0, 65535] of the auto-split and STICKY selectors; 0 becomes 1 as in Pulsar.

    Pulsar's `makeStickyKeyHash(key, [0, 65535])` maps 0 to 1 so the result never reads as
    STICKY_KEY_HASH_NOT_SET; slot 0 of a STICKY range therefore never receives a message.
    """
    return key_hash % HASH_RANGE_SIZE or 1
