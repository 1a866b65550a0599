"""The SQLite metadata store: the embedded default of a broker alone, with no ZooKeeper (`sqlite:<path>`).

Owns: `SqliteMetadataStore` (the tree in one SQLite file of the data directory: a row per node with its
value, version, times, ephemerality and its children's sequence counter) and the worker thread that runs
its SQL. Must not touch: storage's databases (storage/metadata.py keeps its own records), the event
loop's thread (every statement runs on the store's one worker thread and comes back as an awaitable;
metadata writes are rare, one thread is enough), the system's clocks (`time_ms` is given).

Its session is the process's: ephemeral nodes live while the store is open, and their rows are deleted
at open (what a crashed process left) and at close. One store per file: a second one opened on the same
file would delete the first one's ephemeral nodes. It never loses its session, so it sends no session
events; notifications go to its own listeners, on the loop, after the write that caused them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from magnetar.clock import system_time_ms
from magnetar.metadata.store import (
    BadVersionError,
    Check,
    Delete,
    EphemeralParentError,
    GetResult,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationType,
    Op,
    Put,
    SessionEvent,
    SessionExpiredError,
    Stat,
    check_path,
    parent_of,
)

__all__ = ["SqliteMetadataStore"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT,
    value BLOB NOT NULL,
    version INTEGER NOT NULL,
    creation_ms INTEGER NOT NULL,
    modification_ms INTEGER NOT NULL,
    ephemeral INTEGER NOT NULL,
    next_sequence INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes (parent);
INSERT OR IGNORE INTO nodes VALUES ('/', NULL, x'', 0, 0, 0, 0, 0);
"""
_COLUMNS = "version, creation_ms, modification_ms, ephemeral"
_Row = tuple[int, int, int, int]


def _stat(path: str, row: _Row) -> Stat:
    version, creation_ms, modification_ms, ephemeral = row
    # The store's session is the process's: every ephemeral node in the file is its own.
    return Stat(path, version, creation_ms, modification_ms, bool(ephemeral), bool(ephemeral))


