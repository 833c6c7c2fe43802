"""Spans following the OpenTelemetry GenAI conventions, recorded as plain Python values in the gateway process.

Imported only when ``observability.otlp_endpoint`` is set (``startup.install_tracer``). Nothing here
touches the OpenTelemetry SDK: a request's spans become one flat list (``Entry``, the format of
``gateway/observability/span_entries.py``), handed whole to the shipper
(``gateway/observability/shipper.py``), which sends it to the exporter process
(``gateway/observability/exporter.py``) where ``span_entries.rebuild`` turns it back into spans for
the official SDK's processor and OTLP exporter (encoded by ``gateway/observability/otlp_encoder.py``).
The names of attributes, the conventions' value rules and the ids nobody outside has seen are made
there, on that process's CPU: the request path only copies values it already holds (bench/README.md).

Spans:

* ``{METHOD} {path}`` (SERVER): one per request, continuing the caller's W3C ``traceparent``;
  ``loopgate.route``, ``http.response.status_code``, ``error.type``; events ``loopgate.pause``,
  ``loopgate.resume``, ``loopgate.denial`` and ``loopgate.context.*`` (with the continuation id
  where there is one);
* ``chat {model}`` (CLIENT): one per model call of the loop, named after the upstream model of
  the target that answered (the first target's while it runs); ``gen_ai.*`` attributes of the
  conventions; each failed attempt of its failover walk is a ``loopgate.attempt`` event;
* ``execute_tool {name}`` (INTERNAL): one per server-side tool execution;
* an operation's span (CLIENT) that runs no loop, named by its surface (``embeddings {model}``),
  with the attributes its surface gives (``Span.operation``); its failover walk's failed attempts
  are ``loopgate.attempt`` events, as on a model call's span (one helper: ``with_attempts``).

Prompt, completion, tool-argument and tool-result text are attributes only with
``capture_content: true``, each cut at 64 KiB (``gateway/observability/captured.py``).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from gateway.config.observability_section import ObservabilityConfig
from gateway.observability.captured import captured, captured_json
from gateway.observability.span_entries import CHAT, OPERATION, TOOL, Entry, new_id
from gateway.observability.tracing import NOOP, Span, Tracer

# A traceparent is 55 characters (version 00); a later version may append fields. Longer is not parsed.
MAX_TRACEPARENT = 512
_TRACEPARENT = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\r\n]*)?")
_ZERO_TRACE, _ZERO_SPAN = b"0" * 32, b"0" * 16
_bits = random.getrandbits
_NO_EVENTS: tuple[()] = ()  # shared by every span without events (serialised as [])
_now = time.time_ns
#: the request parameters of the conventions, as the caller names them (read with one ``map``)
_REQUESTED = ("temperature", "top_p", "max_tokens", "max_completion_tokens")

#: What the tracer hands on per request: the entry and how many spans it holds.
Sink = Callable[[Entry, int], None]


def parse_traceparent(value: bytes) -> tuple[str, int, bool] | None:
    """``(trace id hex, parent span id, sampled)`` of a W3C ``traceparent``, or None when it is not a valid one."""
    if len(value) > MAX_TRACEPARENT:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace, parent, flags, rest = match.groups()
    if version == b"ff" or (version == b"00" and rest is not None) or trace == _ZERO_TRACE or parent == _ZERO_SPAN:
        return None
    return trace.decode(), int(parent, 16), bool(int(flags, 16) & 1)


def error_type(error: BaseException) -> str:
    """``error.type``: the canonical error class when there is one, else the exception's class name."""
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        return "cancelled"  # the client went away (or the request was cancelled) mid-call
    for attribute in ("last", "error"):  # AllTargetsFailed.last, StreamInterrupted.error
        inner = getattr(error, attribute, None)
        if inner is not None and hasattr(inner, "error_class"):
            return str(inner.error_class.value)
    error_class = getattr(error, "error_class", None)
    return str(error_class.value) if error_class is not None else type(error).__name__


def _appended(events: list[list[Any]] | tuple[()], event: list[Any]) -> list[list[Any]]:
    """``events`` with ``event`` added: the shared empty tuple becomes a list of the span's own."""
    if isinstance(events, list):
        events.append(event)
        return events
    return [event]


