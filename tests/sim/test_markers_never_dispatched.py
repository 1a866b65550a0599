"""Marker entries in a topic never reach consumers or readers (Pulsar's
AbstractBaseDispatcher.filterEntriesForConsumer): the real broker, its topic and managed ledger, driven over
the wire by the shell simulator's clients on virtual time. Markers go in between and after data; consumers
of every type receive the data alone, and acking it leaves no backlog; GET_LAST_MESSAGE_ID names the last
data entry, so a reader's has_message_available() loop ends (Pulsar #22571)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.broker.config import load_config
from magnetar.broker.context import BrokerContext
from magnetar.broker.figures import subscription_figures
from magnetar.broker.root import open_broker
from magnetar.broker.topic import PersistentTopic
from magnetar.clock import LoopClock
from magnetar.positions import Position
from magnetar.protocol import markers
from magnetar.protocol.commands import signed_id
from magnetar.protocol.messages import encode_entry
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, MessageMetadata
from magnetar.sim.shell.client import Delivery, Network, SimClient, SimConsumer, SimProducer
from magnetar.sim.shell.engine import SimEngine
from magnetar.sim.shell.loop import VirtualClockLoop

TOPIC = "persistent://public/default/markers"


class Recording:
    def __init__(self) -> None:
        self.deliveries: list[tuple[str, Delivery]] = []
        self.published_at: dict[int, Position] = {}

    def received(self, consumer: SimConsumer, delivery: Delivery) -> None:
        self.deliveries.append((consumer.label, delivery))

    def acked(self, consumer: SimConsumer, positions: list[Position], deliveries: list[Delivery]) -> None:
        pass

    def released(self, consumer: SimConsumer, deliveries: list[Delivery], why: str) -> None:
        pass

    def ended(self, consumer: SimConsumer, why: str) -> None:
        pass

    def published(self, index: int, key: str, position: Position) -> None:
        self.published_at[index] = position

    def note(self, line: str) -> None:
        pass


class Harness:
    def __init__(self, context: BrokerContext, loop: VirtualClockLoop) -> None:
        self.context = context
        self.network = Network(loop, random.Random(3), (0.05, 0.5))
        self.recording = Recording()
        self.clients = 0
        self._producer: SimProducer | None = None

    async def client(self, name: str) -> SimClient:
        self.clients += 1
        client = SimClient(name, self.context, self.network, self.recording, self.clients)
        await client.connected
        return client

    async def publish(self, indexes: range) -> None:
        if self._producer is None:
            self._producer = SimProducer(await self.client("producer"), TOPIC, "producer")
            await self._producer.create()
        for index in indexes:
            self._producer.send([(index, f"k{index}")], 0)
        while len(self.recording.published_at) < indexes.stop:
            await asyncio.sleep(0.001)

    @property
    def topic(self) -> PersistentTopic:
        return self.context.registry.topics[TOPIC]

    async def marker(self, number: int) -> Position:
        """A marker entry written the way the broker writes its own, through the topic's managed ledger."""
        return await self.topic.append_marker(markers.snapshot_request(f"snapshot-{number}", "r1", 0))

    async def last_message_id(self, client: SimClient, consumer: SimConsumer) -> Position:
        command = BaseCommand(type=BaseCommand.GET_LAST_MESSAGE_ID)
        command.getLastMessageId.consumer_id = consumer.consumer_id
        answer = await client.request(command, command.getLastMessageId)
        last = answer.getLastMessageIdResponse.last_message_id
        return Position(signed_id(last.ledgerId), signed_id(last.entryId))


def run(tmp_path: Path, scenario: Callable[[Harness], Awaitable[None]]) -> None:
    loop = VirtualClockLoop()

    async def main() -> None:
        engine = SimEngine(str(tmp_path), random.Random(2), (0.1, 1.0), (0.1, 1.0))
        broker = await open_broker(
            load_config(),
            tmp_path,
            clock=LoopClock(loop, lambda: int(loop.time() * 1000)),
            storage_engine=engine,
        )
        try:
            await scenario(Harness(broker.context, loop))
        finally:
            await broker.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.shut_down()


def _acking(consumer: SimConsumer) -> None:
    def take_all() -> None:
        while (delivery := consumer.take()) is not None:
            consumer.acknowledge(delivery)

    consumer.on_available = take_all


