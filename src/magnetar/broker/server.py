"""The broker's binary listeners: the service, the pulsar:// (and pulsar+ssl://) ports, the live
connections, and the broker's part of a staged shutdown.

Owns: starting the service and its binary listeners, the set of live connections, the ports really
bound (written back into the config that lookups answer with), and stopping in stages: stop accepting,
close clients cleanly (bounded), flush cursors, close storage.
Must not touch: protocol handling (connection.py), topics (service.py), or the admin HTTP API: the
`magnetar standalone` command (cli/standalone.py) composes a broker with its admin servers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService

if TYPE_CHECKING:
    import ssl

__all__ = ["Broker"]

log = logging.getLogger("magnetar.broker")


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: str | Path) -> None:
        self.config = config
        self.service = BrokerService(config, data_dir)
        self.connections: set[ServerConnection] = set()
        self._binary: asyncio.Server | None = None
        self._binary_tls: asyncio.Server | None = None
        # Set by whoever composes the process once every listener serves; the admin API's /ready reads it.
        self.ready = False
        self.binary_port = 0

    async def start(self) -> None:
        """Start the service and bind brokerServicePort."""
        started = time.perf_counter()
        await self.service.start()
        host = self.config["bindAddress"]
        self._binary = await asyncio.start_server(self._on_client, host, self.config["brokerServicePort"], limit=2**20)
        self.binary_port = self._binary.sockets[0].getsockname()[1]
        if self.config["brokerServicePort"] == 0:
            # The advertised URL must name the port really bound.
            self.advertise_ports({"brokerServicePort": self.binary_port})
        log.info("binary port %s:%d serving in %.0f ms", host, self.binary_port, (time.perf_counter() - started) * 1000)

    async def start_tls(self, port: int, context: ssl.SSLContext) -> int:
        """Bind brokerServicePortTls with `context`; returns the port really bound."""
        self._binary_tls = await asyncio.start_server(
            self._on_client, self.config["bindAddress"], port, ssl=context, limit=2**20
        )
        return int(self._binary_tls.sockets[0].getsockname()[1])

    def advertise_ports(self, ports: dict[str, int | str]) -> None:
        """Write ports really bound (a setting of 0 picks a free one) into the config lookups answer with."""
        self.config = type(self.config)(dict(self.config.values) | ports)
        self.service.config = self.config

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = ServerConnection(self.service, reader, writer)
        self.connections.add(connection)
        log.info("New connection from %s", connection.remote_address)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            log.info(
                "[%s] Closed connection: %s", connection.remote_address, connection.close_reason or "client closed"
            )

    def stop_accepting(self) -> None:
        """First stage of the shutdown: not ready, no new binary connections."""
        self.ready = False
        if self._binary is not None:
            self._binary.close()
        if self._binary_tls is not None:
            self._binary_tls.close()

    async def stop(self) -> None:
        """Staged shutdown: stop accepting, close clients, wait (bounded), flush cursors, close storage."""
        self.stop_accepting()
        for connection in list(self.connections):
            connection.close_gracefully()
        deadline = time.monotonic() + self.config["brokerShutdownTimeoutMs"] / 1000
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        await self.service.close()
        log.info("magnetar stopped")
