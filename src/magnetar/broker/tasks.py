"""Tasks that run beside the work that started them: an owner for each, so that no exception is lost.

Owns: `BackgroundTasks`, a set of running tasks that logs the exception of any that fails (with the
name it was given) and cancels the rest when its owner closes. Every task the broker spawns and does
not await belongs to one: a connection's (its requests that wait), a topic's, the broker's periodic
checks. Must not touch: what the tasks do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["BackgroundTasks"]

log = logging.getLogger(__name__)


class BackgroundTasks:
    """Invariants: a task is in the set from its start until it is done; a done task's exception, if
    any, has been logged (a cancelled task has none)."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("[%s] %s failed: %r", self._owner, task.get_name(), error, exc_info=error)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        """Cancel every task and wait until each has ended."""
        tasks = list(self._tasks)
        self.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
