"""The one driver every request of a surface goes through, and the surface contract.

A surface declares its error shape and what it serves, each with the services bundle it uses
(``api/services.py``, built by the composition root):

* a POST on a path of the surface table (``api/surfaces.py``): the hot paths (chat completions,
  Messages, Responses, embeddings), which the app's front dispatches here without Starlette, by
  one dict lookup (:class:`TableSurface`, :func:`drive`);
* its operations (:class:`Operation`) on other methods and paths (GET, DELETE, path parameters,
  the admin API): Starlette routes them, built from the same declarations (:func:`routes`).

Both are served the same way: the driver begins the work (recorded under the route's template,
never caller text), hands the handler its bundle, and on any exit that is not an answer gives
back what was admitted (a ``BaseException`` included, ``Work.failed``) and renders the error in
the surface's shape. Nothing is routed that never runs: a table path has no Starlette route.

Steps every surface shares are here once: the bounded body (:func:`read_body`) and the
request's deadline (:func:`deadline_of`). The loop surfaces' common run is ``api/loop/surface.py``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from starlette.requests import Request
from starlette.routing import Route

from gateway.api.request.errors import error_response
from gateway.api.request.lifecycle import ErrorRenderer, Lifecycle, Work
from gateway.api.services import Services
from gateway.http.body import read_json
from gateway.http.incoming import Incoming
from gateway.http.request_id import scope_request_id

#: what a surface answers with: an ASGI app (our JSONResponse or SSEResponse, a Starlette response)
Answer = Any
#: a surface's services bundle (``api/services.py``)
S = TypeVar("S")
#: picks a surface's bundle out of the composition root's (``Services``)
Select = Callable[[Services], S]
#: an operation's handler: the request (its path and query parameters), the surface's services, the work
Handler = Callable[[Request, S, Work], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class Operation(Generic[S]):
    """One method on one path of a surface, routed by Starlette (path parameters, GET, DELETE, the admin API)."""

    method: str
    #: Starlette's route template (``/v1/continuations/{id}``)
    path: str
    handler: Handler[S]
    services: Select[S]
    #: the request counts in the request metrics (``Exchange.metered``); it is always recorded
    metered: bool = False
    #: the handler's answer ends the work itself (a renderer of the loop's events: a stream ends when its
    #: last byte is sent); else it is done once the handler returns
    ends_work: bool = False
    #: the template the work is recorded under when not ``path`` (``/v1/continuations`` for each of its ids)
    record_as: str = ""


class Surface(Protocol):
    """One API surface as the driver sees it: its error shape and the operations Starlette routes for it."""

    @property
    def errors(self) -> ErrorRenderer:
        """The surface's error shape (OpenAI's, Anthropic's)."""

    @property
    def operations(self) -> Sequence[Operation[Any]]:
        """Its methods and paths Starlette routes (none for a surface that is only on the table)."""


class TableSurface(Surface, Protocol[S]):
    """A surface with a POST on the surface table: served by the app's front through :func:`drive`."""

    @property
    def path(self) -> str:
        """The route's template: the work is recorded (access record, span, metrics) under it, never caller text."""

    def services(self, every: Services) -> S:
        """The bundle ``serve`` is given (picked once, when the worker starts)."""

    async def serve(self, work: Work, services: S) -> Answer:
        """The request's answer; it ends ``work`` (``done``) when it is complete. Raises to fail."""


@dataclass(frozen=True, slots=True)
class RoutedSurface:
    """A surface Starlette routes alone (no table path): its error shape and operations."""

    operations: tuple[Operation[Any], ...]
    errors: ErrorRenderer = error_response


class Mounted:
    """A table surface with its bundle and the lifecycle, bound when the worker starts (``mount``)."""

    __slots__ = ("lifecycle", "services", "surface")

    def __init__(self, surface: TableSurface[Any], services: Any, lifecycle: Lifecycle) -> None:
        self.surface = surface
        self.services = services
        self.lifecycle = lifecycle


def mount(table: dict[str, TableSurface[Any]], every: Services) -> dict[str, Mounted]:
    """The surface table with each surface's bundle: what the app's front dispatches to."""
    return {path: Mounted(surface, surface.services(every), every.lifecycle) for path, surface in table.items()}


async def drive(mounted: Mounted, incoming: Incoming, method: str = "POST") -> Answer:
    """Serve one POST of a table surface: every failure (any ``BaseException``) gives back what was admitted
    and answers in the surface's shape; an exit (a cancellation) is raised again once given back.

    ``method``: what the work is recorded as; ``WS`` for a turn of a WebSocket connection, served as a POST
    (``responses/websocket.py``)."""
    surface = mounted.surface
    work = mounted.lifecycle.begin(method, surface.path, incoming, errors=surface.errors)
    try:
        return await surface.serve(work, mounted.services)
    except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
        return work.render_error(await work.failed(exc))


def read_body(work: Work, max_bytes: int) -> Awaitable[Any]:
    """The request's JSON body, bounded by ``max_bytes`` (``server.max_body_bytes``: 413 past it, 400 when
    not JSON).

    The reader's own awaitable, not a coroutine around it: no frame more on the hot path."""
    return read_json(work.incoming, max_bytes)


def deadline_of(timeout_s: float) -> float:
    """The ``time.monotonic()`` instant the request's work must end by (``routing.request_timeout_s``)."""
    return time.monotonic() + timeout_s


def begin_routed(request: Request, lifecycle: Lifecycle, path: str, metered: bool,
                 errors: ErrorRenderer = error_response) -> Work:
    """The work of a request Starlette routed (the app's front, ``FastChatPath``, chose its request id
    and sends ``x-request-id`` itself). ``path`` is the route's template, never the caller's text."""
    scope = request.scope
    rid = scope.get("loopgate.request_id") or scope_request_id(scope["headers"])
    return lifecycle.begin(request.method, path, Incoming(scope, request.receive), rid=rid, metered=metered,
                           errors=errors)


def _endpoint(operation: Operation[Any], errors: ErrorRenderer) -> Callable[[Request], Awaitable[Any]]:
    """The Starlette endpoint of one operation: every answer, error or not, is recorded (access record,
    span; metrics when ``metered``), every failure rendered in the surface's shape."""
    handler, select, ends_work = operation.handler, operation.services, operation.ends_work
    path, metered = operation.record_as or operation.path, operation.metered

    async def serve(request: Request) -> Any:
        every: Services = request.app.state.services
        work = begin_routed(request, every.lifecycle, path, metered, errors)
        try:
            response = await handler(request, select(every), work)
        except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
            return work.render_error(await work.failed(exc))
        if not ends_work:
            work.done(getattr(response, "status_code", 200))
        return response

    serve.__name__ = getattr(handler, "__name__", "endpoint")
    return serve


def routes(surfaces: Iterable[Surface]) -> list[Route]:
    """Starlette's routes for every operation of ``surfaces``, in their order (the first match wins)."""
    return [Route(operation.path, _endpoint(operation, surface.errors), methods=[operation.method])
            for surface in surfaces for operation in surface.operations]
