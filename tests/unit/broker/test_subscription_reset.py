"""A seek's cursor reset fences the subscription until the cursor is stored (broker/subscription.py
`reset_cursor`), on real storage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.broker.config import load_config
from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.root import open_broker
from magnetar.broker.subscription import SubscriptionFencedError
from magnetar.broker.topic_name import TopicName
from magnetar.core.errors import ConsumerBusyError


class Connection:
    """What a consumer writes to: the frames, kept."""

    remote_address = "test"

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.forgotten: list[int] = []

    def write(self, frame: bytes) -> None:
        self.frames.append(frame)

    def forget_consumer(self, consumer_id: int) -> None:
        self.forgotten.append(consumer_id)


def _run(tmp_path: Path, scenario) -> None:
    async def main() -> None:
        broker = await open_broker(load_config(), tmp_path / "data")
        try:
            topic = await broker.context.registry.get_topic(TopicName.parse("reset"))
            await scenario(await topic.subscribe("sub", True, "earliest", None))
        finally:
            await broker.stop()

    asyncio.run(main())


def test_a_consumer_coming_back_during_a_reset_is_refused_until_the_cursor_is_stored(tmp_path: Path) -> None:
    """The C++ client clears its queue when the SEEK's answer comes: a consumer let back in before the
    answer could be sent messages that its client then drops."""

    async def scenario(subscription) -> None:
        ledger = subscription.topic.ledger
        positions = list(await ledger.append_many([b"m"] * 5, [1] * 5, [1] * 5, [1000] * 5, ["p"] * 5, list(range(5))))
        connection = Connection()

        def attach(client_id: int) -> None:
            """As the SUBSCRIBE command does."""
            consumer = ServerConsumer(connection, subscription, client_id, "c", -1)
            consumer.consumer_id = subscription.add_consumer(consumer, "Exclusive", 0, None)

        attach(1)
        stored = asyncio.Event()
        flush = subscription.cursor.flush

        async def slow_flush() -> None:
            await stored.wait()
            await flush()

        subscription.cursor.flush = slow_flush
        reset = asyncio.create_task(subscription.reset_cursor(positions[2]))
        try:
            await asyncio.sleep(0)
            assert connection.forgotten == [1] and not subscription.consumers
            with pytest.raises(SubscriptionFencedError) as refused:
                attach(2)
            assert refused.value.server_error == "ServiceNotReady"
            with pytest.raises(ConsumerBusyError):
                await subscription.reset_cursor(positions[0])
        finally:
            stored.set()
        await reset
        attach(3)
        assert [c.client_consumer_id for c in subscription.consumers.values()] == [3]
        assert subscription.cursor.read_position == positions[2]
        assert subscription.cursor.persisted_mark_delete_position == positions[1]

    _run(tmp_path, scenario)
