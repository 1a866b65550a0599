"""The SENDs a replicator forwards stored entries with: `replicated_from` set, every other field and the payload
kept, the SEND's fields taken from the metadata, and the entries that are not for the remote left out."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import commands
from magnetar.protocol.forwarding import forwarded_sends
from magnetar.protocol.framing import FrameDecoder, ProtocolError
from magnetar.protocol.messages import ChecksumError, ParsedEntry, encode_batch, encode_entry, parse_entry, split_batch
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    BrokerEntryMetadata,
    CommandSend,
    KeyValue,
    MessageMetadata,
    SingleMessageMetadata,
)

_U64_MAX = 2**64 - 1


def _metadata(**fields: object) -> MessageMetadata:
    return MessageMetadata(
        **{"producer_name": "orders-7", "sequence_id": 41, "publish_time": 1_700_000_000_000, **fields}
    )


def _forward(stored: bytes, local: str = "a", remote: str = "b", producer_id: int = 0) -> tuple[CommandSend, bytes]:
    """The SEND that forwards `stored` from `local` to `remote`, as the remote's decoder reads it, and its
    payload section; the size forwarded_sends gives is the payload's, without the metadata."""
    (send,) = forwarded_sends(producer_id, [stored], local, remote)
    assert send is not None
    frame, sequence_id, payload_size = send
    ((command, section),) = FrameDecoder().receive_data(frame)
    assert command.type == BaseCommand.SEND
    assert command.send.sequence_id == sequence_id
    assert len(parse_entry(section).payload) == payload_size
    return command.send, section


def _forwarded_entry(stored: bytes, local: str = "a") -> ParsedEntry:
    return parse_entry(_forward(stored, local)[1])  # verifies the CRC


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
    parsed = _forwarded_entry(encode_entry(metadata, b"body"))
    expected = MessageMetadata()
    expected.CopyFrom(metadata)
    expected.replicated_from = "a"
    assert parsed.metadata == expected
    assert parsed.payload == b"body"
    assert parsed.sticky_key == b"order-9"


def test_the_send_carries_the_original_ids_batch_size_and_marker_flag() -> None:
    send, _ = _forward(encode_entry(_metadata(), b"x"), producer_id=3)
    assert (send.producer_id, send.sequence_id, send.HasField("highest_sequence_id"), send.num_messages) == (
        3,
        41,
        False,
        1,
    )
    assert not send.marker
    send, _ = _forward(encode_entry(_metadata(num_messages_in_batch=5, highest_sequence_id=45), b"x"))
    assert (send.sequence_id, send.highest_sequence_id, send.num_messages) == (41, 45, 5)
    send, _ = _forward(encode_entry(_metadata(marker_type=11), b""))
    assert send.marker


def test_crc_covers_the_new_metadata() -> None:
    _, section = _forward(encode_entry(_metadata(), b"xyz"))
    magic, crc = struct.unpack_from(">HI", section)
    assert magic == 0x0E01
    assert crc == crc32c.crc32c(section[6:])
    assert section != encode_entry(_metadata(), b"xyz")


def test_broker_entry_metadata_prefix_is_dropped() -> None:
    stored = encode_entry(_metadata(), b"p", BrokerEntryMetadata(broker_timestamp=5, index=9))
    _, section = _forward(stored)
    assert section[:2] == b"\x0e\x01"
    parsed = parse_entry(section)
    assert parsed.broker_entry_metadata is None
    assert parsed.metadata.replicated_from == "a"


def test_section_without_checksum_gets_one() -> None:
    metadata = _metadata()
    serialized = metadata.SerializeToString()
    unchecked = struct.pack(">I", len(serialized)) + serialized + b"old client"
    _, section = _forward(unchecked)
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
    parsed = _forwarded_entry(stored)
    assert parsed.payload == payload
    assert (parsed.num_messages, parsed.is_batch, parsed.highest_sequence_id) == (3, True, 9)
    assert [m.metadata.partition_key for m in split_batch(parsed.payload, 3)] == ["k1", "k2", ""]


