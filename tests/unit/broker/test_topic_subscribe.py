"""A topic's subscriptions when several consumers subscribe at the same moment, on real storage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.broker.config import load_config
from magnetar.broker.registry import TopicRegistry
from magnetar.broker.root import open_broker
from magnetar.broker.topic import SubscriptionExistsError
from magnetar.broker.topic_name import TopicName
from magnetar.positions import Position


def _run(tmp_path: Path, scenario) -> None:
    async def main() -> None:
        broker = await open_broker(load_config(), tmp_path / "data")
        try:
            await scenario(broker.context.registry)
        finally:
            await broker.stop()

    asyncio.run(main())


def test_consumers_subscribing_at_once_share_one_subscription(tmp_path: Path) -> None:
    """Ten consumers subscribe to a new subscription together: each waits for the cursor to be
    persisted, and all must end on one subscription (two would be two dispatchers on one cursor)."""

    async def scenario(registry: TopicRegistry) -> None:
        topic = await registry.get_topic(TopicName.parse("together"))
        subscriptions = await asyncio.gather(*(topic.subscribe("sub", True, "earliest", None) for _ in range(10)))
        assert all(s is subscriptions[0] for s in subscriptions)
        assert topic.subscriptions["sub"] is subscriptions[0]

    _run(tmp_path, scenario)


def test_admin_create_racing_a_consumer_is_refused(tmp_path: Path) -> None:
    async def scenario(registry: TopicRegistry) -> None:
        topic = await registry.get_topic(TopicName.parse("racing"))
        created, subscribed = await asyncio.gather(
            topic.create_subscription("sub", Position(0, 0)),
            topic.subscribe("sub", True, "earliest", None),
            return_exceptions=True,
        )
        # Whichever came back first owns the name; the other is either the same subscription or refused.
        if isinstance(created, BaseException):
            assert isinstance(created, SubscriptionExistsError)
            assert topic.subscriptions["sub"] is subscribed
        else:
            assert topic.subscriptions["sub"] is created is subscribed

    _run(tmp_path, scenario)


@pytest.mark.parametrize("durable", [True, False])
def test_a_second_subscribe_returns_the_existing_subscription(tmp_path: Path, durable: bool) -> None:
    async def scenario(registry: TopicRegistry) -> None:
        topic = await registry.get_topic(TopicName.parse("again"))
        first = await topic.subscribe("sub", durable, "latest", None)
        assert await topic.subscribe("sub", durable, "latest", None) is first

    _run(tmp_path, scenario)
