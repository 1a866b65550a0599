"""`magnetar standalone` and `magnetar broker`: one process composed of the broker (its binary listeners, broker/server.py) and
the admin API's HTTP and HTTPS servers (admin/app.py), started in order and stopped in stages.

Owns: the start-up order (service and binary port first, then the admin API, imported on a worker
thread; then the TLS ports; then ready), the "magnetar ready" line, and the shutdown stages (stop
accepting, stop the HTTP servers, then the broker's clients and storage) on SIGTERM/SIGINT.
Must not touch: protocol handling, topics or the admin routes; the broker does not know the admin
API exists, and the admin API reaches the broker only through the service it is given.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.config import BrokerConfig
from magnetar.broker.root import open_broker
from magnetar.broker.tls import server_context, tls_port

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable

    from magnetar.admin.app import AdminServer
    from magnetar.broker.context import BrokerContext
    from magnetar.broker.server import Broker
    from magnetar.metadata.store import MetadataStore

__all__ = ["Standalone", "run_standalone"]

log = logging.getLogger("magnetar.broker")


class Standalone:
    """A broker and its admin servers, sharing one event loop."""

    def __init__(self, config: BrokerConfig, data_dir: str | Path, metadata_store: MetadataStore | None = None) -> None:
        self._config = config
        self._data_dir = data_dir
        # A broker of a cluster (`magnetar broker`, the cluster tests): the store it shares with the others.
        self._metadata_store = metadata_store
        self._broker: Broker | None = None
        self._http: AdminServer | None = None
        self._https: AdminServer | None = None
        self.http_port = 0

    async def start(self) -> None:
        started = time.perf_counter()
        broker = self._broker = await open_broker(
            self._config, self._data_dir, create_defaults=False, metadata_store=self._metadata_store
        )
        await broker.listen()
        host = broker.config["bindAddress"]
        # The admin API's imports (FastAPI, its OpenAPI models, our routes' models) take about half a
        # second, more than everything before this line. On a worker thread they no longer hold back
        # the binary port: the loop serves clients meanwhile, winning the GIL back within a switch
        # interval (docs/performance.md, Broker: start-up).
        self._http = await asyncio.to_thread(
            _admin_server, broker.context, lambda: broker.ready, host, broker.config["webServicePort"]
        )
        await self._http.start()
        self.http_port = self._http.port
        if broker.config["webServicePort"] == 0:
            broker.advertise_ports({"webServicePort": self.http_port})
        await self._start_tls(host)
        await broker.create_defaults()
        # Once every listener serves: the URLs a broker of a cluster registers name the ports bound.
        await broker.join_cluster()
        broker.ready = True
        log.info(
            "magnetar ready in %.0f ms: pulsar://%s:%d, http://%s:%d, data %s",
            (time.perf_counter() - started) * 1000,
            host,
            broker.binary_port,
            host,
            self.http_port,
            broker.context.data_dir,
        )

    async def _start_tls(self, host: str) -> None:
        """The TLS ports (brokerServicePortTls, webServicePortTls), when configured, with one context."""
        broker = self.broker
        binary_port, web_port = (
            tls_port(broker.config, "brokerServicePortTls"),
            tls_port(broker.config, "webServicePortTls"),
        )
        if binary_port is None and web_port is None:
            return
        context = server_context(broker.config)
        bound: dict[str, int | str] = {}
        if binary_port is not None:
            bound["brokerServicePortTls"] = str(await broker.start_tls(binary_port, context))
        if web_port is not None:
            self._https = await asyncio.to_thread(
                _admin_server, broker.context, lambda: broker.ready, host, web_port, context
            )
            await self._https.start()
            bound["webServicePortTls"] = str(self._https.port)
        # Lookups answer the TLS URL with the port really bound.
        broker.advertise_ports(bound)
        log.info(
            "TLS ports: %s, %s",
            broker.config.advertised_url_tls or "no pulsar+ssl://",
            broker.config.advertised_web_url_tls or "no https://",
        )

    @property
    def broker(self) -> Broker:
        assert self._broker is not None, "not started"
        return self._broker

    async def stop(self) -> None:
        """Staged shutdown: stop accepting, stop the HTTP servers, then the broker's clients and storage."""
        if self._broker is None:
            return
        self.broker.stop_accepting()
        if self._http is not None:
            await self._http.stop()
        if self._https is not None:
            await self._https.stop()
        await self.broker.stop()


def _admin_server(
    context: BrokerContext,
    is_ready: Callable[[], bool],
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
) -> AdminServer:
    """Import the admin API and bind its port; runs on a worker thread (see Standalone.start)."""
    from magnetar.admin.app import AdminServer, create_app

    return AdminServer(create_app(context, is_ready), host, port, ssl_context)


async def run_standalone(
    config: BrokerConfig,
    data_dir: str | Path,
    on_started: Callable[[], asyncio.Task[None]] | None = None,
) -> int:
    """Run a broker and its admin servers until SIGTERM or SIGINT. `on_started` runs once they serve (the
    process-wide tuning, cli/tuning.py); the task it returns is cancelled at shutdown."""
    standalone = Standalone(config, data_dir)
    await standalone.start()
    started_task = on_started() if on_started is not None else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if started_task is not None:
        started_task.cancel()
    await standalone.stop()
    return 0
