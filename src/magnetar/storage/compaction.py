"""A topic's compacted view on disk: the entries that survived the last compaction, under their original
positions, and the horizon (the last entry that compaction read).

Owns: the calls the broker's compactor makes to keep a topic's view: replacing it in one group-commit
transaction (readers see the old view or the new one, never a mix, and a crash keeps one of them
whole), and reading it back in position order. The tables (`compacted_entries`,
`compaction_horizons`) and their statements are the engine's (`SqliteEngine.replace_compacted`,
`read_compacted`, ...); a topic's view is deleted with the topic (`SqliteEngine.delete_topic`).
Must not touch: which entries survive (broker/compaction.py decides), cursors, consumers, SQL.

Pulsar writes each compaction to a new BookKeeper ledger and records its id in the `__compaction`
cursor's properties; here the view lives beside the topic's ledgers in the same database, keyed by
topic id, and one transaction swaps it, so there is no orphan ledger to clean up after a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from magnetar.positions import Position
from magnetar.storage.sqlite_engine import Entry

if TYPE_CHECKING:
    from magnetar.storage.access import StorageAccess

__all__ = ["read_compacted", "read_horizon", "read_last_compacted", "replace_compacted"]


async def read_horizon(factory: StorageAccess, topic_id: int) -> Position | None:
    """The horizon of the topic's compacted view, None if it was never compacted."""
    return await factory.engine.read_horizon(topic_id)


async def read_compacted(factory: StorageAccess, topic_id: int, start: tuple[int, int], count: int) -> list[Entry]:
    """Up to `count` entries of the compacted view at or after `start`, in position order."""
    return await factory.engine.read_compacted(topic_id, start, count)


async def read_last_compacted(factory: StorageAccess, topic_id: int) -> Entry | None:
    """The last entry of the compacted view, None when it holds none."""
    return await factory.engine.read_last_compacted(topic_id)


def replace_compacted(
    factory: StorageAccess, topic_id: int, horizon: tuple[int, int], entries: Sequence[Entry], now_ms: int
) -> asyncio.Future[None]:
    """Replace the topic's view with `entries` (Entry tuples, their `data` the compacted bytes) and its
    horizon, in one transaction; the future resolves once that is durable."""
    factory.check_open()
    return factory.engine.replace_compacted(topic_id, horizon, entries, now_ms)
