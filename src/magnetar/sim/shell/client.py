"""Simulated Pulsar clients on a simulated network, each talking to a real `ServerConnection` of the broker.

Owns: the network (each direction of a connection delivers bytes in order after seeded delays; a
close arrives after the bytes sent before it); for each client, the broker's `ServerConnection` at the
far end of its pipe, started as the broker's listener starts one for an accepted socket; and clients
that do what the official ones do on the wire: CONNECT, PRODUCER and SEND (one message, or a batch of
one key) with receipts, SUBSCRIBE (durable, or a reader's non-durable subscription) then FLOW of the
receiver queue, more FLOW each time the application has taken half of it, acknowledgements of whole
entries grouped for a while then sent, negative acks sent as REDELIVER of those ids (on Failover and
Exclusive a REDELIVER of everything, in the next consumer epoch: PIP-84), PONG to PING, CLOSE_CONSUMER
after flushing acks, and connections that drop. Everything a client sees or does is reported to a
`Listener` (the world's checker).
Must not touch: the broker's objects beyond starting those connections: a client knows the broker only
through the bytes it exchanges.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from magnetar.broker.commands import open_connection
from magnetar.broker.context import BrokerContext
from magnetar.positions import Position
from magnetar.protocol.commands import signed_id
from magnetar.protocol.framing import FrameDecoder, encode_frame
from magnetar.protocol.messages import encode_batch, encode_entry, parse_entry, split_batch
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandAck,
    CommandConnect,
    CommandFlow,
    CommandPong,
    CommandRedeliverUnacknowledgedMessages,
    CommandSubscribe,
    KeySharedMeta,
    KeySharedMode,
    MessageIdData,
    MessageMetadata,
    SingleMessageMetadata,
)

__all__ = ["Delivery", "Listener", "Network", "SimClient", "SimConsumer", "SimProducer", "ClientClosed"]

_SUB_TYPES = {
    "Exclusive": CommandSubscribe.Exclusive,
    "Shared": CommandSubscribe.Shared,
    "Failover": CommandSubscribe.Failover,
    "Key_Shared": CommandSubscribe.Key_Shared,
}


class ClientClosed(Exception):
    """The connection dropped while a request waited for its answer."""


@dataclass(frozen=True)
class Delivery:
    """One message as a consumer's application sees it."""

    position: Position
    batch_index: int  # -1 for a message that is not part of a batch
    batch_size: int
    key: str
    index: int  # publish order, from the payload
    redelivery_count: int


class Listener(Protocol):
    def received(self, consumer: SimConsumer, delivery: Delivery) -> None: ...
    def acked(self, consumer: SimConsumer, positions: list[Position], deliveries: list[Delivery]) -> None: ...
    def released(self, consumer: SimConsumer, deliveries: list[Delivery], why: str) -> None: ...
    def ended(self, consumer: SimConsumer, why: str) -> None: ...
    def published(self, index: int, key: str, position: Position) -> None: ...
    def note(self, line: str) -> None: ...


