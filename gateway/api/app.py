"""The ASGI application: routes, lifespan and the last-resort error handlers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from gateway import gc_policy
from gateway.api import driver
from gateway.api.approvals.inbox import POLLED, ui_routes
from gateway.api.console.page import console_page_routes
from gateway.api.driver import Mounted, TableSurface, drive
from gateway.api.openapi import openapi_endpoint
from gateway.api.request.errors import error_response, to_gateway_error
from gateway.api.responses.websocket import refuse
from gateway.api.runtime import Runtime
from gateway.api.services import Services
from gateway.api.startup_failure import one_line_startup_failure
from gateway.api.surfaces import EVERY_SURFACE, SOCKETS, SURFACES
from gateway.config.model import Config, WebSocketConfig
from gateway.errors import GatewayError
from gateway.http.conditional import ConditionalGet
from gateway.http.incoming import Incoming
from gateway.http.json_response import JSONResponse
from gateway.http.request_id import REQUEST_ID_HEADER, scope_request_id
from gateway.observability import metrics, startup
from gateway.observability.metrics_shared import SharedMetrics


def _json(payload: object, status: int = 200) -> JSONResponse:
    return JSONResponse(orjson.dumps(payload), status)


async def healthz(request: Request) -> JSONResponse:
    return _json({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    ready = await runtime.store.ping()
    body = {"ready": ready, "store": {"kind": runtime.store.kind, "reachable": ready},
            "circuits": runtime.router.health.snapshot()}
    return _json(body, 200 if ready else 503)


def _refresh_gauges(runtime: Runtime) -> None:
    """Gauges read from the runtime when they are reported (a scrape, a worker's snapshot)."""
    for target, state in runtime.router.health.snapshot().items():
        metrics.CIRCUIT_STATE.set(1.0 if state == "open" else 0.0, target)
        metrics.CIRCUIT_HALF_OPEN.set(1.0 if state == "half_open" else 0.0, target)
    for provider, (in_use, idle, waiting) in runtime.pool.stats().items():
        metrics.UPSTREAM_CONNECTIONS.set(in_use, provider, "in_use")
        metrics.UPSTREAM_CONNECTIONS.set(idle, provider, "idle")
        metrics.UPSTREAM_CONNECTIONS.set(waiting, provider, "waiting")


async def metrics_endpoint(request: Request) -> PlainTextResponse:
    runtime: Runtime = request.app.state.runtime
    shared: SharedMetrics | None = request.app.state.shared_metrics
    if shared is not None:  # --workers N: the sum over every worker
        return PlainTextResponse(await shared.render(), media_type="text/plain; version=0.0.4")
    _refresh_gauges(runtime)
    return PlainTextResponse(metrics.render_all(), media_type="text/plain; version=0.0.4")


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return error_response(GatewayError(exc.status_code, str(exc.detail), kind))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return error_response(to_gateway_error(exc))


def create_app(config: Config, serving: bool = False, debug: bool = False,
               on_ready: Callable[[], None] | None = None) -> FastChatPath:
    """The gateway's ASGI app; ``serving``: it is a worker of ``loopgate serve`` (the process is its own:
    the garbage collector is settled for it, ``gateway/gc_policy.py``). ``debug``: a failed start-up
    logs its traceback (else one line naming the config key); ``on_ready``: called once started (the
    start-up banner)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            tracer = startup.install_tracer(config.observability)  # per worker process: its exporter is its own
            try:
                runtime = app.state.runtime = await Runtime.start(config)
            except BaseException:
                await tracer.shutdown()
                raise
        except Exception as exc:
            app.state.startup_failure = exc  # the one line uvicorn logs (api/startup_failure.py)
            raise
        app.state.services = runtime.services  # what the routed operations are given (api/driver.py)
        front.mount(runtime.services)
        if serving:
            gc_policy.settle(config.server.gc_young_threshold)
        shared = app.state.shared_metrics = SharedMetrics.from_environment(lambda: _refresh_gauges(runtime))
        if shared is not None:
            shared.start()
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            if shared is not None:
                await shared.stop()
            await app.state.runtime.stop()
            await tracer.shutdown()

    routes = [
        *ui_routes(config.auth.enabled),
        *console_page_routes(config.auth.enabled),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/openapi.json", openapi_endpoint, methods=["GET", "HEAD"]),
        *driver.routes(EVERY_SURFACE),
    ]
    # Typed loosely: the handlers answer with our lean JSONResponse (an ASGI app, not a Starlette Response).
    handlers: dict[Any, Any] = {HTTPException: _http_error, Exception: _unexpected}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers,
                    middleware=[Middleware(ConditionalGet, paths=POLLED)])
    front = FastChatPath(app, debug, websocket=config.websocket)
    return front


class FastChatPath:
    """Serves every path of the surface table (``api/surfaces.py``) through the driver, without Starlette.

    Chat completions, Messages, Responses and embeddings are the hot paths, and the driver already
    turns every failure into an answer in the surface's shape, so the router, the two exception
    middlewares and the endpoint wrapper only cost time there (bench/README.md): one dict lookup
    picks the surface, bound to its services once the worker started (``mount``). Everything else,
    lifespan included, goes to the Starlette app (so do the table's paths before the start: a 404).
    """

    def __init__(self, app: Starlette, debug: bool = False, surfaces: dict[str, TableSurface[Any]] = SURFACES,
                 websocket: WebSocketConfig | None = None) -> None:
        self.app = app
        self.state = app.state
        self.debug = debug
        self.table = surfaces
        self.mounted: dict[str, Mounted] = {}
        #: the WebSocket mode (``websocket``); its connections per path once mounted (``surfaces.SOCKETS``)
        self.websocket = websocket or WebSocketConfig()
        self.sockets: dict[str, Callable[[Scope, Receive, Send], Awaitable[None]]] = {}

    def mount(self, services: Services) -> None:
        """Bind the table's surfaces to the bundles the composition root built for them."""
        self.mounted = driver.mount(self.table, services)
        if self.websocket.enabled:
            self.sockets = {path: serve(self.mounted[path], self.websocket) for path, serve in SOCKETS.items()
                            if path in self.mounted}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, one_line_startup_failure(send, self.state, self.debug))
            return
        if scope["type"] != "http":
            await self._socket(scope, receive, send)
            return
        mounted = self.mounted.get(scope["path"])
        if mounted is not None:
            if scope["method"] == "POST":
                response = await drive(mounted, Incoming(scope, receive))
            else:  # the surface's shape, as its other errors (the method is caller text: not echoed)
                error = _UPGRADE if scope["method"] == "GET" and scope["path"] in self.sockets else _NOT_ALLOWED
                response = mounted.surface.errors(error, [(REQUEST_ID_HEADER, scope_request_id(scope["headers"]))])
            await response(scope, receive, send)
            return
        # Every other response (404s and Starlette's own errors included) carries x-request-id too.
        request_id = scope["loopgate.request_id"] = scope_request_id(scope["headers"])
        header = (REQUEST_ID_HEADER, request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)
        await self.app(scope, receive, send_with_id)


    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket handshake: to its path's connections (``surfaces.SOCKETS``), else refused with a 404."""
        serve = self.sockets.get(scope["path"]) if scope["type"] == "websocket" else None
        if serve is not None:
            await serve(scope, receive, send)
        elif scope["type"] == "websocket":
            await receive()  # websocket.connect
            await refuse(scope, send, _NO_SOCKET, [(REQUEST_ID_HEADER, scope_request_id(scope["headers"]))])
        else:
            await self.app(scope, receive, send)


_NOT_ALLOWED = GatewayError(405, "Method Not Allowed: use POST", "invalid_request_error")
#: a plain GET of a path with a WebSocket mode: the answer a client that cannot open a WebSocket falls back on
_UPGRADE = GatewayError(426, "Upgrade Required: GET opens this path's WebSocket mode (send the 'Upgrade: websocket' "
                        "handshake); to create a response over HTTP, use POST", "invalid_request_error", None,
                        "upgrade_required", {"Upgrade": "websocket", "Connection": "Upgrade"})
_NO_SOCKET = GatewayError(404, "no WebSocket endpoint at this path (the Responses API's WebSocket mode is "
                          "GET /v1/responses)", "not_found_error", None, "not_found")
