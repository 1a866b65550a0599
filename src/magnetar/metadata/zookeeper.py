"""The ZooKeeper metadata store: Pulsar's ZKMetadataStore on kazoo, for `metadataStoreUrl=zk:h1:2181,h2:2181/chroot`.

Owns: `ZKMetadataStore` (one ZooKeeper client and its session), the translation of kazoo's errors and
Stats into the interface's (store.py), the persistent recursive watch on the root and the notifications
it gives, and the session events kazoo's connection states give. Must not touch: the event loop's thread
(every request is kazoo's `*_async` or a request on its queue, answered on kazoo's threads and brought
onto the loop with `call_soon_threadsafe`), or any clock: kazoo keeps its own time.

As Pulsar's store does: `put` creates the missing parents; -1 is a create, whose NodeExists is a
BadVersionError; `multi` is one ZooKeeper transaction (a Put without a version becomes a create or a
set after a read of whether the node is there, and the missing parents of its creates join the
transaction; when a concurrent write changed what that read saw, the transaction is planned again);
CHILDREN_CHANGED of the parent goes with every CREATED and DELETED, since a recursive watch sends no
child events. The watch lives on the connection: it is set again at every (re)connection, and a change
made while the store was disconnected is not notified (ZooKeeper sends none for a recursive watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo import exceptions as kazoo_errors
from kazoo.protocol.serialization import CheckVersion, Create2, SetData
from kazoo.protocol.serialization import Delete as DeleteRequest
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from magnetar.metadata.kazoo_ext import WatchingKazooClient
from magnetar.metadata.store import (
    BadVersionError,
    Check,
    ConnectionLostError,
    Delete,
    EphemeralParentError,
    GetResult,
    MetadataStoreError,
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

__all__ = ["DEFAULT_SESSION_TIMEOUT_MS", "ZKMetadataStore", "parse_zookeeper_url"]

# Pulsar's metadataStoreSessionTimeoutMillis.
DEFAULT_SESSION_TIMEOUT_MS = 30_000
# A transaction planned on reads that a concurrent write made stale is planned again, this many times.
_PLAN_ATTEMPTS = 5
# Watch event types on the wire (ZooKeeper's Watcher.Event.EventType).
_WATCH_TYPES = {
    1: NotificationType.CREATED,
    2: NotificationType.DELETED,
    3: NotificationType.MODIFIED,
    4: NotificationType.CHILDREN_CHANGED,
}
_CREATE_FLAGS_EPHEMERAL = 1
_CREATE_FLAGS_SEQUENTIAL = 2


def parse_zookeeper_url(url: str) -> tuple[str, str]:
    """(kazoo's hosts, chroot or '') of `zk:h1:2181,h2:2181/chroot`, or of the deprecated bare
    `h1:2181,h2:2181/chroot` of Pulsar's `zookeeperServers`."""
    hosts = url.removeprefix("zk:").removeprefix("//")
    hosts, slash, chroot = hosts.partition("/")
    if not hosts:
        raise ValueError(f"ZooKeeper URL {url!r} names no host: zk:host1:2181,host2:2181/chroot")
    chroot = "/" + chroot.rstrip("/") if slash and chroot.strip("/") else ""
    if chroot:
        check_path(chroot)
    return hosts, chroot


def _translate(error: BaseException, path: str) -> BaseException:
    """kazoo's error for the interface's; NodeExists is a BadVersionError as in Pulsar's ZKMetadataStore (a
    create under -1 found the node)."""
    if isinstance(error, kazoo_errors.BadVersionError | kazoo_errors.NodeExistsError):
        return BadVersionError(f"{path}: {type(error).__name__}")
    if isinstance(error, kazoo_errors.NoNodeError):
        return NotFoundError(path)
    if isinstance(error, kazoo_errors.NotEmptyError):
        return NotEmptyError(f"{path} has children")
    if isinstance(error, kazoo_errors.NoChildrenForEphemeralsError):
        return EphemeralParentError(f"{path}: a node under an ephemeral one")
    if isinstance(error, kazoo_errors.ConnectionLoss):
        return ConnectionLostError(f"lost the connection to ZooKeeper during the operation on {path}")
    if isinstance(error, kazoo_errors.SessionExpiredError | kazoo_errors.ConnectionClosedError):
        return SessionExpiredError(f"the ZooKeeper session is gone ({type(error).__name__}) for {path}")
    if isinstance(error, kazoo_errors.KazooException):
        return MetadataStoreError(f"{path}: {type(error).__name__} {error}")
    return error


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    """On the loop: complete `future` with the IAsyncResult's outcome, unless it was cancelled."""
    if future.done():
        return
    if result.successful():
        future.set_result(result.value)
    else:
        future.set_exception(result.exception)


@dataclass(slots=True)
class _Plan:
    """A `multi` as ZooKeeper requests: `slots[i]` is the request index of the interface's op i."""

    requests: list[Any]
    slots: list[int]
    # Request indexes whose failure says the plan's reads went stale, not that the caller's op failed.
    stale_if_failed: set[int]


class ZKMetadataStore:
    """One ZooKeeper client with its session (`connect` makes a started one)."""

    def __init__(self, hosts: str, chroot: str = "", session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self._loop = asyncio.get_running_loop()
        self._hosts = hosts
        self._chroot = chroot
        self._session_timeout_ms = session_timeout_ms
        # kazoo reconnects at once and then at most every second: a session lost is followed quickly by a new one.
        self._client = WatchingKazooClient(
            self._on_watch_event,
            hosts=hosts,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 1.0},
        )
        self._client.add_listener(self._on_kazoo_state)
        self._session: int | None = None
        self._state = KazooState.LOST
        self._closed = False
        self._connected: asyncio.Future[None] = self._loop.create_future()
        self._listeners: list[Callable[[Notification], None]] = []
        self._session_listeners: list[Callable[[SessionEvent], None]] = []

    @property
    def session_timeout_ms(self) -> int:
        return self._client.negotiated_timeout_ms

    @classmethod
    async def connect(
        cls, hosts: str, chroot: str = "", session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    ) -> ZKMetadataStore:
        """A store whose session is established, its chroot created when missing, its root watched."""
        store = cls(hosts, chroot, session_timeout_ms)
        try:
            await store._start()
        except BaseException:
            await store.close()
            raise
        return store

    async def _start(self) -> None:
        self._client.start_async()
        try:
            await asyncio.wait_for(asyncio.shield(self._connected), self._session_timeout_ms / 1000)
        except TimeoutError:
            raise ConnectionLostError(
                f"no ZooKeeper session with {self._hosts} within {self._session_timeout_ms} ms"
            ) from None
        if self._chroot:
            # The chroot is made outside it, as Pulsar does for a metadataStoreUrl's chroot, then kazoo
            # prefixes every path with it.
            with contextlib.suppress(kazoo_errors.NodeExistsError):
                await self._call(self._client.create_async(self._chroot, b"", makepath=True))
            self._client.chroot = self._chroot
        await self._call(self._client.add_watch_async("/"))

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session's id (None while there is none)."""
        return self._session

    # ------------------------------------------------------------------ kazoo's threads onto the loop

    def _call(self, result: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()
        result.rawlink(lambda done: self._loop.call_soon_threadsafe(_settle, future, done))
        return future

    async def _request(self, result: Any, path: str) -> Any:
        try:
            return await self._call(result)
        except kazoo_errors.KazooException as error:
            raise _translate(error, path) from None

    def _on_watch_event(self, event_type: int, path: str) -> None:
        """On kazoo's connection thread."""
        kind = _WATCH_TYPES.get(event_type)
        if kind is None or self._closed:
            return
        self._loop.call_soon_threadsafe(self._notify, Notification(kind, path))
        if kind in (NotificationType.CREATED, NotificationType.DELETED) and path != "/":
            self._loop.call_soon_threadsafe(
                self._notify, Notification(NotificationType.CHILDREN_CHANGED, parent_of(path))
            )

    def _notify(self, notification: Notification) -> None:
        for listener in self._listeners:
            listener(notification)

    def _on_kazoo_state(self, state: str) -> None:
        """On kazoo's connection thread: the session id as of this state, and the watch set again on the new
        connection before any request of ours goes out on it."""
        client_id = self._client.client_id
        session = client_id[0] if state == KazooState.CONNECTED and client_id is not None else None
        if state == KazooState.CONNECTED and self._connected.done():
            self._client.add_watch_async("/")
        self._loop.call_soon_threadsafe(self._state_changed, state, session)

    def _state_changed(self, state: str, session: int | None) -> None:
        previous, self._state = self._state, state
        if self._closed:
            return
        if state == KazooState.SUSPENDED:
            self._emit(SessionEvent.CONNECTION_LOST)
        elif state == KazooState.LOST:
            self._session = None
            self._emit(SessionEvent.SESSION_LOST)
        elif not self._connected.done():
            self._session = session
            self._connected.set_result(None)
        else:
            self._reconnected(previous, session)

    def _reconnected(self, previous: str, session: int | None) -> None:
        if previous == KazooState.SUSPENDED and session == self._session:
            self._emit(SessionEvent.RECONNECTED)
            return
        if previous != KazooState.LOST:
            self._emit(SessionEvent.SESSION_LOST)
        self._session = session
        self._emit(SessionEvent.SESSION_REESTABLISHED)

    def _emit(self, event: SessionEvent) -> None:
        for listener in self._session_listeners:
            listener(event)

    def _stat(self, path: str, stat: ZnodeStat) -> Stat:
        owner = stat.ephemeralOwner
        return Stat(path, stat.version, stat.ctime, stat.mtime, owner != 0, owner != 0 and owner == self._session)

    # ------------------------------------------------------------------ the interface

    async def get(self, path: str) -> GetResult | None:
        check_path(path)
        try:
            value, stat = await self._request(self._client.get_async(path), path)
        except NotFoundError:
            return None
        # A node made with no data (by Java's tools, say) reads as None in kazoo.
        return GetResult(value or b"", self._stat(path, stat))

    async def exists(self, path: str) -> Stat | None:
        check_path(path)
        stat = await self._request(self._client.exists_async(path), path)
        return None if stat is None else self._stat(path, stat)

    async def get_children(self, path: str) -> list[str]:
        check_path(path)
        try:
            children: list[str] = await self._request(self._client.get_children_async(path), path)
        except NotFoundError:
            return []
        return sorted(children)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        check_path(path)
        if sequential:
            if expected_version not in (None, -1):
                raise NotFoundError(f"{path}: a sequential node is new, it has no version {expected_version}")
            return await self._create(path, value, ephemeral=ephemeral, sequential=True)
        if expected_version == -1:
            return await self._create(path, value, ephemeral=ephemeral)
        if expected_version is not None:
            return await self._set(path, value, expected_version)
        return await self._upsert(path, value, ephemeral)

    async def _create(self, path: str, value: bytes, *, ephemeral: bool, sequential: bool = False) -> Stat:
        created = self._client.create_async(
            path, value, ephemeral=ephemeral, sequence=sequential, makepath=True, include_data=True
        )
        created_path, stat = await self._request(created, path)
        return self._stat(created_path, stat)

    async def _set(self, path: str, value: bytes, version: int) -> Stat:
        stat = await self._request(self._client.set_async(path, value, version), path)
        return self._stat(path, stat)

    async def _upsert(self, path: str, value: bytes, ephemeral: bool) -> Stat:
        """A set of whatever is there, else a create; a node created or deleted in between sends it round again."""
        while True:
            try:
                return await self._set(path, value, -1)
            except NotFoundError:
                pass
            try:
                return await self._create(path, value, ephemeral=ephemeral)
            except BadVersionError:
                continue

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        check_path(path)
        version = -1 if expected_version is None else expected_version
        await self._request(self._client.delete_async(path, version), path)

    async def delete_recursive(self, path: str) -> None:
        """Children first, as Pulsar's deleteRecursive: not atomic, a node gone in between is no error."""
        check_path(path)
        for child in await self.get_children(path):
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        with contextlib.suppress(NotFoundError):
            await self.delete(path)

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        for op in ops:
            check_path(op.path)
        for attempt in range(_PLAN_ATTEMPTS):
            plan = await self._plan(ops)
            results = await self._request(self._client.transaction_async(plan.requests), ops[0].path if ops else "/")
            failed = _first_failure(results)
            if failed is None:
                return [self._op_result(ops[i], results[slot]) for i, slot in enumerate(plan.slots)]
            index, error = failed
            if index in plan.stale_if_failed and attempt + 1 < _PLAN_ATTEMPTS:
                continue
            raise _translate(error, plan.requests[index].path.removeprefix(self._chroot) or "/")
        raise AssertionError("unreachable: the last attempt raises")

    def _op_result(self, op: Op, result: Any) -> Stat | None:
        if not isinstance(op, Put):
            return None
        if isinstance(result, ZnodeStat):
            return self._stat(op.path, result)
        # A create2's (path, Stat), the path as the server has it, under the chroot.
        path, stat = result
        return self._stat(self._client.unchroot(path), stat)

    async def _plan(self, ops: Sequence[Op]) -> _Plan:
        plan = _Plan([], [], set())
        # What the ops before leave: path → exists, over the tree as read.
        planned: dict[str, bool] = {}
        for op in ops:
            await self._plan_op(plan, planned, op)
        return plan

    async def _plan_op(self, plan: _Plan, planned: dict[str, bool], op: Op) -> None:
        server_path = self._server_path(op.path)
        if isinstance(op, Check):
            plan.slots.append(len(plan.requests))
            plan.requests.append(CheckVersion(server_path, op.version))
        elif isinstance(op, Delete):
            plan.slots.append(len(plan.requests))
            plan.requests.append(DeleteRequest(server_path, -1 if op.expected_version is None else op.expected_version))
            planned[op.path] = False
        elif op.expected_version is not None and op.expected_version != -1:
            plan.slots.append(len(plan.requests))
            plan.requests.append(SetData(server_path, op.value, op.expected_version))
        else:
            await self._plan_put(plan, planned, op)

    async def _plan_put(self, plan: _Plan, planned: dict[str, bool], op: Put) -> None:
        exists = await self._planned_exists(planned, op.path)
        if op.expected_version is None and exists:
            plan.stale_if_failed.add(len(plan.requests))
            plan.slots.append(len(plan.requests))
            plan.requests.append(SetData(self._server_path(op.path), op.value, -1))
            return
        missing = []
        parent = parent_of(op.path)
        while not await self._planned_exists(planned, parent):
            missing.append(parent)
            parent = parent_of(parent)
        for path in reversed(missing):
            plan.stale_if_failed.add(len(plan.requests))
            plan.requests.append(Create2(self._server_path(path), b"", OPEN_ACL_UNSAFE, 0))
            planned[path] = True
        if op.expected_version is None:
            plan.stale_if_failed.add(len(plan.requests))
        plan.slots.append(len(plan.requests))
        flags = _CREATE_FLAGS_EPHEMERAL if op.ephemeral else 0
        plan.requests.append(Create2(self._server_path(op.path), op.value, OPEN_ACL_UNSAFE, flags))
        planned[op.path] = True

    async def _planned_exists(self, planned: dict[str, bool], path: str) -> bool:
        if path == "/":
            return True
        if path not in planned:
            planned[path] = await self.exists(path) is not None
        return planned[path]

    def _server_path(self, path: str) -> str:
        if not self._chroot:
            return path
        return self._chroot if path == "/" else self._chroot + path

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._listeners.append(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.append(listener)

    async def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and kazoo's threads. kazoo's stop joins its
        connection thread: that wait runs on a worker thread, once."""
        if self._closed:
            return
        self._closed = True
        client = self._client
        await asyncio.to_thread(functools.partial(_stop, client))


def _stop(client: WatchingKazooClient) -> None:
    client.stop()
    client.close()


def _first_failure(results: list[Any]) -> tuple[int, BaseException] | None:
    """The failing op of a rolled-back transaction: the one error that is neither a rollback of an op before
    it nor the inconsistency ZooKeeper reports for the ops after it."""
    for index, result in enumerate(results):
        if isinstance(result, BaseException) and not isinstance(
            result, kazoo_errors.RolledBackError | kazoo_errors.RuntimeInconsistency
        ):
            return index, result
    return None
