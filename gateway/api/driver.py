"""The one driver every request of a surface goes through, and the surface contract.

A surface declares its path (the route template it is recorded under), its error shape and
``serve``: what it does with the request's :class:`Work`. :func:`drive` runs the parts no
surface writes again: begin the work, serve it, and on any exit that is not an answer give back
what was admitted (a ``BaseException`` included, ``Work.failed``) and render the error in the
surface's shape. The app's front dispatches the surface table ``{path: surface}``
(``api/surfaces.py``) to it; the surfaces Starlette routes (path parameters, GET and DELETE,
the admin API) are handlers served the same way by :func:`endpoint`.

Steps every surface shares are here once: the bounded body (:func:`read_body`) and the
request's deadline (:func:`deadline_of`). The loop surfaces' common run is ``api/loop_surface.py``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.requests import Request

from gateway.api.errors import error_response
from gateway.api.lifecycle import ErrorRenderer, Work
from gateway.api.runtime import Runtime
from gateway.http.body import read_json
from gateway.http.incoming import Incoming
from gateway.http.request_id import scope_request_id

#: what a surface answers with: an ASGI app (our JSONResponse or SSEResponse, a Starlette response)
Answer = Any


class Surface(Protocol):
    """One API surface as the driver sees it."""

    #: the route's template: the work is recorded (access record, span, metrics) under it, never caller text
    path: str
    #: the surface's error shape (OpenAI's, Anthropic's)
    errors: ErrorRenderer

    async def serve(self, work: Work, runtime: Runtime) -> Answer:
        """The request's answer; it ends ``work`` (``done``) when it is complete. Raises to fail."""


async def drive(surface: Surface, incoming: Incoming, runtime: Runtime) -> Answer:
    """Serve one request of ``surface``: every failure (any ``BaseException``) gives back what was admitted
    and answers in the surface's shape; an exit (a cancellation) is raised again once given back."""
    work = runtime.lifecycle.begin("POST", surface.path, incoming, errors=surface.errors)
    try:
        return await surface.serve(work, runtime)
    except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
        return work.render_error(await work.failed(exc))


def read_body(work: Work, runtime: Runtime) -> Awaitable[Any]:
    """The request's JSON body, bounded by ``server.max_body_bytes`` (413 past it, 400 when not JSON).

    The reader's own awaitable, not a coroutine around it: no frame more on the hot path."""
    return read_json(work.incoming, runtime.config.server.max_body_bytes)


def deadline_of(runtime: Runtime) -> float:
    """The ``time.monotonic()`` instant the request's work must end by (``routing.request_timeout_s``)."""
    return time.monotonic() + runtime.config.routing.request_timeout_s


def begin_routed(request: Request, path: str, metered: bool, errors: ErrorRenderer = error_response) -> Work:
    """The work of a request Starlette routed (the app's wrapper, ``FastChatPath``, chose its request id
    and sends ``x-request-id`` itself). ``path`` is the route's template, never the caller's text."""
    runtime: Runtime = request.app.state.runtime
    scope = request.scope
    rid = scope.get("loopgate.request_id") or scope_request_id(scope["headers"])
    return runtime.lifecycle.begin(request.method, path, Incoming(scope, request.receive), rid=rid, metered=metered,
                                   errors=errors)


#: a surface's handler of one request: it parses, calls the lifecycle's steps on ``work``, renders
Handler = Callable[[Request, Runtime, Work], Awaitable[Any]]


def endpoint(path: str, handler: Handler, metered: bool = False, errors: ErrorRenderer = error_response,
             ends_work: bool = False) -> Callable[[Request], Awaitable[Any]]:
    """A Starlette endpoint serving ``handler`` through the lifecycle: every answer, error or not, is
    recorded (access record, span; metrics when ``metered``), every failure rendered in its shape.

    ``path`` is the route's template; ``errors`` the surface's error shape; ``ends_work``: the
    handler's answer ends the work itself (a renderer of the loop's events: a stream ends when its
    last byte is sent), else it is done once the handler returns. The app's wrapper
    (``FastChatPath``) chose the request id and sends ``x-request-id`` itself.
    """

    async def serve(request: Request) -> Any:
        runtime: Runtime = request.app.state.runtime
        work = begin_routed(request, path, metered, errors)
        try:
            response = await handler(request, runtime, work)
        except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
            return work.render_error(await work.failed(exc))
        if not ends_work:
            work.done(getattr(response, "status_code", 200))
        return response

    serve.__name__ = getattr(handler, "__name__", "endpoint")
    return serve
