"""Payload sections: CRC-32C, broker entry metadata, the fields the broker indexes, batches and ack sets."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.sticky_key import key_hash
from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.messages import (
    ChecksumError,
    ack_set_of,
    acked_indexes,
    and_ack_sets,
    encode_batch,
    encode_entry,
    full_ack_set,
    index_send,
    parse_entry,
    split_batch,
    unacked_count,
    unacked_in_batch,
)
from magnetar.protocol.pulsar_api_pb2 import BrokerEntryMetadata, MessageMetadata, SingleMessageMetadata


def _metadata(**fields: object) -> MessageMetadata:
    return MessageMetadata(producer_name="fake-1", sequence_id=3, publish_time=1_700_000_000_000, **fields)


def test_plain_entry_fields() -> None:
    section = encode_entry(_metadata(partition_key="k1"), b"hello-1")
    parsed = parse_entry(section)
    assert parsed.entry == section
    assert parsed.payload == b"hello-1"
    assert parsed.sticky_key == b"k1"
    assert parsed.key_hash == key_hash(b"k1") == 2110152746
    assert (parsed.num_messages, parsed.is_batch) == (1, False)
    assert (parsed.producer_name, parsed.sequence_id, parsed.publish_time) == ("fake-1", 3, 1_700_000_000_000)
    assert parsed.highest_sequence_id is None
    assert parsed.deliver_at_time is None
    assert parsed.marker_type is None
    assert parsed.broker_entry_metadata is None


def test_section_layout_and_checksum_scope() -> None:
    metadata = _metadata()
    section = encode_entry(metadata, b"xyz")
    serialized = metadata.SerializeToString()
    covered = struct.pack(">I", len(serialized)) + serialized + b"xyz"
    assert section == b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(covered)) + covered


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"ordering_key": b"OK1", "partition_key": "PK"}, b"OK1"),
        ({"partition_key": "PK"}, b"PK"),
        ({"partition_key": "aGk=", "partition_key_b64_encoded": True}, b"hi"),
        ({}, b"fake-1-3"),
    ],
)
def test_sticky_key_follows_core_rules(fields: dict[str, object], key: bytes) -> None:
    parsed = parse_entry(encode_entry(_metadata(**fields), b""))
    assert parsed.sticky_key == key
    assert parsed.key_hash == key_hash(key)


def test_batch_and_optional_fields() -> None:
    metadata = _metadata(
        num_messages_in_batch=3, deliver_at_time=-5, marker_type=1, highest_sequence_id=9, partition_key="k0"
    )
    parsed = parse_entry(encode_entry(metadata, b"p"))
    assert (parsed.num_messages, parsed.is_batch) == (3, True)
    assert (parsed.deliver_at_time, parsed.marker_type, parsed.highest_sequence_id) == (-5, 1, 9)


@pytest.mark.parametrize("count", [0, -1])
def test_batch_without_messages_is_refused(count: int) -> None:
    with pytest.raises(ProtocolError, match="batch of"):
        parse_entry(encode_entry(_metadata(num_messages_in_batch=count), b""))


def test_crc_mismatch_is_detected_anywhere_in_the_covered_bytes() -> None:
    section = encode_entry(_metadata(partition_key="k"), b"payload")
    for index in range(6, len(section)):
        corrupted = bytearray(section)
        corrupted[index] ^= 0x01
        with pytest.raises(ChecksumError) as raised:
            parse_entry(bytes(corrupted))
        assert raised.value.expected != raised.value.computed
    corrupted = bytearray(section)
    corrupted[3] ^= 0xFF  # the stored checksum itself
    with pytest.raises(ChecksumError, match="CRC-32C mismatch"):
        parse_entry(bytes(corrupted))


def test_section_without_checksum_is_accepted() -> None:
    metadata = _metadata(partition_key="k")
    serialized = metadata.SerializeToString()
    section = struct.pack(">I", len(serialized)) + serialized + b"body"
    parsed = parse_entry(section)
    assert parsed.entry == section
    assert parsed.payload == b"body"
    assert parsed.sticky_key == b"k"


def test_broker_entry_metadata_prefix_is_parsed_and_left_out_of_the_entry() -> None:
    plain = encode_entry(_metadata(), b"body")
    prefixed = encode_entry(_metadata(), b"body", BrokerEntryMetadata(broker_timestamp=5, index=7))
    assert prefixed.startswith(b"\x0e\x02")
    parsed = parse_entry(prefixed)
    assert parsed.entry == plain
    assert parsed.broker_entry_metadata == BrokerEntryMetadata(broker_timestamp=5, index=7)
    assert parsed.payload == b"body"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (b"\x0e\x01\x00\x00", "no room for the checksum"),
        (b"\x0e\x02\x00\x00\x00\x09\x08", "BrokerEntryMetadata of 9 bytes overruns"),
        (b"\x00\x00", "no room for the metadata size"),
        (b"\x00\x00\x00\x10\x0a", "MessageMetadata of 16 bytes overruns"),
        (b"\x00\x00\x00\x02\xff\xff", "unparsable MessageMetadata"),
        (b"\x00\x00\x00\x02\x10\x01", "MessageMetadata lacks required fields"),
    ],
)
def test_malformed_sections_raise_protocol_error(section: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_entry(section)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=100), st.booleans())
def test_random_sections_parse_or_raise_known_errors(body: bytes, checksummed: bool) -> None:
    section = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body if checksummed else body
    try:
        parse_entry(section)
    except (ProtocolError, ChecksumError):
        pass


def _index_from_parse(section: bytes) -> tuple[bytes, int, int, int, int, bool, str] | type[Exception]:
    try:
        parsed = parse_entry(section)
    except (ProtocolError, ChecksumError) as error:
        return type(error)
    return (
        parsed.entry,
        parsed.key_hash,
        parsed.num_messages,
        parsed.publish_time,
        parsed.deliver_at_time or 0,
        parsed.marker_type is not None,
        parsed.producer_name,
    )


def _index(section: bytes) -> tuple[bytes, int, int, int, int, bool, str] | type[Exception]:
    try:
        return index_send(section)
    except (ProtocolError, ChecksumError) as error:
        return type(error)


_optional_fields = st.fixed_dictionaries(
    {},
    optional={
        "ordering_key": st.binary(max_size=4),
        "partition_key": st.sampled_from(["", "k", "aGk=", "a", "not base64!"]),
        "partition_key_b64_encoded": st.booleans(),
        "num_messages_in_batch": st.integers(-1, 3),
        "deliver_at_time": st.integers(-(2**63), 2**63 - 1),
        "marker_type": st.integers(0, 3),
        "highest_sequence_id": st.integers(0, 2**64 - 1),
    },
)


@settings(max_examples=300, deadline=None)
@given(_optional_fields, st.binary(max_size=8), st.sampled_from(["checksummed", "plain", "prefixed"]))
def test_index_send_reads_what_parse_entry_reads(fields: dict[str, object], body: bytes, form: str) -> None:
    """The broker's per-SEND fast path must agree with the full parse on every field it returns."""
    prefix = BrokerEntryMetadata(index=1) if form == "prefixed" else None
    section = encode_entry(_metadata(**fields), body, prefix)
    if form == "plain":
        section = section[6:]
    assert _index(section) == _index_from_parse(section)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60), st.booleans())
