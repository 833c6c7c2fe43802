"""Spans following the OpenTelemetry GenAI conventions, recorded as plain Python values in the gateway process.

Imported only when ``observability.otlp_endpoint`` is set (``gateway/tracing.py``). Nothing here
touches the OpenTelemetry SDK: a span is a slotted object holding its ids, times, attributes and
events, and a request's finished spans are handed in one piece to the shipper
(``gateway/tracing_ship.py``), which sends them to the exporter process
(``gateway/tracing_export.py``) where the official SDK's processor and OTLP exporter post them
(encoded by ``gateway/tracing_encode.py``).
Building SDK spans and encoding protobuf here cost three times a plain request (bench/README.md).

Spans:

* ``{METHOD} {path}`` (SERVER): one per request, continuing the caller's W3C ``traceparent``;
  ``loopgate.route``, ``http.response.status_code``, ``error.type``; events ``loopgate.pause``,
  ``loopgate.resume``, ``loopgate.denial`` and ``loopgate.context.*`` (with the continuation id
  where there is one);
* ``chat {model}`` (CLIENT): one per model call of the loop, named after the upstream model of
  the target that answered (the first target's while it runs); ``gen_ai.*`` attributes of the
  conventions; each failed attempt of its failover walk is a ``loopgate.attempt`` event;
* ``execute_tool {name}`` (INTERNAL): one per server-side tool execution.

Prompt, completion, tool-argument and tool-result text are attributes only with
``capture_content: true``.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from gateway.config.observability_section import ObservabilityConfig
from gateway.tracing import NOOP, Span, Tracer

# ``gen_ai.provider.name`` values of the conventions, by provider type.
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini", "litellm": "litellm",
                  "mock": "loopgate.mock"}
# SpanKind and StatusCode values of the OpenTelemetry API (the exporter process maps them back).
INTERNAL, SERVER, CLIENT = 0, 1, 2
UNSET, ERROR = 0, 2
# A traceparent is 55 characters (version 00); a later version may append fields. Longer is not parsed.
MAX_TRACEPARENT = 512
_TRACEPARENT = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\r\n]*)?")
_ZERO_TRACE, _ZERO_SPAN = b"0" * 32, b"0" * 16
_NO_PARAMS = (None, None, None, None)
_bits = random.getrandbits
_NO_EVENTS: tuple[()] = ()  # shared by every span without events (serialised as [])
_now = time.time_ns

#: One finished span as shipped: name, kind, span id, parent span id (0: none), start and end
#: (ns since the epoch), attributes, events ``[name, ns, attributes]``, status code, status message.
#: The attributes are a dict, or (the server and model-call spans: every request has them) a list
#: ``[schema, value, ..., extra]`` whose values are named by ``ATTRIBUTE_NAMES[schema]`` (None:
#: not set) and ``extra`` is None or a dict of the rest; such a span's name is None, made from its
#: attributes by :func:`span_name`. Positions instead of names: no dict is built per span here.
Record = list[Any]
SERVER_ATTRIBUTES, CHAT_ATTRIBUTES = 1, 2
ATTRIBUTE_NAMES: dict[int, tuple[str, ...]] = {
    SERVER_ATTRIBUTES: ("http.request.method", "http.route", "loopgate.route", "loopgate.request_id",
                        "loopgate.tenant", "http.response.status_code", "error.type"),
    CHAT_ATTRIBUTES: ("gen_ai.provider.name", "gen_ai.request.model", "loopgate.target", "gen_ai.response.model",
                      "gen_ai.response.finish_reasons", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                      "gen_ai.response.id", "gen_ai.usage.cache_read.input_tokens", "gen_ai.request.temperature",
                      "gen_ai.request.top_p", "gen_ai.request.max_tokens", "gen_ai.request.max_tokens"),
}
# Values shipped as the gateway holds them, made what the conventions want here: the provider's
# type becomes its ``gen_ai.provider.name``, the finish reason a list; request parameters are kept
# only when they are numbers (a later position wins: max_completion_tokens over max_tokens).
_NUMERIC = frozenset({"gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.max_tokens"})
#: attributes every span of a schema has, with the same value
FIXED_ATTRIBUTES: dict[int, dict[str, Any]] = {SERVER_ATTRIBUTES: {},
                                               CHAT_ATTRIBUTES: {"gen_ai.operation.name": "chat"}}
#: What the tracer hands on per request: the trace id (32 hex digits) and its finished spans.
Sink = Callable[[str, list[Record]], None]


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


def expand(name: str | None, attributes: dict[str, Any] | list[Any]) -> tuple[str, dict[str, Any]]:
    """A record's name and attributes as a dict (see ``Record``): a schema's span is named after its
    attributes (``{METHOD} {route}``, ``chat {model}``). ValueError for a record of no known shape."""
    if isinstance(attributes, dict):
        if name is None:
            raise ValueError("a span with attributes by name has no name")
        return name, attributes
    schema = attributes[0] if attributes else None
    names = ATTRIBUTE_NAMES.get(schema) if isinstance(schema, int) else None
    if names is None or len(attributes) != len(names) + 2:
        raise ValueError(f"attributes of an unknown shape: {str(attributes)[:100]}")
    out = dict(FIXED_ATTRIBUTES[schema])  # type: ignore[index]
    for key, value in zip(names, attributes[1:-1], strict=True):
        if value is None or (key in _NUMERIC and (not isinstance(value, int | float) or isinstance(value, bool))):
            continue
        if key == "gen_ai.provider.name":
            value = PROVIDER_NAMES.get(value, str(value))
        elif key == "gen_ai.response.finish_reasons":
            value = [str(value)]
        out[key] = value
    extra = attributes[-1]
    if extra:
        out.update(extra)
    if name is None:
        name = (f"{out.get('http.request.method')} {out.get('http.route')}" if schema == SERVER_ATTRIBUTES
                else f"chat {out.get('gen_ai.request.model')}")
    return name, out


def new_id(bits: int) -> int:
    """A random id that is never 0 (0 means invalid in W3C trace context)."""
    value = _bits(bits)
    while not value:
        value = _bits(bits)
    return value


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


class _Recording(Span):
    """What every recording span shares: its id, start, events, status, and the request span it belongs to."""

    __slots__ = ("_events", "_owner", "_parent", "_start", "_status", "span_id")
    recording = True

    _owner: ServerSpan  # the request's span (children only: the request's span has no reference to itself)

    # Each kind's __init__ sets them all (no shared method: one call less per span): ``_parent``;
    # ``_events`` the shared empty tuple until the first event; ``_status`` the error
    # description once the span failed; ``span_id``; ``_start`` (ns since the epoch).
    _events: list[list[Any]] | tuple[()]
    _parent: int
    _status: str
    _start: int
    span_id: int

    def _end(self, name: str | None, attributes: dict[str, Any] | list[Any]) -> None:
        """Hand on the finished span (``name`` None: the exporter names it after its attributes)."""
        status = self._status
        record = [name, self._kind, self.span_id, self._parent, self._start, _now(), attributes, self._events,
                  ERROR if status else UNSET, status]
        root = self._owner
        if root.shipped:  # ended after its request's server span (a cancelled task): shipped on its own
            root.tracer.sink(root.hex, [record])
        else:
            root.spans.append(record)

    _kind = INTERNAL

    def model_call(self, targets: Sequence[Any], request: Any) -> Span:
        return ChatSpan(self._owner, self.span_id, targets[0], request)

    def tool(self, call: Any, tool: Any) -> Span:
        return ToolSpan(self._owner, self.span_id, call, tool)

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self._event([name, _now(), attributes])

    def _event(self, event: list[Any]) -> None:
        events = self._events
        if isinstance(events, list):
            events.append(event)
        else:
            self._events = [event]

    def traceparent(self) -> str | None:
        return f"00-{self._owner.hex}-{self.span_id:016x}-01"

    def outgoing(self) -> str | None:
        return self.traceparent() if self._owner.tracer.propagate else None


class ServerSpan(_Recording):
    """``{METHOD} {path}``: the request's span, holding its trace and the child spans finished so far."""

    __slots__ = ("_extra", "_method", "_path", "hex", "shipped", "spans", "tracer")
    _kind = SERVER

    def __init__(self, tracer: LeanTracer, trace_hex: str, parent: int, method: str, path: str) -> None:
        self.tracer = tracer
        self.hex = trace_hex
        self.spans: list[Record] = []
        self.shipped = False
        self._method = method
        self._path = path
        self._extra: dict[str, Any] | None = None
        self._parent = parent
        self._events = _NO_EVENTS
        self._status = ""
        self.span_id = _bits(64) or new_id(64)
        self._start = _now()

    # What the children reach through ``_owner``, the request's span has itself (it ends in ``finish``).

    def model_call(self, targets: Sequence[Any], request: Any) -> Span:
        return ChatSpan(self, self.span_id, targets[0], request)

    def tool(self, call: Any, tool: Any) -> Span:
        return ToolSpan(self, self.span_id, call, tool)

    def traceparent(self) -> str | None:
        return f"00-{self.hex}-{self.span_id:016x}-01"

    def outgoing(self) -> str | None:
        return self.traceparent() if self.tracer.propagate else None

    def set(self, key: str, value: Any) -> None:
        if self._extra is None:
            self._extra = {}
        self._extra[key] = value

    def finish(self, status: int, error_type: str | None, route: str | None = None, request_id: str | None = None,
               tenant: str | None = None) -> None:
        failure = self._status = (error_type or str(status)) if status >= 500 else self._status
        spans = self.spans
        spans.append([None, SERVER, self.span_id, self._parent, self._start, _now(),
                      [SERVER_ATTRIBUTES, self._method, self._path, route, request_id, tenant, status, error_type,
                       self._extra], self._events, ERROR if failure else UNSET, failure])
        self.shipped = True
        self.tracer.sink(self.hex, spans)