async def _until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    for _ in range(int(seconds * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in time")


@pytest.mark.parametrize("subscription_type", ["Exclusive", "Shared", "Key_Shared"])
def test_consumers_receive_the_data_and_no_marker(tmp_path: Path, subscription_type: str) -> None:
    async def scenario(harness: Harness) -> None:
        consumers = []
        for n in range(1 if subscription_type == "Exclusive" else 2):
            consumer = SimConsumer(
                await harness.client(f"c{n}"), f"c{n}", f"c{n}#1", "sub", subscription_type, 100, 0, TOPIC
            )
            await consumer.subscribe()
            _acking(consumer)
            consumers.append(consumer)
        await harness.publish(range(0, 3))
        await harness.marker(1)
        await harness.publish(range(3, 6))
        await harness.marker(2)
        await harness.marker(3)
        await _until(lambda: len(harness.recording.deliveries) >= 6)
        subscription = harness.topic.subscriptions["sub"]
        await _until(lambda: subscription.cursor.number_of_entries_in_backlog() == 0)
        await asyncio.sleep(1)
        assert sorted(d.index for _, d in harness.recording.deliveries) == list(range(6))
        # Acked individually as read: the mark-delete position is past the trailing markers too.
        assert subscription.cursor.mark_delete_position == harness.topic.ledger.last_confirmed_entry
        # A marker written while everything is consumed is read and acked at once: no backlog stays.
        await harness.marker(4)
        await _until(lambda: subscription.cursor.mark_delete_position == harness.topic.ledger.last_confirmed_entry)
        assert subscription.cursor.number_of_entries_in_backlog() == 0
        assert len(harness.recording.deliveries) == 6
        assert subscription_figures(subscription).backlog == 0
        assert sum(c.received for c in consumers) == 6

    run(tmp_path, scenario)


def test_a_readers_has_message_available_loop_ends_on_trailing_markers(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        await harness.publish(range(0, 3))
        await harness.marker(1)
        await harness.publish(range(3, 5))
        await harness.marker(2)
        await harness.marker(3)
        client = await harness.client("reader")
        reader = SimConsumer(client, "reader", "reader#1", "reader-sub", "Exclusive", 100, 0, TOPIC, durable=False)
        await reader.subscribe()
        last = await harness.last_message_id(client, reader)
        assert last == harness.recording.published_at[4]
        assert last < harness.topic.ledger.last_confirmed_entry
        # The client's hasMessageAvailable(): true while the last id is above the last one received.
        received: list[Delivery] = []
        while not received or received[-1].position < last:
            await _until(lambda: reader.queue)
            delivery = reader.take()
            assert delivery is not None
            received.append(delivery)
        assert [d.index for d in received] == list(range(5))
        await asyncio.sleep(1)
        assert not reader.queue  # nothing more came: the markers stay in the broker

    run(tmp_path, scenario)


def test_last_message_id_follows_data_and_skips_markers_written_later(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        client = await harness.client("reader")
        reader = SimConsumer(client, "reader", "reader#1", "reader-sub", "Exclusive", 100, 0, TOPIC, durable=False)
        await harness.publish(range(0, 1))
        first_marker = await harness.marker(1)
        await reader.subscribe()
        assert await harness.last_message_id(client, reader) == harness.recording.published_at[0]
        await harness.marker(2)
        assert await harness.last_message_id(client, reader) == harness.recording.published_at[0]
        await harness.publish(range(1, 2))
        assert await harness.last_message_id(client, reader) == harness.recording.published_at[1]
        await harness.marker(3)
        assert await harness.last_message_id(client, reader) == harness.recording.published_at[1]
        assert first_marker < harness.recording.published_at[1]

    run(tmp_path, scenario)


def test_a_topic_of_markers_alone_has_no_last_message(tmp_path: Path) -> None:
    """Nothing to receive: the answer is before the first entry, so has_message_available() is false."""

    async def scenario(harness: Harness) -> None:
        client = await harness.client("reader")
        reader = SimConsumer(client, "reader", "reader#1", "reader-sub", "Exclusive", 100, 0, TOPIC, durable=False)
        await reader.subscribe()
        first = await harness.marker(1)
        await harness.marker(2)
        last = await harness.last_message_id(client, reader)
        assert last < first
        assert last[1] == -1
        await asyncio.sleep(1)
        assert not reader.queue
        data = encode_entry(
            MessageMetadata(producer_name=markers.MARKER_PRODUCER_NAME, sequence_id=0, publish_time=0), b""
        )
        with pytest.raises(ValueError):
            harness.topic.append_marker(data)

    run(tmp_path, scenario)


def test_data_of_a_client_named_like_the_markers_is_delivered(tmp_path: Path) -> None:
    """Only the marker type makes a marker: a client's producer may be called `pulsar.marker`."""

    async def scenario(harness: Harness) -> None:
        consumer = SimConsumer(await harness.client("c"), "c", "c#1", "sub", "Exclusive", 100, 0, TOPIC)
        await consumer.subscribe()
        _acking(consumer)
        producer = SimProducer(await harness.client("p"), TOPIC, markers.MARKER_PRODUCER_NAME)
        await producer.create()
        producer.send([(7, "k")], 0)
        await _until(lambda: len(harness.recording.deliveries) == 1)
        assert harness.recording.deliveries[0][1].index == 7

    run(tmp_path, scenario)


def test_a_client_cannot_store_a_marker(tmp_path: Path) -> None:
    async def scenario(harness: Harness) -> None:
        client = await harness.client("p")
        producer = SimProducer(client, TOPIC, "p")
        await producer.create()
        metadata = MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, marker_type=markers.UPDATE)
        send = BaseCommand(type=BaseCommand.SEND)
        send.send.producer_id = producer.producer_id
        send.send.sequence_id = 0
        client.send(send, encode_entry(metadata, b""))
        await _until(lambda: not client.open)
        assert harness.topic.ledger.number_of_entries == 0

    run(tmp_path, scenario)
