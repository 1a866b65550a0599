"""Scripted scenarios on the real broker, through the shell simulator's pieces: a virtual-time loop,
the SQLite engine on the loop, a seeded network and clients that speak the wire protocol."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

from magnetar.broker.config import load_config
from magnetar.broker.context import BrokerContext
from magnetar.broker.root import open_broker
from magnetar.clock import LoopClock
from magnetar.positions import Position
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, Schema, ServerError
from magnetar.sim.shell.client import Delivery, Network, SimClient, SimConsumer, SimProducer
from magnetar.sim.shell.engine import SimEngine
from magnetar.sim.shell.loop import VirtualClockLoop

TOPIC = "persistent://public/default/scripted"


class Harness:
    def __init__(self, context: BrokerContext, loop: VirtualClockLoop) -> None:
        self.context = context
        self.loop = loop
        self.network = Network(loop, random.Random(1), (0.05, 0.5))
        self.recording = Recording()
        self.clients = 0

    async def client(self, name: str) -> SimClient:
        self.clients += 1
        client = SimClient(name, self.context, self.network, self.recording, self.clients)
        await client.connected
        return client

    async def consumer(
        self, client: SimClient, name: str, subscription_type: str, queue_size: int = 100
    ) -> SimConsumer:
        consumer = SimConsumer(client, name, f"{name}#1", "sub", subscription_type, queue_size, 0, TOPIC)
        await consumer.subscribe()
        return consumer

    async def publish(self, messages: list[tuple[int, str]]) -> None:
        client = await self.client("producer")
        producer = SimProducer(client, TOPIC, "producer")
        await producer.create()
        for message in messages:
            producer.send([message], 0)
        while len(self.recording.published_at) < len(messages):
            await asyncio.sleep(0.001)


class Recording:
    """What the clients saw, in order."""

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


def run(tmp_path: Path, scenario: Callable[[Harness], Awaitable[None]], **settings: object) -> None:
    loop = VirtualClockLoop()

    async def main() -> None:
        engine = SimEngine(str(tmp_path), random.Random(2), (0.1, 1.0), (0.1, 1.0))
        broker = await open_broker(
            load_config(overrides=settings),
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
    """The application takes every message as it arrives and acks it at once."""

    def take_all() -> None:
        while (delivery := consumer.take()) is not None:
            consumer.acknowledge(delivery)

    consumer.on_available = take_all


def test_consumers_subscribing_at_once_share_one_dispatcher(tmp_path: Path) -> None:
    """Five clients subscribe at the same moment to a new Key_Shared subscription (the first
    subscription of a topic): every key goes to one consumer, and every message once."""

    async def scenario(harness: Harness) -> None:
        clients = [await harness.client(f"client-{n}") for n in range(5)]
        consumers = [
            SimConsumer(client, f"c{n}", f"c{n}#1", "sub", "Key_Shared", 100, 0, TOPIC)
            for n, client in enumerate(clients)
        ]
        await asyncio.gather(*(consumer.subscribe() for consumer in consumers))
        for consumer in consumers:
            _acking(consumer)
        topic = harness.context.registry.topics[TOPIC]
        assert list(topic.subscriptions) == ["sub"]
        assert len(topic.subscriptions["sub"].consumers) == 5
        await harness.publish([(index, f"k{index % 20}") for index in range(200)])
        while len(harness.recording.deliveries) < 200:
            await asyncio.sleep(0.01)
        await asyncio.sleep(1)
        deliveries = harness.recording.deliveries
        assert sorted(d.index for _label, d in deliveries) == list(range(200))
        owners: dict[str, set[str]] = {}
        for label, delivery in deliveries:
            owners.setdefault(delivery.key, set()).add(label)
        assert all(len(labels) == 1 for labels in owners.values()), owners

    run(tmp_path, scenario)


def test_a_redelivery_of_everything_moves_the_consumer_epoch(tmp_path: Path) -> None:
    """PIP-84: an Exclusive consumer asks for everything again with the next epoch; what the broker
    sends from then on carries it, and the client drops what was sent before."""

    async def scenario(harness: Harness) -> None:
        client = await harness.client("client")
        consumer = await harness.consumer(client, "c", "Exclusive")
        await harness.publish([(index, "k") for index in range(10)])
        while len(harness.recording.deliveries) < 10:
            await asyncio.sleep(0.01)
        server_consumer = next(iter(harness.context.registry.topics[TOPIC].subscriptions["sub"].consumers.values()))
        assert server_consumer.epoch == 0
        consumer.redeliver_all()
        while len(harness.recording.deliveries) < 20:
            await asyncio.sleep(0.01)
        assert server_consumer.epoch == 1
        again = [d.index for _label, d in harness.recording.deliveries[10:]]
        assert again == list(range(10))

    run(tmp_path, scenario)


def test_producer_success_always_names_a_schema_version(tmp_path: Path) -> None:
    """Pulsar always sends schema_version in PRODUCER_SUCCESS, and the Java client cannot create a
    producer without it: empty for a producer without a schema, the topic's version else."""

    async def scenario(harness: Harness) -> None:
        client = await harness.client("client")
        answers = []
        for producer_id, schema in ((1, None), (2, {"name": "s", "type": 2, "schema_data": b'{"type":"string"}'})):
            command = BaseCommand(type=BaseCommand.PRODUCER)
            command.producer.topic = TOPIC
            command.producer.producer_id = producer_id
            if schema is not None:
                command.producer.schema.CopyFrom(Schema(**schema))
            answers.append((await client.request(command, command.producer)).producer_success)
        assert [a.HasField("schema_version") for a in answers] == [True, True]
        assert answers[0].schema_version == b""
        assert answers[1].schema_version == (0).to_bytes(8, "big")

    run(tmp_path, scenario)


