"""A broker built by the composition root (broker/root.py): its binary listeners, the pulsar:// (and
pulsar+ssl://) ports, the live connections, its periodic checks, and its part of a staged shutdown.

Owns: binding the binary ports, the set of live connections, the ports really bound (written back into
the config that lookups answer with), the broker's background tasks, and stopping in stages: stop
accepting, close clients cleanly (bounded), stop the background tasks, flush cursors, close storage.
Must not touch: protocol handling (connection.py and commands/), topics (registry.py), or the admin HTTP
API: the `magnetar standalone` command (cli/standalone.py) composes a broker with its admin servers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar.broker.commands import open_connection
from magnetar.broker.connection import ServerConnection

if TYPE_CHECKING:
    import ssl

    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.context import BrokerContext
    from magnetar.broker.tasks import BackgroundTasks

__all__ = ["Broker"]

log = logging.getLogger("magnetar.broker")


class Broker:
    def __init__(self, context: BrokerContext, tasks: BackgroundTasks) -> None:
        self.context = context
        self.config: BrokerConfig = context.config
        self.connections: set[ServerConnection] = set()
        self._tasks = tasks
        self._binary: asyncio.Server | None = None
        self._binary_tls: asyncio.Server | None = None
        # Set by whoever composes the process once every listener serves; the admin API's /ready reads it.
        self.ready = False
        self.binary_port = 0

    async def open(self) -> None:
        """Resume replication of the topics that replicate, and start the periodic checks."""
        registry = self.context.registry
        await registry.load_replicated_topics()
        self._tasks.spawn(registry.expire_periodically(), "message expiry")
        self._tasks.spawn(registry.check_replication_periodically(), "replication check")
        self._tasks.spawn(registry.compact_periodically(), "compaction check")

    async def create_defaults(self) -> None:
        """What Pulsar's standalone creates once it serves, where missing: this broker's cluster with the
        URLs it advertises (the TLS ones too when those ports are on), tenant `public` with the super users
        as its admins, and `public/default`. Once the ports are bound, so the URLs name them; after the
        admin API serves, so that a setup script that creates them first keeps what it created."""
        config = self.config
        urls = {
            "serviceUrl": config.advertised_web_url,
            "serviceUrlTls": config.advertised_web_url_tls,
            "brokerServiceUrl": config.advertised_url,
            "brokerServiceUrlTls": config.advertised_url_tls,
        }
        cluster_data = {key: url for key, url in urls.items() if url}
        super_users = sorted(self.context.authorization.super_users)
        await self.context.metadata.ensure_defaults(config["clusterName"], cluster_data, super_users)

    async def join_cluster(self) -> None:
        """A broker of a cluster registers itself and runs for leader, once its ports are bound (the URLs
        it writes name them); a broker alone has nothing to join."""
        if self.context.cluster is not None:
            await self.context.cluster.start()

    async def listen(self) -> None:
        """Bind brokerServicePort."""
        clock = self.context.clock
        started = clock.monotonic()
        host = self.config["bindAddress"]
        self._binary = await asyncio.start_server(self._on_client, host, self.config["brokerServicePort"], limit=2**20)
        self.binary_port = self._binary.sockets[0].getsockname()[1]
        if self.config["brokerServicePort"] == 0:
            # The advertised URL must name the port really bound.
            self.advertise_ports({"brokerServicePort": self.binary_port})
        log.info("binary port %s:%d serving in %.0f ms", host, self.binary_port, (clock.monotonic() - started) * 1000)

    async def start_tls(self, port: int, context: ssl.SSLContext) -> int:
        """Bind brokerServicePortTls with `context`; returns the port really bound."""
        self._binary_tls = await asyncio.start_server(
            self._on_client, self.config["bindAddress"], port, ssl=context, limit=2**20
        )
        return int(self._binary_tls.sockets[0].getsockname()[1])

    def advertise_ports(self, ports: dict[str, int | str]) -> None:
        """Write ports really bound (a setting of 0 picks a free one) into the config lookups answer with."""
        self.config.advertise(ports)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = open_connection(self.context, reader, writer)
        self.connections.add(connection)
        count = self.context.connections
        count.active += 1
        count.created += 1
        log.info("New connection from %s", connection.remote_address)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            self.context.connections.active -= 1
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
        """Staged shutdown: stop accepting, close clients, wait (bounded), stop the background tasks,
        replicators and compactions, flush cursors, close storage. A broker of a cluster unloads every
        bundle it owns first, so its clients find the new owners at once."""
        self.stop_accepting()
        if self.context.cluster is not None:
            await self.context.cluster.stop()
        for connection in list(self.connections):
            connection.close_gracefully()
        clock = self.context.clock
        deadline = clock.monotonic() + self.config["brokerShutdownTimeoutMs"] / 1000
        while self.connections and clock.monotonic() < deadline:
            await clock.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        await self._tasks.close()
        await self.context.registry.close()
        storage = self.context.storage
        await storage.flush_cursors()
        await storage.close()
        log.info("magnetar stopped")