class ChatSpan(_Recording):
    """``chat {model}``: one model call, its failover walk's failed attempts as events."""

    __slots__ = ("_extra", "_first", "_params")
    _kind = CLIENT

    def __init__(self, root: ServerSpan, parent: int, first: Any, request: Any) -> None:
        self._first = first
        self._params = request.params  # read at the end: only the request parameters of the conventions
        extra: dict[str, Any] | None = None
        if root.tracer.capture:
            extra = {"gen_ai.input.messages": orjson.dumps(request.messages, default=str).decode()}
        self._owner = root
        self._extra = extra
        self._parent = parent
        self._events = _NO_EVENTS
        self._status = ""
        self.span_id = _bits(64) or new_id(64)
        self._start = _now()

    def answered(self, target: Any, response: Any, attempts: list[dict[str, Any]]) -> None:
        if len(attempts) > 1 or (attempts and attempts[0].get("error_class") is not None):
            self._attempts(attempts)
        usage = response.usage
        model = target.model
        if self._owner.tracer.capture:
            self.set("gen_ai.output.messages", orjson.dumps([response.message], default=str).decode())
        self._end(None, [CHAT_ATTRIBUTES, target.provider.type, model, target.label, response.model or model,
                         response.finish_reason, usage.prompt_tokens, usage.completion_tokens, response.id or None,
                         usage.cached_tokens or None, *self._requested(), self._extra])

    def failed(self, error: BaseException, attempts: list[dict[str, Any]]) -> None:
        self._attempts(attempts)
        kind = error_type(error)
        self.set("error.type", kind)
        self._status = kind
        first = self._first
        self._end(None, [CHAT_ATTRIBUTES, first.provider.type, first.model, first.label, None, None, None, None,
                         None, None, *self._requested(), self._extra])

    def _requested(self) -> tuple[Any, Any, Any, Any]:
        """temperature, top_p, max_tokens, max_completion_tokens as the caller sent them (checked by the exporter)."""
        params = self._params
        if not params:
            return _NO_PARAMS
        get = params.get
        return get("temperature"), get("top_p"), get("max_tokens"), get("max_completion_tokens")

    def _attempts(self, attempts: list[dict[str, Any]]) -> None:
        """Every attempt of the walk that did not answer, as an event (the answering one is the span itself)."""
        for entry in attempts:
            if entry.get("error_class") is None:
                continue
            attributes = {"loopgate.target": entry["target"], "error.type": entry["error_class"],
                          "loopgate.elapsed_ms": entry["elapsed_ms"]}
            if entry.get("status") is not None:
                attributes["http.response.status_code"] = entry["status"]
            self._event(["loopgate.attempt", _now(), attributes])
        if len(attempts) > 1:
            self.set("loopgate.attempts", len(attempts))

    def set(self, key: str, value: Any) -> None:
        if self._extra is None:
            self._extra = {}
        self._extra[key] = value


