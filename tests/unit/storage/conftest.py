"""Helpers for storage unit tests: each test runs its scenario in a fresh event loop and data dir."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import ManagedLedgerFactory, StorageConfig

SMALL = StorageConfig(
    managedLedgerMaxEntriesPerLedger=5,
    managedLedgerMinLedgerRolloverTimeMinutes=0,
    defaultRetentionTimeInMinutes=-1,
    defaultRetentionSizeInMB=-1,
)


class ManualClock:
    """A storage `Clock` that moves only when the test calls `advance`: timers fire there, in time
    order, so a test of rollovers, retention and periodic flushes waits on no real time."""

    def __init__(self, epoch_ms: int = 1_767_225_600_000) -> None:
        self.now = 0.0
        self._epoch_ms = epoch_ms
        self._timers: list[tuple[float, int, asyncio.Handle]] = []
        self._order = itertools.count()

    def time_ms(self) -> int:
        return self._epoch_ms + int(self.now * 1000)

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.Handle:
        handle = asyncio.Handle(callback, (), asyncio.get_running_loop())
        heapq.heappush(self._timers, (self.now + delay_s, next(self._order), handle))
        return handle

    async def sleep(self, delay_s: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.call_later(delay_s, lambda: woken.done() or woken.set_result(None))
        await woken

    async def advance(self, seconds: float) -> None:
        """Move the clock on, running each timer that comes due and letting what it woke run a few
        loop iterations before the next timer. A timer's coroutine that waits for a commit meanwhile
        (a periodic flush of a dirty cursor) sets its next timer late: flush first where that matters."""
        until = self.now + seconds
        while self._timers and self._timers[0][0] <= until:
            when, _, handle = heapq.heappop(self._timers)
            self.now = when
            if not handle.cancelled():
                handle._run()
            for _ in range(3):
                await asyncio.sleep(0)
        self.now = until


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="session")
def small_config() -> StorageConfig:
    """Ledgers of 5 entries, rolled at once, kept forever: rollover shows up in every test."""
    return SMALL


@pytest.fixture
def run_storage(tmp_path: Path) -> Callable[..., Any]:
    """`run_storage(scenario, config, clock)` opens a factory on tmp_path (on `clock`, the event loop's
    by default), runs `scenario(factory)`, closes."""

    def run(
        scenario: Callable[[ManagedLedgerFactory], Awaitable[Any]],
        config: StorageConfig = SMALL,
        clock: ManualClock | None = None,
    ) -> Any:
        async def main() -> Any:
            factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), config, clock=clock)
            try:
                return await scenario(factory)
            finally:
                await factory.close()

        return asyncio.run(main())

    return run
