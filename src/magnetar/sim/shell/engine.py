"""The SQLite engine with its threads replaced by the event loop: commits and reads take seeded time.

Owns: when a group commit runs and how long a read takes, chosen by the simulation's RNG. What a
commit writes and what a read returns is the real engine's work (`SqliteEngine._commit`, `_read`),
on a real SQLite database, so the managed ledger, the cursors and the entry cache above it are the
broker's own code. Must not touch: the schema or the SQL; those are the engine's.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from magnetar.clock import Clock
from magnetar.storage.sqlite_engine import CommitReport, SqliteEngine

__all__ = ["SimEngine"]


class SimEngine(SqliteEngine):
    def __init__(
        self, data_dir: str, rng: random.Random, commit_ms: tuple[float, float], read_ms: tuple[float, float]
    ) -> None:
        super().__init__(data_dir, journal_sync_data=False)
        self._rng = rng
        self._commit_ms = commit_ms
        self._read_ms = read_ms
        self._queued: list[Any] = []
        self._commit_handle: asyncio.TimerHandle | None = None

    def start(
        self,
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[CommitReport], None],
        clock: Clock,
    ) -> None:
        self._loop = loop
        self._on_commit = on_commit
        self._clock = clock

    def submit(self, item: Any) -> None:
        """Everything submitted before the commit fires goes into it, as a group commit takes what queued
        during the previous fsync."""
        self._queued.append(item)
        if self._commit_handle is None:
            assert self._loop is not None
            delay = self._rng.uniform(*self._commit_ms) / 1000
            self._commit_handle = self._loop.call_later(delay, self._commit_queued)

    def _commit_queued(self) -> None:
        self._commit_handle = None
        batch, self._queued = self._queued, []
        report = self._commit(batch)
        assert self._on_commit is not None
        self._on_commit(report)

    async def _run_read(self, function: Callable[..., Any], *args: Any) -> Any:
        await asyncio.sleep(self._rng.uniform(*self._read_ms) / 1000)
        return self._read(function, args)

    def close(self) -> None:
        if self._commit_handle is not None:
            self._commit_handle.cancel()
            self._commit_queued()
        super().close()