def with_attempts(span: Span, events: list[list[Any]] | tuple[()], attempts: list[dict[str, Any]]
                  ) -> list[list[Any]] | tuple[()]:
    """``events`` with a ``loopgate.attempt`` event for every attempt of a failover walk that did not answer
    (the answering one is the span itself), and the walk's length on ``span`` when it tried more than one.

    Every span of a walk (a model call's, an operation's) records its attempts here: one event shape."""
    for entry in attempts:
        if entry.get("error_class") is None:
            continue
        attributes = {"loopgate.target": entry["target"], "error.type": entry["error_class"],
                      "loopgate.elapsed_ms": entry["elapsed_ms"]}
        if entry.get("status") is not None:
            attributes["http.response.status_code"] = entry["status"]
        events = _appended(events, ["loopgate.attempt", _now(), attributes])
    if len(attempts) > 1:
        span.set("loopgate.attempts", len(attempts))
    return events


class _Recording(Span):
    """What the request's span and a model call's share: events, and attributes beyond their fixed values."""

    __slots__ = ("_events", "_extra")
    recording = True

    _events: list[list[Any]] | tuple[()]
    _extra: dict[str, Any] | None

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self._events = _appended(self._events, [name, _now(), attributes])

    def set(self, key: str, value: Any) -> None:
        if self._extra is None:
            self._extra = {}
        self._extra[key] = value


class ServerSpan(_Recording):
    """``{METHOD} {path}``: the request's span, holding its trace and the child spans finished so far."""

    __slots__ = ("_children", "_method", "_parent", "_path", "_start", "hex", "span_id", "tracer")

    def __init__(self, tracer: LeanTracer, trace_hex: str, parent: int, method: str, path: str) -> None:
        self.tracer = tracer
        self.hex = trace_hex
        self._parent = parent
        self._method = method
        self._path = path
        self._children: list[list[Any]] | None = []  # None once shipped
        self._events: list[list[Any]] | tuple[()] = _NO_EVENTS
        self._extra: dict[str, Any] | None = None
        self.span_id = _bits(64) or new_id(64)
        self._start = _now()

    def model_call(self, targets: Sequence[Any], request: Any) -> Span:
        return ChatSpan(self, targets[0], request)

    def tool(self, call: Any, tool: Any) -> Span:
        return ToolSpan(self, call, tool)

    def operation(self, name: str, attributes: dict[str, Any]) -> Span:
        return OperationSpan(self, name, attributes)

    def traceparent(self) -> str | None:
        return f"00-{self.hex}-{self.span_id:016x}-01"

    def outgoing(self) -> str | None:
        return self.traceparent() if self.tracer.propagate else None

    def child_done(self, record: list[Any]) -> None:
        children = self._children
        if children is None:  # ended after its request's server span (a cancelled task): shipped on its own
            self.tracer.sink([self.hex, self.span_id, [record]], 1)
        else:
            children.append(record)

    def finish(self, status: int, error_type: str | None, route: str | None = None, request_id: str | None = None,
               tenant: str | None = None) -> None:
        children = self._children
        if children is None:
            return  # finished once already
        self._children = None
        self.tracer.sink([self.hex, self._parent, self.span_id, self._start, _now(), self._method, self._path, route,
                          request_id, tenant, status, error_type, self._events, self._extra, children],
                         len(children) + 1)


class ChatSpan(_Recording):
    """``chat {model}``: one model call, its failover walk's failed attempts as events.

    Its id is made by the exporter unless a request made under it needs it (``outgoing``)."""

    __slots__ = ("_first", "_id", "_owner", "_request", "_start")

    def __init__(self, owner: ServerSpan, first: Any, request: Any) -> None:
        self._owner = owner
        self._first = first
        self._request = request  # its parameters are read at the end: only those of the conventions
        self._extra: dict[str, Any] | None = (
            {"gen_ai.input.messages": captured_json(request.messages)}
            if owner.tracer.capture else None)
        self._id = 0
        self._events: list[list[Any]] | tuple[()] = _NO_EVENTS
        self._start = _now()

    def outgoing(self) -> str | None:
        return self.traceparent() if self._owner.tracer.propagate else None

    def traceparent(self) -> str | None:
        if not self._id:
            self._id = new_id(64)
        return f"00-{self._owner.hex}-{self._id:016x}-01"

    def answered(self, target: Any, response: Any, attempts: list[dict[str, Any]]) -> None:
        events = self._events
        if len(attempts) != 1 or attempts[0].get("error_class") is not None:
            events = with_attempts(self, events, attempts)
        owner = self._owner
        if owner.tracer.capture:
            self.set("gen_ai.output.messages", captured_json([response.message]))
        usage = response.usage
        temperature, top_p, max_tokens, max_completion = map(self._request.params.get, _REQUESTED)
        owner.child_done([CHAT, self._id, self._start, _now(), "", events, self._extra, target.provider.type,
                          target.model, target.label, response.model, response.finish_reason, usage.prompt_tokens,
                          usage.completion_tokens, response.id, usage.cached_tokens, temperature, top_p, max_tokens,
                          max_completion])

    def failed(self, error: BaseException, attempts: list[dict[str, Any]]) -> None:
        events = with_attempts(self, self._events, attempts)
        kind = error_type(error)
        self.set("error.type", kind)
        first = self._first
        self._owner.child_done([CHAT, self._id, self._start, _now(), kind, events, self._extra, first.provider.type,
                                first.model, first.label, None, None, None, None, None, None,
                                *map(self._request.params.get, _REQUESTED)])


