"""Marker entries: what the broker writes into a topic for its own use, never for consumers.

Owns: the bytes of Pulsar's replicated-subscription markers (PIP-33; Pulsar's `PulsarMarkers.proto` and
`Markers.java`) and of magnetar's acked-ranges marker, as whole payload sections (checksummed
MessageMetadata + marker payload, what Pulsar's `Commands.serializeMetadataAndPayload(Crc32c, ...)` writes),
and reading them back. Must not touch: when markers are written or what they cause (replication.snapshots
decides, the broker appends), storage, clocks (the publish time is a parameter) or sockets.

Metadata as Pulsar's `Markers.newMessage` writes it: `producer_name = pulsar.marker`, `sequence_id = 0`,
`publish_time`, `marker_type`, and `replicate_to` by type:

    REQUEST   (10)  none                    every remote cluster
    RESPONSE  (11)  [the requesting cluster] only the cluster that asked
    SNAPSHOT  (12)  [the local cluster]      nowhere: it stays in the topic that wrote it
    UPDATE    (13)  none                    every remote cluster
    ACKED_RANGES (100, magnetar) none        every remote cluster (a Pulsar broker skips the type)

Clusters in SNAPSHOT and UPDATE are ordered by name, as Pulsar's TreeMap orders them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from google.protobuf.message import DecodeError, Message

from magnetar.positions import Position
from magnetar.protocol.commands import wire_id
from magnetar.protocol.framing import ProtocolError, missing_fields
from magnetar.protocol.messages import encode_entry, parse_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata
from magnetar.protocol.pulsar_markers_pb2 import (
    ClusterMessageId,
    MarkersMessageIdData,
    MarkerType,
    ReplicatedSubscriptionsAckedRanges,
    ReplicatedSubscriptionsSnapshot,
    ReplicatedSubscriptionsSnapshotRequest,
    ReplicatedSubscriptionsSnapshotResponse,
    ReplicatedSubscriptionsUpdate,
)

__all__ = [
    "ACKED_RANGES",
    "MARKER_PRODUCER_NAME",
    "Marker",
    "SNAPSHOT",
    "SNAPSHOT_REQUEST",
    "SNAPSHOT_RESPONSE",
    "UPDATE",
    "acked_ranges",
    "is_marker",
    "parse_marker",
    "position_of",
    "snapshot",
    "snapshot_request",
    "snapshot_response",
    "subscription_update",
]

# Pulsar's producer name for the markers the broker writes (transaction markers use `pulsar.txn.marker`,
# which magnetar never writes). Every stored entry with a marker type carries it: the broker writes
# markers so, and the only other way a marker gets in is another cluster's replicator forwarding one,
# whose metadata (and so the stored producer name) keeps the name its broker wrote.
MARKER_PRODUCER_NAME = "pulsar.marker"

SNAPSHOT_REQUEST = MarkerType.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
SNAPSHOT_RESPONSE = MarkerType.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
SNAPSHOT = MarkerType.REPLICATED_SUBSCRIPTION_SNAPSHOT
UPDATE = MarkerType.REPLICATED_SUBSCRIPTION_UPDATE
ACKED_RANGES = MarkerType.MAGNETAR_REPLICATED_SUBSCRIPTION_ACKED_RANGES

_BODIES: dict[int, type[Message]] = {
    SNAPSHOT_REQUEST: ReplicatedSubscriptionsSnapshotRequest,
    SNAPSHOT_RESPONSE: ReplicatedSubscriptionsSnapshotResponse,
    SNAPSHOT: ReplicatedSubscriptionsSnapshot,
    UPDATE: ReplicatedSubscriptionsUpdate,
    ACKED_RANGES: ReplicatedSubscriptionsAckedRanges,
}


class Marker(NamedTuple):
    """A marker entry read back: its metadata, and its payload parsed by type (None for a type magnetar
    does not read, such as Pulsar's transaction markers)."""

    marker_type: int
    metadata: MessageMetadata
    body: Message | None


def snapshot_request(snapshot_id: str, source_cluster: str, publish_time: int) -> bytes:
    request = ReplicatedSubscriptionsSnapshotRequest(snapshot_id=snapshot_id, source_cluster=source_cluster)
    return _entry(SNAPSHOT_REQUEST, request, publish_time, None)


def snapshot_response(
    snapshot_id: str, reply_to_cluster: str, cluster: str, position: Position, publish_time: int
) -> bytes:
    """`cluster`'s answer to `reply_to_cluster`'s request: its topic's position `position`."""
    response = ReplicatedSubscriptionsSnapshotResponse(
        snapshot_id=snapshot_id, cluster=ClusterMessageId(cluster=cluster, message_id=_message_id(position))
    )
    return _entry(SNAPSHOT_RESPONSE, response, publish_time, reply_to_cluster)


def snapshot(
    snapshot_id: str,
    local_cluster: str,
    local_position: Position,
    clusters: Mapping[str, Position],
    publish_time: int,
    request_position: Position | None = None,
) -> bytes:
    """A completed snapshot: `local_position` here corresponds to `clusters`' positions there.
    `request_position` (magnetar) is where its first REQUEST was written here."""
    body = ReplicatedSubscriptionsSnapshot(
        snapshot_id=snapshot_id, local_message_id=_message_id(local_position), clusters=_cluster_ids(clusters)
    )
    if request_position is not None:
        body.request_message_id.CopyFrom(_message_id(request_position))
    return _entry(SNAPSHOT, body, publish_time, local_cluster)


def subscription_update(subscription_name: str, clusters: Mapping[str, Position], publish_time: int) -> bytes:
    update = ReplicatedSubscriptionsUpdate(subscription_name=subscription_name, clusters=_cluster_ids(clusters))
    return _entry(UPDATE, update, publish_time, None)


def acked_ranges(
    subscription_name: str,
    source_cluster: str,
    ranges: Mapping[str, Iterable[tuple[Position, Position]]],
    publish_time: int,
) -> bytes:
    """magnetar's marker: `source_cluster`'s subscription acknowledged the entries of each cluster's
    open-closed ranges `(lower, upper]`, given in that cluster's positions. A lower bound is often just
    before a ledger's first entry (`(ledger, -1)`) or the earliest position (`(-1, -1)`): ids travel as
    Pulsar's message ids do, -1 as 2^64 - 1 (`commands.signed_id` reads them back)."""
    body = ReplicatedSubscriptionsAckedRanges(subscription_name=subscription_name, source_cluster=source_cluster)
    for cluster in sorted(ranges):
        item = body.clusters.add(cluster=cluster)
        for lower, upper in ranges[cluster]:
            item.ranges.add(
                lower=MarkersMessageIdData(ledger_id=wire_id(lower[0]), entry_id=wire_id(lower[1])),
                upper=MarkersMessageIdData(ledger_id=wire_id(upper[0]), entry_id=wire_id(upper[1])),
            )
    return _entry(ACKED_RANGES, body, publish_time, None)


def parse_marker(section: bytes) -> Marker | None:
    """The marker in a stored entry's (or a SEND's) payload section, or None when the entry is data.

    Raises ChecksumError as `messages.parse_entry` does, and ProtocolError when the section or a marker
    payload of a known type is malformed.
    """
    parsed = parse_entry(section)
    if parsed.marker_type is None:
        return None
    body_type = _BODIES.get(parsed.marker_type)
    if body_type is None:
        return Marker(parsed.marker_type, parsed.metadata, None)
    body = body_type()
    try:
        body.ParseFromString(parsed.payload)
    except DecodeError as error:
        raise ProtocolError(f"unparsable {body_type.__name__}: {error}") from error
    if not body.IsInitialized():
        raise ProtocolError(f"{body_type.__name__} lacks required fields: {missing_fields(body)}")
    return Marker(parsed.marker_type, parsed.metadata, body)


def is_marker(section: bytes) -> bool:
    """The entry's metadata carries a marker type: it is the broker's, never a consumer's (Pulsar's
    `Markers.isServerOnlyMarker`). Raises as `messages.parse_entry` does."""
    return parse_entry(section).marker_type is not None


def position_of(message_id: MarkersMessageIdData) -> Position:
    return Position(message_id.ledger_id, message_id.entry_id)


def _message_id(position: Position) -> MarkersMessageIdData:
    return MarkersMessageIdData(ledger_id=position[0], entry_id=position[1])


def _cluster_ids(clusters: Mapping[str, Position]) -> list[ClusterMessageId]:
    return [ClusterMessageId(cluster=name, message_id=_message_id(clusters[name])) for name in sorted(clusters)]


def _entry(marker_type: int, body: Message, publish_time: int, replicate_to: str | None) -> bytes:
    metadata = MessageMetadata(
        producer_name=MARKER_PRODUCER_NAME, sequence_id=0, publish_time=publish_time, marker_type=marker_type
    )
    if replicate_to is not None:
        metadata.replicate_to.append(replicate_to)
    return encode_entry(metadata, body.SerializeToString())
