"""The tracing facade: what the API, the engine and the tool sources call, whatever the exporter.

Hooks call methods of a :class:`Span`. Without ``observability.otlp_endpoint`` every span is
the one shared :data:`NOOP` whose methods return at once: nothing from OpenTelemetry is
imported and no object is built per request (a hook costs one method call). With it,
``startup.install_tracer`` puts the span recorder (``gateway.observability.recorder``, imported
then, and only then) in :data:`TRACER` at start-up, and an exporter process per worker
(``python -m gateway.observability.exporter``) does the OpenTelemetry SDK's work.

This module imports nothing from the gateway: the recorder builds on it, never the other way round.

The engine sees spans only through this module, so it stays free of HTTP and of the SDK. An
outgoing request (an HTTP tool, an MCP server, optionally a provider) continues the trace by
reading :data:`OUTGOING`: the ``traceparent`` of the span it runs under, or None. It is a
context variable because each tool runs in its own task: a value set there stays there.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

OUTGOING: ContextVar[str | None] = ContextVar("loopgate_traceparent", default=None)


class Span:
    """A span that records nothing: the base of every hook, and what every hook gets when tracing is off."""

    __slots__ = ()
    recording = False

    def model_call(self, targets: Any, request: Any) -> Span:
        """A ``chat {model}`` child span for one model call (its failover attempts included)."""
        return self

    def answered(self, target: Any, response: Any, attempts: list[dict[str, Any]]) -> None:
        """End a model-call span with the answer of ``target``; ``attempts`` are this call's entries."""

    def failed(self, error: BaseException, attempts: list[dict[str, Any]]) -> None:
        """End a model-call span with the error the call ended with."""

    def tool(self, call: Any, tool: Any) -> Span:
        """An ``execute_tool {name}`` child span for one tool execution."""
        return self

    def tool_done(self, status: str, content: str | None) -> None:
        """End a tool span with the outcome's status (and content, when content capture is on)."""

    def operation(self, name: str, attributes: dict[str, Any]) -> Span:
        """A CLIENT child span named ``name`` for an upstream operation that is not a loop's model call
        (an embeddings request), with ``attributes``; ended by ``operation_done``."""
        return self

    def operation_done(self, failure: str, attempts: list[dict[str, Any]]) -> None:
        """End an operation span; ``failure``: its error type ("" when it succeeded); ``attempts``: its failover
        walk's entries (each failed one an event, as on a model call's span)."""

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        """A point event on this span (pause, resume, denial, context action)."""

    def set(self, key: str, value: Any) -> None:
        """One attribute."""

    def finish(self, status: int, error_type: str | None, route: str | None = None, request_id: str | None = None,
               tenant: str | None = None) -> None:
        """End a server span with the HTTP status, ``error.type`` for a failed request, and the request's
        ``loopgate.route``, ``loopgate.request_id`` and ``loopgate.tenant`` (one call: it runs per request)."""

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` naming this span, for a request made under it."""
        return None

    def outgoing(self) -> str | None:
        """The ``traceparent`` for a provider request, when propagation to providers is on."""
        return None


NOOP = Span()


class Tracer:
    """Starts server spans. This one (the default) starts none."""

    enabled = False

    def server(self, method: str, path: str, traceparent: bytes | None) -> Span:
        return NOOP

    async def shutdown(self) -> None:
        """Flush and stop the exporter (at the end of a worker's lifespan)."""


#: The process's tracer, chosen at start-up (``startup.install_tracer``).
TRACER: Tracer = Tracer()
