"""Spans following the OpenTelemetry GenAI conventions, recorded as plain Python values in the gateway process.

Imported only when ``observability.otlp_endpoint`` is set (``gateway/tracing.py``). Nothing here
touches the OpenTelemetry SDK: a span is a slotted object holding its ids, times, attributes and
events, and a request's finished spans are handed in one piece to the shipper
(``gateway/tracing_ship.py``), which sends them to the exporter process
(``gateway/tracing_export.py``) where the official SDK and OTLP exporter encode and post them.
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
_REQUEST_PARAMS = (("temperature", "gen_ai.request.temperature"), ("top_p", "gen_ai.request.top_p"),
                   ("max_tokens", "gen_ai.request.max_tokens"), ("max_completion_tokens", "gen_ai.request.max_tokens"))
_bits = random.getrandbits
_NO_EVENTS: tuple[()] = ()  # shared by every span without events (serialised as [])
_now = time.time_ns

#: One finished span as shipped: name, kind, span id, parent span id (0: none), start and end
#: (ns since the epoch), attributes, events ``[name, ns, attributes]``, status code, status message.
Record = list[Any]
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


class _Trace:
    """The request's share of a trace: its id and the spans finished so far (shipped with the server span)."""

    __slots__ = ("hex", "shipped", "spans")

    def __init__(self, trace_hex: str) -> None:
        self.hex = trace_hex
        self.spans: list[Record] = []
        self.shipped = False


class LeanSpan(Span):
    __slots__ = ("_attributes", "_events", "_first", "_kind", "_name", "_parent", "_start", "_status",
                 "_trace", "_tracer", "span_id")
    recording = True

    def __init__(self, tracer: LeanTracer, trace: _Trace, name: str, kind: int, parent: int,
                 attributes: dict[str, Any], first: Any = None) -> None:
        self._tracer = tracer
        self._trace = trace
        self._name = name
        self._kind = kind
        self._parent = parent
        self._attributes = attributes
        self._first = first
        self._events: list[list[Any]] | tuple[()] = _NO_EVENTS  # a list of its own from the first event
        self._status = ""  # the error description once the span failed
        self.span_id = _bits(64) or new_id(64)
        self._start = _now()

    def _end(self) -> None:
        status = self._status
        record = [self._name, self._kind, self.span_id, self._parent, self._start, _now(), self._attributes,
                  self._events, ERROR if status else UNSET, status]
        trace = self._trace
        if trace.shipped:  # ended after its request's server span (a cancelled task): shipped on its own
            self._tracer.sink(trace.hex, [record])
        else:
            trace.spans.append(record)

    def model_call(self, targets: Sequence[Any], request: Any) -> Span:
        first = targets[0]
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": _provider(first),
                      "gen_ai.request.model": first.model, "loopgate.target": first.label}
        params = request.params
        if params:
            for key, name in _REQUEST_PARAMS:
                value = params.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    attributes[name] = value
        if self._tracer.capture:
            attributes["gen_ai.input.messages"] = orjson.dumps(request.messages, default=str).decode()
        return LeanSpan(self._tracer, self._trace, f"chat {first.model}", CLIENT, self.span_id, attributes, first)

    def answered(self, target: Any, response: Any, attempts: list[dict[str, Any]]) -> None:
        attributes = self._attributes
        if target is not self._first:  # failed over: the span names the model that answered
            self._name = f"chat {target.model}"
            attributes["gen_ai.provider.name"] = _provider(target)
            attributes["gen_ai.request.model"] = target.model
            attributes["loopgate.target"] = target.label
        if attempts:
            self._attempts(attempts)
        usage = response.usage
        attributes["gen_ai.response.model"] = response.model or target.model
        attributes["gen_ai.response.finish_reasons"] = [str(response.finish_reason)]
        attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        if response.id:
            attributes["gen_ai.response.id"] = response.id
        if usage.cached_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
        if self._tracer.capture:
            attributes["gen_ai.output.messages"] = orjson.dumps([response.message], default=str).decode()
        self._end()

    def failed(self, error: BaseException, attempts: list[dict[str, Any]]) -> None:
        self._attempts(attempts)
        kind = error_type(error)
        self._attributes["error.type"] = kind
        self._status = kind
        self._end()

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
            self._attributes["loopgate.attempts"] = len(attempts)

    def tool(self, call: Any, tool: Any) -> Span:
        name = call["function"]["name"]
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                      "gen_ai.tool.call.id": call["id"], "gen_ai.tool.type": "function",
                      "loopgate.tool.source": str(getattr(tool.spec, "source", ""))}
        if self._tracer.capture:
            attributes["gen_ai.tool.call.arguments"] = call["function"].get("arguments") or ""
        return LeanSpan(self._tracer, self._trace, f"execute_tool {name}", INTERNAL, self.span_id, attributes)

    def tool_done(self, status: str, content: str | None) -> None:
        attributes = self._attributes
        attributes["loopgate.tool.status"] = status
        if status != "ok":
            attributes["error.type"] = status
            self._status = status
        if self._tracer.capture and content is not None:
            attributes["gen_ai.tool.call.result"] = content
        self._end()

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self._event([name, _now(), attributes])

    def _event(self, event: list[Any]) -> None:
        events = self._events
        if isinstance(events, list):
            events.append(event)
        else:
            self._events = [event]

    def set(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def finish(self, status: int, error_type: str | None, route: str | None = None, request_id: str | None = None,
               tenant: str | None = None) -> None:
        attributes = self._attributes
        if route is not None:
            attributes["loopgate.route"] = route
        if request_id is not None:
            attributes["loopgate.request_id"] = request_id
        if tenant is not None:
            attributes["loopgate.tenant"] = tenant
        attributes["http.response.status_code"] = status
        if error_type is not None:
            attributes["error.type"] = error_type
        if status >= 500:
            self._status = error_type or str(status)
        self._end()
        trace = self._trace
        trace.shipped = True
        self._tracer.sink(trace.hex, trace.spans)

    def traceparent(self) -> str | None:
        return f"00-{self._trace.hex}-{self.span_id:016x}-01"

    def outgoing(self) -> str | None:
        return self.traceparent() if self._tracer.propagate else None


def _provider(target: Any) -> str:
    return PROVIDER_NAMES.get(target.provider.type, str(target.provider.type))


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
        return LeanSpan(self, _Trace(trace_hex), f"{method} {path}", SERVER, parent,
                        {"http.request.method": method, "http.route": path})

    async def shutdown(self) -> None:
        if self._close is not None:
            await asyncio.to_thread(self._close)
