"""A producer on a connection: appends its SENDs and answers with receipts in send order.

Owns: the pipeline of one producer (append, wait for durability, SEND_RECEIPT strictly in order),
deduplication by sequence id when the topic has it on (`PersistentTopic.deduplication_enabled`), and
SEND_ERROR replies.
Must not touch: the ledger's internals or other producers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Mapping
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol

from magnetar.protocol import commands
from magnetar.replication.replicator import remote_cluster_of

if TYPE_CHECKING:
    from magnetar.broker.peer import ClientConnection
    from magnetar.broker.topic_context import TopicContext
    from magnetar.broker.topic_name import TopicName
    from magnetar.positions import Position
    from magnetar.storage import ManagedLedger


class ProducerTopic(Protocol):
    """What a producer reaches of its topic (topic.PersistentTopic, which names this module's class, not
    the other way round)."""

    # Pulsar's msgInCounter and bytesInCounter, and when the last data entry was stored (epoch ms).
    msg_in_counter: int
    bytes_in_counter: int
    last_data_ms: int | None

    @property
    def name(self) -> TopicName: ...

    @property
    def context(self) -> TopicContext: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def deduplication_enabled(self) -> bool: ...

    @property
    def sequence_pushed(self) -> dict[str, int]: ...

    @property
    def sequence_persisted(self) -> dict[str, int]: ...

    @property
    def replicators(self) -> Mapping[str, object]: ...

    def replicated_entries_stored(self, first: Position, last: Position) -> None: ...

    def replicated_marker_stored(self, origin: str, position: Position, data: bytes) -> None: ...

    def remove_producer(self, producer: ServerProducer) -> None: ...

    def note_delayed_delivery(self) -> None: ...


__all__ = ["SEND_ENTRY", "SEND_MESSAGES", "Send", "ServerProducer"]

log = logging.getLogger(__name__)

# A duplicate's receipt carries no position: Pulsar answers it with message id (-1, -1).
_DUPLICATE = (-1, -1)


# A SEND as the connection hands it over: (sequence id, highest sequence id, entry bytes, key hash, message
# count, publish time, producer name in the entry's metadata, whether the entry is a marker: only another
# cluster's replicator forwards those).
Send = tuple[int, int, bytes, int, int, int, str, bool]
# A `Send`'s entry bytes and message count: what the connection's publish limits count.
SEND_ENTRY = itemgetter(2)
SEND_MESSAGES = itemgetter(4)


class ServerProducer:
    """Invariants: receipts leave in the order the SENDs arrived; a closed producer appends nothing."""

    def __init__(
        self, connection: ClientConnection, topic: ProducerTopic, producer_id: int, name: str, access_mode: str
    ) -> None:
        self.connection = connection
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.closed = False
        # Runs of SENDs awaiting their receipts, in send order: (future of the batch's positions or None
        # for resent duplicates, the SENDs as `publish_many` got them, index of the run's first SEND in
        # the batch). A socket read's SENDs are one run unless duplicates split it.
        self._pending: deque[tuple[asyncio.Future | None, list[Send], int]] = deque()
        # Counted per socket read of SENDs, not per message; the admin API turns them into rates.
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.connected_since_ms = topic.context.clock.time_ms()
        # A replicator's producer from another cluster (`pulsar.repl.<cluster>-->…`): its entries keep
        # their original producer's name and sequence ids, and deduplication goes by those (Pulsar's
        # replication dedup V1), so a resend after the replicator reconnected is dropped.
        self.remote_cluster = remote_cluster_of(name)

    def publish_many(self, sends: list[Send]) -> None:
        """Append the SENDs of one socket read (`Send`) with one storage call; receipts follow in send
        order once each SEND and every earlier one are answered."""
        topic = self.topic
        pending = self._pending
        if topic.deduplication_enabled:
            accepted = []
            # Runs of SENDs in send order, each flagged whether it holds duplicates.
            runs: list[tuple[bool, list[Send]]] = []
            pushed = topic.sequence_pushed
            replicated = self.remote_cluster is not None
            for send in sends:
                if send[7]:
                    # A marker (sequence id 0, every one of them) is the remote broker's, never a resend
                    # to drop: Pulsar publishes a marker SEND without deduplication.
                    duplicate = False
                    accepted.append(send)
                else:
                    sequence_id, highest = send[0], send[1]
                    last = max(sequence_id, highest)
                    name = send[6] if replicated else self.name
                    duplicate = last <= pushed.get(name, -1)
                    if not duplicate:
                        pushed[name] = last
                        accepted.append(send)
                if not runs or runs[-1][0] != duplicate:
                    runs.append((duplicate, []))
                runs[-1][1].append(send)
        else:
            accepted = sends
            runs = [(False, sends)]
        future = self._append(accepted) if accepted else None
        index = 0
        for duplicate, run in runs:
            if duplicate:
                # Resent: answered in its place in the order, without storing it again.
                pending.append((None, run, 0))
            else:
                pending.append((future, run, index))
                index += len(run)
        self._flush()

    def _append(self, sends: list[Send]) -> asyncio.Future:
        # Tuples: append_many keeps them as its columns without a copy.
        sequence_ids, highest_ids, datas, hashes, counts, times, names, markers = zip(*sends)
        # An entry keeps its highest sequence id (a batch's last message's): a restart rebuilds
        # deduplication from the stored ones, and a resent batch must stay a duplicate across it.
        stored_ids = tuple(map(max, sequence_ids, highest_ids))
        topic = self.topic
        # A replicator forwards many producers' entries: each keeps its original producer's name.
        producer_names = names if self.remote_cluster is not None else (self.name,) * len(datas)
        future = topic.ledger.append_many(datas, hashes, counts, times, producer_names, stored_ids)
        messages, size = sum(counts), sum(map(len, datas))
        if True in markers:
            # Markers are not data: neither in the counts nor in when data last arrived.
            marker_entries = [(i, data) for i, (data, marker) in enumerate(zip(datas, markers)) if marker]
            messages -= len(marker_entries)
            size -= sum(len(data) for _, data in marker_entries)
            if self.remote_cluster is not None:
                future.add_done_callback(partial(self._markers_stored, self.remote_cluster, marker_entries))
        if messages:
            topic.last_data_ms = topic.context.clock.time_ms()
        self.msg_in_counter += messages
        self.bytes_in_counter += size
        topic.msg_in_counter += messages
        topic.bytes_in_counter += size
        if self.remote_cluster is not None and topic.replicators:
            future.add_done_callback(self._replicated_stored)
        future.add_done_callback(self._on_done)
        return future

    def _replicated_stored(self, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            positions = future.result()
            self.topic.replicated_entries_stored(positions[0], positions[-1])

    def _markers_stored(self, origin: str, marker_entries: list[tuple[int, bytes]], future: asyncio.Future) -> None:
        """Another cluster's markers (PIP-33), stored: each goes to the topic's controller now, at the position
        it got here. (Pulsar hands them over when the replicator pointing back at that cluster reads them,
        behind everything it has still to forward: a snapshot's round trip then waited for both clusters'
        replication backlogs.)"""
        if future.cancelled() or future.exception() is not None:
            return
        positions = future.result()
        for index, data in marker_entries:
            self.topic.replicated_marker_stored(origin, positions[index], data)

    def _on_done(self, _future: asyncio.Future) -> None:
        self._flush()

    def _flush(self) -> None:  # noqa: C901 - the publish path, once per socket read of SENDs: left whole until a split is measured
        """Send every receipt that is due, in order, in one write."""
        pending = self._pending
        receipts: list[bytes] = []
        answered = answered_bytes = 0
        while pending:
            future, run, index = pending[0]
            if future is not None and not future.done():
                break
            pending.popleft()
            answered += len(run)
            answered_bytes += sum(map(len, map(SEND_ENTRY, run)))
            if self.closed:
                continue
            if future is None:
                receipts.append(commands.send_receipts(self.producer_id, run, itertools.repeat(_DUPLICATE)))
                continue
            error = future.exception()
            if error is not None:
                log.error("append failed on %s for producer %s: %s", self.topic.name, self.name, error)
                # Any SEND_ERROR but ChecksumError makes the client reconnect and resend what is pending.
                for send in run:
                    receipts.append(commands.send_error(self.producer_id, send[0], "PersistenceError", str(error)))
                continue
            positions = future.result()
            if index or len(run) < len(positions):
                positions = positions[index : index + len(run)]
            if self.topic.deduplication_enabled:
                persisted = self.topic.sequence_persisted
                if self.remote_cluster is None:
                    last = max(max(send[0], send[1]) for send in run)
                    persisted[self.name] = max(persisted.get(self.name, -1), last)
                else:
                    # A replicator's entries count for their original producers, as in Pulsar's
                    # recordMessagePersisted: a producer of that name that moves to this cluster is
                    # told its last sequence id, not -1 (it would start from 0 again, and each new
                    # message would be dropped as a duplicate of a replicated one).
                    for send in run:
                        last = max(send[0], send[1])
                        if not send[7] and last > persisted.get(send[6], -1):
                            persisted[send[6]] = last
            receipts.append(commands.send_receipts(self.producer_id, run, positions))
        if receipts:
            self.connection.write(b"".join(receipts))
        if answered:
            self.connection.publish_answered(answered, answered_bytes)

    def close_silently(self, by: str | None = None) -> None:
        """Forget the producer without a word to the client: its connection is gone, or the client
        closed the producer (`by="client"`, for the log)."""
        self._log_closed(by)
        self.closed = True
        self.topic.remove_producer(self)

    def close_by_broker(self) -> None:
        self._log_closed("broker")
        self.closed = True
        self.topic.remove_producer(self)
        self.connection.forget_producer(self.producer_id)
        self.connection.write(commands.close_producer(self.producer_id))

    def _log_closed(self, by: str | None) -> None:
        if not self.closed:
            log.info(
                "[%s] Closed producer on topic %s: producerName=%s, producerId=%d, %s",
                self.connection.remote_address,
                self.topic.name,
                self.name,
                self.producer_id,
                f"closed by {by}" if by else "connection closed",
            )