@pytest.mark.parametrize("prefix", [None, BrokerEntryMetadata(broker_timestamp=5)])
def test_entries_not_for_the_remote_are_left_out(prefix: BrokerEntryMetadata | None) -> None:
    """Loop prevention (an entry that came from another cluster never goes again) and the client's
    `replication_clusters`; the answers line up with the sections, through both ways of reading. As in
    Pulsar, an empty `replicated_from` counts: its presence is what marks a replicated entry."""
    stored = [
        encode_entry(_metadata(sequence_id=0), b"p", prefix),
        encode_entry(_metadata(sequence_id=1, replicated_from="c"), b"p", prefix),
        encode_entry(_metadata(sequence_id=2, replicate_to=["c"]), b"p", prefix),
        encode_entry(_metadata(sequence_id=3, replicate_to=["c", "b"]), b"p", prefix),
        encode_entry(_metadata(sequence_id=4, replicated_from=""), b"p", prefix),
    ]
    sends = forwarded_sends(0, stored, "a", "b")
    assert [send and send[1] for send in sends] == [0, None, None, 3, None]


def test_damaged_sections_raise() -> None:
    with pytest.raises(ProtocolError):
        forwarded_sends(0, [b"\x0e\x01\x00\x00"], "a", "b")
    overrun = struct.pack(">I", 1000) + b"metadata"
    with pytest.raises(ProtocolError, match="overruns"):
        forwarded_sends(0, [b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(overrun)) + overrun], "a", "b")
    garbage = struct.pack(">I", 3) + b"\xff\xff\xff" + b"payload"
    with pytest.raises(ProtocolError, match="unparsable"):
        forwarded_sends(0, [b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(garbage)) + garbage], "a", "b")
    # Behind broker entry metadata, the section is parsed whole, its checksum verified.
    prefixed = bytearray(encode_entry(_metadata(), b"payload", BrokerEntryMetadata(broker_timestamp=5)))
    prefixed[-1] ^= 0xFF
    with pytest.raises(ChecksumError):
        forwarded_sends(0, [bytes(prefixed)], "a", "b")


def test_a_checksummed_sections_metadata_bytes_are_kept_and_the_field_appended() -> None:
    metadata = _metadata(partition_key="k", properties=[KeyValue(key="z", value="1")])
    serialized = metadata.SerializeToString()
    _, section = _forward(encode_entry(metadata, b"body"), "east")
    (size,) = struct.unpack_from(">I", section, 6)
    assert section[10 : 10 + size] == serialized + b"\x2a\x04east"
    assert section[10 + size :] == b"body"


_text = st.text(max_size=12)
_keys = st.lists(st.tuples(_text, _text), max_size=4)


@given(
    producer_id=st.integers(0, _U64_MAX),
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
    marker_type=st.none() | st.integers(0, 30),
    local_cluster=st.text(min_size=1, max_size=12),
    payload=st.binary(max_size=64),
    prefixed=st.booleans(),
)
def test_the_send_is_commands_send_of_the_section_with_replicated_from(
    producer_id: int,
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
    marker_type: int | None,
    local_cluster: str,
    payload: bytes,
    prefixed: bool,
) -> None:
    """Any metadata: the frame is, byte for byte, `commands.send` of the section the remote must get (the
    stored metadata's bytes with `replicated_from` appended, under a fresh checksum), or, behind broker
    entry metadata, a SEND whose section parses to the same metadata and payload."""
    optional = {
        "highest_sequence_id": highest_sequence_id,
        "event_time": event_time,
        "partition_key": partition_key,
        "ordering_key": ordering_key,
        "schema_version": schema_version,
        "num_messages_in_batch": num_messages_in_batch,
        "deliver_at_time": deliver_at_time,
        "marker_type": marker_type,
    }
    remote = "remote-cluster"
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

    (send,) = forwarded_sends(producer_id, [stored], local_cluster, remote)

    if replicate_to and remote not in replicate_to:
        assert send is None
        return
    assert send is not None
    frame, forwarded_sequence_id, payload_size = send
    assert forwarded_sequence_id == sequence_id
    expected = MessageMetadata()
    expected.CopyFrom(metadata)
    expected.replicated_from = local_cluster
    serialized = metadata.SerializeToString()
    field = MessageMetadata(replicated_from=local_cluster).SerializePartialToString()
    checked = struct.pack(">I", len(serialized) + len(field)) + serialized + field + payload
    section = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(checked)) + checked
    if prefixed:
        ((command, section),) = FrameDecoder().receive_data(frame)
        assert (command.send.producer_id, command.send.sequence_id) == (producer_id, sequence_id)
    assert payload_size == len(payload)
    assert frame == commands.send(
        producer_id, sequence_id, highest_sequence_id, num_messages_in_batch or 1, section, marker_type is not None
    )
    parsed = parse_entry(section)
    assert parsed.metadata == expected
    assert parsed.payload == payload
    assert parsed.broker_entry_metadata is None