class Network:
    """Delivers each direction's bytes in the order sent, each after a seeded delay."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random, delay_ms: tuple[float, float]) -> None:
        self.loop = loop
        self.rng = rng
        self.delay_ms = delay_ms

    def pipe(self, arrive: Callable[[bytes], None], eof: Callable[[], None]) -> _Pipe:
        return _Pipe(self, arrive, eof)


class _Pipe:
    def __init__(self, network: Network, arrive: Callable[[bytes], None], eof: Callable[[], None]) -> None:
        self._network = network
        self._arrive = arrive
        self._eof = eof
        self._last_at = 0.0
        self.closed = False

    def _next_at(self) -> float:
        network = self._network
        at = max(network.loop.time() + network.rng.uniform(*network.delay_ms) / 1000, self._last_at + 1e-7)
        self._last_at = at
        return at

    def send(self, data: bytes) -> None:
        if not self.closed and data:
            self._network.loop.call_at(self._next_at(), self._arrive, data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._network.loop.call_at(self._next_at(), self._eof)


class _Transport:
    def get_write_buffer_size(self) -> int:
        return 0


class _ServerWriter:
    """What `ServerConnection` writes to: the broker-to-client direction of the pipe pair."""

    def __init__(self, pipe: _Pipe, peer: tuple[str, int]) -> None:
        self._pipe = pipe
        self._peer = peer
        self.transport = _Transport()

    def write(self, data: bytes) -> None:
        self._pipe.send(data)

    def is_closing(self) -> bool:
        return self._pipe.closed

    def close(self) -> None:
        self._pipe.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" else default

    async def drain(self) -> None:
        return None


class SimClient:
    """One client connection: the broker's `ServerConnection` runs on the other end of it."""

    def __init__(self, name: str, context: BrokerContext, network: Network, listener: Listener, number: int) -> None:
        self.name = name
        self.listener = listener
        self.loop = network.loop
        reader = asyncio.StreamReader(limit=2**24)
        self._to_broker = network.pipe(reader.feed_data, reader.feed_eof)
        to_client = network.pipe(self._on_data, self._on_eof)
        # The connection writes through `_ServerWriter`, the StreamWriter calls it makes, to the network.
        writer = cast(asyncio.StreamWriter, _ServerWriter(to_client, ("sim", number)))
        self.connection = open_connection(context, reader, writer)
        self.task = self.loop.create_task(self.connection.run())
        self._decoder = FrameDecoder()
        self._requests: dict[int, asyncio.Future[BaseCommand]] = {}
        self._next_request = 0
        self._next_consumer = 0
        self.consumers: dict[int, SimConsumer] = {}
        self.producers: dict[int, SimProducer] = {}
        self.open = True
        self.connected: asyncio.Future[None] = self.loop.create_future()
        self.send(
            BaseCommand(
                type=BaseCommand.CONNECT, connect=CommandConnect(client_version="magnetar-sim", protocol_version=20)
            )
        )

    def send(self, command: BaseCommand, payload: bytes = b"") -> None:
        if self.open:
            self._to_broker.send(encode_frame(command, payload))

    async def request(self, command: BaseCommand, body: Any) -> BaseCommand:
        self._next_request += 1
        body.request_id = self._next_request
        future: asyncio.Future[BaseCommand] = self.loop.create_future()
        self._requests[self._next_request] = future
        self.send(command)
        return await future

    def new_consumer_id(self) -> int:
        self._next_consumer += 1
        return self._next_consumer

    def drop(self) -> None:
        """The client closes its socket (a crash, a network cut): every consumer on it ends at once."""
        if not self.open:
            return
        self.open = False
        self._to_broker.close()
        self._fail_all("connection dropped")

    def _fail_all(self, why: str) -> None:
        self.open = False
        for future in self._requests.values():
            if not future.done():
                future.set_exception(ClientClosed(why))
        self._requests.clear()
        if not self.connected.done():
            self.connected.set_exception(ClientClosed(why))
        for consumer in list(self.consumers.values()):
            consumer.end(why)
        for producer in self.producers.values():
            producer.fail(why)

    def _on_eof(self) -> None:
        if self.open:
            self.listener.note(f"{self.name}: the broker closed the connection")
            self._to_broker.close()
            self._fail_all("closed by the broker")

    def _on_data(self, data: bytes) -> None:
        if not self.open:
            return
        for frame in self._decoder.receive_data(data):
            command, payload = frame
            self._on_command(command, payload)

    def _on_command(self, command: BaseCommand, payload: bytes) -> None:
        kind = command.type
        if kind == BaseCommand.MESSAGE:
            consumer = self.consumers.get(command.message.consumer_id)
            if consumer is not None:
                consumer.on_message(command.message, payload)
        elif kind in (BaseCommand.SEND_RECEIPT, BaseCommand.SEND_ERROR):
            self._on_send_answer(command)
        elif kind == BaseCommand.CONNECTED:
            if not self.connected.done():
                self.connected.set_result(None)
        elif kind == BaseCommand.PING:
            self.send(BaseCommand(type=BaseCommand.PONG, pong=CommandPong()))
        elif kind == BaseCommand.CLOSE_CONSUMER:
            consumer = self.consumers.get(command.close_consumer.consumer_id)
            if consumer is not None:
                consumer.end("closed by the broker")
        else:
            self._on_answer(command)

    def _on_send_answer(self, command: BaseCommand) -> None:
        """A SEND_RECEIPT or SEND_ERROR, for the producer that sent."""
        if command.type == BaseCommand.SEND_RECEIPT:
            producer = self.producers.get(command.send_receipt.producer_id)
            if producer is not None:
                producer.on_receipt(command.send_receipt)
        else:
            producer = self.producers.get(command.send_error.producer_id)
            if producer is not None:
                producer.fail(f"send error {command.send_error.message}")

    def _on_answer(self, command: BaseCommand) -> None:
        """The answer to a request: its future takes the whole command (a parked exclusive producer's
        first PRODUCER_SUCCESS, not ready yet, is not the answer)."""
        kind = command.type
        if kind in _RESPONSES:
            request_id = getattr(command, _RESPONSES[kind]).request_id
        elif kind in (BaseCommand.SUCCESS, BaseCommand.ERROR):
            request_id = (command.success if kind == BaseCommand.SUCCESS else command.error).request_id
        elif kind == BaseCommand.PRODUCER_SUCCESS:
            body = command.producer_success
            if body.HasField("producer_ready") and not body.producer_ready:
                return
            request_id = body.request_id
        else:
            return
        future = self._requests.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(command)


