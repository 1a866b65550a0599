"""A connection's output (broker/connection.py): what is written in one turn of the event loop leaves in one
write at the next, in order; MESSAGE frames (`deliver`) do not leave if by then the broker may no longer
serve, its session's lease having lapsed between the dispatch and the write (a process stopped there by
kill -STOP past its session timeout: the chaos suite saw such a frame reach a consumer after another broker
had taken the topic over)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from magnetar.broker.config import load_config
from magnetar.broker.connection import ServerConnection
from magnetar.broker.root import open_broker


class _Writer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, _name: str, default: object = None) -> object:
        return default


def test_message_frames_stay_back_once_the_broker_may_no_longer_serve(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await open_broker(load_config(), tmp_path / "data")
        try:
            writer = _Writer()
            connection = ServerConnection(broker.context, asyncio.StreamReader(), writer)  # type: ignore[arg-type]
            lease = [True]
            connection.serving = lambda: lease[0]
            connection.deliver(b"m1")
            connection.write(b"r1")
            await asyncio.sleep(0)
            assert writer.sent == [b"m1r1"]
            connection.write(b"r2")
            connection.deliver(b"m2")
            connection.write(b"r3")
            lease[0] = False  # stopped here past the session timeout, and continued
            await asyncio.sleep(0)
            assert writer.sent == [b"m1r1", b"r2r3"]
            connection.deliver(b"m3")
            await asyncio.sleep(0)
            assert writer.sent == [b"m1r1", b"r2r3"]
        finally:
            await broker.stop()

    asyncio.run(scenario())
