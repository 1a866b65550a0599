"""The entries a subscription holds for its replays (broker/subscription.py `_hold`): bounded by payload
bytes, the oldest kept when a read overflows the bound, none thrown away wholesale."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import NamedTuple

from magnetar.broker import subscription as subscription_module
from magnetar.broker.config import load_config
from magnetar.broker.root import open_broker
from magnetar.broker.topic_name import TopicName
from magnetar.positions import Position


class Stored(NamedTuple):
    position: Position
    data: bytes


def _entries(first: int, count: int, size: int) -> list[Stored]:
    return [Stored(Position(1, first + i), b"x" * size) for i in range(count)]


def _run(tmp_path: Path, scenario) -> None:
    async def main() -> None:
        broker = await open_broker(load_config(), tmp_path / "data")
        try:
            topic = await broker.context.registry.get_topic(TopicName.parse("held"))
            await scenario(await topic.subscribe("sub", True, "earliest", None))
        finally:
            await broker.stop()

    asyncio.run(main())


def test_a_read_larger_than_the_bound_keeps_the_oldest_entries(tmp_path: Path) -> None:
    size = subscription_module.HELD_BYTES_MAX // 10

    async def scenario(subscription) -> None:
        subscription._hold(_entries(0, 4, size))
        # One read of 100 entries of a tenth of the bound: the first six of it fit beside the four held.
        subscription._hold(_entries(4, 100, size))
        assert list(subscription._held) == [Position(1, i) for i in range(10)]
        assert subscription._held_bytes == 10 * size <= subscription_module.HELD_BYTES_MAX
        # Full: a later read holds nothing more, and what was held stays for the replays.
        subscription._hold(_entries(104, 5, size))
        assert list(subscription._held) == [Position(1, i) for i in range(10)]
        subscription._release([Position(1, 0), Position(1, 1)])
        subscription._hold(_entries(109, 5, size))
        assert list(subscription._held)[-2:] == [Position(1, 109), Position(1, 110)]

    _run(tmp_path, scenario)


def test_entries_below_the_mark_delete_position_make_room(tmp_path: Path) -> None:
    size = subscription_module.HELD_BYTES_MAX // 4

    async def scenario(subscription) -> None:
        ledger = subscription.topic.ledger
        positions = list(await ledger.append_many([b"m"] * 5, [1] * 5, [1] * 5, [1000] * 5, ["p"] * 5, list(range(5))))
        subscription._hold([Stored(p, b"x" * size) for p in positions[:4]])
        assert len(subscription._held) == 4
        # Nobody released them (a skip moved the cursor): the next read that needs room drops them.
        subscription.cursor.mark_delete(positions[1])
        subscription._hold([Stored(positions[4], b"x" * size)])
        assert list(subscription._held) == [positions[2], positions[3], positions[4]]

    _run(tmp_path, scenario)
