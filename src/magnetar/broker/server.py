"""`magnetar standalone`: the broker process — listeners, the admin HTTP port, and a staged shutdown.

Owns: starting the service and its listeners, the set of live connections, and stopping in stages on
SIGTERM/SIGINT: stop accepting, close clients cleanly, flush cursors, close storage, exit 0.
Must not touch: protocol handling (connection.py) or topics (service.py).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.broker.tls import server_context, tls_port

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable

    from magnetar.admin import AdminServer

__all__ = ["Broker", "run_standalone"]

log = logging.getLogger("magnetar.broker")


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: str | Path) -> None:
        self.config = config
        self.service = BrokerService(config, data_dir)
        self.connections: set[ServerConnection] = set()
        self._binary: asyncio.Server | None = None
        self._http: AdminServer | None = None
        self._binary_tls: asyncio.Server | None = None
        self._https: AdminServer | None = None
        self.ready = False
        self.binary_port = 0
        self.http_port = 0

    async def start(self) -> None:
        started = time.perf_counter()
        await self.service.start()
        host = self.config["bindAddress"]
        self._binary = await asyncio.start_server(self._on_client, host, self.config["brokerServicePort"], limit=2**20)
        self.binary_port = self._binary.sockets[0].getsockname()[1]
        if self.config["brokerServicePort"] == 0:
            # The advertised URL must name the port really bound.
            self.config = type(self.config)(dict(self.config.values) | {"brokerServicePort": self.binary_port})
            self.service.config = self.config
        log.info("binary port %s:%d serving in %.0f ms", host, self.binary_port, (time.perf_counter() - started) * 1000)
        # The admin API's imports (FastAPI, its OpenAPI models, our routes' models) take about half a
        # second, more than everything before this line. On a worker thread they no longer hold back
        # the binary port: the loop serves clients meanwhile, winning the GIL back within a switch
        # interval (docs/performance.md, Broker: start-up).
        self._http = await asyncio.to_thread(
            _admin_server, self.service, lambda: self.ready, host, self.config["webServicePort"]
        )
        await self._http.start()
        self.http_port = self._http.port
        if self.config["webServicePort"] == 0:
            self.config = type(self.config)(dict(self.config.values) | {"webServicePort": self.http_port})
            self.service.config = self.config
        await self._start_tls(host)
        self.ready = True
        log.info(
            "magnetar ready in %.0f ms: pulsar://%s:%d, http://%s:%d, data %s",
            (time.perf_counter() - started) * 1000,
            host,
            self.binary_port,
            host,
            self.http_port,
            self.service.data_dir,
        )

    async def _start_tls(self, host: str) -> None:
        """The TLS ports (brokerServicePortTls, webServicePortTls), when configured, with one context."""
        binary_port, web_port = (
            tls_port(self.config, "brokerServicePortTls"),
            tls_port(self.config, "webServicePortTls"),
        )
        if binary_port is None and web_port is None:
            return
        context = server_context(self.config)
        bound: dict[str, str] = {}
        if binary_port is not None:
            self._binary_tls = await asyncio.start_server(self._on_client, host, binary_port, ssl=context, limit=2**20)
            bound["brokerServicePortTls"] = str(self._binary_tls.sockets[0].getsockname()[1])
        if web_port is not None:
            self._https = await asyncio.to_thread(
                _admin_server, self.service, lambda: self.ready, host, web_port, context
            )
            await self._https.start()
            bound["webServicePortTls"] = str(self._https.port)
        # Lookups answer the TLS URL with the port really bound.
        self.config = type(self.config)(dict(self.config.values) | bound)
        self.service.config = self.config
        log.info(
            "TLS ports: %s, %s",
            self.config.advertised_url_tls or "no pulsar+ssl://",
            self.config.advertised_web_url_tls or "no https://",
        )

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

    async def stop(self) -> None:
        """Staged shutdown: stop accepting, close clients, wait (bounded), flush cursors, close storage."""
        self.ready = False
        if self._binary is not None:
            self._binary.close()
        if self._binary_tls is not None:
            self._binary_tls.close()
        if self._http is not None:
            await self._http.stop()
        if self._https is not None:
            await self._https.stop()
        for connection in list(self.connections):
            connection.close_gracefully()
        deadline = time.monotonic() + self.config["brokerShutdownTimeoutMs"] / 1000
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        await self.service.close()
        log.info("magnetar stopped")


def _admin_server(
    service: BrokerService,
    is_ready: Callable[[], bool],
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
) -> AdminServer:
    """Import the admin API and bind its port; runs on a worker thread (see Broker.start)."""
    from magnetar.admin import AdminServer, create_app

    return AdminServer(create_app(service, is_ready), host, port, ssl_context)


async def run_standalone(
    config: BrokerConfig,
    data_dir: str | Path,
    on_started: Callable[[], asyncio.Task[None]] | None = None,
) -> int:
    """Run a broker until SIGTERM or SIGINT. `on_started` runs once it serves (the CLI's process-wide
    tuning, cli/tuning.py); the task it returns is cancelled at shutdown."""
    broker = Broker(config, data_dir)
    await broker.start()
    started_task = on_started() if on_started is not None else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if started_task is not None:
        started_task.cancel()
    await broker.stop()
    return 0
