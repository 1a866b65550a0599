"""A replicator: one topic partition's entries forwarded to the same topic on one remote cluster.

Owns: the durable cursor `pulsar.repl.<remote>` on the local topic (it holds back retention like a
subscription and survives restarts), the producer `pulsar.repl.<local>--><remote>` on the remote
cluster (reconnected with backoff from 100 ms to 1 min while the remote is away), which entries go
(not those that came from another cluster, `replicated_from`, nor those whose `replicate_to` leaves
this remote out, nor internal markers), and moving the cursor only when the remote has stored an
entry (its SEND_RECEIPT). What was sent and not confirmed when a connection dropped is read and sent
again after the reconnect: the remote drops the repeats when it deduplicates (the original producer
name and sequence id travel with each entry).
Must not touch: the storage engine (it reads through the cursor and the ledger's API) or other
topics. A replicator belongs to its topic, which starts and stops it (broker/topic.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.protocol.forwarding import forwarded_sends
from magnetar.replication.acked_ranges import ReplicatedPositions
from magnetar.replication.producer import PRODUCER_ID, RemoteError, RemoteProducer, RemoteUnavailable
from magnetar.replication.remote_admin import RemoteAdminError, ensure_partitioned_topic

if TYPE_CHECKING:
    from magnetar.client.security import ClientSecurity
    from magnetar.clock import Clock
    from magnetar.positions import Position
    from magnetar.storage import ManagedCursor, ManagedLedger

__all__ = ["Replicator", "REPLICATOR_PREFIX", "cursor_cluster", "cursor_name", "producer_name", "remote_cluster_of"]

log = logging.getLogger(__name__)

# Pulsar's replicatorPrefix: the replicator's cursor is `pulsar.repl.<remote>`, its producer on the remote
# `pulsar.repl.<local>--><remote>`; subscriptions may not use the prefix.
REPLICATOR_PREFIX = "pulsar.repl"
BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 60.0
IDLE_CHECK_S = 1.0  # an idle replicator looks at its remote connection this often
PARTITION_SUFFIX = "-partition-"
# A replicator reads a quarter of its queue at a time (Pulsar reads up to dispatcherMaxReadBatchSize, 100):
# small enough that reads and the remote's work overlap, large enough that a read's fixed cost (a turn of
# the event loop, a reader thread for what is not cached) is spread over many entries.
READS_PER_QUEUE = 4
# The SENDs read ahead and not sent yet are at most a queue's worth of entries, and stop growing past
# this many bytes (a read may go over by its own size).
READ_AHEAD_BYTES_MAX = 8 * 1024 * 1024
# ...and sends at most a quarter of its queue per write, the rest of its room in the next turns of the event
# loop. The remote commits together whatever SENDs arrive during its previous commit and answers them
# together: a whole queue sent in one write came back as 1,000 receipts in one read, and the two clusters
# then took turns (each idle while the other worked) instead of overlapping.
WRITES_PER_QUEUE = 4


def cursor_name(remote_cluster: str) -> str:
    return f"{REPLICATOR_PREFIX}.{remote_cluster}"


def cursor_cluster(name: str) -> str | None:
    """The remote cluster of a replicator's cursor (`pulsar.repl.<cluster>`), None for any other cursor."""
    prefix = REPLICATOR_PREFIX + "."
    return name[len(prefix) :] if name.startswith(prefix) else None


def producer_name(local_cluster: str, remote_cluster: str) -> str:
    return f"{REPLICATOR_PREFIX}.{local_cluster}-->{remote_cluster}"


def remote_cluster_of(producer: str) -> str | None:
    """The cluster a replicator producer comes from (`pulsar.repl.<cluster>-->…`, or the older
    `pulsar.repl.<cluster>`), None for any other producer."""
    prefix = REPLICATOR_PREFIX + "."
    if not producer.startswith(prefix):
        return None
    return producer[len(prefix) :].split("-->", 1)[0]


@dataclass(frozen=True, slots=True)
class ReplicatorFigures:
    """A replicator's outbound side, as Pulsar's ReplicatorStats reports it: entries and payload bytes sent
    since the topic loaded, the entries not replicated yet, how long the oldest unanswered send has
    waited, the connection."""

    msg_out_count: int
    bytes_out_count: int
    replication_backlog: int
    connected: bool
    replication_delay_s: int
    outbound_connection: str | None
    outbound_connected_since_ms: int | None


class ClusterDirectory(Protocol):
    """Where the other clusters are and how to reach them (remote_cluster.RemoteClusters)."""

    def broker_service_url(self, cluster: str) -> str | None: ...

    def admin_service_url(self, cluster: str) -> str | None: ...

    def security(self, cluster: str) -> ClientSecurity: ...