def test_get_or_create_schema_and_get_schema_by_version(tmp_path: Path) -> None:
    """The Go client registers a schema with GET_OR_CREATE_SCHEMA on its first send; AUTO_CONSUME and
    the Python client's Avro reader fetch a message's writer schema with GET_SCHEMA by version."""

    def get_or_create(topic: str, schema: dict) -> BaseCommand:
        command = BaseCommand(type=BaseCommand.GET_OR_CREATE_SCHEMA)
        command.getOrCreateSchema.topic = topic
        command.getOrCreateSchema.schema.CopyFrom(Schema(**schema))
        return command

    def get(version: int | None) -> BaseCommand:
        command = BaseCommand(type=BaseCommand.GET_SCHEMA)
        command.getSchema.topic = TOPIC
        if version is not None:
            command.getSchema.schema_version = version.to_bytes(8, "big")
        return command

    strings = {"name": "s", "type": 2, "schema_data": b'{"type":"string"}'}
    ints = {"name": "s", "type": 2, "schema_data": b'{"type":"int"}'}
    longs = {"name": "s", "type": 2, "schema_data": b'{"type":"long"}'}

    async def scenario(harness: Harness) -> None:
        client = await harness.client("client")

        async def ask(command: BaseCommand) -> object:
            body = getattr(command, "getOrCreateSchema" if command.HasField("getOrCreateSchema") else "getSchema")
            answer = await client.request(command, body)
            return (
                answer.getOrCreateSchemaResponse if command.HasField("getOrCreateSchema") else answer.getSchemaResponse
            )

        missing = await ask(get_or_create("persistent://public/default/nowhere", strings))
        assert (ServerError.Name(missing.error_code), missing.error_message) == ("TopicNotFound", "Topic not found")
        await harness.publish([(0, "k")])  # the topic exists now, without a schema
        assert (await ask(get_or_create(TOPIC, ints))).schema_version == (0).to_bytes(8, "big")
        assert (await ask(get_or_create(TOPIC, ints))).schema_version == (0).to_bytes(8, "big")
        # An int reader cannot read strings: not FULL-compatible with version 0.
        refused = await ask(get_or_create(TOPIC, strings))
        assert ServerError.Name(refused.error_code) == "IncompatibleSchema"
        assert "Unable to read schema" in refused.error_message
        # long widens int, not the other way round: FULL needs both.
        assert ServerError.Name((await ask(get_or_create(TOPIC, longs))).error_code) == "IncompatibleSchema"
        assert (await ask(get_or_create(TOPIC, {"name": "n", "type": 0, "schema_data": b""}))).schema_version == b""
        first = await ask(get(0))
        assert (first.schema.schema_data, first.schema_version) == (b'{"type":"int"}', (0).to_bytes(8, "big"))
        assert first.schema.name == "public/default/scripted"
        assert (await ask(get(None))).schema_version == (0).to_bytes(8, "big")
        assert (await ask(get(5))).error_message == "Topic not found or no-schema"

    run(tmp_path, scenario)


def test_acks_sent_just_after_a_seek_do_not_move_the_reset_cursor(tmp_path: Path) -> None:
    """A client seeks to the earliest message and acknowledges what it holds right after, before the
    broker has closed its consumer: those acks must not land on the reset cursor (Pulsar closes the
    subscription's consumers before it moves the cursor), so all ten messages come again."""

    async def scenario(harness: Harness) -> None:
        client = await harness.client("client")
        consumer = await harness.consumer(client, "c", "Exclusive")
        await harness.publish([(index, "k") for index in range(10)])
        while len(harness.recording.deliveries) < 10:
            await asyncio.sleep(0.01)
        held = [consumer.take() for _ in range(10)]
        seek = BaseCommand(type=BaseCommand.SEEK)
        seek.seek.consumer_id = consumer.consumer_id
        seek.seek.message_id.ledgerId = (1 << 64) - 1  # earliest: (-1, -1)
        seek.seek.message_id.entryId = (1 << 64) - 1
        answer = asyncio.ensure_future(client.request(seek, seek.seek))
        # The acks leave after the SEEK, and reach the broker while its cursor is being reset.
        await asyncio.sleep(0.0003)
        for delivery in held:
            assert delivery is not None
            consumer.acknowledge(delivery)
        assert (await answer).type == BaseCommand.SUCCESS
        cursor = harness.context.registry.topics[TOPIC].subscriptions["sub"].cursor
        first = harness.recording.published_at[0]
        assert cursor.mark_delete_position < first
        again = await harness.consumer(await harness.client("again"), "c2", "Exclusive")
        while len(harness.recording.deliveries) < 20:
            await asyncio.sleep(0.01)
        assert [d.index for label, d in harness.recording.deliveries[10:] if label == again.label] == list(range(10))

    run(tmp_path, scenario)
