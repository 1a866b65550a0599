"""Ledger metadata and ids in ZooKeeper, in BookKeeper's own places, so that the Java client and
BookKeeper's tools share them with us.

Owns: `ZkLedgerManager` (the `LedgerManager` of zk+hierarchical:// metadata services), the ledger id
generators (`ZkLedgerIdGenerator`, `LongZkLedgerIdGenerator`), bookie discovery (`/ledgers/available`).
Must not touch: bookies, entries; the event loop's thread (kazoo's calls block: each runs in a worker
thread and comes back as an awaitable).

Places under the ledgers root (`/ledgers`):

    idgen/ID-nnnnnnnnnn         EPHEMERAL_SEQUENTIAL; its sequence number is the id, then it is deleted
    idgen-long/HOB-hhhhhhhhhh/ID-llllllllll
                                once short ids ran out (ZooKeeper's counter reached 2^31 - 1), or once
                                idgen-long exists: the id is high << 32 | low
    00/0000/L0001               the metadata of ledger 1 (metadata.py's `ledger_path`)
    available/<bookie id>       a writable bookie (ephemeral); available/readonly/<bookie id> a read-only one
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from magnetar.bookkeeper.errors import LedgerExistError, LedgerIdOverflowError, MetadataVersionError, NoSuchLedgerError
from magnetar.bookkeeper.ledger_manager import Versioned
from magnetar.bookkeeper.metadata import SHORT_LEDGER_ID_MAX, LedgerMetadata, ledger_path, parse, serialize

__all__ = ["ZkLedgerManager", "parse_metadata_service_uri"]

_T = TypeVar("_T")

_IDGEN = "idgen"
_IDGEN_LONG = "idgen-long"
_HOB_PREFIX = "HOB-"
_ID_PREFIX = "ID-"
_AVAILABLE = "available"
_READONLY = "readonly"


def parse_metadata_service_uri(uri: str) -> tuple[str, str]:
    """(ZooKeeper hosts for kazoo, ledgers root) of `zk+hierarchical://h1:2181;h2:2181/ledgers`, the form of
    BookKeeper's `metadataServiceUri` and Pulsar's `bookkeeperMetadataServiceUri`."""
    scheme, separator, rest = uri.partition("://")
    if not separator or scheme not in ("zk", "zk+hierarchical"):
        raise ValueError(f"metadata service URI {uri!r} must be zk+hierarchical://hosts/ledgers-root")
    hosts, slash, root = rest.partition("/")
    if not hosts or not slash or not root:
        raise ValueError(f"metadata service URI {uri!r} must name hosts and a ledgers root")
    return hosts.replace(";", ","), "/" + root.rstrip("/")


def _sequence_number(created_path: str) -> int:
    return int(created_path.rsplit(_ID_PREFIX, 1)[1])


class ZkLedgerManager:
    """BookKeeper's `HierarchicalLedgerManager` and its id generator, over kazoo."""

    def __init__(self, hosts: str, ledgers_root: str = "/ledgers", session_timeout_s: float = 30.0) -> None:
        self._root = ledgers_root
        self._zk = KazooClient(hosts=hosts, timeout=session_timeout_s)

    @classmethod
    async def connect(cls, metadata_service_uri: str, session_timeout_s: float = 30.0) -> ZkLedgerManager:
        """A started manager for `zk+hierarchical://…` (the ledgers root must exist: `initnewcluster`)."""
        hosts, root = parse_metadata_service_uri(metadata_service_uri)
        manager = cls(hosts, root, session_timeout_s)
        try:
            await manager._call(manager._zk.start, session_timeout_s)
        except KazooTimeoutError:
            await manager._call(manager._zk.stop)
            raise ValueError(f"no ZooKeeper answered at {hosts} within {session_timeout_s:g} s") from None
        if await manager._call(manager._zk.exists, root) is None:
            await manager.close()
            raise ValueError(f"{root} does not exist in ZooKeeper {hosts}: run BookKeeper's initnewcluster first")
        return manager

    async def _call(self, function: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        return await asyncio.to_thread(functools.partial(function, *args, **kwargs))

    # --- ids

    async def generate_ledger_id(self) -> int:
        return await self._call(self._generate_ledger_id)

    def _generate_ledger_id(self) -> int:
        zk = self._zk
        long_path = f"{self._root}/{_IDGEN_LONG}"
        if zk.exists(long_path) is None:
            created = zk.create(f"{self._root}/{_IDGEN}/{_ID_PREFIX}", ephemeral=True, sequence=True, makepath=True)
            zk.delete(created)
            ledger_id = _sequence_number(created)
            if 0 <= ledger_id < SHORT_LEDGER_ID_MAX:
                return ledger_id
            zk.ensure_path(long_path)
        return self._generate_long_ledger_id(long_path)

    def _generate_long_ledger_id(self, long_path: str) -> int:
        zk = self._zk
        while True:
            highs = [
                int(name[len(_HOB_PREFIX) :]) for name in zk.get_children(long_path) if name.startswith(_HOB_PREFIX)
            ]
            if not highs:
                self._create_high_order_node(long_path, 1)
                continue
            high = max(highs)
            created = zk.create(
                f"{long_path}/{_HOB_PREFIX}{high:010d}/{_ID_PREFIX}", ephemeral=True, sequence=True, makepath=True
            )
            zk.delete(created)
            low = _sequence_number(created)
            if 0 <= low < SHORT_LEDGER_ID_MAX:
                return (high << 32) | low
            if high + 1 >= 2**31:
                raise LedgerIdOverflowError("ledger ids exhausted: every HOB- node is full")
            self._create_high_order_node(long_path, high + 1)

    def _create_high_order_node(self, long_path: str, high: int) -> None:
        try:
            self._zk.create(f"{long_path}/{_HOB_PREFIX}{high:010d}")
        except NodeExistsError:
            # Another client (Java's LongZkLedgerIdGenerator too) created it first: use it.
            pass

    # --- metadata

    async def create_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        path = ledger_path(self._root, ledger_id)
        try:
            await self._call(self._zk.create, path, serialize(metadata), makepath=True)
        except NodeExistsError as error:
            raise LedgerExistError(f"ledger {ledger_id} already exists at {path}") from error
        return 0

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned:
        path = ledger_path(self._root, ledger_id)
        try:
            data, stat = await self._call(self._zk.get, path)
        except NoNodeError as error:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist ({path})") from error
        return Versioned(parse(data, ledger_id), stat.version)

    async def write_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        path = ledger_path(self._root, ledger_id)
        try:
            stat = await self._call(self._zk.set, path, serialize(metadata), version=version)
        except BadVersionError as error:
            raise MetadataVersionError(f"ledger {ledger_id} changed since version {version}") from error
        except NoNodeError as error:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist ({path})") from error
        new_version: int = stat.version
        return new_version

    async def remove_ledger_metadata(self, ledger_id: int, version: int | None) -> None:
        path = ledger_path(self._root, ledger_id)
        try:
            await self._call(self._zk.delete, path, version=-1 if version is None else version)
        except BadVersionError as error:
            raise MetadataVersionError(f"ledger {ledger_id} changed since version {version}") from error
        except NoNodeError as error:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist ({path})") from error

    # --- bookies

    async def writable_bookies(self) -> tuple[str, ...]:
        try:
            children = await self._call(self._zk.get_children, f"{self._root}/{_AVAILABLE}")
        except NoNodeError:
            return ()
        return tuple(sorted(name for name in children if name != _READONLY))

    async def close(self) -> None:
        await self._call(self._zk.stop)
        await self._call(self._zk.close)
