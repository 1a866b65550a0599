"""A `MetadataStore` on ZooKeeper (kazoo) for the BookKeeper engine's tests against real bookies, where two
engines, or a killed writer process and its successor, share the managed-ledger records.

Owns: get / put / delete / children / multi mapped onto kazoo, each blocking call on a worker thread. Must not
touch: magnetar's code. It is the engine tests' stand-in for magnetar's own ZooKeeper store, which is written
beside this branch; it delivers no notifications or session events (registered listeners are kept and never
called: the engine registers none).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError, RolledBackError
from kazoo.protocol.states import ZnodeStat

from magnetar.metadata.store import (
    BadVersionError,
    Check,
    Delete,
    GetResult,
    MetadataStoreError,
    NotFoundError,
    Notification,
    Op,
    Put,
    SessionEvent,
    Stat,
    parent_of,
)
from magnetar.metadata.store import NotEmptyError as StoreNotEmptyError

_T = TypeVar("_T")
_ERRORS: dict[type[Exception], type[MetadataStoreError]] = {
    ZkBadVersion: BadVersionError,
    NodeExistsError: BadVersionError,
    NoNodeError: NotFoundError,
    NotEmptyError: StoreNotEmptyError,
}


def _stat(path: str, stat: ZnodeStat, session: int) -> Stat:
    return Stat(path, stat.version, stat.ctime, stat.mtime, stat.ephemeralOwner != 0, stat.ephemeralOwner == session)


class ZkMetadataStore:
    def __init__(self, hosts: str) -> None:
        self._zk = KazooClient(hosts=hosts, timeout=10)
        self._listeners: list[Callable[[Notification], None]] = []

    @classmethod
    async def connect(cls, hosts: str, chroot: str = "") -> ZkMetadataStore:
        """A store on `hosts`, its paths under `chroot` (created if missing) when given: tests that share a
        ZooKeeper keep their records apart."""
        if chroot:
            root = await cls.connect(hosts)
            await root._call(root._zk.ensure_path, chroot)
            await root.close()
        store = cls(hosts + chroot)
        await store._call(store._zk.start, 10)
        return store

    async def _call(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return await asyncio.to_thread(functools.partial(function, *args, **kwargs))
        except tuple(_ERRORS) as error:
            raise _ERRORS[type(error)](str(error) or type(error).__name__) from error

    @property
    def _session(self) -> int:
        return self._zk.client_id[0] if self._zk.client_id else 0

    async def get(self, path: str) -> GetResult | None:
        try:
            value, stat = await self._call(self._zk.get, path)
        except NotFoundError:
            return None
        return GetResult(value, _stat(path, stat, self._session))

    async def exists(self, path: str) -> Stat | None:
        stat = await self._call(self._zk.exists, path)
        return None if stat is None else _stat(path, stat, self._session)

    async def get_children(self, path: str) -> list[str]:
        try:
            return sorted(await self._call(self._zk.get_children, path))
        except NotFoundError:
            return []

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        if expected_version is None and not sequential and await self.exists(path) is not None:
            stat = await self._call(self._zk.set, path, value)
            return _stat(path, stat, self._session)
        if expected_version is None or expected_version == -1:
            created = await self._call(
                self._zk.create, path, value, ephemeral=ephemeral, sequence=sequential, makepath=True
            )
            stat = await self._call(self._zk.exists, created)
            return _stat(created, stat, self._session)
        stat = await self._call(self._zk.set, path, value, expected_version)
        return _stat(path, stat, self._session)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await self._call(self._zk.delete, path, -1 if expected_version is None else expected_version)

    async def delete_recursive(self, path: str) -> None:
        try:
            await self._call(self._zk.delete, path, recursive=True)
        except NotFoundError:
            return

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        for op in ops:
            if isinstance(op, Put) and op.expected_version in (None, -1):
                await self._call(self._zk.ensure_path, parent_of(op.path))
        return await asyncio.to_thread(self._commit, list(ops))

    def _commit(self, ops: list[Op]) -> list[Stat | None]:
        transaction = self._zk.transaction()
        for op in ops:
            if isinstance(op, Check):
                transaction.check(op.path, op.version)
            elif isinstance(op, Delete):
                transaction.delete(op.path, -1 if op.expected_version is None else op.expected_version)
            elif op.expected_version == -1:
                transaction.create(op.path, op.value, ephemeral=op.ephemeral)
            else:
                transaction.set_data(op.path, op.value, -1 if op.expected_version is None else op.expected_version)
        results = transaction.commit()
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise _ERRORS.get(type(result), MetadataStoreError)(f"{type(result).__name__} in a multi")
        stats: list[Stat | None] = []
        for op, result in zip(ops, results):
            if not isinstance(op, Put):
                stats.append(None)
            elif isinstance(result, ZnodeStat):
                stats.append(_stat(op.path, result, self._session))
            else:
                stats.append(Stat(op.path, 0, 0, 0, op.ephemeral, op.ephemeral))
        return stats

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._listeners.append(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        return None

    async def close(self) -> None:
        await asyncio.to_thread(self._zk.stop)
        await asyncio.to_thread(self._zk.close)
