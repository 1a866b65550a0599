"""Replicated subscriptions' snapshots (PIP-33), as pure state: what a topic's controller decides and what
a replicated subscription keeps, with time and snapshot ids given, like `magnetar.core`.

Owns:
- `SnapshotBuilder`: one snapshot taken by the cluster that started it (Pulsar's
  ReplicatedSubscriptionsSnapshotBuilder): its REQUEST, the RESPONSEs collected (one round for two
  clusters, two for more), its timeout, and the SNAPSHOT it ends with;
- `SnapshotController`: the decisions of a topic's controller (the pure half of Pulsar's
  ReplicatedSubscriptionsController): whether a tick starts a snapshot, which builder a RESPONSE belongs
  to, timeouts and completions, and the counts its metrics report;
- `respond_to_request` and `update_target`: what a cluster answers to another's REQUEST, and where an
  UPDATE moves the local subscription;
- `ReplicatedSubscriptionSnapshotCache`: the snapshots one replicated subscription has read, and the one
  its mark-delete position has just passed (Pulsar's ReplicatedSubscriptionSnapshotCache).
Must not touch: asyncio, the wall clock, random ids, storage or sockets. The broker runs the timer, reads
and appends the marker entries these return (`magnetar.protocol.markers`), and tells them where each one
landed.

The protocol, message by message (Pulsar's ReplicatedSubscriptionsController and
ReplicatedSubscriptionsSnapshotBuilder): A's tick writes REQUEST; A's replicators carry it to B and C; on B
the replicator pointing back at A hands it to B's controller, which writes a RESPONSE for A only; it comes
back into A's topic at some position p, and A's builder files it. When every remote answered (twice with
more than one remote), A writes SNAPSHOT {local p of the last response, every remote's first-round
position}. A subscription reading SNAPSHOT caches it; when its mark-delete position passes one, an UPDATE
carries that snapshot's remote positions to the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from sortedcontainers import SortedDict

from magnetar.positions import Position
from magnetar.protocol import markers
from magnetar.protocol.pulsar_markers_pb2 import (
    ReplicatedSubscriptionsSnapshot,
    ReplicatedSubscriptionsSnapshotRequest,
    ReplicatedSubscriptionsSnapshotResponse,
    ReplicatedSubscriptionsUpdate,
)

__all__ = [
    "CachedSnapshot",
    "ReplicatedSubscriptionSnapshotCache",
    "SNAPSHOT_MAX_CACHED_PER_SUBSCRIPTION",
    "SnapshotBuilder",
    "SnapshotController",
    "cached_snapshot",
    "respond_to_request",
    "update_target",
]

# Pulsar's replicatedSubscriptionsSnapshotMaxCachedPerSubscription.
SNAPSHOT_MAX_CACHED_PER_SUBSCRIPTION = 10


class SnapshotBuilder:
    """One snapshot, from its first REQUEST to its SNAPSHOT marker.

    Invariants: `missing` holds the remotes this round still waits for; `responses` holds each remote's
    first answer (a later round never replaces it); once the SNAPSHOT marker is being written, no
    response changes anything until that write fails.
    """

    def __init__(
        self, snapshot_id: str, local_cluster: str, remote_clusters: list[str], start_ms: int, timeout_ms: int
    ) -> None:
        if not remote_clusters:
            raise ValueError("a snapshot needs at least one remote cluster")
        self.snapshot_id = snapshot_id
        self.local_cluster = local_cluster
        self.remote_clusters = frozenset(remote_clusters)
        self.start_ms = start_ms
        self.timeout_ms = timeout_ms
        self.missing = set(self.remote_clusters)
        self.responses: dict[str, Position] = {}
        # With more than one remote, a second round makes sure that whatever the remotes sent each other
        # while answering the first one has reached this cluster too (PIP-33, "Snapshot steps").
        self.needs_two_rounds = len(self.remote_clusters) > 1
        self.first_round_complete = False
        # Where the first REQUEST landed in the local topic (magnetar's SNAPSHOT extension).
        self.request_position: Position | None = None
        # The local position of the response that completed the snapshot, once it did.
        self.local_position: Position | None = None
        self.snapshot_pending = False

    def request(self) -> bytes:
        """The REQUEST marker of a round, to append locally (its replicators carry it to every remote)."""
        return markers.snapshot_request(self.snapshot_id, self.local_cluster, self.start_ms)

    def request_written(self, position: Position | None) -> None:
        """The first round's REQUEST stored at `position` (None: not stored, the snapshot has none)."""
        if self.request_position is None:
            self.request_position = position

    def response_received(
        self, position: Position, response: ReplicatedSubscriptionsSnapshotResponse, now_ms: int
    ) -> bytes | None:
        """A remote's RESPONSE landed in the local topic at `position`. Returns the marker to append
        next: the second round's REQUEST, or the SNAPSHOT once every remote answered the last round."""
        cluster = response.cluster.cluster
        if cluster not in self.remote_clusters:
            return None
        self.responses.setdefault(cluster, markers.position_of(response.cluster.message_id))
        self.missing.discard(cluster)
        if self.missing:
            return None
        if self.needs_two_rounds and not self.first_round_complete:
            self.first_round_complete = True
            self.missing = set(self.remote_clusters)
            return markers.snapshot_request(self.snapshot_id, self.local_cluster, now_ms)
        if self.snapshot_pending:
            return None
        # Pulsar #26119: the snapshot is complete only once this marker is stored; until then a late
        # response may not write a second one, and a failed write lets the next response try again.
        self.snapshot_pending = True
        self.local_position = position
        return markers.snapshot(
            self.snapshot_id, self.local_cluster, position, self.responses, now_ms, self.request_position
        )

    def snapshot_write_failed(self) -> None:
        self.snapshot_pending = False

    def timed_out(self, now_ms: int) -> bool:
        """Pulsar's `startTimeMillis + timeoutMillis < now`."""
        return self.start_ms + self.timeout_ms < now_ms


