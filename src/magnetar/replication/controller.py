"""A topic's replicated-subscription controller (PIP-33): the asyncio half of `snapshots.SnapshotController`.

Owns: the timer that starts a snapshot every `replicatedSubscriptionsSnapshotFrequencyMillis`, writing the
markers the pure code returns (REQUEST, RESPONSE, SNAPSHOT, UPDATE) into the topic in the order they were
decided, answering the markers another cluster's replicator brought in (handed over by the replicator
pointing back at that cluster), and the counts its metrics report.
Must not touch: the topic's objects (it reaches the topic through `ReplicatedTopic`, the narrow face the
topic gives it), storage, or what a snapshot means (`snapshots.py`).

Pulsar's ReplicatedSubscriptionsController; the topic starts and stops it as Pulsar's
`PersistentTopic.checkReplicatedSubscriptionControllerState` does.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.positions import Position
from magnetar.protocol import markers
from magnetar.protocol.markers import Marker
from magnetar.protocol.pulsar_markers_pb2 import (
    ReplicatedSubscriptionsAckedRanges,
    ReplicatedSubscriptionsSnapshotRequest,
    ReplicatedSubscriptionsSnapshotResponse,
    ReplicatedSubscriptionsUpdate,
)
from magnetar.replication.acked_ranges import AckedRangesContent, marker_content
from magnetar.replication.snapshots import CachedSnapshot, SnapshotController, respond_to_request, update_target

if TYPE_CHECKING:
    from magnetar.clock import Clock

__all__ = ["ReplicatedSubscriptionsController", "ReplicatedTopic"]

log = logging.getLogger(__name__)


class ReplicatedTopic(Protocol):
    """What the controller reaches of its topic."""

    @property
    def last_data_ms(self) -> int | None:
        """When the last data entry (not a marker) was stored, None if never since the topic loaded."""
        ...

    def append_marker(self, entry: bytes) -> Awaitable[Position]: ...

    def replicator_states(self) -> dict[str, bool]:
        """Each remote cluster the topic replicates to, and whether its replicator is connected."""
        ...

    async def apply_replicated_update(self, subscription: str, position: Position) -> None:
        """Move (or create, then move) a local subscription."""
        ...

    def acked_ranges_due(self) -> list[tuple[str, AckedRangesContent]]:
        """The subscriptions whose consumers acknowledged something since the last call, with their
        ACKED_RANGES content (magnetar's acked ranges)."""
        ...

    async def apply_acked_ranges(self, subscription: str, source: str, content: AckedRangesContent) -> None:
        """Acknowledge on a local subscription what another cluster's acknowledged."""
        ...


class ReplicatedSubscriptionsController:
    """Invariants: markers are appended one at a time, in the order they were decided; a SNAPSHOT counts
    as complete only once it is stored (Pulsar #26119)."""

    def __init__(
        self,
        topic: ReplicatedTopic,
        topic_name: str,
        local_cluster: str,
        frequency_ms: int,
        timeout_ms: int,
        clock: Clock,
        acked_ranges: bool,
        new_snapshot_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        """`acked_ranges`: magnetar's acked ranges are on (replicatedSubscriptionsAckedRangesEnabled): at
        each tick the subscriptions that acknowledged something send it, and what other clusters' sent is
        applied here."""
        self._topic = topic
        self.topic_name = topic_name
        self.local_cluster = local_cluster
        self.frequency_ms = frequency_ms
        self._now_ms = clock.time_ms
        self._acked_ranges = acked_ranges
        self.acked_ranges_written = 0
        self.snapshots = SnapshotController(local_cluster, timeout_ms, new_snapshot_id)
        # How long each completed snapshot took (ms), for pulsar_replicated_subscriptions_snapshot_ms.
        self.snapshot_ms_count = 0
        self.snapshot_ms_sum = 0
        self.updates_written = 0
        self._queue: asyncio.Queue[tuple[bytes, Callable[[Position | None], Any] | None]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._tick_loop(), name=f"snapshots {self.topic_name}"),
            loop.create_task(self._write_loop(), name=f"markers {self.topic_name}"),
        ]
        if self._acked_ranges:
            self._tasks.append(loop.create_task(self._acked_ranges_loop(), name=f"acked ranges {self.topic_name}"))
        log.info("[%s] Replicated subscriptions controller started", self.topic_name)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------------------ the timer

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.frequency_ms / 1000)
            now = self._now_ms()
            timed_out = set(self.snapshots.pending)
            builder = self.snapshots.tick(now, self._topic.last_data_ms, self._topic.replicator_states())
            timed_out.difference_update(self.snapshots.pending)
            if timed_out:
                # A remote that did not answer in replicatedSubscriptionsSnapshotTimeoutSeconds: down, its
                # feature off, or not replicating back; no subscription moves until a snapshot completes.
                log.warning("[%s] Snapshot %s timed out", self.topic_name, ", ".join(sorted(timed_out)))
            if builder is not None:
                log.debug("[%s] Starting snapshot %s", self.topic_name, builder.snapshot_id)
                self._write(builder.request(), builder.request_written)

    async def _acked_ranges_loop(self) -> None:
        """Every half snapshot period, at most one ACKED_RANGES per subscription, and only after its
        consumers acknowledged something: the marker carries the whole state, so one per period is enough.
        It needs no snapshot (the replicator's receipts translate it), so it keeps its own, shorter period:
        an acknowledgement reaches the other clusters within half a period plus the replication delay,
        not a whole period. A failure is logged and leaves the timer (and the snapshots) running."""
        while True:
            await asyncio.sleep(self.frequency_ms / 2000)
            try:
                for subscription, content in self._topic.acked_ranges_due():
                    self._write(markers.acked_ranges(subscription, self.local_cluster, content, self._now_ms()), None)
                    self.acked_ranges_written += 1
            except Exception:
                log.exception("[%s] Acked ranges not written", self.topic_name)

    # ------------------------------------------------------------------------- what arrives

    def marker_received(self, position: Position, marker: Marker) -> None:
        """A marker another cluster wrote, stored here at `position`, read by the replicator pointing
        back at that cluster."""
        now = self._now_ms()
        body = marker.body
        if marker.marker_type == markers.SNAPSHOT_REQUEST:
            assert isinstance(body, ReplicatedSubscriptionsSnapshotRequest)
            response = respond_to_request(body, position, self.local_cluster, now)
            if response is not None:
                self._write(response, None)
        elif marker.marker_type == markers.SNAPSHOT_RESPONSE:
            assert isinstance(body, ReplicatedSubscriptionsSnapshotResponse)
            snapshot_id = body.snapshot_id
            builder = self.snapshots.pending.get(snapshot_id)
            following = self.snapshots.response_received(position, body, now)
            if following is None or builder is None:
                return
            if builder.snapshot_pending:  # the SNAPSHOT, not the second round's REQUEST
                self._write(following, lambda stored: self._snapshot_stored(snapshot_id, stored))
            else:
                self._write(following, None)
        elif marker.marker_type == markers.UPDATE:
            assert isinstance(body, ReplicatedSubscriptionsUpdate)
            target = update_target(body, self.local_cluster)
            if target is not None:
                name = body.subscription_name
                task = asyncio.get_running_loop().create_task(self._apply(name, target))
                self._tasks.append(task)
                task.add_done_callback(self._tasks.remove)
        elif marker.marker_type == markers.ACKED_RANGES and self._acked_ranges:
            assert isinstance(body, ReplicatedSubscriptionsAckedRanges)
            name, source, content = marker_content(body)
            if source != self.local_cluster:
                task = asyncio.get_running_loop().create_task(self._apply_ranges(name, source, content))
                self._tasks.append(task)
                task.add_done_callback(self._tasks.remove)

    async def _apply(self, subscription: str, position: Position) -> None:
        try:
            await self._topic.apply_replicated_update(subscription, position)
        except Exception:
            log.exception("[%s] Replicated subscription %s not moved to %s", self.topic_name, subscription, position)
        else:
            log.debug("[%s] Replicated subscription %s moved to %s", self.topic_name, subscription, position)

    async def _apply_ranges(self, subscription: str, source: str, content: AckedRangesContent) -> None:
        try:
            await self._topic.apply_acked_ranges(subscription, source, content)
        except Exception:
            log.exception("[%s] Acked ranges of %s from %s not applied", self.topic_name, subscription, source)

    def _snapshot_stored(self, snapshot_id: str, position: Position | None) -> None:
        if position is None:
            self.snapshots.snapshot_write_failed(snapshot_id)
            return
        took = self.snapshots.snapshot_written(snapshot_id, self._now_ms())
        if took is not None:
            self.snapshot_ms_count += 1
            self.snapshot_ms_sum += took
            log.debug("[%s] Snapshot %s complete at %s in %d ms", self.topic_name, snapshot_id, position, took)

    # ------------------------------------------------------------------------ subscriptions

    def subscription_passed_snapshot(self, subscription: str, snapshot: CachedSnapshot) -> None:
        """A replicated subscription's mark-delete position passed `snapshot`: the other clusters move
        theirs to its positions (UPDATE)."""
        self._write(markers.subscription_update(subscription, dict(snapshot.clusters), self._now_ms()), None)
        self.updates_written += 1

    # ------------------------------------------------------------------------------ writing

    def _write(self, entry: bytes, done: Callable[[Position | None], Any] | None) -> None:
        self._queue.put_nowait((entry, done))

    async def _write_loop(self) -> None:
        while True:
            entry, done = await self._queue.get()
            try:
                position: Position | None = await self._topic.append_marker(entry)
            except Exception as error:  # noqa: BLE001 - the writer outlives a failed append; done() learns of it
                log.warning("[%s] Marker not stored: %s", self.topic_name, error)
                position = None
            if done is not None:
                done(position)
