"""The batch encoder of magnetar.client: what it writes parses back, with protobuf, as the same messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.batch import (
    EVENT_TIME_TAG,
    KEY_TAG,
    ORDERING_KEY_TAG,
    PAYLOAD_SIZE_TAG,
    PROPERTY_TAG,
    bytes_field,
    entry_section,
    indexed_messages,
    size_prefix,
    varint,
)
from magnetar.protocol.messages import encode_batch, parse_entry, split_batch
from magnetar.protocol.pulsar_api_pb2 import KeyValue, SingleMessageMetadata


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_is_protobufs(value: int) -> None:
    expected = SingleMessageMetadata(payload_size=0, sequence_id=value).SerializeToString()
    assert PAYLOAD_SIZE_TAG + varint(0) + b"\x40" + varint(value) == expected


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.text(max_size=300)),
            st.binary(max_size=300),
            st.one_of(st.none(), st.binary(min_size=1, max_size=20)),
            st.one_of(st.none(), st.integers(min_value=1, max_value=2**50)),
            st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_fields_joined_by_hand_equal_encode_batch(messages: list) -> None:
    """Hand-encoded fields, in field-number order, are byte for byte what protobuf writes."""
    by_hand, reference = [], []
    for key, payload, ordering, event_time, properties in messages:
        parts = []
        for name, text in properties.items():
            pair = bytes_field(b"\x0a", name.encode()) + bytes_field(b"\x12", text.encode())
            parts.append(bytes_field(PROPERTY_TAG, pair))
        if key is not None:
            parts.append(bytes_field(KEY_TAG, key.encode()))
        parts.append(PAYLOAD_SIZE_TAG + varint(len(payload)))
        if event_time is not None:
            parts += (EVENT_TIME_TAG, varint(event_time))
        if ordering is not None:
            parts.append(bytes_field(ORDERING_KEY_TAG, ordering))
        metadata = b"".join(parts)
        by_hand += (size_prefix(len(metadata)), metadata, payload)
        single = SingleMessageMetadata(
            properties=[KeyValue(key=n, value=t) for n, t in properties.items()],
            partition_key=key,
            event_time=event_time,
            ordering_key=ordering,
        )
        reference.append((single, payload))
    assert b"".join(by_hand) == encode_batch(reference)


def test_size_prefix_above_the_cached_sizes() -> None:
    assert size_prefix(255) == b"\x00\x00\x00\xff"
    assert size_prefix(300) == b"\x00\x00\x01\x2c"


@pytest.mark.parametrize("key", ["k-7", b"\x00ordering", None])
def test_batch_entry_section_parses_with_its_key_and_sequence_range(key: str | bytes | None) -> None:
    payload = b"".join(size_prefix(2) + PAYLOAD_SIZE_TAG + varint(1) + bytes((n,)) for n in range(3))
    section = entry_section("p-1", 40, payload, 1_700_000_000_123, batch_count=3, key=key)
    entry = parse_entry(section)
    assert entry.metadata.producer_name == "p-1"
    assert (entry.metadata.sequence_id, entry.metadata.highest_sequence_id) == (40, 42)
    assert entry.metadata.publish_time == 1_700_000_000_123
    assert entry.num_messages == 3
    assert entry.metadata.partition_key == (key if isinstance(key, str) else "")
    assert entry.metadata.ordering_key == (key if isinstance(key, bytes) else b"")
    assert [m.payload for m in split_batch(entry.payload, 3)] == [b"\x00", b"\x01", b"\x02"]


def test_single_message_entry_section_is_not_a_batch() -> None:
    entry = parse_entry(entry_section("p-1", 9, b"hello", 5, key="k"))
    assert not entry.metadata.HasField("num_messages_in_batch")
    assert entry.metadata.partition_key == "k"
    assert entry.payload == b"hello"


@pytest.mark.parametrize("size", [8, 9, 100, 300])
def test_indexed_messages_carry_their_index_and_shared_metadata(size: int) -> None:
    metadata = bytes_field(KEY_TAG, b"key-3") + PAYLOAD_SIZE_TAG + varint(size)
    indexes = range(3, 3 + 100 * 7, 100)
    messages = split_batch(indexed_messages(metadata, indexes, size), len(indexes))
    assert [int.from_bytes(m.payload[:8], "big") for m in messages] == list(indexes)
    assert {m.payload[8:] for m in messages} == {bytes(size - 8)}
    assert {(m.metadata.partition_key, m.metadata.payload_size) for m in messages} == {("key-3", size)}


def test_indexed_messages_need_room_for_the_index() -> None:
    with pytest.raises(ValueError):
        indexed_messages(PAYLOAD_SIZE_TAG + varint(4), range(2), 4)
