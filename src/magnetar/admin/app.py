"""The FastAPI application and its uvicorn server, run as tasks of the broker's event loop.

The routers live one module per area (clusters, tenants and namespaces; topics; stats; explain;
metrics). Handlers find the broker service as `request.app.state.service`.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException

from magnetar.admin import clusters, explain, metrics, schemas, stats, topics
from magnetar.admin.errors import RestError

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

__all__ = ["AdminServer", "create_app"]


def create_app(service: BrokerService, is_ready: object = lambda: True) -> FastAPI:
    app = FastAPI(
        title="magnetar admin",
        description="Apache Pulsar's /admin/v2 API, plus explanations of Key_Shared blocking.",
        version="0.1.0",
    )
    app.state.service = service
    app.state.is_ready = is_ready

    @app.exception_handler(RestError)
    async def _rest_error(_request: Request, error: RestError) -> JSONResponse:
        return JSONResponse({"reason": error.reason}, status_code=error.status)

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"reason": str(error.detail)}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
        # Pulsar (Jersey) answers a body or parameter it cannot read with 400.
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()
        )
        return JSONResponse({"reason": f"Invalid request: {problems}"}, status_code=400)

    @app.get("/admin/v2/brokers/health", response_class=PlainTextResponse, tags=["brokers"])
    async def health() -> PlainTextResponse:
        if not app.state.is_ready():
            return PlainTextResponse("starting", status_code=503)
        return PlainTextResponse("ok")

    @app.get("/ready", response_class=PlainTextResponse, include_in_schema=False)
    async def ready() -> PlainTextResponse:
        return await health()

    for module in (clusters, topics, stats, explain, metrics):
        app.include_router(module.router)
    app.include_router(schemas.router)
    app.include_router(schemas.namespace_router)
    return app


class _InLoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: the broker's own handlers run the staged shutdown."""

    def capture_signals(self):  # noqa: ANN201 - a context manager that leaves signals alone
        return _NoSignals()


class _NoSignals:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None


class AdminServer:
    """The HTTP listener on webServicePort, sharing the broker's loop."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self._socket = socket.create_server((host, port), reuse_port=False)
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
        self._ticks: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._server.config.load()
        self._server.lifespan = self._server.config.lifespan_class(self._server.config)
        await self._server.startup(sockets=[self._socket])
        self._ticks = asyncio.get_running_loop().create_task(self._server.main_loop())

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._ticks is not None:
            await self._ticks
        await self._server.shutdown(sockets=[self._socket])
