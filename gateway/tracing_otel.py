"""OpenTelemetry spans following the GenAI semantic conventions, exported over OTLP/HTTP protobuf.

Imported only when ``observability.otlp_endpoint`` is set (``gateway/tracing.py``). Spans:

* ``{METHOD} {path}`` (SERVER): one per request, continuing the caller's W3C ``traceparent``;
  ``loopgate.route``, ``http.response.status_code``, ``error.type``; events ``loopgate.pause``,
  ``loopgate.resume``, ``loopgate.denial`` and ``loopgate.context.*`` (with the continuation id
  where there is one);
* ``chat {model}`` (CLIENT): one per model call of the loop, named after the upstream model of
  the target that answered (the first target's while it runs); ``gen_ai.*`` attributes of the
  conventions; each failed attempt of its failover walk is a ``loopgate.attempt`` event;
* ``execute_tool {name}`` (INTERNAL): one per server-side tool execution.

Prompt, completion, tool-argument and tool-result text are attributes only with
``capture_content: true``. Spans are batched and exported by the SDK's worker thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import orjson
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import Span as OtelSpanType
from opentelemetry.trace import SpanKind, Status, StatusCode, get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.config.observability_section import ObservabilityConfig
from gateway.tracing import NOOP, Span, Tracer

# ``gen_ai.provider.name`` values of the conventions, by provider type.
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini", "litellm": "litellm",
                  "mock": "loopgate.mock"}
_PROPAGATOR = TraceContextTextMapPropagator()
# A traceparent is 55 characters; anything much longer is not one and is not parsed.
_MAX_TRACEPARENT = 128


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


class OtelSpan(Span):
    __slots__ = ("_capture", "_first", "_pending", "_propagate", "_span", "_tracer")
    recording = True

    def __init__(self, tracer: OtelTracer, span: OtelSpanType, first: Any = None) -> None:
        self._tracer = tracer
        self._span = span
        self._capture = tracer.config.capture_content
        self._propagate = tracer.config.propagate_to_providers
        self._first = first
        self._pending: dict[str, Any] = {}

    def _child(self, name: str, kind: SpanKind, attributes: dict[str, Any], first: Any = None) -> OtelSpan:
        context = set_span_in_context(self._span)
        span = self._tracer.sdk.start_span(name, context=context, kind=kind, attributes=attributes)
        return OtelSpan(self._tracer, span, first)

    def model_call(self, targets: Sequence[Any], request: Any) -> Span:
        first = targets[0]
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": _provider(first),
                      "gen_ai.request.model": first.model, "loopgate.target": first.label}
        params = request.params
        for key, name in (("temperature", "gen_ai.request.temperature"), ("top_p", "gen_ai.request.top_p"),
                          ("max_tokens", "gen_ai.request.max_tokens"),
                          ("max_completion_tokens", "gen_ai.request.max_tokens")):
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        if self._capture:
            attributes["gen_ai.input.messages"] = orjson.dumps(request.messages, default=str).decode()
        return self._child(f"chat {first.model}", SpanKind.CLIENT, attributes, first)

    def answered(self, target: Any, response: Any, attempts: list[dict[str, Any]]) -> None:
        span = self._span
        if target is not self._first:  # failed over: the span names the model that answered
            span.update_name(f"chat {target.model}")
            span.set_attributes({"gen_ai.provider.name": _provider(target), "gen_ai.request.model": target.model,
                                 "loopgate.target": target.label})
        self._attempts(attempts)
        usage = response.usage
        attributes: dict[str, Any] = {
            "gen_ai.response.model": response.model or target.model,
            "gen_ai.response.finish_reasons": [str(response.finish_reason)],
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
        }
        if response.id:
            attributes["gen_ai.response.id"] = response.id
        if usage.cached_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
        if self._capture:
            attributes["gen_ai.output.messages"] = orjson.dumps([response.message], default=str).decode()
        span.set_attributes(attributes)
        span.end()

    def failed(self, error: BaseException, attempts: list[dict[str, Any]]) -> None:
        self._attempts(attempts)
        kind = error_type(error)
        self._span.set_attribute("error.type", kind)
        self._span.set_status(Status(StatusCode.ERROR, kind))
        self._span.end()

    def _attempts(self, attempts: list[dict[str, Any]]) -> None:
        """Every attempt of the walk that did not answer, as an event (the answering one is the span itself)."""
        for entry in attempts:
            if entry.get("error_class") is None:
                continue
            attributes = {"loopgate.target": entry["target"], "error.type": entry["error_class"],
                          "loopgate.elapsed_ms": entry["elapsed_ms"]}
            if entry.get("status") is not None:
                attributes["http.response.status_code"] = entry["status"]
            self._span.add_event("loopgate.attempt", attributes)
        if len(attempts) > 1:
            self._span.set_attribute("loopgate.attempts", len(attempts))

    def tool(self, call: Any, tool: Any) -> Span:
        name = call["function"]["name"]
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                      "gen_ai.tool.call.id": call["id"], "gen_ai.tool.type": "function",
                      "loopgate.tool.source": str(getattr(tool.spec, "source", ""))}
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = call["function"].get("arguments") or ""
        return self._child(f"execute_tool {name}", SpanKind.INTERNAL, attributes)

    def tool_done(self, status: str, content: str | None) -> None:
        span = self._span
        span.set_attribute("loopgate.tool.status", status)
        if status != "ok":
            span.set_attribute("error.type", status)
            span.set_status(Status(StatusCode.ERROR, status))
        if self._capture and content is not None:
            span.set_attribute("gen_ai.tool.call.result", content)
        span.end()

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self._span.add_event(name, attributes)

    def set(self, key: str, value: Any) -> None:
        self._pending[key] = value  # set with the others when the span ends: one lock, one pass

    def finish(self, status: int, error_type: str | None) -> None:
        span = self._span
        attributes: dict[str, Any] = {"http.response.status_code": status, **self._pending}
        if error_type is not None:
            attributes["error.type"] = error_type
        span.set_attributes(attributes)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR, error_type or str(status)))
        span.end()

    def traceparent(self) -> str | None:
        context = self._span.get_span_context()
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def outgoing(self) -> str | None:
        return self.traceparent() if self._propagate else None


def _provider(target: Any) -> str:
    return PROVIDER_NAMES.get(target.provider.type, str(target.provider.type))


class OtelTracer(Tracer):
    enabled = True

    def __init__(self, config: ObservabilityConfig) -> None:
        assert config.otlp_endpoint is not None
        self.config = config
        resource = Resource.create({"service.name": config.service_name, "service.version": __version__})
        # Root traces are sampled in ``server`` before the SDK is asked (an unsampled request then
        # costs no SDK span at all); a caller's traceparent decides for its own trace.
        self._ratio = config.sample_ratio
        self.provider = TracerProvider(resource=resource, sampler=ParentBased(ALWAYS_ON))
        exporter = OTLPSpanExporter(endpoint=f"{config.otlp_endpoint}/v1/traces", headers=dict(config.headers))
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.sdk = self.provider.get_tracer("loopgate", __version__)

    def server(self, method: str, path: str, traceparent: bytes | None) -> Span:
        context: Context | None = None
        if traceparent and len(traceparent) <= _MAX_TRACEPARENT:
            context = _PROPAGATOR.extract({"traceparent": traceparent.decode("latin-1")})
            if not get_current_span(context).get_span_context().is_valid:
                context = None
        if context is None and self._ratio < 1.0 and random.random() >= self._ratio:
            return NOOP
        span = self.sdk.start_span(f"{method} {path}", context=context, kind=SpanKind.SERVER,
                                   attributes={"http.request.method": method, "http.route": path})
        if not span.is_recording():
            # Not sampled: no child spans, nothing propagated, the hooks cost what they cost untraced.
            return NOOP
        return OtelSpan(self, span)

    async def shutdown(self) -> None:
        await asyncio.to_thread(self.provider.shutdown)
