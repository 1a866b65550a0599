"""A producer on a connection: appends its SENDs and answers with receipts in send order.

Owns: the pipeline of one producer (append, wait for durability, SEND_RECEIPT strictly in order),
deduplication by sequence id when the topic has it on (`PersistentTopic.deduplication_enabled`), and
SEND_ERROR replies.
Must not touch: the ledger's internals or other producers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from magnetar.protocol import commands

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.topic import PersistentTopic

__all__ = ["ServerProducer"]

log = logging.getLogger(__name__)

# A duplicate's receipt carries no position: Pulsar answers it with message id (-1, -1).
_DUPLICATE = (-1, -1)


class ServerProducer:
    """Invariants: receipts leave in the order the SENDs arrived; a closed producer appends nothing."""

    def __init__(
        self, connection: ServerConnection, topic: PersistentTopic, producer_id: int, name: str, access_mode: str
    ) -> None:
        self.connection = connection
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.closed = False
        # (sequence id, highest sequence id, future of the batch's positions, index in the batch), in
        # send order; a duplicate's future holds [_DUPLICATE].
        self._pending: deque[tuple[int, int, asyncio.Future, int]] = deque()
        # Counted per socket read of SENDs, not per message; the admin API turns them into rates.
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.connected_since_ms = int(time.time() * 1000)

    def publish_many(self, sends: list[tuple[int, int, bytes, int, int, int]]) -> None:
        """Append the SENDs of one socket read, each (sequence id, highest sequence id, entry bytes, key
        hash, message count, publish time), with one storage call; receipts follow in send order once
        each SEND and every earlier one are answered."""
        topic = self.topic
        dedup = topic.deduplication_enabled
        accepted = []
        for send in sends:
            sequence_id, highest = send[0], send[1]
            if dedup:
                last = max(sequence_id, highest)
                if last <= topic.sequence_pushed.get(self.name, -1):
                    # Resent: answered in its place in the order, without storing it again.
                    done = asyncio.get_running_loop().create_future()
                    done.set_result([_DUPLICATE])
                    self._pending.append((sequence_id, highest, done, 0))
                    continue
                topic.sequence_pushed[self.name] = last
            accepted.append(send)
        if accepted:
            sequence_ids, highest_ids, datas, hashes, counts, times = map(list, zip(*accepted))
            # An entry keeps its highest sequence id (a batch's last message's): a restart rebuilds
            # deduplication from the stored ones, and a resent batch must stay a duplicate across it.
            stored_ids = list(map(max, sequence_ids, highest_ids))
            future = topic.ledger.append_many(datas, hashes, counts, times, [self.name] * len(datas), stored_ids)
            for index, send in enumerate(accepted):
                self._pending.append((send[0], send[1], future, index))
            messages, size = sum(counts), sum(map(len, datas))
            self.msg_in_counter += messages
            self.bytes_in_counter += size
            topic.msg_in_counter += messages
            topic.bytes_in_counter += size
            future.add_done_callback(self._on_done)
        self._flush()

    def _on_done(self, _future: asyncio.Future) -> None:
        self._flush()

    def _flush(self) -> None:
        """Send every receipt that is due, in order, in one write."""
        pending = self._pending
        receipts: list[bytes] = []
        dedup = self.topic.deduplication_enabled
        while pending and pending[0][2].done():
            sequence_id, highest, future, index = pending.popleft()
            if self.closed:
                continue
            error = future.exception()
            if error is not None:
                log.error("append failed on %s for producer %s: %s", self.topic.name, self.name, error)
                # Any SEND_ERROR but ChecksumError makes the client reconnect and resend what is pending.
                receipts.append(commands.send_error(self.producer_id, sequence_id, "PersistenceError", str(error)))
                continue
            position = future.result()[index]
            if dedup and position != _DUPLICATE:
                persisted = self.topic.sequence_persisted
                persisted[self.name] = max(persisted.get(self.name, -1), max(sequence_id, highest))
            receipts.append(commands.send_receipt(self.producer_id, sequence_id, position[0], position[1], highest))
        if receipts:
            self.connection.write(b"".join(receipts))

    def close_silently(self) -> None:
        """Forget the producer without a word to the client (its connection is gone)."""
        self.closed = True
        self.topic.remove_producer(self)

    def close_by_broker(self) -> None:
        self.closed = True
        self.topic.remove_producer(self)
        self.connection.forget_producer(self.producer_id)
        self.connection.write(commands.close_producer(self.producer_id))
