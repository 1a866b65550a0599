"""Back-pressure on publishers (broker/publish_limits.py): a connection with too many SENDs unanswered, or a
broker holding too many bytes of them, stops reading until half of the limit is free; and over a real
socket, every SEND read is answered, in order, and counted out again."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from magnetar.broker.config import load_config
from magnetar.broker.publish_limits import PendingPublishes, PublishBuffer
from magnetar.broker.root import open_broker
from magnetar.client.wire import Connection, Producer
from magnetar.protocol.messages import encode_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata


def _run(scenario) -> None:
    asyncio.run(scenario())


def test_a_connection_over_its_count_waits_for_half():
    async def scenario() -> None:
        buffer = PublishBuffer(0)
        pending = PendingPublishes(10, buffer)
        pending.read(9, 900)
        assert not pending.over_limit
        pending.read(3, 300)
        assert pending.over_limit
        waiting = asyncio.ensure_future(pending.room())
        await asyncio.sleep(0)
        assert buffer.throttled_connections == 1
        pending.answered(6, 600)
        await asyncio.sleep(0)
        assert not waiting.done()
        pending.answered(1, 100)
        await asyncio.sleep(0)
        assert waiting.done() and buffer.throttled_connections == 0
        assert pending.count == 5 and buffer.size_bytes == 500

    _run(scenario)


def test_the_broker_buffer_holds_every_publishing_connection_until_half():
    async def scenario() -> None:
        buffer = PublishBuffer(1)
        first, second = PendingPublishes(0, buffer), PendingPublishes(0, buffer)
        first.read(1, 200_000)
        second.read(1, 900_000)
        assert buffer.full and first.over_limit and second.over_limit
        waits = [asyncio.ensure_future(p.room()) for p in (first, second)]
        await asyncio.sleep(0)
        assert buffer.throttled_global == 2
        first.answered(1, 200_000)
        await asyncio.sleep(0)
        # 900,000 bytes left: above half the megabyte, both still wait.
        assert not any(w.done() for w in waits)
        second.answered(1, 900_000)
        await asyncio.sleep(0)
        assert all(w.done() for w in waits) and buffer.throttled_global == 0 and buffer.size_bytes == 0

    _run(scenario)


def test_no_limit_never_waits():
    async def scenario() -> None:
        pending = PendingPublishes(0, PublishBuffer(0))
        pending.read(1_000_000, 10**10)
        assert not pending.over_limit
        await pending.room()

    _run(scenario)


def _produce(port: int, count: int, result: list) -> None:
    section = encode_entry(MessageMetadata(producer_name="limited", sequence_id=0, publish_time=1), b"x" * 100)
    with Connection(f"pulsar://127.0.0.1:{port}") as connection:
        producer = Producer(connection, "persistent://public/default/limited", "limited")
        for sequence_id in range(count):
            producer.send(sequence_id, sequence_id, 1, section)
        result.extend(producer.flush())


def test_a_burst_past_the_limit_is_answered_in_order_and_counted_out(tmp_path: Path):
    throttled: list[int] = []
    original_room = PendingPublishes.room

    async def counting_room(self: PendingPublishes) -> None:
        throttled.append(self.count)
        await original_room(self)

    async def scenario() -> None:
        config = load_config(overrides={"brokerServicePort": 0, "maxPendingPublishRequestsPerConnection": 16})
        broker = await open_broker(config, tmp_path / "data")
        try:
            await broker.listen()
            receipts: list = []
            thread = threading.Thread(target=_produce, args=(broker.binary_port, 3000, receipts))
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.01)
            assert [r.sequence_id for r in receipts] == list(range(3000))
            positions = [r.position for r in receipts]
            assert positions == sorted(positions) and len(set(positions)) == 3000
            assert broker.context.publish_buffer.size_bytes == 0
        finally:
            await broker.stop()

    PendingPublishes.room = counting_room  # type: ignore[method-assign]
    try:
        _run(scenario)
    finally:
        PendingPublishes.room = original_room  # type: ignore[method-assign]
    # The client pipelines up to 1,000 SENDs: the connection stopped reading over and over, each time with
    # at least its 16 unanswered.
    assert throttled and min(throttled) >= 16