class SnapshotController:
    """A topic's snapshots in progress and done, and when to take the next one.

    Invariants: every pending builder's id is a key of `pending`; `last_completed_start_ms` is the start
    of the snapshot named `last_completed_snapshot_id` (0 before any completed).
    """

    def __init__(self, local_cluster: str, timeout_ms: int, new_snapshot_id: Callable[[], str]) -> None:
        """`timeout_ms`: replicatedSubscriptionsSnapshotTimeoutSeconds in ms. `new_snapshot_id`: a fresh
        id per snapshot (Pulsar: a random UUID)."""
        self.local_cluster = local_cluster
        self.timeout_ms = timeout_ms
        self._new_snapshot_id = new_snapshot_id
        self.pending: dict[str, SnapshotBuilder] = {}
        self.last_completed_snapshot_id: str | None = None
        self.last_completed_start_ms = 0
        # For the metrics: pulsar_replicated_subscriptions_pending_snapshots is len(pending).
        self.started_count = 0
        self.completed_count = 0
        self.timed_out_count = 0

    def tick(self, now_ms: int, last_data_ms: int | None, replicators: Mapping[str, bool]) -> SnapshotBuilder | None:
        """A timer tick (every replicatedSubscriptionsSnapshotFrequencyMillis). `last_data_ms`: when the
        last data entry (not a marker) was stored, local or replicated, None if never; `replicators`:
        each remote cluster and whether its replicator is connected. Returns the new snapshot's builder,
        whose `request()` the caller appends, or None when no snapshot starts."""
        for snapshot_id in [i for i, builder in self.pending.items() if builder.timed_out(now_ms)]:
            del self.pending[snapshot_id]
            self.timed_out_count += 1
        if self.last_completed_snapshot_id is None and self.pending:
            # Pulsar #23839: a peer that never answers (feature off, one-way replication) gets one REQUEST
            # per timeout, not one per tick.
            return None
        if last_data_ms is None or last_data_ms < self.last_completed_start_ms:
            # Nothing stored since the last snapshot started (#16618, #10292): it still holds.
            return None
        if not replicators or not all(replicators.values()):
            # A snapshot without a cluster could skip what that cluster sent through a third one.
            return None
        builder = SnapshotBuilder(
            self._new_snapshot_id(), self.local_cluster, sorted(replicators), now_ms, self.timeout_ms
        )
        self.pending[builder.snapshot_id] = builder
        self.started_count += 1
        return builder

    def response_received(
        self, position: Position, response: ReplicatedSubscriptionsSnapshotResponse, now_ms: int
    ) -> bytes | None:
        """A RESPONSE came back into the local topic at `position`; one for a snapshot no longer pending
        (timed out, done, or another broker's) is ignored."""
        builder = self.pending.get(response.snapshot_id)
        if builder is None:
            return None
        return builder.response_received(position, response, now_ms)

    def snapshot_written(self, snapshot_id: str, now_ms: int) -> int | None:
        """The SNAPSHOT marker of `snapshot_id` is stored: the snapshot is complete. Returns how long it
        took (pulsar_replicated_subscriptions_snapshot_ms), None for a snapshot no longer pending."""
        builder = self.pending.pop(snapshot_id, None)
        if builder is None:
            return None
        self.last_completed_snapshot_id = snapshot_id
        self.last_completed_start_ms = builder.start_ms
        self.completed_count += 1
        return now_ms - builder.start_ms

    def snapshot_write_failed(self, snapshot_id: str) -> None:
        builder = self.pending.get(snapshot_id)
        if builder is not None:
            builder.snapshot_write_failed()


