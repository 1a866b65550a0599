"""Marker entries byte by byte: Pulsar's field numbers (PulsarMarkers.proto, MessageMetadata.marker_type = 20),
the metadata Pulsar's `Markers.newMessage` writes, and Pulsar's MarkersTest values read back."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.positions import Position
from magnetar.protocol import markers
from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.messages import encode_entry, parse_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata

PUBLISH_TIME = 1_700_000_000_000
# publish_time as a protobuf varint, for the expected metadata bytes.
PUBLISH_TIME_VARINT = bytes.fromhex("80d095ffbc31")


def _metadata(marker_type: int, replicate_to: str | None) -> bytes:
    """MessageMetadata as Pulsar writes a marker's, field by field in number order: producer_name (1),
    sequence_id (2) = 0, publish_time (3), replicate_to (7), marker_type (20: tag 0xa0 0x01)."""
    name = b"pulsar.marker"
    out = b"\x0a" + bytes([len(name)]) + name + b"\x10\x00" + b"\x18" + PUBLISH_TIME_VARINT
    if replicate_to is not None:
        out += b"\x3a" + bytes([len(replicate_to)]) + replicate_to.encode()
    return out + b"\xa0\x01" + bytes([marker_type])


def _section(metadata: bytes, payload: bytes) -> bytes:
    """A checksummed payload section as Pulsar's serializeMetadataAndPayload(Crc32c, ...) lays it out."""
    checked = struct.pack(">I", len(metadata)) + metadata + payload
    return b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(checked)) + checked


def test_publish_time_varint_is_what_the_expected_bytes_say() -> None:
    assert MessageMetadata(publish_time=PUBLISH_TIME).SerializePartialToString() == b"\x18" + PUBLISH_TIME_VARINT


def test_snapshot_request_bytes() -> None:
    entry = markers.snapshot_request("sid", "us-west", PUBLISH_TIME)
    payload = bytes.fromhex("0a03736964") + bytes.fromhex("120775732d77657374")  # snapshot_id, source_cluster
    assert entry == _section(_metadata(10, None), payload)


def test_snapshot_response_bytes() -> None:
    entry = markers.snapshot_response("sid", "us-west", "us-east", Position(5, 7), PUBLISH_TIME)
    cluster = bytes.fromhex("0a0775732d65617374") + bytes.fromhex("120408051007")  # us-east, 5:7
    payload = bytes.fromhex("0a03736964") + b"\x12" + bytes([len(cluster)]) + cluster
    assert entry == _section(_metadata(11, "us-west"), payload)


def test_snapshot_and_update_bytes_order_clusters_by_name() -> None:
    clusters = {"us-east": Position(10, 11), "us-cent": Position(20, 21)}
    cent = bytes.fromhex("0a0775732d63656e74120408141015")
    east = bytes.fromhex("0a0775732d656173741204080a100b")
    snapshot = markers.snapshot("sid", "us-west", Position(5, 7), clusters, PUBLISH_TIME)
    payload = bytes.fromhex("0a03736964120408051007") + b"\x1a\x0f" + cent + b"\x1a\x0f" + east
    assert snapshot == _section(_metadata(12, "us-west"), payload)
    update = markers.subscription_update("sub-1", clusters, PUBLISH_TIME)
    payload = bytes.fromhex("0a057375622d31") + b"\x12\x0f" + cent + b"\x12\x0f" + east
    assert update == _section(_metadata(13, None), payload)


# Pulsar's MarkersTest, read back through parse_marker.


def test_pulsar_markers_test_snapshot_request() -> None:
    marker = markers.parse_marker(markers.snapshot_request("sid", "us-west", PUBLISH_TIME))
    assert marker is not None and marker.marker_type == markers.SNAPSHOT_REQUEST
    assert list(marker.metadata.replicate_to) == []
    assert (marker.body.snapshot_id, marker.body.source_cluster) == ("sid", "us-west")


def test_pulsar_markers_test_snapshot_response() -> None:
    marker = markers.parse_marker(markers.snapshot_response("sid", "us-west", "us-east", Position(5, 7), PUBLISH_TIME))
    assert marker is not None and marker.marker_type == markers.SNAPSHOT_RESPONSE
    assert list(marker.metadata.replicate_to) == ["us-west"]
    assert marker.body.snapshot_id == "sid"
    assert marker.body.cluster.cluster == "us-east"
    assert markers.position_of(marker.body.cluster.message_id) == (5, 7)


def test_pulsar_markers_test_snapshot() -> None:
    clusters = {"us-east": Position(10, 11), "us-cent": Position(20, 21)}
    marker = markers.parse_marker(markers.snapshot("sid", "us-west", Position(5, 7), clusters, PUBLISH_TIME))
    assert marker is not None and marker.marker_type == markers.SNAPSHOT
    assert list(marker.metadata.replicate_to) == ["us-west"]
    assert marker.body.snapshot_id == "sid"
    assert markers.position_of(marker.body.local_message_id) == (5, 7)
    assert [(c.cluster, markers.position_of(c.message_id)) for c in marker.body.clusters] == [
        ("us-cent", (20, 21)),
        ("us-east", (10, 11)),
    ]
    assert not marker.body.HasField("request_message_id")


