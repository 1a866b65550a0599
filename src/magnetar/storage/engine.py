"""The storage engine interface: what the factory, the managed ledgers, the cursors, the metadata records
and compaction call on the engine that keeps their bytes.

Owns: the shape only (`StorageEngine`; what it returns is `engine_records`'). Must not touch: anything; the engines
are `sqlite_engine.SqliteEngine` (one data directory), the shell simulator's `SimEngine` (SQLite on a
virtual loop) and `bookkeeper_engine.BookKeeperEngine` (ledgers on bookies, their lists and cursors in a
metadata store).

What every engine guarantees (the layers above rely on it, docs/storage.md "The engine interface"):
- appends are `submit((owner, runs, payload bytes, entries))` on the event loop, the runs in position
  order; each is reported back through `on_commit` as `CommitReport.appended` (durable) or `.failed`,
  and the reports of one owner arrive in position order (`ManagedLedger.on_durable` completes every
  pending append at or before the position it is told);
- every named write returns a future resolved once the write is durable, failed when it is not;
- a ledger id is the engine's to give (`allocate_ledger_id`), synchronously: the append path assigns
  positions in call order and cannot wait for one;
- `open_topic` is where a topic's previous owner loses it: an engine shared between processes fences
  the topic's last ledger there, and refuses the load when another owner won it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.clock import Clock
from magnetar.positions import Position
from magnetar.storage.engine_records import Catalog, TopicState

if TYPE_CHECKING:
    from magnetar.storage.sqlite_engine import CommitReport, Entry, Run

__all__ = ["Catalog", "StorageEngine", "TopicState"]


class StorageEngine(Protocol):
    # Where the engine keeps its data, for messages (a directory, or a metadata service's address).
    data_dir: str

    async def load(self) -> Catalog:
        """Open the engine's files or connections and read its catalog; on failure nothing stays open."""
        ...

    def start(self, loop: asyncio.AbstractEventLoop, on_commit: Callable[[CommitReport], None], clock: Clock) -> None:
        """From now on `on_commit` gets every report of appends and writes, on `loop`."""
        ...

    async def shutdown(self) -> None:
        """Finish what was submitted, close. Called once, after the last submit."""
        ...

    def submit(self, item: Any) -> None:
        """Queue `(owner, runs, payload bytes, entries)`: appends, in position order (`owner.topic_id`
        names their topic)."""
        ...

    def allocate_ledger_id(self, topic_id: int) -> int:
        """The id of the topic's next ledger, unique across topics and never reused."""
        ...

    async def open_topic(self, name: str, topic_id: int | None, decode_ranges: Callable[[bytes], Any]) -> TopicState:
        """Load a topic (`topic_id` from the catalog, None when the catalog does not list it: it is created
        if missing). Raises StorageError when the topic cannot be taken (another owner has it)."""
        ...

    def stored_topics(self) -> set[str]:
        """The topics stored beyond those the catalog listed: the ones other brokers created in an engine
        shared between processes (kept current as they come and go); empty where the catalog lists all."""
        ...

    async def close_topic(self, topic_id: int) -> None:
        """The topic's managed ledger was closed (its topic unloaded, its appends done): release what the
        engine holds for it, so that its next owner, here or elsewhere, recovers nothing."""
        ...

    # The named writes: each future resolves once durable.

    def delete_ledger(self, topic_id: int, ledger_id: int, entries: int) -> asyncio.Future[None]: ...

    def delete_topic(self, topic_id: int) -> asyncio.Future[None]: ...

    def upsert_cursor(
        self,
        topic_id: int,
        name: str,
        mark_delete_position: tuple[int, int],
        individually_deleted: bytes,
        batch_deleted: str,
        properties: str,
    ) -> asyncio.Future[None]: ...

    def delete_cursor(self, topic_id: int, name: str) -> asyncio.Future[None]: ...

    def put_metadata(self, path: str, value: str, version: int) -> asyncio.Future[int]:
        """The record at `path` (`value` its JSON) replaces the one at `version - 1` (-1: none); resolves to
        the version it is stored at, RecordVersionError when another writer changed the record first."""
        ...

    def watch_records(self, on_record: Callable[[str, str | None, int], None]) -> None:
        """From now on `on_record(path, JSON or None when gone, version)` follows the records under
        RECORD_ROOTS as other writers of a shared store change them, on the event loop."""
        ...

    def delete_metadata(self, path: str) -> asyncio.Future[None]: ...

    def replace_compacted(
        self, topic_id: int, horizon: tuple[int, int], entries: Sequence[Entry], now_ms: int
    ) -> asyncio.Future[None]: ...

    # The reads.

    async def read_entries(self, ledger_id: int, first: int, last: int) -> tuple[list[Run], list[Entry]]:
        """Entries `first..last` (inclusive, every one must exist) as Entry objects, and the segments they
        came from as runs, whole (they may begin before `first` and end after `last`)."""
        ...

    async def first_published_at_or_after(self, ledger_id: int, publish_time_ms: int) -> int | None: ...

    async def read_horizon(self, topic_id: int) -> Position | None: ...

    async def read_compacted(self, topic_id: int, start: tuple[int, int], count: int) -> list[Entry]: ...

    async def read_last_compacted(self, topic_id: int) -> Entry | None: ...
