"""The time storage runs on: the wall clock of ledger timestamps and retention, the monotonic clock of
ledger ages, and the timers of rollovers, cursor flushes and retention checks.

Owns: the `Clock` that `ManagedLedgerFactory.open` takes and every storage decision that depends on
time reads, and `LoopClock`, the one it uses unless given another: the event loop's clock and timers
and the broker's wall clock. The shell simulator's loop has a virtual clock, so its storage rolls
and trims in virtual time; unit tests give a clock they advance by hand and wait on no real time.
Must not touch: what happens at those times (rollover and retention are `ledger_policy`'s).

The commit thread's group wait (`journalMaxGroupWaitMSec`) is not here: it is a wait inside one
commit on the engine's own thread, measured in real time, and decides no ledger's fate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "LoopClock", "TimerHandle"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time as storage reads it; all of it on the event loop thread."""

    def time_ms(self) -> int:
        """Wall-clock time, epoch milliseconds: ledger timestamps, retention by age."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back: ledger ages, write latencies."""
        ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        """Run `callback` on the event loop once `delay_s` seconds of `monotonic()` passed."""
        ...

    async def sleep(self, delay_s: float) -> None:
        """Return once `delay_s` seconds of `monotonic()` passed."""
        ...


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LoopClock:
    """The event loop's monotonic clock and timers, and a wall clock: the system's, or the broker's
    (`BrokerService(clock_ms=...)`, which the shell simulator derives from its virtual loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, time_ms: Callable[[], int] | None = None) -> None:
        self._loop = loop
        self.time_ms: Callable[[], int] = time_ms or _wall_clock_ms
        self.monotonic: Callable[[], float] = loop.time

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_later(delay_s, callback)

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
