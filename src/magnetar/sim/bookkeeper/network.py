"""Bookies on the virtual loop, reached by the real `BookieClient` through simulated TCP connections.

Owns: `SimLoop` (the virtual-clock loop whose `create_connection` reaches a `SimBookieServer`, whose
futures tell an observer when they get a result, so a checker sees the moment an add is acknowledged, and
which keeps what asyncio would log as unhandled), `SimBookieServer` (a `Bookie` that takes seconds of
virtual time to answer, answers requests out of their order, loses them while stalled, and crashes and
restarts with its journal kept) and the connections between them. Must not touch: the client's code: it
only carries its bytes.

A connection delivers bytes in order, as TCP does. A bookie handles each request after its own delay
(journal and thread-pool latency), so its answers can leave in another order than the requests came, as a
4.18 bookie's do across its threads; a stalled bookie reads requests and never answers them (the client
times out); a crashed bookie refuses connections and its open ones are reset. The seeded `random.Random`
draws every delay, so a schedule replays exactly.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from magnetar.bookkeeper import wire
from magnetar.sim.bookkeeper.bookie import Bookie, answer
from magnetar.sim.shell.loop import VirtualClockLoop

__all__ = ["Latency", "SimBookieServer", "SimLoop"]


class _ObservedFuture(asyncio.Future[Any]):
    def set_result(self, result: Any) -> None:
        super().set_result(result)
        loop = self.get_loop()
        assert isinstance(loop, SimLoop)
        for observer in loop.result_observers:
            observer()


class SimLoop(VirtualClockLoop):
    """Connections to `servers` by host:port; every future it creates calls `result_observers` as soon as
    it has a result, before any callback of it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.servers: dict[str, SimBookieServer] = {}
        self.result_observers: list[Callable[[], None]] = []
        # What asyncio would log as unhandled (a task's exception never retrieved): a client that drops
        # a failure on the floor. The world reports each as a violation.
        self.unhandled: list[str] = []
        self.set_exception_handler(self._record_unhandled)

    def _record_unhandled(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.unhandled.append(f"{context.get('message')}: {context.get('exception')!r}")

    def create_future(self) -> asyncio.Future[Any]:
        return _ObservedFuture(loop=self)

    async def create_connection(  # type: ignore[override]  # the bookie client's use only: a factory, host, port
        self, protocol_factory: Callable[[], asyncio.Protocol], host: str, port: int, **_: Any
    ) -> tuple[asyncio.Transport, asyncio.Protocol]:
        server = self.servers.get(f"{host}:{port}")
        if server is None:
            raise ConnectionRefusedError(f"no bookie at {host}:{port}")
        return await server.accept(protocol_factory())


class Latency:
    """The delays of one schedule: the network's one-way time and a bookie's time to handle a request,
    sometimes long (a journal fsync behind others, a GC pause)."""

    def __init__(self, rng: random.Random, network_s: float, handling_s: float, slow_fraction: float) -> None:
        self.rng = rng
        self.network_s = network_s
        self.handling_s = handling_s
        self.slow_fraction = slow_fraction

    def network(self) -> float:
        return self.rng.uniform(0.1, 1.0) * self.network_s

    def handling(self, request: wire.AddRequest | wire.ReadRequest) -> float:
        """How long the bookie takes to handle `request` (a scripted schedule decides per request)."""
        slow = 50.0 if self.rng.random() < self.slow_fraction else 1.0
        return self.rng.uniform(0.1, 1.0) * self.handling_s * slow


class _ServerSide(asyncio.Transport):
    """The client's end of one connection: what it writes reaches the bookie, in order."""

    def __init__(self, server: SimBookieServer, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.server = server
        self.protocol = protocol
        self.decoder = wire.RequestDecoder()
        self.closed = False
        # When the last bytes sent each way arrive: later bytes never overtake them.
        self.to_bookie_at = 0.0
        self.to_client_at = 0.0

    def _arrival(self, last: float) -> float:
        loop = self.server.loop
        return max(last, loop.time() + self.server.latency.network())

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write(self, data: Any) -> None:
        if self.closed:
            return
        self.to_bookie_at = self._arrival(self.to_bookie_at)
        self.server.loop.call_at(self.to_bookie_at, self.server.receive, self, bytes(data))

    def send_to_client(self, frame: bytes) -> None:
        if self.closed:
            return
        self.to_client_at = self._arrival(self.to_client_at)
        self.server.loop.call_at(self.to_client_at, self._deliver, frame)

    def _deliver(self, frame: bytes) -> None:
        if not self.closed:
            self.protocol.data_received(frame)

    def close(self) -> None:
        """The client closes: both ends are gone."""
        self.reset(None)

    def reset(self, error: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.connections.discard(self)
        self.server.loop.call_soon(self.protocol.connection_lost, error)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class SimBookieServer:
    """One bookie reachable at `bookie_id` on `loop`, answering after `latency`."""

    def __init__(self, loop: SimLoop, bookie_id: str, latency: Latency) -> None:
        self.loop = loop
        self.bookie_id = bookie_id
        self.latency = latency
        self.bookie = Bookie()
        self.up = True
        self.stalled = False
        self.connections: set[_ServerSide] = set()
        # Bumped at each crash: work a crashed incarnation had under way is dropped.
        self.incarnation = 0
        loop.servers[bookie_id] = self

    async def accept(self, protocol: asyncio.Protocol) -> tuple[asyncio.Transport, asyncio.Protocol]:
        await asyncio.sleep(self.latency.network() * 2)
        if not self.up:
            raise ConnectionRefusedError(f"bookie {self.bookie_id} is down")
        connection = _ServerSide(self, protocol)
        self.connections.add(connection)
        protocol.connection_made(connection)
        return connection, protocol

    def receive(self, connection: _ServerSide, data: bytes) -> None:
        if connection.closed or not self.up:
            return
        for request in connection.decoder.receive_data(data):
            if not self.stalled:
                self.loop.call_later(
                    self.latency.handling(request), self._handle, connection, request, self.incarnation
                )

    def _handle(self, connection: _ServerSide, request: wire.AddRequest | wire.ReadRequest, incarnation: int) -> None:
        if incarnation != self.incarnation or connection.closed:
            return
        connection.send_to_client(answer(self.bookie, request))

    def crash(self) -> None:
        """kill -9: connections reset, requests under way never answered; what the journal has stays."""
        self.up = False
        self.incarnation += 1
        for connection in list(self.connections):
            connection.reset(ConnectionResetError(f"bookie {self.bookie_id} crashed"))

    def restart(self) -> None:
        self.up = True
        self.stalled = False