class ToolSpan(_Recording):
    """``execute_tool {name}``: one server-side tool execution (its attributes as a plain dict)."""

    __slots__ = ("_attributes", "_name")

    def __init__(self, root: ServerSpan, parent: int, call: Any, tool: Any) -> None:
        name = self._name = call["function"]["name"]
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                      "gen_ai.tool.call.id": call["id"], "gen_ai.tool.type": "function",
                      "loopgate.tool.source": str(getattr(tool.spec, "source", ""))}
        if root.tracer.capture:
            attributes["gen_ai.tool.call.arguments"] = call["function"].get("arguments") or ""
        self._owner = root
        self._attributes = attributes
        self._parent = parent
        self._events = _NO_EVENTS
        self._status = ""
        self.span_id = _bits(64) or new_id(64)
        self._start = _now()

    def set(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def tool_done(self, status: str, content: str | None) -> None:
        attributes = self._attributes
        attributes["loopgate.tool.status"] = status
        if status != "ok":
            attributes["error.type"] = status
            self._status = status
        if self._owner.tracer.capture and content is not None:
            attributes["gen_ai.tool.call.result"] = content
        self._end(f"execute_tool {self._name}", attributes)


class LeanTracer(Tracer):
    """Samples and starts server spans; ``sink`` receives each request's finished spans (the shipper's ``submit``)."""

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