def respond_to_request(
    request: ReplicatedSubscriptionsSnapshotRequest, request_position: Position, local_cluster: str, now_ms: int
) -> bytes | None:
    """The RESPONSE a cluster writes when another's REQUEST, stored here at `request_position`, is read
    by the replicator pointing back at the requester; None for a request that names no requester.

    The answer is the position of the REQUEST itself (Pulsar's newer brokers; 3.x answered the topic's
    last position). Everything the requester had sent before its REQUEST is below it here, and whatever
    this cluster stores after it reaches the requester after the REQUEST was written there: the
    translation of acknowledged ranges (docs/replication.md) rests on both.
    """
    if not request.HasField("source_cluster") or request.source_cluster == local_cluster:
        return None
    return markers.snapshot_response(
        request.snapshot_id, request.source_cluster, local_cluster, request_position, now_ms
    )


def update_target(update: ReplicatedSubscriptionsUpdate, local_cluster: str) -> Position | None:
    """Where an UPDATE from another cluster moves this cluster's subscription `update.subscription_name`
    (cumulatively: a mark-delete position only moves forward), None when it names no position here."""
    target = None
    for cluster_id in update.clusters:
        if cluster_id.cluster == local_cluster:
            target = markers.position_of(cluster_id.message_id)
    return target


class CachedSnapshot(NamedTuple):
    snapshot_id: str
    # Where the snapshot's last response landed in the local topic: a mark-delete position at or past it
    # means the remote positions below are consumed too.
    position: Position
    # Each remote cluster's position, by cluster name.
    clusters: tuple[tuple[str, Position], ...]
    # magnetar: where its first REQUEST was written locally (None in a Pulsar broker's snapshot).
    request_position: Position | None


def cached_snapshot(snapshot: ReplicatedSubscriptionsSnapshot) -> CachedSnapshot:
    """The parts of a SNAPSHOT marker a subscription keeps."""
    request = markers.position_of(snapshot.request_message_id) if snapshot.HasField("request_message_id") else None
    return CachedSnapshot(
        snapshot.snapshot_id,
        markers.position_of(snapshot.local_message_id),
        tuple((c.cluster, markers.position_of(c.message_id)) for c in snapshot.clusters),
        request,
    )


class ReplicatedSubscriptionSnapshotCache:
    """The snapshots a replicated subscription read and its mark-delete position has not passed yet, as
    Pulsar 4.0 keeps them: by local position, the newest `max_cached` (a snapshot at a position already
    held replaces it; the oldest go first).

    Invariants: at most `max_cached` snapshots; no two at one position.
    """

    def __init__(self, max_cached: int = SNAPSHOT_MAX_CACHED_PER_SUBSCRIPTION) -> None:
        if max_cached < 1:
            raise ValueError(f"replicatedSubscriptionsSnapshotMaxCachedPerSubscription must be >= 1, not {max_cached}")
        self.max_cached = max_cached
        self._snapshots: SortedDict[Position, CachedSnapshot] = SortedDict()

    def __len__(self) -> int:
        return len(self._snapshots)

    def snapshots(self) -> list[CachedSnapshot]:
        """Oldest first."""
        return list(self._snapshots.values())

    def add_new_snapshot(self, snapshot: CachedSnapshot) -> None:
        snapshots = self._snapshots
        snapshots[snapshot.position] = snapshot
        while len(snapshots) > self.max_cached:
            snapshots.popitem(0)

    def advanced_mark_delete_position(self, mark_delete: Position) -> CachedSnapshot | None:
        """The mark-delete position moved to `mark_delete`: drop every snapshot at or below it and return
        the newest of them (the one an UPDATE carries), None when there was none."""
        snapshots = self._snapshots
        found = None
        while snapshots and snapshots.peekitem(0)[0] <= mark_delete:
            found = snapshots.popitem(0)[1]
        return found