def test_pulsar_markers_test_update() -> None:
    clusters = {"us-east": Position(10, 11), "us-cent": Position(20, 21)}
    marker = markers.parse_marker(markers.subscription_update("sub-1", clusters, PUBLISH_TIME))
    assert marker is not None and marker.marker_type == markers.UPDATE
    assert list(marker.metadata.replicate_to) == []
    assert marker.body.subscription_name == "sub-1"
    assert [(c.cluster, markers.position_of(c.message_id)) for c in marker.body.clusters] == [
        ("us-cent", (20, 21)),
        ("us-east", (10, 11)),
    ]


def test_every_marker_carries_pulsars_marker_metadata() -> None:
    entries = [
        markers.snapshot_request("s", "a", PUBLISH_TIME),
        markers.snapshot_response("s", "a", "b", Position(1, 2), PUBLISH_TIME),
        markers.snapshot("s", "a", Position(1, 2), {"b": Position(3, 4)}, PUBLISH_TIME),
        markers.subscription_update("sub", {"b": Position(3, 4)}, PUBLISH_TIME),
        markers.acked_ranges("sub", "a", {"b": [(Position(3, 4), Position(3, 9))]}, PUBLISH_TIME),
    ]
    for entry in entries:
        parsed = parse_entry(entry)
        assert parsed.producer_name == markers.MARKER_PRODUCER_NAME
        assert parsed.sequence_id == 0
        assert parsed.publish_time == PUBLISH_TIME
        assert parsed.marker_type in (10, 11, 12, 13, 100)
        assert markers.is_marker(entry)


def test_the_snapshot_extension_field_round_trips_and_is_field_1000() -> None:
    entry = markers.snapshot(
        "s", "a", Position(1, 2), {"b": Position(3, 4)}, PUBLISH_TIME, request_position=Position(1, 0)
    )
    marker = markers.parse_marker(entry)
    assert marker is not None and markers.position_of(marker.body.request_message_id) == (1, 0)
    # Field 1000, length-delimited: tag varint (1000 << 3 | 2) = 0xc2 0x3e, then {ledger 1, entry 0}.
    assert parse_entry(entry).payload.endswith(bytes.fromhex("c23e0408011000"))


def test_acked_ranges_round_trip() -> None:
    ranges = {"r2": [(Position(7, 1), Position(7, 9)), (Position(7, 12), Position(8, 0))], "r3": []}
    marker = markers.parse_marker(markers.acked_ranges("sub", "r1", ranges, PUBLISH_TIME))
    assert marker is not None and marker.marker_type == markers.ACKED_RANGES
    assert (marker.body.subscription_name, marker.body.source_cluster) == ("sub", "r1")
    read = {
        c.cluster: [(markers.position_of(r.lower), markers.position_of(r.upper)) for r in c.ranges]
        for c in marker.body.clusters
    }
    assert read == ranges


def test_data_is_not_a_marker() -> None:
    entry = encode_entry(
        MessageMetadata(producer_name=markers.MARKER_PRODUCER_NAME, sequence_id=3, publish_time=1), b"x"
    )
    assert markers.parse_marker(entry) is None
    assert not markers.is_marker(entry)


def test_a_marker_type_magnetar_does_not_read_parses_without_a_body() -> None:
    metadata = MessageMetadata(producer_name="pulsar.txn.marker", sequence_id=1, publish_time=1, marker_type=21)
    marker = markers.parse_marker(encode_entry(metadata, b""))
    assert marker is not None and (marker.marker_type, marker.body) == (21, None)


def test_a_malformed_marker_payload_is_a_protocol_error() -> None:
    metadata = MessageMetadata(producer_name="pulsar.marker", sequence_id=0, publish_time=1, marker_type=10)
    with pytest.raises(ProtocolError, match="lacks required fields"):
        markers.parse_marker(encode_entry(metadata, b""))  # no snapshot_id
    with pytest.raises(ProtocolError, match="unparsable"):
        markers.parse_marker(encode_entry(metadata, b"\x0a\x05ab"))  # a string shorter than its length


_names = st.text(min_size=1, max_size=20)
_positions = st.builds(Position, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))


@given(
    _names, _names, st.dictionaries(_names, _positions, min_size=1, max_size=5), _positions, st.integers(0, 2**63 - 1)
)
def test_snapshot_round_trips(
    snapshot_id: str, local: str, clusters: dict[str, Position], position: Position, time: int
) -> None:
    marker = markers.parse_marker(markers.snapshot(snapshot_id, local, position, clusters, time))
    assert marker is not None
    assert marker.metadata.publish_time == time
    assert marker.body.snapshot_id == snapshot_id
    assert markers.position_of(marker.body.local_message_id) == position
    assert {c.cluster: markers.position_of(c.message_id) for c in marker.body.clusters} == clusters
    assert [c.cluster for c in marker.body.clusters] == sorted(clusters)


@given(_names, _names, _names, _positions)
def test_response_round_trips(snapshot_id: str, reply_to: str, cluster: str, position: Position) -> None:
    marker = markers.parse_marker(markers.snapshot_response(snapshot_id, reply_to, cluster, position, 0))
    assert marker is not None
    assert list(marker.metadata.replicate_to) == [reply_to]
    assert (marker.body.snapshot_id, marker.body.cluster.cluster) == (snapshot_id, cluster)
    assert markers.position_of(marker.body.cluster.message_id) == position