def test_index_send_fails_like_parse_entry(body: bytes, checksummed: bool) -> None:
    section = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body if checksummed else body
    assert _index(section) == _index_from_parse(section)


# --- batches


def _singles() -> list[tuple[SingleMessageMetadata, bytes]]:
    return [
        (SingleMessageMetadata(partition_key="k0", sequence_id=0), b"m0"),
        (SingleMessageMetadata(partition_key="k0", sequence_id=2, ordering_key=b"o"), b""),
        (SingleMessageMetadata(partition_key="k0", sequence_id=4, properties=[{"key": "a", "value": "b"}]), b"m4" * 40),
    ]


def test_batch_split_round_trip() -> None:
    singles = _singles()
    payload = encode_batch(singles)
    messages = split_batch(payload, 3)
    assert [message.payload for message in messages] == [body for _, body in singles]
    assert [message.metadata.sequence_id for message in messages] == [0, 2, 4]
    assert [message.metadata.payload_size for message in messages] == [2, 0, 80]
    assert messages[1].metadata.ordering_key == b"o"
    assert messages[2].metadata.properties[0].value == "b"


def test_batch_split_layout_matches_reference() -> None:
    metadata = SingleMessageMetadata(partition_key="k0", payload_size=2, sequence_id=0)
    serialized = metadata.SerializeToString()
    payload = struct.pack(">I", len(serialized)) + serialized + b"ab"
    [message] = split_batch(payload, 1)
    assert message == (metadata, b"ab")


