"""The in-memory metadata store: one process's tree, shared by any number of clients with a session
each, for the deterministic simulator and for tests of the parts that use a store.

Owns: `MemoryMetadataServer` (the tree: what a ZooKeeper ensemble holds) and `MemoryMetadataStore` (one
client of it with its own session: what a broker holds), and the faults a simulation injects into a
client: a lost connection, then either a reconnection or an expired session. Must not touch: the event
loop's time (nothing here waits) or anything outside the tree.

Every operation is applied at once, whole, before the call returns; notifications go to every client's
listeners on the event loop's next turn, as a real store's arrive after the write that caused them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from magnetar.metadata.store import (
    BadVersionError,
    Check,
    ConnectionLostError,
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

__all__ = ["MemoryMetadataServer", "MemoryMetadataStore"]


@dataclass(slots=True)
class _Node:
    value: bytes
    version: int
    creation_ms: int
    modification_ms: int
    # The session that owns an ephemeral node; None for a persistent one.
    owner: int | None
    children: set[str] = field(default_factory=set)
    # The next sequential child's number, as ZooKeeper's parent cversion gives it.
    next_sequence: int = 0


class MemoryMetadataServer:
    """The tree and its sessions. `time_ms` stamps the nodes (a simulation passes its virtual clock's)."""

    def __init__(self, time_ms: Callable[[], int] = lambda: 0) -> None:
        self._time_ms = time_ms
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, None)}
        self._next_session = 1
        self._clients: list[MemoryMetadataStore] = []

    def connect(self, session_timeout_ms: int = 0) -> MemoryMetadataStore:
        """A new client with a new session, which expires only when told (`session_timeout_ms` is what
        the client reports it was granted)."""
        client = MemoryMetadataStore(self, self.new_session(), session_timeout_ms)
        self._clients.append(client)
        return client

    def new_session(self) -> int:
        session = self._next_session
        self._next_session += 1
        return session

    # ------------------------------------------------------------------ reads

    def stat(self, path: str, session: int) -> Stat | None:
        node = self._nodes.get(path)
        if node is None:
            return None
        return Stat(
            path, node.version, node.creation_ms, node.modification_ms, node.owner is not None, node.owner == session
        )

    def value(self, path: str) -> bytes | None:
        node = self._nodes.get(path)
        return None if node is None else node.value

    def children(self, path: str) -> list[str]:
        node = self._nodes.get(path)
        return sorted(node.children) if node is not None else []

    # ------------------------------------------------------------------ writes

    def apply(self, ops: Sequence[Op], session: int) -> list[Stat | None]:
        """All of `ops` or none: each is checked against the tree as the ones before it left it, on a copy of
        what they touch, and the copy replaces the tree's nodes only when every op passed."""
        staged = _Staged(self._nodes)
        results: list[Stat | None] = []
        for op in ops:
            results.append(self._stage(staged, op, session))
        self._nodes.update(staged.nodes)
        for path in staged.deleted:
            self._nodes.pop(path, None)
        self._notify(staged.notifications)
        return results

    def _stage(self, staged: _Staged, op: Op, session: int) -> Stat | None:
        check_path(op.path)
        if isinstance(op, Check):
            node = staged.get(op.path)
            if node is None:
                raise NotFoundError(op.path)
            if node.version != op.version:
                raise BadVersionError(f"{op.path} is at version {node.version}, not {op.version}")
            return None
        if isinstance(op, Put):
            return self._stage_put(staged, op, session)
        self._stage_delete(staged, op)
        return None

    def _stage_put(self, staged: _Staged, op: Put, session: int) -> Stat:
        now = self._time_ms()
        node = staged.get(op.path)
        if node is not None:
            if op.expected_version == -1:
                raise BadVersionError(f"{op.path} exists")
            if op.expected_version is not None and node.version != op.expected_version:
                raise BadVersionError(f"{op.path} is at version {node.version}, not {op.expected_version}")
            written = staged.copy(op.path)
            written.value = op.value
            written.version += 1
            written.modification_ms = now
            staged.notifications.append(Notification(NotificationType.MODIFIED, op.path))
        else:
            if op.expected_version not in (None, -1):
                raise NotFoundError(op.path)
            self._stage_parents(staged, parent_of(op.path), now)
            owner = session if op.ephemeral else None
            written = staged.create(op.path, _Node(op.value, 0, now, now, owner))
        return Stat(
            op.path,
            written.version,
            written.creation_ms,
            written.modification_ms,
            written.owner is not None,
            written.owner == session,
        )

    def _stage_parents(self, staged: _Staged, path: str, now: int) -> None:
        missing = []
        node = staged.get(path)
        while node is None:
            missing.append(path)
            path = parent_of(path)
            node = staged.get(path)
        if node.owner is not None:
            raise EphemeralParentError(f"{path} is ephemeral: it cannot have children")
        for parent in reversed(missing):
            staged.create(parent, _Node(b"", 0, now, now, None))

    def _stage_delete(self, staged: _Staged, op: Delete) -> None:
        node = staged.get(op.path)
        if node is None:
            raise NotFoundError(op.path)
        if op.expected_version is not None and node.version != op.expected_version:
            raise BadVersionError(f"{op.path} is at version {node.version}, not {op.expected_version}")
        if node.children:
            raise NotEmptyError(f"{op.path} has children: {', '.join(sorted(node.children)[:3])}")
        staged.remove(op.path)

    def sequential_path(self, path: str) -> str:
        """`path` with its parent's next ten-digit sequence number appended; the parent's counter moves on."""
        parent = self._nodes.get(parent_of(path))
        sequence = 0
        if parent is not None:
            sequence = parent.next_sequence
            parent.next_sequence += 1
        return f"{path}{sequence:010d}"

    def delete_recursive(self, path: str) -> None:
        node = self._nodes.get(path)
        if node is None:
            return
        for child in sorted(node.children):
            self.delete_recursive(f"{path.rstrip('/')}/{child}")
        self.apply([Delete(path)], 0)

    # ------------------------------------------------------------------ sessions

    def expire_session(self, session: int) -> None:
        """Delete the session's ephemeral nodes, deepest first, as one change."""
        owned = sorted((path for path, node in self._nodes.items() if node.owner == session), key=len, reverse=True)
        if owned:
            self.apply([Delete(path) for path in owned], 0)

    def forget(self, client: MemoryMetadataStore) -> None:
        self._clients.remove(client)

    def _notify(self, notifications: list[Notification]) -> None:
        if not notifications:
            return
        loop = asyncio.get_running_loop()
        for client in self._clients:
            for notification in notifications:
                client.deliver(loop, notification)


