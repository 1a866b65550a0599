"""Payload sections as a replicator forwards them: `replicated_from` set, every other field and the payload kept."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.messages import (
    ChecksumError,
    encode_batch,
    encode_entry,
    parse_entry,
    replicated_section,
    split_batch,
    stored_metadata,
)
from magnetar.protocol.pulsar_api_pb2 import BrokerEntryMetadata, KeyValue, MessageMetadata, SingleMessageMetadata

_U64_MAX = 2**64 - 1


def _metadata(**fields: object) -> MessageMetadata:
    return MessageMetadata(
        **{"producer_name": "orders-7", "sequence_id": 41, "publish_time": 1_700_000_000_000, **fields}
    )


def test_replicated_from_is_set_and_the_rest_kept() -> None:
    metadata = _metadata(
        partition_key="customer-1",
        ordering_key=b"order-9",
        event_time=1_699_999_999_000,
        schema_version=b"\x00\x00\x00\x00\x00\x00\x00\x02",
        replicate_to=["b", "c"],
        highest_sequence_id=41,
        properties=[KeyValue(key="k", value="v"), KeyValue(key="trace", value="abc")],
    )
    section = replicated_section(encode_entry(metadata, b"body"), "a")
    parsed = parse_entry(section)
    expected = MessageMetadata()
    expected.CopyFrom(metadata)
    expected.replicated_from = "a"
    assert parsed.metadata == expected
    assert parsed.payload == b"body"
    assert parsed.sticky_key == b"order-9"


def test_crc_covers_the_new_metadata() -> None:
    section = replicated_section(encode_entry(_metadata(), b"xyz"), "a")
    magic, crc = struct.unpack_from(">HI", section)
    assert magic == 0x0E01
    assert crc == crc32c.crc32c(section[6:])
    assert section != encode_entry(_metadata(), b"xyz")


def test_broker_entry_metadata_prefix_is_dropped() -> None:
    stored = encode_entry(_metadata(), b"p", BrokerEntryMetadata(broker_timestamp=5, index=9))
    section = replicated_section(stored, "a")
    assert section[:2] == b"\x0e\x01"
    parsed = parse_entry(section)
    assert parsed.broker_entry_metadata is None
    assert parsed.metadata.replicated_from == "a"


def test_section_without_checksum_gets_one() -> None:
    metadata = _metadata()
    serialized = metadata.SerializeToString()
    unchecked = struct.pack(">I", len(serialized)) + serialized + b"old client"
    section = replicated_section(unchecked, "a")
    assert section[:2] == b"\x0e\x01"
    assert parse_entry(section).payload == b"old client"


def test_batch_payload_is_untouched() -> None:
    payload = encode_batch(
        [
            (
                SingleMessageMetadata(partition_key="k1", sequence_id=7, properties=[KeyValue(key="x", value="1")]),
                b"one",
            ),
            (SingleMessageMetadata(partition_key="k2", sequence_id=8, event_time=3), b"two"),
            (SingleMessageMetadata(sequence_id=9, null_value=True), b""),
        ]
    )
    stored = encode_entry(_metadata(num_messages_in_batch=3, sequence_id=7, highest_sequence_id=9), payload)
    parsed = parse_entry(replicated_section(stored, "a"))
    assert parsed.payload == payload
    assert (parsed.num_messages, parsed.is_batch, parsed.highest_sequence_id) == (3, True, 9)
    assert [m.metadata.partition_key for m in split_batch(parsed.payload, 3)] == ["k1", "k2", ""]


def test_an_already_replicated_entry_is_renamed() -> None:
    # The replicator skips these (loop prevention); appended, the field's last occurrence is what parsers read.
    stored = encode_entry(_metadata(replicated_from="c"), b"p")
    assert parse_entry(replicated_section(stored, "a")).metadata.replicated_from == "a"


def test_damaged_sections_raise_as_parse_entry_does() -> None:
    section = bytearray(encode_entry(_metadata(), b"payload"))
    section[-1] ^= 0xFF
    with pytest.raises(ChecksumError):
        replicated_section(bytes(section), "a")
    with pytest.raises(ProtocolError):
        replicated_section(b"\x0e\x01\x00\x00", "a")
    overrun = struct.pack(">I", 1000) + b"metadata"
    with pytest.raises(ProtocolError):
        replicated_section(b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(overrun)) + overrun, "a")


def test_a_checksummed_sections_metadata_bytes_are_kept_and_the_field_appended() -> None:
    metadata = _metadata(partition_key="k", properties=[KeyValue(key="z", value="1")])
    serialized = metadata.SerializeToString()
    section = replicated_section(encode_entry(metadata, b"body"), "east")
    (size,) = struct.unpack_from(">I", section, 6)
    assert section[10 : 10 + size] == serialized + b"\x2a\x04east"
    assert section[10 + size :] == b"body"


_text = st.text(max_size=12)
_keys = st.lists(st.tuples(_text, _text), max_size=4)


@given(
    producer_name=_text,
    sequence_id=st.integers(0, _U64_MAX),
    highest_sequence_id=st.none() | st.integers(0, _U64_MAX),
    publish_time=st.integers(0, _U64_MAX),
    event_time=st.none() | st.integers(0, _U64_MAX),
    partition_key=st.none() | _text,
    ordering_key=st.none() | st.binary(max_size=12),
    properties=_keys,
    replicate_to=st.lists(_text, max_size=3),
    schema_version=st.none() | st.binary(max_size=8),
    num_messages_in_batch=st.none() | st.integers(1, 1000),
    deliver_at_time=st.none() | st.integers(0, 2**63 - 1),
    replicated_from=st.none() | _text,
    local_cluster=st.text(min_size=1, max_size=12),
    payload=st.binary(max_size=64),
    prefixed=st.booleans(),
)
def test_round_trip_keeps_every_field(
    producer_name: str,
    sequence_id: int,
    highest_sequence_id: int | None,
    publish_time: int,
    event_time: int | None,
    partition_key: str | None,
    ordering_key: bytes | None,
    properties: list[tuple[str, str]],
    replicate_to: list[str],
    schema_version: bytes | None,
    num_messages_in_batch: int | None,
    deliver_at_time: int | None,
    replicated_from: str | None,
    local_cluster: str,
    payload: bytes,
    prefixed: bool,
) -> None:
    optional = {
        "highest_sequence_id": highest_sequence_id,
        "event_time": event_time,
        "partition_key": partition_key,
        "ordering_key": ordering_key,
        "schema_version": schema_version,
        "num_messages_in_batch": num_messages_in_batch,
        "deliver_at_time": deliver_at_time,
        "replicated_from": replicated_from,
    }
    metadata = MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time,
        properties=[KeyValue(key=k, value=v) for k, v in properties],
        replicate_to=replicate_to,
        **{name: value for name, value in optional.items() if value is not None},
    )
    prefix = BrokerEntryMetadata(broker_timestamp=1, index=2) if prefixed else None
    stored = encode_entry(metadata, payload, prefix)

    section = replicated_section(stored, local_cluster)

    parsed = parse_entry(section)  # verifies the CRC
    expected = MessageMetadata()
    expected.CopyFrom(metadata)
    expected.replicated_from = local_cluster
    assert parsed.metadata == expected
    assert parsed.payload == payload
    assert parsed.broker_entry_metadata is None
    original = parse_entry(stored)
    assert (parsed.sticky_key, parsed.num_messages, parsed.highest_sequence_id) == (
        original.sticky_key,
        original.num_messages,
        original.highest_sequence_id,
    )


@pytest.mark.parametrize("prefix", [False, True])
def test_stored_metadata_reads_what_parse_entry_reads(prefix: bool) -> None:
    """The replicator's light read of a stored entry agrees with the full parse, for a checksummed
    section and for one behind broker entry metadata."""
    metadata = _metadata(partition_key="k", replicate_to=["r2"], num_messages_in_batch=3, highest_sequence_id=9)
    broker_metadata = BrokerEntryMetadata(broker_timestamp=5) if prefix else None
    section = encode_entry(metadata, b"batch-payload", broker_metadata)
    assert stored_metadata(section) == parse_entry(section).metadata
