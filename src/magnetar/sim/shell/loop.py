"""An asyncio event loop whose clock is virtual: when nothing is ready it jumps to the next timer.

Owns: virtual time and an executor that runs blocking calls inline. With no real I/O and no threads,
what runs and in which order depends on nothing but the program and its seed, so a schedule replays
exactly; and an hour of timers passes in the milliseconds the callbacks themselves take.
Must not touch: anything the broker does; it only schedules it.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["VirtualClockLoop", "InlineExecutor", "Stalled"]


class Stalled(RuntimeError):
    """Nothing is ready and no timer is scheduled: the program waits for something that never comes."""


class _VirtualSelector(selectors.BaseSelector):
    """The loop's self-pipe still goes through a real selector (call_soon_threadsafe writes to it); a
    wait for timers advances the clock instead of sleeping."""

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.now = 0.0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready:
            return ready
        if timeout is None:
            raise Stalled("no callback is ready and no timer is scheduled")
        self.now += timeout
        return []

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """`time()` is virtual seconds from 0. Timers fire in the order of their times, callbacks in the
    order they were scheduled, exactly as on a real loop, minus the waiting."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)
        self._clock_resolution = 1e-9
        self.set_default_executor(InlineExecutor())

    def time(self) -> float:
        return self._virtual.now

    def shut_down(self) -> None:
        """Cancel what still runs (connections' tasks, timers' coroutines), let it finish, close."""
        pending = [task for task in asyncio.all_tasks(self) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.close()


class InlineExecutor(ThreadPoolExecutor):
    """`run_in_executor` and `asyncio.to_thread` run the call at once, on the loop's thread (a
    ThreadPoolExecutor only because asyncio accepts no other default executor; it starts none)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine, as a thread's would be
            future.set_exception(error)
        return future
