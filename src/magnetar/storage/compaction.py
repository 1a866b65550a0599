"""A topic's compacted view on disk: the entries that survived the last compaction, under their original
positions, and the horizon (the last entry that compaction read).

Owns: the `compacted_entries` and `compaction_horizons` tables (schema in sqlite_engine), replacing a
topic's view in one group-commit transaction (readers see the old view or the new one, never a mix,
and a crash keeps one of them whole), and reading it back in position order.
Must not touch: which entries survive (broker/compaction.py decides), cursors, consumers.

Pulsar writes each compaction to a new BookKeeper ledger and records its id in the `__compaction`
cursor's properties; here the view lives beside the topic's ledgers in the same database, keyed by
topic id, and one transaction swaps it, so there is no orphan ledger to clean up after a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from magnetar.core.positions import Position
from magnetar.storage.sqlite_engine import Entry, new_entry, new_position

__all__ = ["delete_compacted", "read_compacted", "read_horizon", "read_last_compacted", "replace_compacted"]


async def read_horizon(factory: Any, topic_id: int) -> Position | None:
    """The horizon of the topic's compacted view, None if it was never compacted."""

    def read(connection: Any) -> Position | None:
        row = connection.execute(
            "SELECT ledger_id, entry_id FROM compaction_horizons WHERE topic_id=?", (topic_id,)
        ).fetchone()
        return None if row is None else Position(*row)

    return await factory.engine.run_read(read)


async def read_compacted(factory: Any, topic_id: int, start: tuple[int, int], count: int) -> list[Entry]:
    """Up to `count` entries of the compacted view at or after `start`, in position order."""

    def read(connection: Any) -> list[Entry]:
        rows = connection.execute(
            "SELECT ledger_id, entry_id, data, sticky_key_hash, message_count, publish_time, producer_name, "
            "sequence_id FROM compacted_entries WHERE topic_id=? AND (ledger_id, entry_id) >= (?, ?) "
            "ORDER BY ledger_id, entry_id LIMIT ?",
            (topic_id, start[0], start[1], count),
        ).fetchall()
        return [new_entry((new_position((row[0], row[1])), *row[2:])) for row in rows]

    return await factory.engine.run_read(read)


async def read_last_compacted(factory: Any, topic_id: int) -> Entry | None:
    """The last entry of the compacted view, None when it holds none."""

    def read(connection: Any) -> Entry | None:
        row = connection.execute(
            "SELECT ledger_id, entry_id, data, sticky_key_hash, message_count, publish_time, producer_name, "
            "sequence_id FROM compacted_entries WHERE topic_id=? ORDER BY ledger_id DESC, entry_id DESC LIMIT 1",
            (topic_id,),
        ).fetchone()
        return None if row is None else new_entry((new_position((row[0], row[1])), *row[2:]))

    return await factory.engine.run_read(read)


def replace_compacted(
    factory: Any, topic_id: int, horizon: tuple[int, int], entries: Sequence[Entry], now_ms: int
) -> Any:
    """Replace the topic's view with `entries` (Entry tuples, their `data` the compacted bytes) and its
    horizon, in one transaction; the future resolves once that is durable."""
    rows = [(topic_id, entry.position[0], entry.position[1], *entry[1:]) for entry in entries]

    def apply(connection: Any) -> None:
        connection.execute("DELETE FROM compacted_entries WHERE topic_id=?", (topic_id,))
        connection.executemany("INSERT INTO compacted_entries VALUES (?,?,?,?,?,?,?,?,?)", rows)
        connection.execute(
            "INSERT INTO compaction_horizons VALUES (?,?,?,?) ON CONFLICT(topic_id) DO UPDATE SET "
            "ledger_id=excluded.ledger_id, entry_id=excluded.entry_id, compacted_at_ms=excluded.compacted_at_ms",
            (topic_id, horizon[0], horizon[1], now_ms),
        )

    return factory.write(apply)


def delete_compacted(connection: Any, topic_id: int) -> None:
    """Inside a transaction deleting the topic: its compacted view goes with it."""
    connection.execute("DELETE FROM compacted_entries WHERE topic_id=?", (topic_id,))
    connection.execute("DELETE FROM compaction_horizons WHERE topic_id=?", (topic_id,))