class Replicator:
    """Invariants: at most one remote producer at a time; the cursor's mark-delete position only passes
    entries the remote confirmed or that are not for it; `_in_flight` holds, in read order, what was sent
    since the last entry confirmed: each entry sent and not confirmed yet, and each entry not for this
    remote that came after one of those; `_read_ahead` holds, in read order, what was read after those and
    not sent yet (at most `queue_size` entries), and `_read_ahead_bytes` the size of its SENDs."""

    def __init__(
        self,
        topic_name: str,
        local_cluster: str,
        remote_cluster: str,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        clusters: ClusterDirectory,
        clock: Clock,
        queue_size: int,
        partitions: int = 0,
        record_positions: bool = False,
    ) -> None:
        """`clusters` tells where the remote cluster is and how to reach it (asked at each connect, so that
        a corrected registration is used). `partitions`: how many partitions the topic this one is a
        partition of has (0 for a topic that is not partitioned); the remote gets a partitioned topic with
        at least as many before the first send (Pulsar 4.0's createTopicToRemoteClusterForReplication),
        through its admin API. `record_positions`: keep where each entry landed in the remote topic (its
        receipt), so that replicated subscriptions translate their acknowledgements (acked_ranges.py)."""
        self.topic_name = topic_name
        self.local_cluster = local_cluster
        self.remote_cluster = remote_cluster
        self.ledger = ledger
        self.cursor = cursor
        self._clusters = clusters
        self._clock = clock
        self.queue_size = queue_size
        self.partitions = partitions
        self.positions = ReplicatedPositions() if record_positions else None
        self.producer: RemoteProducer | None = None
        # (position, payload bytes) of each entry sent, in send order; bytes -1 for an entry skipped
        # behind them (it is done once they are).
        self._in_flight: deque[tuple[Any, int]] = deque()
        # (position, payload bytes, SEND frame, sequence id) of each entry read and not sent yet; frame None
        # for one that is not for this remote.
        self._read_ahead: deque[tuple[Any, int, bytes | None, int]] = deque()
        self._read_ahead_bytes = 0
        # The producer `_forward` sends through, which receipts send on through too.
        self._sender: RemoteProducer | None = None
        # A call of `_send_buffered` waits for the next turn of the loop.
        self._send_scheduled = False
        # Set by receipts and by a lost connection: what `_forward` waits for when it can neither read nor send.
        self._progress = asyncio.Event()
        self.state = "Disconnected"
        self._task: asyncio.Task[None] | None = None
        # Counters for Pulsar's replicator stats (the admin API turns them into rates): as Pulsar's, entries
        # (a batch is one) and their payload bytes.
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.connected_since_ms: int | None = None
        # Everything read is sent and the loop waits for the topic's next entry: the cursor's
        # waitingReadOp in Pulsar's internalStats.
        self.waiting_for_entries = False

    @property
    def connected(self) -> bool:
        return self.producer is not None and self.producer.connected

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replicator {self.topic_name} -> {self.remote_cluster}"
            )

    async def stop(self) -> None:
        """Stop forwarding and close the remote producer; the cursor stays (its owner deletes it)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.close()
        self.state = "Stopped"

    def backlog(self) -> int:
        return self.cursor.number_of_entries_in_backlog()

    # ------------------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        delay = BACKOFF_INITIAL_S
        while True:
            producer = await self._connect()
            if producer is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            delay = BACKOFF_INITIAL_S
            try:
                await self._forward(producer)
            except RemoteUnavailable as error:
                log.warning("[%s] Replicator to %s disconnected: %s", self.topic_name, self.remote_cluster, error)
            except Exception:
                # A read that failed, or a remote that answered nonsense: start over after a pause,
                # from the last confirmed entry.
                log.exception("[%s] Replicator to %s failed; it starts again", self.topic_name, self.remote_cluster)
                await asyncio.sleep(delay)
            finally:
                self.producer = None
                self.connected_since_ms = None
                self.state = "Disconnected"
                if producer.connected:
                    await producer.close()

    async def _connect(self) -> RemoteProducer | None:
        url = self._clusters.broker_service_url(self.remote_cluster)
        if not url:
            log.warning(
                "[%s] Replicator to %s: the cluster has no brokerServiceUrl registered",
                self.topic_name,
                self.remote_cluster,
            )
            return None
        self.state = "Starting"
        name = producer_name(self.local_cluster, self.remote_cluster)
        try:
            security = self._clusters.security(self.remote_cluster)
            producer = RemoteProducer(
                url,
                self.topic_name,
                name,
                self.queue_size,
                on_receipts=self._on_receipts,
                on_disconnect=lambda _error: self._progress.set(),
                security=security,
                clock=self._clock,
            )
            if self.partitions:
                await self._ensure_remote_partitions(security)
            await producer.start()
        except (RemoteUnavailable, RemoteError, OSError, ValueError) as error:
            log.info("[%s] Replicator to %s at %s not connected: %s", self.topic_name, self.remote_cluster, url, error)
            self.state = "Disconnected"
            return None
        self.producer = producer
        self.state = "Started"
        self.connected_since_ms = self._clock.time_ms()
        # Everything not confirmed yet goes again: sends in flight when the last connection dropped
        # were never confirmed, and the cursor skips what was.
        self._in_flight.clear()
        self.cursor.rewind()
        log.info(
            "[%s] Replicator to %s connected at %s, backlog %d entries",
            self.topic_name,
            self.remote_cluster,
            producer.address,
            self.backlog(),
        )
        return producer

    async def _ensure_remote_partitions(self, security: ClientSecurity) -> None:
        admin = self._clusters.admin_service_url(self.remote_cluster)
        if not admin:
            raise RemoteUnavailable(f"cluster {self.remote_cluster} has no serviceUrl for its admin API")
        base = self.topic_name.rsplit(PARTITION_SUFFIX, 1)[0]
        try:
            await ensure_partitioned_topic(admin, base, self.partitions, security)
        except RemoteAdminError as error:
            raise RemoteUnavailable(str(error)) from error

    async def _forward(self, producer: RemoteProducer) -> None:
        """Read and send until the connection drops. Reads run ahead of the sends by up to a queue's worth
        of entries, and each socket read of receipts sends at once as many as it made room for
        (`_on_receipts`): the remote gets the next entries as soon as it has room for them, without waiting
        for a read or for this loop's turn. A read from disk runs meanwhile. Pulsar's replicator reads for
        the room of its queue only; reading ahead keeps the whole queue on its way when reads and receipts
        take turns on one event loop, and writes of a quarter of the queue (`_send_buffered`) keep the
        remote's commits overlapping with this cluster's work instead of taking turns with it."""
        cursor = self.cursor
        read_ahead = self._read_ahead
        # A backlog found at connect time is logged once it is all confirmed.
        catching_up = self.backlog() > 0
        started = self._clock.monotonic()
        read_max = max(1, self.queue_size // READS_PER_QUEUE)
        self._sender = producer
        try:
            while True:
                if not producer.connected:
                    raise RemoteUnavailable("the remote producer's connection dropped")
                room = self.queue_size - len(read_ahead)
                if room > 0 and self._read_ahead_bytes < READ_AHEAD_BYTES_MAX and cursor.has_more_entries():
                    entries = cursor.undeleted_entries(await cursor.read_entries(min(room, read_max)))
                    self._buffer(entries, producer.max_frame_bytes)
                    self._send_buffered(producer)
                elif read_ahead:
                    if self._send_buffered(producer):
                        continue
                    # The queue is full (receipts make room) or the socket holds enough unsent bytes.
                    if producer.write_budget <= 0:
                        await producer.drain()
                    else:
                        self._progress.clear()
                        await self._progress.wait()
                else:
                    if catching_up and producer.pending == 0 and self.backlog() == 0:
                        catching_up = False
                        log.info(
                            "[%s] Replicator to %s caught up in %.1f s",
                            self.topic_name,
                            self.remote_cluster,
                            self._clock.monotonic() - started,
                        )
                    await self._wait_for_entries()
        finally:
            # What was read and not sent is read again after the reconnect (the cursor rewinds to the last
            # confirmed).
            self._sender = None
            read_ahead.clear()
            self._read_ahead_bytes = 0

    async def _wait_for_entries(self) -> None:
        """New entries, or a second passing (the loop then sees whether the remote went away)."""
        self.waiting_for_entries = True
        try:
            await asyncio.wait_for(self.ledger.wait_for_new_entries(self.ledger.last_confirmed_entry), IDLE_CHECK_S)
        except TimeoutError:
            pass
        finally:
            self.waiting_for_entries = False

    def _buffer(self, entries: list[Any], max_frame_bytes: int) -> None:
        """Add a read's entries to the read-ahead, each with its SEND, or with none when it is not for this
        remote: not one that came from another cluster (its markers reached the topic's controller when they
        were stored), nor one whose `replicate_to` leaves this remote out (a SNAPSHOT marker names only its
        own cluster), nor one larger than the remote accepts (it can never go there, and holding it would
        stop the rest)."""
        sends = forwarded_sends(PRODUCER_ID, [entry.data for entry in entries], self.local_cluster, self.remote_cluster)
        append = self._read_ahead.append
        added = 0
        for entry, send in zip(entries, sends):
            if send is None:
                append((entry.position, -1, None, 0))
                continue
            frame, sequence_id, size = send
            if len(frame) > max_frame_bytes:
                log.error(
                    "[%s] Entry %s not replicated to %s: its SEND of %d bytes exceeds the remote's limit of %d",
                    self.topic_name,
                    entry.position,
                    self.remote_cluster,
                    len(frame),
                    max_frame_bytes,
                )
                append((entry.position, -1, None, 0))
                continue
            append((entry.position, size, frame, sequence_id))
            added += len(frame)
        self._read_ahead_bytes += added

    def _send_buffered(self, producer: RemoteProducer) -> int:
        """Send from the read-ahead, in order, what the producer has room for (its queue, and its socket's
        unsent bytes), at most a `WRITES_PER_QUEUE`th of the queue now and the rest in the next turns of
        the loop, and pass the entries not for this remote on the way; returns how many went or were
        passed now."""
        read_ahead = self._read_ahead
        if not read_ahead:
            return 0
        room, budget = producer.room, producer.write_budget
        write_max = max(1, self.queue_size // WRITES_PER_QUEUE)
        in_flight = self._in_flight
        frames: list[bytes] = []
        sequence_ids: list[int] = []
        skipped = None
        taken = 0
        while read_ahead:
            position, size, frame, sequence_id = read_ahead[0]
            if frame is None:
                read_ahead.popleft()
                taken += 1
                if in_flight:
                    in_flight.append((position, -1))
                else:
                    skipped = position
                continue
            if room <= 0 or budget <= 0 or len(frames) == write_max:
                break
            read_ahead.popleft()
            taken += 1
            room -= 1
            budget -= len(frame)
            frames.append(frame)
            sequence_ids.append(sequence_id)
            in_flight.append((position, size))
        if frames:
            self._read_ahead_bytes -= sum(map(len, frames))
            producer.send_frames(frames, sequence_ids)
            if len(frames) == write_max and read_ahead and room > 0 and not self._send_scheduled:
                self._send_scheduled = True
                asyncio.get_running_loop().call_soon(self._send_next, producer)
        if skipped is not None and not in_flight:
            self.cursor.mark_delete(skipped)
        return taken

    def _send_next(self, producer: RemoteProducer) -> None:
        self._send_scheduled = False
        if producer is self._sender and producer.connected and not self.cursor.closed:
            self._send_buffered(producer)

    def pass_replicated(self, first: Position, last: Position) -> None:
        """Entries `first` to `last` (one append of another cluster's replicator, all carrying
        `replicated_from`) are stored: none is for this remote. When everything before them is done, the
        cursor passes them now instead of reading each back only to skip it, so a topic that receives
        replication pays nothing per entry for its own replicators. Otherwise the loop skips them as it
        reads (`_send_buffered`)."""
        cursor = self.cursor
        if (
            self._in_flight
            or self._read_ahead
            or cursor.closed
            or self.ledger.next_valid_position(cursor.mark_delete_position) != first
        ):
            return
        cursor.mark_delete(last)

    def _on_receipts(self, message_ids: list[tuple[int, int]]) -> None:
        """The remote stored the oldest `len(message_ids)` entries in flight (or dropped them as
        duplicates): the cursor moves past them, and past the skipped entries right behind them, once
        per socket read of receipts; then the read-ahead fills the room they made."""
        in_flight = self._in_flight
        answered = len(message_ids)
        size = 0
        done = None
        sent: list[Any] | None = [] if self.positions is not None else None
        while answered:
            done, length = in_flight.popleft()
            if length >= 0:
                answered -= 1
                size += length
                if sent is not None:
                    sent.append(done)
        while in_flight and in_flight[0][1] < 0:
            done = in_flight.popleft()[0]
        self.msg_out_counter += len(message_ids)
        self.bytes_out_counter += size
        if sent:
            self.positions.record(sent, message_ids)  # type: ignore[union-attr]
        if done is not None and not self.cursor.closed:
            self.cursor.mark_delete(done)
        sender = self._sender
        if sender is not None and sender.connected and not self.cursor.closed:
            self._send_buffered(sender)
        self._progress.set()

    # ------------------------------------------------------------------------------- stats

    def stats(self) -> ReplicatorFigures:
        """What Pulsar's ReplicatorStats says of the outbound side; rates and Pulsar's JSON are the admin API's."""
        producer = self.producer
        oldest = producer.oldest_pending_since_ms if producer is not None else None
        return ReplicatorFigures(
            msg_out_count=self.msg_out_counter,
            bytes_out_count=self.bytes_out_counter,
            replication_backlog=self.backlog(),
            connected=self.connected,
            replication_delay_s=max(0, (self._clock.time_ms() - oldest) // 1000) if oldest is not None else 0,
            outbound_connection=producer.channel if producer is not None and producer.connected else None,
            outbound_connected_since_ms=self.connected_since_ms,
        )