class ToolSpan(Span):
    """``execute_tool {name}``: one server-side tool execution (its attributes as a plain dict)."""

    __slots__ = ("_attributes", "_events", "_name", "_owner", "_start", "span_id")
    recording = True

    def __init__(self, owner: ServerSpan, call: Any, tool: Any) -> None:
        name = self._name = call["function"]["name"]
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                      "gen_ai.tool.call.id": call["id"], "gen_ai.tool.type": "function",
                      "loopgate.tool.source": str(getattr(tool.spec, "source", ""))}
        if owner.tracer.capture:
            arguments = call["function"].get("arguments") or ""
            attributes["gen_ai.tool.call.arguments"] = captured(arguments) if isinstance(arguments, str) else arguments
        self._owner = owner
        self._attributes = attributes
        self._events: list[list[Any]] | tuple[()] = _NO_EVENTS
        self.span_id = new_id(64)  # the traceparent of the tool's own requests names it
        self._start = _now()

    def set(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self._events = _appended(self._events, [name, _now(), attributes])

    def traceparent(self) -> str | None:
        return f"00-{self._owner.hex}-{self.span_id:016x}-01"

    def outgoing(self) -> str | None:
        return self.traceparent() if self._owner.tracer.propagate else None

    def tool_done(self, status: str, content: str | None) -> None:
        attributes = self._attributes
        attributes["loopgate.tool.status"] = status
        failure = ""
        if status != "ok":
            attributes["error.type"] = failure = status
        if self._owner.tracer.capture and content is not None:
            attributes["gen_ai.tool.call.result"] = captured(content)
        self._owner.child_done([TOOL, self.span_id, self._start, _now(), failure, self._events, self._name,
                                attributes])


class OperationSpan(Span):
    """A surface's own upstream operation (``embeddings {model}``): its name and attributes as given."""

    __slots__ = ("_attributes", "_events", "_name", "_owner", "_start")
    recording = True

    def __init__(self, owner: ServerSpan, name: str, attributes: dict[str, Any]) -> None:
        self._owner = owner
        self._name = name
        self._attributes = attributes
        self._events: list[list[Any]] | tuple[()] = _NO_EVENTS
        self._start = _now()

    def set(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self._events = _appended(self._events, [name, _now(), attributes])

    def operation_done(self, failure: str, attempts: list[dict[str, Any]]) -> None:
        events = with_attempts(self, self._events, attempts)
        if failure:
            self._attributes["error.type"] = failure
        self._owner.child_done([OPERATION, 0, self._start, _now(), failure, events, self._name, self._attributes])


class LeanTracer(Tracer):
    """Samples and starts server spans; ``sink`` receives each request's entry (the shipper's ``submit``)."""

    enabled = True

    def __init__(self, config: ObservabilityConfig, sink: Sink, close: Callable[[], Any] | None = None) -> None:
        self.config = config
        self.sink = sink
        self.capture = config.capture_content
        self.propagate = config.propagate_to_providers
        self._ratio = config.sample_ratio
        self._close = close

    def server(self, method: str, path: str, traceparent: bytes | None) -> Span:
        caller = parse_traceparent(traceparent) if traceparent else None
        if caller is not None:
            trace_hex, parent, sampled = caller
            if not sampled:  # ParentBased: the caller decided for its trace
                return NOOP
        else:
            if self._ratio < 1.0 and random.random() >= self._ratio:
                return NOOP
            trace_hex, parent = "%032x" % (_bits(128) or new_id(128)), 0  # faster than an f-string's format
        return ServerSpan(self, trace_hex, parent, method, path)

    async def shutdown(self) -> None:
        if self._close is not None:
            await asyncio.to_thread(self._close)
