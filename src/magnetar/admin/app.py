"""The FastAPI application and its uvicorn server, run as tasks of the broker's event loop.

The routers live one module per area (clusters, tenants and namespaces; topics; stats; explain;
brokers; bundles; lookup; metrics). Handlers find the broker context as `request.app.state.context`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from magnetar.admin import (
    brokers,
    bundles,
    clusters,
    compaction,
    console,
    explain,
    lookup,
    metrics,
    replicated_subscriptions,
    schemas,
    stats,
    topics,
)
from magnetar.admin.errors import RestError, error_page
from magnetar.admin.permissions import router as permissions_router
from magnetar.admin.security import SecurityMiddleware

if TYPE_CHECKING:
    from magnetar.broker.context import BrokerContext

__all__ = ["AdminServer", "create_app"]


def create_app(context: BrokerContext, is_ready: object = lambda: True) -> FastAPI:
    app = FastAPI(
        title="magnetar admin",
        description="Apache Pulsar's /admin/v2 API, plus explanations of Key_Shared blocking.",
        version="0.1.0",
    )
    app.state.context = context
    app.state.is_ready = is_ready

    @app.exception_handler(RestError)
    async def _rest_error(_request: Request, error: RestError) -> JSONResponse:
        return JSONResponse({"reason": error.reason}, status_code=error.status)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, error: HTTPException) -> HTMLResponse | JSONResponse:
        # 404 and 405 come from routing alone (handlers raise RestError): a path no route has, or a
        # method it lacks. Pulsar's web server answers those with its HTML error page, not the JSON
        # {"reason"} of a missing resource, so a client tells "no such endpoint" from "no such topic".
        if error.status_code in (404, 405):
            page = error_page(error.status_code, str(error.detail), request.url.path)
            return HTMLResponse(page, status_code=error.status_code, headers=error.headers)
        return JSONResponse({"reason": str(error.detail)}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
        # Pulsar (Jersey) answers a body or parameter it cannot read with 400.
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()
        )
        return JSONResponse({"reason": f"Invalid request: {problems}"}, status_code=400)

    @app.get("/ready", response_class=PlainTextResponse, include_in_schema=False)
    async def ready(request: Request) -> PlainTextResponse:
        return await brokers.health(request)

    if context is not None and context.cluster is not None:
        # A topic another broker owns: 307 to it (inside the security check, which runs first).
        bundles.redirect_to_owners(app, context)
    # Who calls, and may they (authenticationEnabled, authorizationEnabled): before every route.
    app.add_middleware(SecurityMiddleware, context=context)
    app.include_router(clusters.router)
    app.include_router(permissions_router)
    app.include_router(topics.router, prefix=topics.PERSISTENT_PREFIX)
    app.include_router(stats.router, prefix=topics.PERSISTENT_PREFIX)
    app.include_router(replicated_subscriptions.router, prefix=topics.PERSISTENT_PREFIX)
    # The same routes for non-persistent topics. Left out of the OpenAPI document, which would describe
    # every operation twice (and the fuzzing of it take twice as long) for no difference but the domain.
    for router in (topics.router, stats.router, replicated_subscriptions.router):
        app.include_router(
            router, prefix=topics.NON_PERSISTENT_PREFIX, tags=["non-persistent topic"], include_in_schema=False
        )
    app.include_router(bundles.router)
    for module in (explain, brokers, lookup, metrics, compaction):
        app.include_router(module.router)
    app.include_router(schemas.router)
    app.include_router(schemas.namespace_router)
    if context is not None and context.config["consoleEnabled"]:
        console.mount(app)
    return app


class _InLoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: the broker's own handlers run the staged shutdown."""

    def capture_signals(self):
        return _NoSignals()


class _NoSignals:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None


def _with_tls_session(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, handing each request of an HTTPS connection its TLS session as
    `scope["state"]["ssl_object"]`: the security middleware takes a client certificate's CN as the role
    (AuthenticationProviderTls). uvicorn keeps the session to itself, and one protocol object serves one
    connection, so its app is wrapped when the connection is made."""

    class WithTlsSession(protocol):  # type: ignore[valid-type,misc]
        app: Any  # uvicorn's protocols keep their ASGI app here

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            if ssl_object is not None:
                self.app = _TlsSessionApp(self.app, ssl_object)

    return WithTlsSession


class _TlsSessionApp:
    def __init__(self, app: Any, ssl_object: ssl.SSLObject) -> None:
        self.app = app
        self.ssl_object = ssl_object

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["ssl_object"] = self.ssl_object
        await self.app(scope, receive, send)


class AdminServer:
    """The HTTP listener on webServicePort, sharing the broker's loop."""

    def __init__(self, app: FastAPI, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> None:
        try:
            self._socket = socket.create_server((host, port), reuse_port=False)
        except OSError as error:
            # Named as asyncio names the binary port's, so that one message tells which port failed.
            raise OSError(error.errno, f"error while attempting to bind on address {(host, port)!r}") from error
        # Accepted connections inherit it. Without it a keep-alive request waits ~40 ms: h11 writes the
        # headers and the body separately, and Nagle holds the body until the client's delayed ACK.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.setblocking(False)
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=2,
            server_header=False,
        )
        self._server = _InLoopServer(config)
        self._ssl_context = ssl_context  # webServicePortTls: the broker's context (broker/tls.py)
        self._ticks: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._server.config.load()
        if self._ssl_context is not None:
            self._server.config.ssl = self._ssl_context
            self._server.config.http_protocol_class = _with_tls_session(self._server.config.http_protocol_class)
        self._server.lifespan = self._server.config.lifespan_class(self._server.config)
        await self._server.startup(sockets=[self._socket])
        self._ticks = asyncio.get_running_loop().create_task(self._server.main_loop())

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._ticks is not None:
            await self._ticks
        await self._server.shutdown(sockets=[self._socket])