class _Staged:
    """What a `multi` has changed so far, over the tree it leaves untouched until it commits."""

    def __init__(self, nodes: dict[str, _Node]) -> None:
        self._base = nodes
        self.nodes: dict[str, _Node] = {}
        self.deleted: set[str] = set()
        self.notifications: list[Notification] = []

    def get(self, path: str) -> _Node | None:
        if path in self.deleted:
            return None
        return self.nodes.get(path) or self._base.get(path)

    def copy(self, path: str) -> _Node:
        node = self.nodes.get(path)
        if node is None:
            base = self._base[path]
            node = _Node(
                base.value,
                base.version,
                base.creation_ms,
                base.modification_ms,
                base.owner,
                set(base.children),
                base.next_sequence,
            )
            self.nodes[path] = node
        return node

    def create(self, path: str, node: _Node) -> _Node:
        self.deleted.discard(path)
        self.nodes[path] = node
        parent = parent_of(path)
        self.copy(parent).children.add(path.rpartition("/")[2])
        self.notifications.append(Notification(NotificationType.CREATED, path))
        self.notifications.append(Notification(NotificationType.CHILDREN_CHANGED, parent))
        return node

    def remove(self, path: str) -> None:
        self.nodes.pop(path, None)
        self.deleted.add(path)
        parent = parent_of(path)
        self.copy(parent).children.discard(path.rpartition("/")[2])
        self.notifications.append(Notification(NotificationType.DELETED, path))
        self.notifications.append(Notification(NotificationType.CHILDREN_CHANGED, parent))


class MemoryMetadataStore:
    """One client of a `MemoryMetadataServer`, with its session. A simulation calls `lose_connection`,
    then `reconnect` (the same session) or `expire_session` (a new one, its ephemeral nodes gone)."""

    def __init__(self, server: MemoryMetadataServer, session: int, session_timeout_ms: int = 0) -> None:
        self._server = server
        self.session = session
        self.session_timeout_ms = session_timeout_ms
        self._connected = True
        self._closed = False
        self._listeners: list[Callable[[Notification], None]] = []
        self._session_listeners: list[Callable[[SessionEvent], None]] = []

    # ------------------------------------------------------------------ the interface

    async def get(self, path: str) -> GetResult | None:
        self._check_usable(path)
        stat = self._server.stat(path, self.session)
        value = self._server.value(path)
        return None if stat is None or value is None else GetResult(value, stat)

    async def exists(self, path: str) -> Stat | None:
        self._check_usable(path)
        return self._server.stat(path, self.session)

    async def get_children(self, path: str) -> list[str]:
        self._check_usable(path)
        return self._server.children(path)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        self._check_usable(path)
        if sequential:
            path = self._server.sequential_path(path)
        [stat] = self._server.apply([Put(path, value, expected_version, ephemeral)], self.session)
        assert stat is not None
        return stat

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._check_usable(path)
        self._server.apply([Delete(path, expected_version)], self.session)

    async def delete_recursive(self, path: str) -> None:
        self._check_usable(path)
        self._server.delete_recursive(path)

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        for op in ops:
            self._check_usable(op.path)
        return self._server.apply(ops, self.session)

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._listeners.append(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.append(listener)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.expire_session(self.session)
        self._server.forget(self)

    # ------------------------------------------------------------------ faults a simulation injects

    def lose_connection(self) -> None:
        """The servers are out of reach: operations raise ConnectionLostError until `reconnect` or
        `expire_session`."""
        if self._connected:
            self._connected = False
            self._emit(SessionEvent.CONNECTION_LOST)

    def reconnect(self) -> None:
        if not self._connected:
            self._connected = True
            self._emit(SessionEvent.RECONNECTED)

    def expire_session(self) -> None:
        """The session times out: its ephemeral nodes go, then a new session is made, as a ZooKeeper client
        under Pulsar's `reconnect` policy does; SESSION_LOST, then SESSION_REESTABLISHED."""
        self.lose_connection()
        self._server.expire_session(self.session)
        self._emit(SessionEvent.SESSION_LOST)
        self.session = self._server.new_session()
        self._connected = True
        self._emit(SessionEvent.SESSION_REESTABLISHED)

    # ------------------------------------------------------------------ delivery

    def deliver(self, loop: asyncio.AbstractEventLoop, notification: Notification) -> None:
        """Nothing while disconnected: ZooKeeper does not send what changed meanwhile."""
        if not self._connected:
            return
        for listener in self._listeners:
            loop.call_soon(listener, notification)

    def _emit(self, event: SessionEvent) -> None:
        loop = asyncio.get_running_loop()
        for listener in self._session_listeners:
            loop.call_soon(listener, event)

    def _check_usable(self, path: str) -> None:
        check_path(path)
        if self._closed:
            raise SessionExpiredError("the metadata store is closed")
        if not self._connected:
            raise ConnectionLostError(f"no connection to the metadata store for {path}")