class _Tree:
    """The SQL, on the worker thread only. A write runs in one transaction: all of it or none."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._db.execute("DELETE FROM nodes WHERE ephemeral = 1")

    def close(self) -> None:
        self._db.execute("DELETE FROM nodes WHERE ephemeral = 1")
        self._db.close()

    def row(self, path: str) -> _Row | None:
        found: _Row | None = self._db.execute(f"SELECT {_COLUMNS} FROM nodes WHERE path = ?", (path,)).fetchone()
        return found

    def get(self, path: str) -> GetResult | None:
        found = self._db.execute(f"SELECT value, {_COLUMNS} FROM nodes WHERE path = ?", (path,)).fetchone()
        return None if found is None else GetResult(found[0], _stat(path, found[1:]))

    def children(self, path: str) -> list[str]:
        rows = self._db.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
        return sorted(row[0].rpartition("/")[2] for row in rows)

    def write(
        self, ops: Sequence[Op], now: int, sequential: bool = False
    ) -> tuple[list[Stat | None], list[Notification]]:
        """`ops` in one transaction; `sequential` numbers the path of the first (a Put)."""
        notifications: list[Notification] = []
        self._db.execute("BEGIN IMMEDIATE")
        try:
            results = [self._apply(op, now, notifications, sequential and index == 0) for index, op in enumerate(ops)]
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return results, notifications

    def _apply(self, op: Op, now: int, notifications: list[Notification], sequential: bool) -> Stat | None:
        if isinstance(op, Check):
            row = self.row(op.path)
            if row is None:
                raise NotFoundError(op.path)
            if row[0] != op.version:
                raise BadVersionError(f"{op.path} is at version {row[0]}, not {op.version}")
            return None
        if isinstance(op, Put):
            return self._put(op, now, notifications, sequential)
        self._delete(op, notifications)
        return None

    def _put(self, op: Put, now: int, notifications: list[Notification], sequential: bool) -> Stat:
        path = self._sequential_path(op.path, now, notifications) if sequential else op.path
        row = self.row(path)
        if row is None:
            if op.expected_version not in (None, -1):
                raise NotFoundError(path)
            self._create_parents(parent_of(path), now, notifications)
            self._insert(path, op.value, now, op.ephemeral, notifications)
            return Stat(path, 0, now, now, op.ephemeral, op.ephemeral)
        if op.expected_version == -1:
            raise BadVersionError(f"{path} exists")
        if op.expected_version is not None and row[0] != op.expected_version:
            raise BadVersionError(f"{path} is at version {row[0]}, not {op.expected_version}")
        self._db.execute(
            "UPDATE nodes SET value = ?, version = version + 1, modification_ms = ? WHERE path = ?",
            (op.value, now, path),
        )
        notifications.append(Notification(NotificationType.MODIFIED, path))
        return _stat(path, (row[0] + 1, row[1], now, row[3]))

    def _sequential_path(self, path: str, now: int, notifications: list[Notification]) -> str:
        """`path` and its parent's next ten-digit number; the parent's counter moves on."""
        parent = parent_of(path)
        self._create_parents(parent, now, notifications)
        (sequence,) = self._db.execute("SELECT next_sequence FROM nodes WHERE path = ?", (parent,)).fetchone()
        self._db.execute("UPDATE nodes SET next_sequence = next_sequence + 1 WHERE path = ?", (parent,))
        return f"{path}{sequence:010d}"

    def _create_parents(self, path: str, now: int, notifications: list[Notification]) -> None:
        missing = []
        row = self.row(path)
        while row is None:
            missing.append(path)
            path = parent_of(path)
            row = self.row(path)
        if row[3]:
            raise EphemeralParentError(f"{path} is ephemeral: it cannot have children (NoChildrenForEphemerals)")
        for parent in reversed(missing):
            self._insert(parent, b"", now, False, notifications)

    def _insert(self, path: str, value: bytes, now: int, ephemeral: bool, notifications: list[Notification]) -> None:
        parent = parent_of(path)
        self._db.execute(
            "INSERT INTO nodes (path, parent, value, version, creation_ms, modification_ms, ephemeral)"
            " VALUES (?, ?, ?, 0, ?, ?, ?)",
            (path, parent, value, now, now, int(ephemeral)),
        )
        notifications.append(Notification(NotificationType.CREATED, path))
        notifications.append(Notification(NotificationType.CHILDREN_CHANGED, parent))

    def _delete(self, op: Delete, notifications: list[Notification]) -> None:
        row = self.row(op.path)
        if row is None:
            raise NotFoundError(op.path)
        if op.expected_version is not None and row[0] != op.expected_version:
            raise BadVersionError(f"{op.path} is at version {row[0]}, not {op.expected_version}")
        if self._db.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (op.path,)).fetchone() is not None:
            raise NotEmptyError(f"{op.path} has children")
        self._db.execute("DELETE FROM nodes WHERE path = ?", (op.path,))
        notifications.append(Notification(NotificationType.DELETED, op.path))
        notifications.append(Notification(NotificationType.CHILDREN_CHANGED, parent_of(op.path)))

    def delete_recursive(self, path: str, now: int) -> list[Notification]:
        """`path` and everything below it, deepest first, in one transaction."""
        paths = self._subtree(path)
        return self.write([Delete(each) for each in paths], now)[1] if paths else []

    def _subtree(self, path: str) -> list[str]:
        """`path` and every node below it, deepest first."""
        prefix = "/" if path == "/" else path + "/"
        rows = self._db.execute(
            "SELECT path FROM nodes WHERE path = ? OR substr(path, 1, ?) = ?", (path, len(prefix), prefix)
        ).fetchall()
        return sorted((row[0] for row in rows if row[0] != "/"), key=lambda p: (-p.count("/"), p))


class SqliteMetadataStore:
    """The tree in the SQLite file `path` (`open` makes one)."""

    def __init__(self, tree: _Tree, worker: ThreadPoolExecutor, time_ms: Callable[[], int]) -> None:
        self._tree = tree
        self._worker = worker
        self._time_ms = time_ms
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._listeners: list[Callable[[Notification], None]] = []

    @property
    def session_timeout_ms(self) -> int:
        return 0

    @classmethod
    async def open(cls, path: str | Path, time_ms: Callable[[], int] = system_time_ms) -> SqliteMetadataStore:
        """The store of the file `path` (created with its directory when missing), its stale ephemeral nodes gone."""
        file = Path(path)
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-metadata-sqlite")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(worker, lambda: file.parent.mkdir(parents=True, exist_ok=True))
            tree = await loop.run_in_executor(worker, _Tree, file)
        except BaseException:
            worker.shutdown(wait=False)
            raise
        return cls(tree, worker, time_ms)

    async def _run(self, function: Callable[..., _T], *args: object) -> _T:
        if self._closed:
            raise SessionExpiredError("the metadata store is closed")
        return await self._loop.run_in_executor(self._worker, function, *args)

    async def _write(self, ops: Sequence[Op], sequential: bool = False) -> list[Stat | None]:
        for op in ops:
            check_path(op.path)
        results, notifications = await self._run(self._tree.write, ops, self._time_ms(), sequential)
        self._notify(notifications)
        return results

    def _notify(self, notifications: list[Notification]) -> None:
        for notification in notifications:
            for listener in self._listeners:
                self._loop.call_soon(listener, notification)

    async def get(self, path: str) -> GetResult | None:
        check_path(path)
        return await self._run(self._tree.get, path)

    async def exists(self, path: str) -> Stat | None:
        check_path(path)
        row = await self._run(self._tree.row, path)
        return None if row is None else _stat(path, row)

    async def get_children(self, path: str) -> list[str]:
        check_path(path)
        return await self._run(self._tree.children, path)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        [stat] = await self._write([Put(path, value, expected_version, ephemeral)], sequential)
        assert stat is not None
        return stat

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await self._write([Delete(path, expected_version)])

    async def delete_recursive(self, path: str) -> None:
        """In one transaction: the subtree is gone whole, or (on an error) all of it is still there."""
        check_path(path)
        self._notify(await self._run(self._tree.delete_recursive, path, self._time_ms()))

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        return await self._write(ops)

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._listeners.append(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """Kept for the interface: an embedded store's session ends only with its close."""

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._loop.run_in_executor(self._worker, self._tree.close)
        self._worker.shutdown(wait=False)
