"""Back-pressure on publishers (broker/publish_limits.py): a connection with too many SENDs unanswered, or a
broker holding too many bytes of them, stops reading until half of the limit is free; and over a real
socket, every SEND read is answered, in order, and counted out again."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from magnetar.broker.config import load_config
from magnetar.broker.publish_limits import PendingPublishes, PublishBuffer, PublishRate
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


def _burst(tmp_path: Path, overrides: dict[str, int], limiter: type, record, count: int = 3000) -> None:
    """`count` SENDs pipelined into a broker with `overrides`, `limiter.room` wrapped to call `record(limiter)`
    each time a connection waits: the receipts, after checking they are all there, in order, once each, and
    that every SEND was counted out of the publish buffer."""
    original_room = limiter.room

    async def recording_room(self) -> None:
        record(self)
        await original_room(self)

    async def scenario() -> None:
        config = load_config(overrides={"brokerServicePort": 0, **overrides})
        broker = await open_broker(config, tmp_path / "data")
        try:
            await broker.listen()
            receipts: list = []
            thread = threading.Thread(target=_produce, args=(broker.binary_port, count, receipts))
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.01)
            assert [r.sequence_id for r in receipts] == list(range(count))
            positions = [r.position for r in receipts]
            assert positions == sorted(positions) and len(set(positions)) == count
            assert broker.context.publish_buffer.size_bytes == 0
        finally:
            await broker.stop()

    limiter.room = recording_room
    try:
        _run(scenario)
    finally:
        limiter.room = original_room


def test_a_burst_past_the_limit_is_answered_in_order_and_counted_out(tmp_path: Path):
    throttled: list[int] = []
    _burst(
        tmp_path, {"maxPendingPublishRequestsPerConnection": 16}, PendingPublishes, lambda p: throttled.append(p.count)
    )
    # The client pipelines up to 1,000 SENDs: the connection stopped reading over and over, each time with
    # at least its 16 unanswered.
    assert throttled and min(throttled) >= 16


class _Clock:
    """Monotonic time that only sleeping moves."""

    def __init__(self) -> None:
        self.now_s = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now_s

    async def sleep(self, delay_s: float) -> None:
        self.slept.append(delay_s)
        self.now_s += delay_s


def test_the_publish_rate_holds_over_a_second_whatever_the_reads():
    async def scenario() -> None:
        clock = _Clock()
        rate = PublishRate(clock, 1000, 0)  # type: ignore[arg-type]
        assert rate.enabled and not rate.over_limit
        rate.read(600, 1)
        assert not rate.over_limit
        # A second read takes the bucket 400 messages into debt: 0.4 s at 1,000 a second.
        rate.read(800, 1)
        assert rate.over_limit
        await rate.room()
        assert clock.slept == [0.4] and not rate.over_limit
        # After a quiet second the bucket is full again, no fuller.
        clock.now_s += 5
        rate.read(1000, 1)
        assert not rate.over_limit
        rate.read(1, 1)
        assert rate.over_limit

    _run(scenario)


def test_the_byte_rate_and_no_rate():
    async def scenario() -> None:
        clock = _Clock()
        rate = PublishRate(clock, 0, 10_000)  # type: ignore[arg-type]
        rate.read(1, 25_000)
        await rate.room()
        assert clock.slept == [1.5]
        unlimited = PublishRate(clock, 0, 0)  # type: ignore[arg-type]
        unlimited.read(10**9, 10**12)
        assert not unlimited.enabled and not unlimited.over_limit

    _run(scenario)


def test_a_broker_rate_limit_stops_reading_and_loses_nothing(tmp_path: Path):
    waits: list[bool] = []
    rate = {"brokerPublisherThrottlingMaxMessageRate": 400}
    _burst(tmp_path, rate, PublishRate, lambda r: waits.append(r.over_limit), count=1000)
    # 1,000 messages against a bucket of 400 filled at 400 a second: unless the client took 1.5 s to send
    # them by itself, the bucket went into debt and the connection waited, each time in debt.
    assert waits and all(waits)