# Answers a request's future takes whole, by the field that holds them.
_RESPONSES = {
    BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    BaseCommand.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
}


@dataclass
class _Held:
    delivery: Delivery
    received_at: float


@dataclass
class SimConsumer:
    """One incarnation of a consumer: from SUBSCRIBE until it closes, is closed, or its connection drops.

    Permits follow the official client: the receiver queue's size at subscribe, then the count of
    messages the application took each time that reaches half the queue. Acks of a batch's messages
    are kept until the whole entry is acknowledged (no batch index acks), then grouped for
    `ack_group_ms` (0: sent at once), as the client's ack grouping tracker does.
    """

    client: SimClient
    name: str
    label: str
    subscription: str
    subscription_type: str
    queue_size: int
    ack_group_ms: float
    topic: str
    consumer_id: int = 0
    open: bool = False
    queue: deque[Delivery] = field(default_factory=deque)
    held: dict[tuple[Position, int], Delivery] = field(default_factory=dict)
    taken_since_flow: int = 0
    _batch_acked: dict[Position, set[int]] = field(default_factory=dict)
    _pending_acks: list[Position] = field(default_factory=list)
    _ack_flush: asyncio.TimerHandle | None = None
    received: int = 0
    on_available: Callable[[], None] | None = None
    # PIP-84: a redelivery of everything on Failover and Exclusive moves to the next epoch, and
    # MESSAGEs of an earlier epoch (sent before the broker heard of it) are dropped.
    epoch: int = 0
    # False for a reader: its subscription is non-durable and goes with it.
    durable: bool = True

    async def subscribe(self, initial_earliest: bool = True) -> None:
        """Raises ClientClosed, or RuntimeError with the broker's error."""
        client = self.client
        self.consumer_id = client.new_consumer_id()
        command = BaseCommand(type=BaseCommand.SUBSCRIBE)
        body = command.subscribe
        body.topic = self.topic
        body.subscription = self.subscription
        body.subType = _SUB_TYPES[self.subscription_type]
        body.consumer_id = self.consumer_id
        body.consumer_name = self.name
        body.durable = self.durable
        body.initialPosition = CommandSubscribe.Earliest if initial_earliest else CommandSubscribe.Latest
        body.consumer_epoch = self.epoch
        if self.subscription_type == "Key_Shared":
            body.keySharedMeta.CopyFrom(KeySharedMeta(keySharedMode=KeySharedMode.AUTO_SPLIT))
        client.consumers[self.consumer_id] = self
        self.open = True
        try:
            answer = await client.request(command, body)
        except ClientClosed:
            self.open = False
            raise
        if answer.type == BaseCommand.ERROR:
            self.open = False
            client.consumers.pop(self.consumer_id, None)
            raise RuntimeError(f"subscribe refused: {answer.error.message}")
        if not self.open:
            return
        self._flow(self.queue_size)

    def _flow(self, permits: int) -> None:
        self.client.send(
            BaseCommand(type=BaseCommand.FLOW, flow=CommandFlow(consumer_id=self.consumer_id, messagePermits=permits))
        )

    def on_message(self, message: Any, payload: bytes) -> None:
        if not self.open:
            return
        entry = parse_entry(payload)
        if message.HasField("consumer_epoch") and message.consumer_epoch < self.epoch:
            self._return_permits(entry.num_messages)
            return
        position = Position(signed_id(message.message_id.ledgerId), signed_id(message.message_id.entryId))
        redelivery_count = message.redelivery_count
        key = entry.metadata.partition_key
        if entry.is_batch:
            acked_set = list(message.ack_set)
            parts = split_batch(entry.payload, entry.num_messages)
            for batch_index, single in enumerate(parts):
                if acked_set and not (acked_set[batch_index // 64] >> (batch_index % 64)) & 1:
                    continue  # acknowledged before: the client skips it (ack_set bit clear)
                delivery = Delivery(
                    position,
                    batch_index,
                    len(parts),
                    single.metadata.partition_key,
                    int(single.payload),
                    redelivery_count,
                )
                self._arrive(delivery)
        else:
            self._arrive(Delivery(position, -1, 1, key, int(entry.payload), redelivery_count))

    def _arrive(self, delivery: Delivery) -> None:
        self.received += 1
        self.held[(delivery.position, delivery.batch_index)] = delivery
        self.client.listener.received(self, delivery)
        self.queue.append(delivery)
        if self.on_available is not None:
            self.on_available()

    def take(self) -> Delivery | None:
        """The application receives the next message of the queue; permits go back at half the queue."""
        if not self.open or not self.queue:
            return None
        delivery = self.queue.popleft()
        self._return_permits(1)
        return delivery

    def _return_permits(self, count: int) -> None:
        self.taken_since_flow += count
        if self.taken_since_flow >= max(self.queue_size // 2, 1):
            self._flow(self.taken_since_flow)
            self.taken_since_flow = 0

    def acknowledge(self, delivery: Delivery) -> None:
        """The application acks a message; the broker hears of it when the whole entry is acked and the
        group is sent. Until then the message counts as held."""
        if not self.open:
            return
        if delivery.batch_index >= 0:
            acked = self._batch_acked.setdefault(delivery.position, set())
            acked.add(delivery.batch_index)
            if len(acked) < delivery.batch_size:
                return
            del self._batch_acked[delivery.position]
        self._pending_acks.append(delivery.position)
        if self.ack_group_ms <= 0:
            self.flush_acks()
        elif self._ack_flush is None:
            self._ack_flush = self.client.loop.call_later(self.ack_group_ms / 1000, self.flush_acks)

    def flush_acks(self) -> None:
        self._ack_flush = None
        if not self._pending_acks or not self.open:
            return
        positions = set(self._pending_acks)
        sent = [d for key, d in self.held.items() if key[0] in positions]
        for delivery in sent:
            del self.held[(delivery.position, delivery.batch_index)]
        self.client.listener.acked(self, sorted(positions), sent)
        ids = [MessageIdData(ledgerId=p[0], entryId=p[1]) for p in self._pending_acks]
        self._pending_acks = []
        ack = CommandAck(consumer_id=self.consumer_id, ack_type=CommandAck.Individual, message_id=ids)
        self.client.send(BaseCommand(type=BaseCommand.ACK, ack=ack))

    def negative_acknowledge(self, delivery: Delivery) -> None:
        """Sends REDELIVER for the message's entry (the client's nack tracker, once its delay passed).
        Only single messages are nacked here: a batch is acknowledged or redelivered as one entry.
        On Failover and Exclusive the client asks for everything instead, as the official ones do."""
        if not self.open or delivery.batch_index >= 0:
            return
        if self.subscription_type in ("Failover", "Exclusive"):
            self.redeliver_all()
            return
        key = (delivery.position, delivery.batch_index)
        released = [self.held.pop(key)] if key in self.held else []
        self.client.listener.released(self, released, "nack")
        ids = [MessageIdData(ledgerId=delivery.position[0], entryId=delivery.position[1])]
        self.client.send(
            BaseCommand(
                type=BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                redeliverUnacknowledgedMessages=CommandRedeliverUnacknowledgedMessages(
                    consumer_id=self.consumer_id, message_ids=ids
                ),
            )
        )

    def redeliver_all(self) -> None:
        """redeliverUnacknowledgedMessages: the next epoch, the receiver queue cleared (its permits
        returned), everything not acked released, REDELIVER without ids."""
        if not self.open:
            return
        self.epoch += 1
        cleared = len(self.queue)
        self.queue.clear()
        released = list(self.held.values())
        self.held.clear()
        self._batch_acked.clear()
        self.client.listener.released(self, released, "redeliver-all")
        self.client.send(
            BaseCommand(
                type=BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                redeliverUnacknowledgedMessages=CommandRedeliverUnacknowledgedMessages(
                    consumer_id=self.consumer_id, consumer_epoch=self.epoch
                ),
            )
        )
        if cleared:
            self._return_permits(cleared)

    async def close(self) -> None:
        """Acks still grouped go first, then CLOSE_CONSUMER; the incarnation ends when it is sent."""
        if not self.open:
            return
        if self._ack_flush is not None:
            self._ack_flush.cancel()
        self.flush_acks()
        command = BaseCommand(type=BaseCommand.CLOSE_CONSUMER)
        body = command.close_consumer
        body.consumer_id = self.consumer_id
        future = self.client.request(command, body)
        self.end("closed")
        try:
            await future
        except ClientClosed:
            pass

    def end(self, why: str) -> None:
        if not self.open:
            return
        self.open = False
        if self._ack_flush is not None:
            self._ack_flush.cancel()
            self._ack_flush = None
        self.client.consumers.pop(self.consumer_id, None)
        self.queue.clear()
        self.held.clear()
        self.client.listener.ended(self, why)


@dataclass
class SimProducer:
    """A producer that publishes keyed messages whose payload is their publish index; a batch holds
    messages of one key (KeyBased batching)."""

    client: SimClient
    topic: str
    name: str
    producer_id: int = 1
    sequence_id: int = 0
    in_flight: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    failed: str | None = None

    async def create(self) -> None:
        command = BaseCommand(type=BaseCommand.PRODUCER)
        body = command.producer
        body.topic = self.topic
        body.producer_id = self.producer_id
        body.producer_name = self.name
        self.client.producers[self.producer_id] = self
        answer = await self.client.request(command, body)
        if answer.type == BaseCommand.ERROR:
            raise RuntimeError(f"producer refused: {answer.error.message}")

    def send(self, messages: list[tuple[int, str]], publish_time_ms: int) -> None:
        """One entry: a single message, or a batch of several of the same key."""
        sequence_id = self.sequence_id
        self.sequence_id += len(messages)
        metadata = MessageMetadata(producer_name=self.name, sequence_id=sequence_id, publish_time=publish_time_ms)
        key = messages[0][1]
        metadata.partition_key = key
        if len(messages) == 1:
            section = encode_entry(metadata, str(messages[0][0]).encode())
        else:
            metadata.num_messages_in_batch = len(messages)
            metadata.highest_sequence_id = sequence_id + len(messages) - 1
            section = encode_entry(
                metadata,
                encode_batch(
                    (SingleMessageMetadata(partition_key=k, payload_size=len(str(i))), str(i).encode())
                    for i, k in messages
                ),
            )
        self.in_flight[sequence_id] = messages
        command = BaseCommand(type=BaseCommand.SEND)
        command.send.producer_id = self.producer_id
        command.send.sequence_id = sequence_id
        command.send.num_messages = len(messages)
        if len(messages) > 1:
            command.send.highest_sequence_id = sequence_id + len(messages) - 1
        self.client.send(command, section)

    def on_receipt(self, receipt: Any) -> None:
        messages = self.in_flight.pop(receipt.sequence_id, None)
        if messages is None:
            return
        position = Position(signed_id(receipt.message_id.ledgerId), signed_id(receipt.message_id.entryId))
        for index, key in messages:
            self.client.listener.published(index, key, position)

    def fail(self, why: str) -> None:
        self.failed = why
