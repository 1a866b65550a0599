"""A small blocking Pulsar client: what the Spark data source and the perf tool say to a broker, and nothing else.

Owns: one TCP connection per `Connection` (the CONNECT handshake, requests answered by request id,
PING/PONG, AUTH_CHALLENGE answered with fresh credentials), reading a bounded range of a topic through a reader with key hash ranges (`read_range`),
producing batch entries under a chosen producer name with chosen sequence ids (`Producer`), partition
metadata and topic lists, and moving a durable subscription with a cumulative ack (`SubscriptionCursor`).
Must not touch: broker internals or the broker's files (this is a network client; it speaks the wire
format through `magnetar.protocol`), Spark, or anything that decodes rows (spark/rows.py).

Blocking sockets, not asyncio: Spark calls the data source from plain threads and worker processes,
and a task reads one range from start to end; an event loop would add a thread hop per frame for
nothing. Every wait has a deadline, so a dead broker fails the task instead of hanging it.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from magnetar.client.security import ClientSecurity
from magnetar.protocol.framing import Frame, FrameDecoder, encode_frame
from magnetar.protocol.messages import ParsedEntry, parse_entry
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandAck,
    CommandCloseConsumer,
    CommandCloseProducer,
    CommandConnect,
    CommandFlow,
    CommandGetLastMessageId,
    CommandGetTopicsOfNamespace,
    CommandPartitionedTopicMetadata,
    CommandPong,
    CommandProducer,
    CommandSend,
    CommandSubscribe,
    KeySharedMode,
    MessageIdData,
    ServerError,
)

__all__ = [
    "BrokerError",
    "Connection",
    "ConnectionLost",
    "EARLIEST",
    "FULL_HASH_RANGE",
    "LATEST",
    "Producer",
    "ReadTimeout",
    "Receipt",
    "SubscriptionCursor",
    "individual_ack_frame",
    "normalize_topic",
    "read_range",
]

CLIENT_VERSION = "magnetar-spark-0.1.0"
PROTOCOL_VERSION = 20
# Pulsar's sentinels for "before the first entry" and "after the last one" (`MessageId.earliest` and
# `MessageId.latest` of its clients).
EARLIEST = (-1, -1)
LATEST = (2**63 - 1, 2**63 - 1)
FULL_HASH_RANGE = ((0, 65535),)
_U64 = (1 << 64) - 1
_RECV_BYTES = 1 << 20  # one recv per MB: a batch entry of 1,000 messages of 100 B is ~110 KB
# A reader returns permits when half of them are used, as the official client does with its queue.
READER_PERMITS = 100_000
# Unanswered SENDs a producer keeps in flight: enough to hide a commit's fsync, bounded so that a slow
# broker pushes back on the task instead of growing its memory.
PRODUCER_PENDING_MAX = 1000


class BrokerError(Exception):
    """The broker refused a request; `code` is Pulsar's ServerError name (TopicNotFound, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class ConnectionLost(Exception):
    """The connection closed, or the broker closed our consumer or producer."""


class ReadTimeout(Exception):
    """Nothing arrived before the deadline."""


