"""Connections to bookies: one asyncio connection per bookie, requests matched to responses, timeouts,
reconnection, a bound on requests in flight.

Owns: `BookieTransport` (what ledger operations need from bookies), `BookieClient` (its implementation over
TCP, BookKeeper's `BookieClientImpl` + `PerChannelBookieClient` with the v2 protocol). Must not touch:
ledger metadata, digests, the meaning of entries. Everything runs on the event loop's thread.

An add resolves to None or raises the bookie's error (errors.py); a read resolves to the entry body.
A v2 response carries no request id, so requests are matched by (op, ledger id, entry id); two requests
with the same key (a retried read) are answered in the order they were sent, as the bookie answers one
channel's requests of one ledger in order.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Protocol, cast

from magnetar.bookkeeper import wire
from magnetar.bookkeeper.errors import (
    BKError,
    BKTimeoutError,
    BookieHandleNotAvailableError,
    ClientClosedError,
    error_for_rc,
)
from magnetar.clock import Clock, TimerHandle

__all__ = ["BookieClient", "BookieTransport", "bookie_address"]

log = logging.getLogger(__name__)

# Pulsar's `bookkeeperClientTimeoutInSeconds` default: an add or read not answered by then fails with
# TimeoutException and the ledger handle treats that bookie as failed.
DEFAULT_TIMEOUT_S = 30.0
# Requests written to one bookie and not yet answered. A bookie works through a channel's requests in order,
# so more in flight only lengthen its queue; at Pulsar's 5 MiB largest entry this keeps at most 5 GiB of our
# frames in its queue and socket buffers. Requests past the bound wait here, in the order they came.
IN_FLIGHT_MAX = 1000
# How often unanswered requests are checked against their deadline: a timeout fires at most this late.
_TIMEOUT_CHECK_INTERVAL_S = 1.0

_Key = tuple[int, int, int]


class BookieTransport(Protocol):
    """What the ledger operations need from the bookies; a fake in tests stands in for `BookieClient`."""

    def add_entry(self, bookie: str, ledger_id: int, entry_id: int, frame: bytes) -> asyncio.Future[None]:
        """Send an ADDENTRY frame (wire.encode_add_request); resolves when the bookie has it durably."""
        ...

    def read_entry(
        self, bookie: str, ledger_id: int, entry_id: int, flags: int = wire.FLAG_NONE, master_key: bytes | None = None
    ) -> asyncio.Future[bytes]:
        """Read an entry's body (entry -1: the bookie's last entry; FLAG_DO_FENCING: fence first)."""
        ...


def bookie_address(bookie: str) -> tuple[str, int]:
    """(host, port) of a bookie id of the form host:port, the default `bookieId`."""
    host, separator, port = bookie.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ValueError(f"bookie id {bookie!r} is not host:port (custom bookie ids are not resolved yet)")
    return host, int(port)


class _Request:
    __slots__ = ("deadline", "future", "key")

    def __init__(self, key: _Key, future: asyncio.Future[bytes | None], deadline: float) -> None:
        self.key = key
        self.future = future
        self.deadline = deadline


class _BookieConnection(asyncio.Protocol):
    """One bookie's channel. Invariants: every request with an unresolved future is in `_by_deadline`; it is
    in `_pending` once written (at most IN_FLIGHT_MAX of them) and in `_unsent` before."""

    def __init__(self, bookie: str, timeout_s: float, clock: Clock) -> None:
        self.bookie = bookie
        self._timeout_s = timeout_s
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._decoder = wire.ResponseDecoder()
        self._pending: dict[_Key, collections.deque[_Request]] = {}
        self._in_flight = 0
        self._unsent: collections.deque[tuple[_Request, bytes]] = collections.deque()
        self._by_deadline: collections.deque[_Request] = collections.deque()
        self._timer: TimerHandle | None = None
        self._paused = False
        self._closed = False

    # --- requests

    def request(self, key: _Key, frame: bytes) -> asyncio.Future[bytes | None]:
        future: asyncio.Future[bytes | None] = self._loop.create_future()
        if self._closed:
            future.set_exception(ClientClosedError("the bookie client is closed"))
            return future
        request = _Request(key, future, self._clock.monotonic() + self._timeout_s)
        self._by_deadline.append(request)
        if self._timer is None:
            self._timer = self._clock.call_later(_TIMEOUT_CHECK_INTERVAL_S, self._check_timeouts)
        self._unsent.append((request, frame))
        if self._transport is None:
            if self._connecting is None:
                self._connecting = self._loop.create_task(self._connect())
        else:
            self._flush()
        return future

    def _flush(self) -> None:
        transport = self._transport
        if transport is None or self._paused:
            return
        frames = []
        while self._unsent and self._in_flight < IN_FLIGHT_MAX:
            request, frame = self._unsent.popleft()
            if request.future.done():
                continue
            self._pending.setdefault(request.key, collections.deque()).append(request)
            self._in_flight += 1
            frames.append(frame)
        if frames:
            transport.writelines(frames)

    async def _connect(self) -> None:
        try:
            host, port = bookie_address(self.bookie)
            await self._loop.create_connection(lambda: self, host, port)
        except (OSError, ValueError) as error:
            self._fail_all(BookieHandleNotAvailableError(f"cannot connect to bookie {self.bookie}: {error}"))
        finally:
            self._connecting = None

    def _check_timeouts(self) -> None:
        self._timer = None
        now = self._clock.monotonic()
        queue = self._by_deadline
        while queue and (queue[0].future.done() or queue[0].deadline <= now):
            request = queue.popleft()
            if request.future.done():
                continue
            waiting = self._pending.get(request.key)
            if waiting is not None and request in waiting:
                waiting.remove(request)
                self._in_flight -= 1
                if not waiting:
                    del self._pending[request.key]
            request.future.set_exception(
                BKTimeoutError(
                    f"bookie {self.bookie} did not answer op {request.key[0]} for ledger"
                    f" {request.key[1]} entry {request.key[2]} within {self._timeout_s} s"
                )
            )
        if queue:
            self._timer = self._clock.call_later(_TIMEOUT_CHECK_INTERVAL_S, self._check_timeouts)
        self._flush()

    def _fail_all(self, error: BKError) -> None:
        for request, _ in self._unsent:
            if not request.future.done():
                request.future.set_exception(error)
        self._unsent.clear()
        for waiting in self._pending.values():
            for request in waiting:
                if not request.future.done():
                    request.future.set_exception(error)
        self._pending.clear()
        self._in_flight = 0

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._transport is not None:
            self._transport.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._fail_all(ClientClosedError("the bookie client is closed"))

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._closed:
            transport.close()
            return
        # A stream's transport: uvloop's (magnetar broker runs on uvloop) has asyncio.Transport's methods
        # without subclassing it, so an isinstance check would refuse every connection.
        self._transport = cast(asyncio.Transport, transport)
        self._decoder = wire.ResponseDecoder()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._paused = False
        self._fail_all(BookieHandleNotAvailableError(f"connection to bookie {self.bookie} lost: {exc or 'closed'}"))

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            responses = self._decoder.receive_data(data)
        except wire.WireProtocolError as error:
            log.warning("bookie %s broke the v2 protocol (%s): closing its connection", self.bookie, error)
            if self._transport is not None:
                self._transport.close()
            return
        pending = self._pending
        for response in responses:
            op = wire.ADDENTRY if isinstance(response, wire.AddResponse) else wire.READENTRY
            key = (op, response.ledger_id, response.entry_id)
            waiting = pending.get(key)
            if waiting is None:
                # A late answer to a request that timed out: nobody waits for it any more.
                continue
            request = waiting.popleft()
            if not waiting:
                del pending[key]
            self._in_flight -= 1
            future = request.future
            if future.done():
                continue
            if response.rc != wire.EOK:
                future.set_exception(
                    error_for_rc(
                        response.rc,
                        f"from bookie {self.bookie} for ledger {response.ledger_id} entry {response.entry_id}",
                        add=op == wire.ADDENTRY,
                    )
                )
            elif isinstance(response, wire.ReadResponse):
                future.set_result(response.body)
            else:
                future.set_result(None)
        if self._unsent:
            self._flush()


class BookieClient:
    """The `BookieTransport` over TCP: a connection per bookie, opened on first use and again after a loss."""

    def __init__(self, clock: Clock, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """`clock` times the requests out after `timeout_s` (bookkeeperClientTimeoutInSeconds)."""
        self._clock = clock
        self._timeout_s = timeout_s
        self._connections: dict[str, _BookieConnection] = {}
        self._closed = False

    def _connection(self, bookie: str) -> _BookieConnection:
        connection = self._connections.get(bookie)
        if connection is None:
            if self._closed:
                raise ClientClosedError("the bookie client is closed")
            connection = self._connections[bookie] = _BookieConnection(bookie, self._timeout_s, self._clock)
        return connection

    def add_entry(self, bookie: str, ledger_id: int, entry_id: int, frame: bytes) -> asyncio.Future[None]:
        future = self._connection(bookie).request((wire.ADDENTRY, ledger_id, entry_id), frame)
        return future  # type: ignore[return-value]  # an add's future resolves to None

    def read_entry(
        self, bookie: str, ledger_id: int, entry_id: int, flags: int = wire.FLAG_NONE, master_key: bytes | None = None
    ) -> asyncio.Future[bytes]:
        frame = wire.encode_read_request(ledger_id, entry_id, flags, master_key)
        future = self._connection(bookie).request((wire.READENTRY, ledger_id, entry_id), frame)
        return future  # type: ignore[return-value]  # a read's future resolves to the body

    async def close(self) -> None:
        self._closed = True
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
