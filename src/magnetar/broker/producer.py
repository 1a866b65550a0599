"""A producer on a connection: appends its SENDs and answers with receipts in send order.

Owns: the pipeline of one producer (append, wait for durability, SEND_RECEIPT strictly in order),
deduplication by sequence id when `brokerDeduplicationEnabled`, and SEND_ERROR replies.
Must not touch: the ledger's internals or other producers.
"""

from __future__ import annotations

import asyncio
import logging
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
        # (sequence_id, highest_sequence_id, future of the position or of _DUPLICATE), in send order
        self._pending: deque[tuple[int, int, asyncio.Future]] = deque()
        self.msg_in_counter = 0
        self.bytes_in_counter = 0

    def publish(
        self, sequence_id: int, highest_sequence_id: int, data: bytes, key_hash: int, message_count: int, publish_time: int
    ) -> None:
        """Append one SEND's entry; its receipt follows once it and every earlier one are answered."""
        topic = self.topic
        dedup = topic.service.config["brokerDeduplicationEnabled"]
        last = max(sequence_id, highest_sequence_id)
        loop = asyncio.get_running_loop()
        if dedup and last <= topic.sequence_pushed.get(self.name, -1):
            done = loop.create_future()
            done.set_result(_DUPLICATE)
            self._pending.append((sequence_id, highest_sequence_id, done))
            self._flush()
            return
        future = topic.ledger.append(data, key_hash, message_count, publish_time, self.name, sequence_id)
        if dedup:
            topic.sequence_pushed[self.name] = last
        self.msg_in_counter += message_count
        self.bytes_in_counter += len(data)
        self._pending.append((sequence_id, highest_sequence_id, future))
        future.add_done_callback(self._on_done)

    def _on_done(self, _future: asyncio.Future) -> None:
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        while pending and pending[0][2].done():
            sequence_id, highest, future = pending.popleft()
            if self.closed:
                continue
            error = future.exception()
            if error is not None:
                log.error("append failed on %s for producer %s: %s", self.topic.name, self.name, error)
                # Any SEND_ERROR but ChecksumError makes the client reconnect and resend what is pending.
                self.connection.write(
                    commands.send_error(self.producer_id, sequence_id, "PersistenceError", str(error))
                )
                continue
            position = future.result()
            if position != _DUPLICATE and self.topic.service.config["brokerDeduplicationEnabled"]:
                persisted = self.topic.sequence_persisted
                persisted[self.name] = max(persisted.get(self.name, -1), max(sequence_id, highest))
            self.connection.write(
                commands.send_receipt(self.producer_id, sequence_id, position[0], position[1], highest)
            )

    def close_silently(self) -> None:
        """Forget the producer without a word to the client (its connection is gone)."""
        self.closed = True
        self.topic.remove_producer(self)

    def close_by_broker(self) -> None:
        self.closed = True
        self.topic.remove_producer(self)
        self.connection.forget_producer(self.producer_id)
        self.connection.write(commands.close_producer(self.producer_id))
