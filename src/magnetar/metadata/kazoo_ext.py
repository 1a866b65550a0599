"""What the ZooKeeper store needs of ZooKeeper that kazoo 2.11 does not send: ZooKeeper 3.6's `addWatch`
(a persistent recursive watch, the one Pulsar's ZKMetadataStore sets on its root) with the dispatch of
its events, and a `multi` whose creates answer with their Stat (`create2` in a transaction).

kazoo's own support for persistent watches was proposed (python-zk/kazoo#715) and is not in a release;
this is the least of it, on kazoo's public request classes and two of its internals that have not
changed since kazoo 2.6: `KazooClient._call` (queue a request with its IAsyncResult) and
`ConnectionHandler._read_watch_event` (where a watch event arrives, on kazoo's connection thread).

Owns: `AddWatch`, `WatchingKazooClient`, `Create2Transaction`. Must not touch: the asyncio event loop
(everything here runs on kazoo's threads) or the store's semantics (zookeeper.py's).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Create2,
    Delete,
    MultiHeader,
    SetData,
    Transaction,
    Watch,
    int_struct,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

__all__ = ["PERSISTENT_RECURSIVE", "AddWatch", "Create2Transaction", "WatchingKazooClient"]

# AddWatchMode.PERSISTENT_RECURSIVE: every change at or below the path, never removed by a trigger.
PERSISTENT_RECURSIVE = 1


class AddWatch(namedtuple("AddWatch", "path mode")):
    """ZooKeeper's AddWatchRequest (OpCode.addWatch = 106); the server answers with an ErrorResponse."""

    type = 106

    def serialize(self) -> bytearray:
        request = bytearray(write_string(self.path))
        request.extend(int_struct.pack(self.mode))
        return request

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True


class Create2Transaction(Transaction):
    """A multi whose ops may be `Create2`: its result is (path, ZnodeStat), where kazoo's Transaction reads a
    create's path only. Same opcode (14), so kazoo's reader unchroots its plain-string results as before."""

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        header, offset = MultiHeader.deserialize(buffer, offset)
        while not header.done:
            result, offset = _read_result(header.type, buffer, offset)
            results.append(result)
            header, offset = MultiHeader.deserialize(buffer, offset)
        return results


def _read_result(op_type: int, buffer: bytes, offset: int) -> tuple[Any, int]:
    if op_type == Create2.type:
        path, offset = read_string(buffer, offset)
        return (path, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))), offset + stat_struct.size
    if op_type == Create.type:
        return read_string(buffer, offset)
    if op_type == SetData.type:
        return ZnodeStat._make(stat_struct.unpack_from(buffer, offset)), offset + stat_struct.size
    if op_type == -1:
        error = int_struct.unpack_from(buffer, offset)[0]
        return EXCEPTIONS[error](), offset + int_struct.size
    # Delete and CheckVersion answer with their header alone.
    assert op_type in (Delete.type, CheckVersion.type), op_type
    return True, offset


class _WatchingConnection(ConnectionHandler):
    def __init__(self, client: WatchingKazooClient, retry: Any, logger: Any) -> None:
        super().__init__(client, retry, logger=logger)
        self._watching_client = client

    def _connect(self, host: str, hostip: str, port: int) -> tuple[float, float]:
        """kazoo's connect, keeping the session timeout the server granted (it may cut the one asked for to
        its maxSessionTimeout): kazoo reads a connection dead after 2/3 of it, so that is what it returns."""
        read_timeout, connect_timeout = super()._connect(host, hostip, port)
        self._watching_client.negotiated_timeout_ms = int(read_timeout * 3 / 2)
        return read_timeout, connect_timeout

    def _read_watch_event(self, buffer: bytes, offset: int) -> None:
        watch, _ = Watch.deserialize(buffer, offset)
        self._watching_client.on_watch_event(watch.type, self._watching_client.unchroot(watch.path))
        super()._read_watch_event(buffer, offset)


class WatchingKazooClient(KazooClient):
    """A KazooClient that hands every watch event (its type: 1 created, 2 deleted, 3 changed, 4 children;
    and its path, unchrooted) to `on_watch_event` on kazoo's connection thread, before kazoo reads the
    next reply: so an event reaches the caller before the reply of any read sent after it."""

    def __init__(self, on_watch_event: Callable[[int, str], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_watch_event = on_watch_event
        # The session timeout the server granted at the last connection (the one asked for until then).
        self.negotiated_timeout_ms = self._session_timeout
        self._connection = _WatchingConnection(self, self._conn_retry.copy(), self.logger)

    def add_watch_async(self, path: str, mode: int = PERSISTENT_RECURSIVE) -> Any:
        result = self.handler.async_result()
        self._call(AddWatch(_chrooted(self.chroot, path), mode), result)
        return result

    def transaction_async(self, requests: list[Any]) -> Any:
        """Commit kazoo request objects (Create2, SetData, Delete, CheckVersion, paths already chrooted)."""
        result = self.handler.async_result()
        self._call(Create2Transaction(requests), result)
        return result


def _chrooted(chroot: str | None, path: str) -> str:
    if not chroot:
        return path
    return chroot if path == "/" else chroot + path
