"""The one clock of a broker: wall-clock time, monotonic time and timers, for every layer that keeps
time (broker, storage, replication, admin).

Owns: the `Clock` protocol each of them takes, and `LoopClock`, the clock the composition root
(broker/root.py) builds unless given another: the event loop's monotonic clock and timers, and the
system's wall clock. The shell simulator gives a `LoopClock` over its virtual loop with a wall clock
derived from that loop's time, so everything the broker stamps, ages or schedules runs in virtual time;
unit tests give one they advance by hand. Nothing outside this module reads the system's clocks
(tests/unit/test_layers.py checks it), except the network clients (client/, cli/, spark/), which are not
part of a broker.
Must not touch: what happens at those times.

Storage's commit thread reads `monotonic()` for its group wait (`journalMaxGroupWaitMSec`): a
LoopClock's `monotonic` is the loop's `time()`, which reads the system's monotonic clock and is safe to
call from any thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "LoopClock", "TimerHandle", "system_time_ms"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time as a broker reads it; all of it on the event loop thread, `monotonic` from any thread."""

    def time_ms(self) -> int:
        """Wall-clock time, epoch milliseconds: publish and ledger timestamps, retention, TTL, stats."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back: ages, timeouts, durations in logs."""
        ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        """Run `callback` on the event loop once `delay_s` seconds of `monotonic()` passed."""
        ...

    async def sleep(self, delay_s: float) -> None:
        """Return once `delay_s` seconds of `monotonic()` passed."""
        ...


def system_time_ms() -> int:
    """The system's wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class LoopClock:
    """The event loop's monotonic clock and timers, and a wall clock: the system's unless given one
    (the shell simulator derives it from its virtual loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, time_ms: Callable[[], int] | None = None) -> None:
        self._loop = loop
        self.time_ms: Callable[[], int] = time_ms or system_time_ms
        self.monotonic: Callable[[], float] = loop.time

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_later(delay_s, callback)

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