def normalize_topic(name: str) -> str:
    """A topic's full name, as the clients normalise short forms (`t`, `tenant/ns/t`)."""
    if "://" in name:
        return name
    parts = name.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{name}"
    if len(parts) == 3:
        return f"persistent://{name}"
    raise ValueError(f"invalid topic name {name!r}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class Connection:
    """One connection to a broker. Frames nobody asked for yet wait in `_backlog` for their reader."""

    _ids = itertools.count(1)

    def __init__(self, service_url: str, timeout_s: float = 30.0, security: ClientSecurity | None = None) -> None:
        url = urlsplit(service_url)
        if url.scheme not in ("pulsar", "pulsar+ssl") or not url.hostname or not url.port:
            raise ValueError(
                f"serviceUrl must look like pulsar://host:port or pulsar+ssl://host:port, not {service_url!r}"
            )
        security = security or ClientSecurity()
        self.timeout_s = timeout_s
        self._tls = url.scheme == "pulsar+ssl"
        try:
            sock = socket.create_connection((url.hostname, url.port), timeout=timeout_s)
        except OSError as error:
            raise ConnectionLost(f"cannot connect to the broker at {service_url}: {error}") from error
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls:
            try:
                sock = security.ssl_context().wrap_socket(sock, server_hostname=url.hostname)
            except (OSError, ssl.SSLError) as error:
                sock.close()
                raise ConnectionLost(f"TLS handshake with the broker at {service_url} failed: {error}") from error
        self._socket = sock
        self._security = security
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._backlog: deque[Frame] = deque()
        self.closed = False
        # The broker challenges credentials that expire on a live connection; `_received` answers.
        connect: dict[str, Any] = {"client_version": CLIENT_VERSION, "protocol_version": PROTOCOL_VERSION}
        connect |= security.connect_fields()
        self.send_command(BaseCommand(type=BaseCommand.CONNECT, connect=CommandConnect(**connect)))
        frame = self.next_frame(
            lambda f: f.command.type in (BaseCommand.CONNECTED, BaseCommand.ERROR), time.monotonic() + timeout_s
        )
        if frame.command.type == BaseCommand.ERROR:
            self.close()
            raise BrokerError(ServerError.Name(frame.command.error.error), frame.command.error.message)
        self.max_message_size = frame.command.connected.max_message_size or 5 * 1024 * 1024

    def next_id(self) -> int:
        return next(self._ids)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._socket.close()
            except OSError:
                pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ frames

    def send_command(self, command: BaseCommand, payload: bytes = b"") -> None:
        self.send_raw(encode_frame(command, payload))

    def send_raw(self, data: bytes) -> None:
        try:
            self._socket.sendall(data)
        except OSError as error:
            self.close()
            raise ConnectionLost(f"sending to the broker failed: {error}") from error

    def _fill(self, deadline: float) -> bool:
        """Read from the socket once; False when the deadline passed first."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._socket.settimeout(remaining)
        try:
            data = self._socket.recv(_RECV_BYTES)
        except TimeoutError:
            return False
        except OSError as error:
            self.close()
            raise ConnectionLost(f"reading from the broker failed: {error}") from error
        frames, replies = self._received(data)
        self._backlog.extend(frames)
        if replies:
            self.send_raw(replies)
        return True

    def _received(self, data: bytes) -> tuple[list[Frame], bytes]:
        """The frames in what one recv returned, keep-alives and auth challenges left out, and what
        answers those: a PONG per PING, an AUTH_RESPONSE per AUTH_CHALLENGE."""
        if not data:
            self.close()
            raise ConnectionLost("the broker closed the connection")
        frames, replies = [], b""
        for frame in self._decoder.receive_data(data):
            kind = frame.command.type
            if kind == BaseCommand.PING:
                replies += _PONG
            elif kind == BaseCommand.AUTH_CHALLENGE:
                replies += self._auth_response()
            elif kind != BaseCommand.PONG:
                frames.append(frame)
        return frames, replies

    def _auth_response(self) -> bytes:
        """Fresh credentials for the broker's challenge; a plugin that cannot give them any more (a token
        file gone) ends the connection, as the broker would once the challenge went unanswered."""
        try:
            response = self._security.auth_response(CLIENT_VERSION, PROTOCOL_VERSION)
        except (OSError, ValueError) as error:
            self.close()
            raise ConnectionLost(f"cannot answer the broker's auth challenge: {error}") from error
        return encode_frame(response)

    def next_frame(self, wanted: Callable[[Frame], bool], deadline: float) -> Frame:
        """The first frame `wanted` accepts, leaving the others in order for whoever wants them."""
        seen = 0
        while True:
            backlog = self._backlog
            for index in range(seen, len(backlog)):
                frame = backlog[index]
                if wanted(frame):
                    del backlog[index]
                    return frame
            seen = len(backlog)
            if not self._fill(deadline):
                raise ReadTimeout(f"no answer from the broker in {self.timeout_s:.0f} s")

    def request(self, command: BaseCommand, request_id: int, payload: bytes = b"") -> BaseCommand:
        """Send a request and return the answer carrying its request id; ERROR raises BrokerError."""
        self.send_command(command, payload)

        def answers(frame: Frame) -> bool:
            body = getattr(frame.command, _RESPONSE_FIELDS.get(frame.command.type, ""), None)
            return body is not None and getattr(body, "request_id", None) == request_id

        frame = self.next_frame(answers, time.monotonic() + self.timeout_s)
        command = frame.command
        if command.type == BaseCommand.ERROR:
            raise BrokerError(ServerError.Name(command.error.error), command.error.message)
        return command

    def pump(self, outgoing: bytearray, wait_s: float) -> list[Frame]:
        """Send what the socket takes of `outgoing` (removing it) and return the frames that arrived,
        waiting up to `wait_s` for the socket to be ready either way; PINGs are answered through
        `outgoing`. For a caller that keeps sending while answers arrive on one thread (a pipelined
        producer): it never blocks on a full send buffer while the broker waits for it to read."""
        sock = self._socket
        if sock.gettimeout() != 0.0:
            sock.settimeout(0.0)
        frames = list(self._backlog)
        self._backlog.clear()
        # TLS: bytes already decrypted inside the SSL object are invisible to select.
        buffered = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
        try:
            readable, writable, _ = select.select(
                (sock,), (sock,) if outgoing else (), (), 0.0 if buffered else max(wait_s, 0.0)
            )
            if writable:
                del outgoing[: sock.send(outgoing)]
            if readable or buffered:
                received, replies = self._received(sock.recv(_RECV_BYTES))
                frames += received
                outgoing += replies
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass  # select said ready and the kernel (or a partial TLS record) disagreed: the next pump retries
        except OSError as error:
            self.close()
            raise ConnectionLost(f"talking to the broker failed: {error}") from error
        return frames

    # ----------------------------------------------------------------------------- lookups

    def partitions(self, topic: str) -> int:
        request_id = self.next_id()
        answer = self.request(
            BaseCommand(
                type=BaseCommand.PARTITIONED_METADATA,
                partitionMetadata=CommandPartitionedTopicMetadata(topic=topic, request_id=request_id),
            ),
            request_id,
        ).partitionMetadataResponse
        if answer.response == 1:  # Failed
            raise BrokerError(ServerError.Name(answer.error), answer.message)
        return answer.partitions

    def topics_of_namespace(self, namespace: str) -> list[str]:
        request_id = self.next_id()
        answer = self.request(
            BaseCommand(
                type=BaseCommand.GET_TOPICS_OF_NAMESPACE,
                getTopicsOfNamespace=CommandGetTopicsOfNamespace(
                    request_id=request_id, namespace=namespace, mode=CommandGetTopicsOfNamespace.PERSISTENT
                ),
            ),
            request_id,
        )
        return list(answer.getTopicsOfNamespaceResponse.topics)

    # ---------------------------------------------------------------------------- consumers

    def subscribe(
        self,
        topic: str,
        subscription: str,
        *,
        durable: bool,
        start: tuple[int, int] | None = None,
        hash_ranges: Sequence[tuple[int, int]] = (),
        create_topic: bool = False,
        sub_type: int = CommandSubscribe.Exclusive,
        consumer_name: str | None = None,
    ) -> int:
        """A consumer, Exclusive unless `sub_type` says otherwise (Key_Shared without hash ranges is
        AUTO_SPLIT); a non-durable one starts at `start` (the broker starts at that entry itself, as
        for any reader). Returns its consumer id."""
        consumer_id = self.next_id()
        request_id = self.next_id()
        fields: dict[str, Any] = {
            "topic": topic,
            "subscription": subscription,
            "subType": sub_type,
            "consumer_id": consumer_id,
            "request_id": request_id,
            "consumer_name": consumer_name or subscription,
            "durable": durable,
            "initialPosition": CommandSubscribe.Earliest,
            "force_topic_creation": create_topic,
        }
        if start is not None:
            fields["start_message_id"] = {"ledgerId": start[0] & _U64, "entryId": start[1] & _U64}
        if hash_ranges and tuple(hash_ranges) != FULL_HASH_RANGE:
            fields["keySharedMeta"] = {
                "keySharedMode": KeySharedMode.STICKY,
                "hashRanges": [{"start": lo, "end": hi} for lo, hi in hash_ranges],
            }
        self.request(BaseCommand(type=BaseCommand.SUBSCRIBE, subscribe=CommandSubscribe(**fields)), request_id)
        return consumer_id

    def flow(self, consumer_id: int, permits: int) -> None:
        self.send_command(
            BaseCommand(type=BaseCommand.FLOW, flow=CommandFlow(consumer_id=consumer_id, messagePermits=permits))
        )

    def ack_cumulative(self, consumer_id: int, position: tuple[int, int], wait: bool = False) -> None:
        fields: dict[str, Any] = {
            "consumer_id": consumer_id,
            "ack_type": 1,
            "message_id": [{"ledgerId": position[0] & _U64, "entryId": position[1] & _U64}],
        }
        if not wait:
            self.send_command(BaseCommand(type=BaseCommand.ACK, ack=CommandAck(**fields)))
            return
        request_id = fields["request_id"] = self.next_id()
        self.request(BaseCommand(type=BaseCommand.ACK, ack=CommandAck(**fields)), request_id)

    def last_message_id(self, consumer_id: int) -> tuple[tuple[int, int], tuple[int, int] | None]:
        """(the topic's last entry, the consumer's mark-delete position)."""
        request_id = self.next_id()
        answer = self.request(
            BaseCommand(
                type=BaseCommand.GET_LAST_MESSAGE_ID,
                getLastMessageId=CommandGetLastMessageId(consumer_id=consumer_id, request_id=request_id),
            ),
            request_id,
        ).getLastMessageIdResponse
        last = (_signed(answer.last_message_id.ledgerId), _signed(answer.last_message_id.entryId))
        mark_delete = None
        if answer.HasField("consumer_mark_delete_position"):
            position = answer.consumer_mark_delete_position
            mark_delete = (_signed(position.ledgerId), _signed(position.entryId))
        return last, mark_delete

    def close_consumer(self, consumer_id: int) -> None:
        request_id = self.next_id()
        self.request(
            BaseCommand(
                type=BaseCommand.CLOSE_CONSUMER,
                close_consumer=CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id),
            ),
            request_id,
        )

    def next_message(self, consumer_id: int, deadline: float) -> Frame | None:
        """The next MESSAGE frame for the consumer, or None at the deadline. A CLOSE_CONSUMER from the
        broker (after a seek or an unload) raises ConnectionLost: the caller resubscribes."""
        backlog = self._backlog
        while True:
            while backlog:
                frame = backlog.popleft()
                kind = frame.command.type
                if kind == BaseCommand.MESSAGE and frame.command.message.consumer_id == consumer_id:
                    return frame
                if kind == BaseCommand.CLOSE_CONSUMER and frame.command.close_consumer.consumer_id == consumer_id:
                    raise ConnectionLost("the broker closed the reader")
            if not self._fill(deadline):
                return None


def individual_ack_frame(consumer_id: int, positions: Sequence[tuple[int, int]]) -> bytes:
    """One ACK frame for whole entries (every message of a batch), as a client groups its acks; a
    pipelined caller queues it with `Connection.pump`."""
    message_ids = [MessageIdData(ledgerId=ledger & _U64, entryId=entry & _U64) for ledger, entry in positions]
    ack = CommandAck(consumer_id=consumer_id, ack_type=CommandAck.Individual, message_id=message_ids)
    return encode_frame(BaseCommand(type=BaseCommand.ACK, ack=ack))


_PONG = encode_frame(BaseCommand(type=BaseCommand.PONG, pong=CommandPong()))

# Which BaseCommand field of a reply carries the request id it answers.
_RESPONSE_FIELDS = {
    BaseCommand.SUCCESS: "success",
    BaseCommand.ERROR: "error",
    BaseCommand.PRODUCER_SUCCESS: "producer_success",
    BaseCommand.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    BaseCommand.LOOKUP_RESPONSE: "lookupTopicResponse",
    BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    BaseCommand.ACK_RESPONSE: "ackResponse",
}


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class ReceivedEntry:
    position: tuple[int, int]
    entry: ParsedEntry  # checksum verified, metadata parsed


def read_range(
    service_url: str,
    topic: str,
    start: tuple[int, int],
    end: tuple[int, int],
    hash_ranges: Sequence[tuple[int, int]],
    timeout_s: float = 120.0,
    reconnects_max: int = 3,
    security: ClientSecurity | None = None,
) -> Iterator[ReceivedEntry]:
    """The entries after `start` up to and including `end` whose sticky key hash lies in `hash_ranges`,
    in position order; the broker filters by hash, so no other entry crosses the network.

    `start` is a position already read (or EARLIEST); the broker starts a reader at that entry itself
    and it is dropped here, as the official client drops it. When the last entry of the range is not
    ours, nothing tells us the broker passed `end`: we ack what we received and ask for the reader's
    mark-delete position, which also covers the filtered entries the broker acked. A lost connection
    resubscribes after the last entry received, so the entries yielded are the same either way.
    """
    last = start
    reconnects = 0
    while True:
        try:
            for entry in _read_range_once(service_url, topic, last, end, hash_ranges, timeout_s, security):
                last = entry.position
                yield entry
            return
        except ConnectionLost:
            reconnects += 1
            if reconnects > reconnects_max:
                raise


def _read_range_once(
    service_url: str,
    topic: str,
    start: tuple[int, int],
    end: tuple[int, int],
    hash_ranges: Sequence[tuple[int, int]],
    timeout_s: float,
    security: ClientSecurity | None,
) -> Iterator[ReceivedEntry]:
    if end <= start and start != EARLIEST:
        return
    with Connection(service_url, min(timeout_s, 30.0), security) as connection:
        subscription = f"spark-reader-{os.urandom(5).hex()}"
        consumer_id = connection.subscribe(topic, subscription, durable=False, start=start, hash_ranges=hash_ranges)
        connection.flow(consumer_id, READER_PERMITS)
        unreturned = 0
        received: tuple[int, int] | None = None
        idle_s = 0.002
        deadline = time.monotonic() + timeout_s
        while True:
            frame = connection.next_message(consumer_id, min(deadline, time.monotonic() + idle_s))
            if frame is None:
                if time.monotonic() >= deadline:
                    raise ReadTimeout(
                        f"{topic}: the range after {start} up to {end} did not complete in {timeout_s:.0f} s"
                    )
                if _reader_passed_end(connection, consumer_id, received, end):
                    break
                idle_s = min(idle_s * 2, 0.02)
                continue
            idle_s = 0.002
            message_id = frame.command.message.message_id
            position = (_signed(message_id.ledgerId), _signed(message_id.entryId))
            received = position
            entry = parse_entry(frame.payload)
            unreturned += entry.num_messages
            if unreturned >= READER_PERMITS // 2:
                connection.flow(consumer_id, unreturned)
                unreturned = 0
            if position > end:
                break
            if position > start:
                yield ReceivedEntry(position, entry)
            if position == end:
                break
            deadline = time.monotonic() + timeout_s
        _close_reader(connection, consumer_id)


def _reader_passed_end(
    connection: Connection, consumer_id: int, received: tuple[int, int] | None, end: tuple[int, int]
) -> bool:
    """Asked when the reader is quiet: has the broker's reader passed `end` with only other hashes left?
    Acks what was received, then reads the reader's mark-delete position, which also covers the filtered
    entries the broker acked."""
    if received is not None:
        connection.ack_cumulative(consumer_id, received)
    _last, mark_delete = connection.last_message_id(consumer_id)
    return mark_delete is not None and mark_delete >= end


def _close_reader(connection: Connection, consumer_id: int) -> None:
    try:
        connection.close_consumer(consumer_id)
    except (BrokerError, ReadTimeout):
        pass  # the connection closes next; a non-durable subscription goes with it


# ------------------------------------------------------------------------------------------ producing


@dataclass(frozen=True)
class Receipt:
    sequence_id: int
    position: tuple[int, int]

    @property
    def duplicate(self) -> bool:
        """Broker deduplication dropped the entry (Pulsar answers a duplicate with id (-1, -1))."""
        return self.position == (-1, -1)


class Producer:
    """A producer with a name the caller chooses, sending entries (single messages or batches) whose
    sequence ids the caller chooses, pipelined; `flush()` waits for every receipt.

    Invariants: receipts arrive in send order (the broker guarantees it), so `_in_flight` is a FIFO.
    """

    def __init__(self, connection: Connection, topic: str, name: str) -> None:
        self.connection = connection
        self.topic = topic
        self.name = name
        self.producer_id = connection.next_id()
        request_id = connection.next_id()
        answer = connection.request(
            BaseCommand(
                type=BaseCommand.PRODUCER,
                producer=CommandProducer(
                    topic=topic,
                    producer_id=self.producer_id,
                    request_id=request_id,
                    producer_name=name,
                    user_provided_producer_name=True,
                ),
            ),
            request_id,
        ).producer_success
        self.last_sequence_id = answer.last_sequence_id
        self._in_flight: deque[int] = deque()
        self.receipts: list[Receipt] = []

    def send(self, sequence_id: int, highest_sequence_id: int, num_messages: int, section: bytes) -> None:
        """Send one entry; `section` is its payload section (checksum, metadata, payload)."""
        while len(self._in_flight) >= PRODUCER_PENDING_MAX:
            self._receive_one()
        fields: dict[str, Any] = {"producer_id": self.producer_id, "sequence_id": sequence_id}
        if num_messages != 1:
            fields["num_messages"] = num_messages
        if highest_sequence_id != sequence_id:
            fields["highest_sequence_id"] = highest_sequence_id
        self.connection.send_command(BaseCommand(type=BaseCommand.SEND, send=CommandSend(**fields)), section)
        self._in_flight.append(sequence_id)

    def flush(self) -> list[Receipt]:
        while self._in_flight:
            self._receive_one()
        receipts, self.receipts = self.receipts, []
        return receipts

    def _receive_one(self) -> None:
        producer_id = self.producer_id

        def mine(frame: Frame) -> bool:
            kind = frame.command.type
            if kind == BaseCommand.SEND_RECEIPT:
                return frame.command.send_receipt.producer_id == producer_id
            if kind == BaseCommand.SEND_ERROR:
                return frame.command.send_error.producer_id == producer_id
            return kind == BaseCommand.CLOSE_PRODUCER and frame.command.close_producer.producer_id == producer_id

        frame = self.connection.next_frame(mine, time.monotonic() + self.connection.timeout_s)
        command = frame.command
        if command.type == BaseCommand.SEND_ERROR:
            error = command.send_error
            raise BrokerError(ServerError.Name(error.error), error.message)
        if command.type == BaseCommand.CLOSE_PRODUCER:
            raise ConnectionLost(f"the broker closed producer {self.name}")
        receipt = command.send_receipt
        expected = self._in_flight.popleft()
        if receipt.sequence_id != expected:
            raise ConnectionLost(f"receipt for sequence id {receipt.sequence_id}, expected {expected}")
        message_id = receipt.message_id
        self.receipts.append(Receipt(expected, (_signed(message_id.ledgerId), _signed(message_id.entryId))))

    def close(self) -> None:
        request_id = self.connection.next_id()
        self.connection.request(
            BaseCommand(
                type=BaseCommand.CLOSE_PRODUCER,
                close_producer=CommandCloseProducer(producer_id=self.producer_id, request_id=request_id),
            ),
            request_id,
        )


# ------------------------------------------------------------------------------------------ subscriptions


class SubscriptionCursor:
    """A durable subscription the data source moves: an Exclusive consumer that never asks for messages
    (no FLOW) and only acks cumulatively, so the backlog drains and retention may free what is behind
    it. The connection is kept between commits and opened again if it broke."""

    def __init__(
        self,
        service_url: str,
        topic: str,
        subscription: str,
        timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.service_url = service_url
        self.security = security
        self.topic = topic
        self.subscription = subscription
        self.timeout_s = timeout_s
        self._connection: Connection | None = None
        self._consumer_id = 0

    def _consumer(self) -> tuple[Connection, int]:
        if self._connection is None or self._connection.closed:
            connection = Connection(self.service_url, self.timeout_s, self.security)
            try:
                self._consumer_id = connection.subscribe(self.topic, self.subscription, durable=True)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection, self._consumer_id

    def ack(self, position: tuple[int, int]) -> None:
        """Everything up to and including `position` is processed (a cumulative ack never moves back)."""
        for attempt in (1, 2):
            connection, consumer_id = self._consumer()
            try:
                connection.ack_cumulative(consumer_id, position, wait=True)
                return
            except ConnectionLost:
                if attempt == 2:
                    raise

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
