"""The ASGI application: routes, lifespan and the last-resort error handlers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway import metrics
from gateway.api.access import visible_routes
from gateway.api.admin import admin_routes
from gateway.api.approvals import approval_routes
from gateway.api.auth import authenticate
from gateway.api.chat import chat_completions
from gateway.api.continuations import continuation_routes
from gateway.api.errors import error_response, to_gateway_error
from gateway.api.incoming import Incoming
from gateway.api.json_response import JSONResponse
from gateway.api.runtime import Runtime
from gateway.api.sse_response import SSEResponse
from gateway.config.model import Config
from gateway.errors import GatewayError


def _json(payload: object, status: int = 200) -> JSONResponse:
    return JSONResponse(orjson.dumps(payload), status)


async def chat_endpoint(request: Request) -> JSONResponse | SSEResponse:
    """Reached only for what ``FastChatPath`` passes on (it serves every POST itself)."""
    return await chat_completions(Incoming(request.scope, request.receive), request.app.state.runtime)


async def list_models(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    try:
        key = authenticate(Incoming(request.scope, request.receive).authorization, runtime.keys)
    except GatewayError as error:
        return error_response(error)
    created = request.app.state.started
    names = visible_routes(key, runtime.routes.names())
    return _json({"object": "list", "data": [{"id": name, "object": "model", "created": created,
                                              "owned_by": "loopgate"} for name in names]})


async def healthz(request: Request) -> JSONResponse:
    return _json({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    ready = await runtime.store.ping()
    body = {"ready": ready, "store": {"kind": runtime.store.kind, "reachable": ready},
            "circuits": runtime.router.health.snapshot()}
    return _json(body, 200 if ready else 503)


async def metrics_endpoint(request: Request) -> PlainTextResponse:
    runtime: Runtime = request.app.state.runtime
    for target, state in runtime.router.health.snapshot().items():
        metrics.CIRCUIT_STATE.set(0.0 if state == "closed" else 1.0, target)
    for provider, (in_use, idle, waiting) in runtime.pool.stats().items():
        metrics.UPSTREAM_CONNECTIONS.set(in_use, provider, "in_use")
        metrics.UPSTREAM_CONNECTIONS.set(idle, provider, "idle")
        metrics.UPSTREAM_CONNECTIONS.set(waiting, provider, "waiting")
    return PlainTextResponse(metrics.render_all(), media_type="text/plain; version=0.0.4")


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return error_response(GatewayError(exc.status_code, str(exc.detail), kind))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return error_response(to_gateway_error(exc))


def create_app(config: Config) -> FastChatPath:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.runtime = await Runtime.start(config)
        app.state.started = int(time.time())
        try:
            yield
        finally:
            await app.state.runtime.stop()

    routes = [
        Route("/v1/chat/completions", chat_endpoint, methods=["POST"]),
        Route("/chat/completions", chat_endpoint, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *continuation_routes(),
        *admin_routes(),
        *approval_routes(),
    ]
    # Typed loosely: the handlers answer with our lean JSONResponse (an ASGI app, not a Starlette Response).
    handlers: dict[Any, Any] = {HTTPException: _http_error, Exception: _unexpected}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    return FastChatPath(app)


class FastChatPath:
    """Serves ``POST /v1/chat/completions`` without Starlette's routing and middleware layers.

    That endpoint is the hot path and its handler already turns every failure into an
    OpenAI-shaped response, so the router, the two exception middlewares and the endpoint
    wrapper only cost time there (about a tenth of a proxied request's CPU, measured with
    py-spy). Everything else, lifespan included, goes to the Starlette app.
    """

    _PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self._PATHS:
            response = await chat_completions(Incoming(scope, receive), self.state.runtime)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