@pytest.mark.parametrize(
    ("count", "cut", "message"),
    [
        (4, 0, "no room for the size of batch message 3"),
        (2, 0, "bytes after its 2 messages"),
        (3, 1, "declares 80 payload bytes, 79 remain"),
        (3, 82, "SingleMessageMetadata 2 of"),
    ],
)
def test_malformed_batches_raise_protocol_error(count: int, cut: int, message: str) -> None:
    payload = encode_batch(_singles())
    with pytest.raises(ProtocolError, match=message):
        split_batch(payload[: len(payload) - cut], count)


# --- ack sets (Java BitSet words: bit i set = index i still unacked)


def test_reference_ack_set_sequence() -> None:
    # A 4-message batch: index 1 acked gives [13]; the client then acks the other three as [2] each.
    assert full_ack_set(4) == [15]
    assert unacked_count([13]) == 3
    assert and_ack_sets([13], [2]) == []
    assert unacked_count(and_ack_sets(full_ack_set(4), [13])) == 3


def test_ack_set_words_are_java_longs() -> None:
    assert full_ack_set(64) == [-1]
    assert full_ack_set(65) == [-1, 1]
    assert full_ack_set(0) == []
    assert unacked_count([-1, 1]) == 65
    assert unacked_count([-(2**63)]) == 1
    assert and_ack_sets([-1, -1], [-(2**63)]) == [-(2**63)]
    assert and_ack_sets([-1, 5], [-1]) == [-1]  # missing words are zero, as in BitSet.and
    assert and_ack_sets([1, 0], [1, 7]) == [1]  # trailing zero words trimmed, as BitSet.toLongArray


def test_ack_sets_from_and_to_the_acked_indexes_a_cursor_keeps() -> None:
    # The reference sequence again, from the cursor's side: index 1 acked is mask 0b10.
    assert ack_set_of(4, 0b10) == [13]
    assert acked_indexes([13], 4) == [1]
    assert unacked_in_batch(4, 0b10) == 3
    assert ack_set_of(4, 0b1111) == [] and acked_indexes([], 4) == [0, 1, 2, 3]
    assert ack_set_of(65, 0) == full_ack_set(65) == [-1, 1]
    assert ack_set_of(65, 1 << 64) == [-1]
    assert acked_indexes([-(2**63)], 65) == [*range(63), 64]  # the sign bit is index 63


@given(st.integers(1, 200), st.data())
@settings(max_examples=200)
def test_ack_set_and_acked_indexes_are_inverse(batch_size: int, data: st.DataObject) -> None:
    acked_mask = data.draw(st.integers(0, (1 << batch_size) - 1))
    ack_set = ack_set_of(batch_size, acked_mask)
    acked = [i for i in range(batch_size) if (acked_mask >> i) & 1]
    assert acked_indexes(ack_set, batch_size) == acked
    assert unacked_count(ack_set) == unacked_in_batch(batch_size, acked_mask) == batch_size - len(acked)
    assert all(-(2**63) <= word < 2**63 for word in ack_set)


@given(st.integers(0, 200), st.sets(st.integers(0, 199)), st.sets(st.integers(0, 199)))
def test_ack_set_and_matches_set_intersection(size: int, left_acked: set[int], right_acked: set[int]) -> None:
    def ack_set(unacked: set[int]) -> list[int]:
        words = [0] * ((size + 63) // 64)
        for index in unacked:
            words[index // 64] |= 1 << (index % 64)
        return [word - (1 << 64) if word >= 1 << 63 else word for word in words]

    everything = set(range(size))
    left, right = everything - left_acked, everything - right_acked
    assert full_ack_set(size) == ack_set(everything)
    assert unacked_count(and_ack_sets(ack_set(left), ack_set(right))) == len(left & right)
