"""The OTLP protobuf encoding of the exporter process: the official encoder's message, at a fraction of its cost.

The official encoder (``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans``)
builds a protobuf object per attribute, value, span and status, then copies each into its parent:
at a few thousand requests per second that takes a large share of a core from the gateway on a
small host (bench/README.md, "Every control on").

:class:`SpanEncoder` produces the same message for a fraction of that. Protobuf defines a
message's encoding as the concatenation of its fields' encodings, in any order, and a repeated
field as its elements' encodings one after the other: so a span's own fields (ids, name, kind,
times, status, flags) are written out as bytes, and each attribute is one ``KeyValue`` of the
official definitions (``opentelemetry-proto``) serialized by protobuf once and reused while it
repeats (``gen_ai.operation.name=chat``, the route, the model, the provider). Values follow the
official rules exactly (bool, str, int, float, bytes, sequences, mappings, None); an attribute the
official encoder would leave out with an error in the log (an integer outside 64 bits, an unknown
type) is left out the same way.

:func:`install` hands it to the official ``OTLPSpanExporter`` (its transport, retries, headers,
compression and ``OTEL_EXPORTER_OTLP_*`` variables stay as they are), after checking on sample
spans of every shape the gateway makes that both encoders give equal messages; if they do not
(an SDK release that changed the message), the official encoder stays and a warning says so.
``LOOPGATE_TRACE_ENCODER=official`` keeps it too.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope as SdkScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace import Status as SdkStatus
from opentelemetry.trace import StatusCode as SdkStatusCode

logger = logging.getLogger("loopgate.tracing")

ENCODER_ENV = "LOOPGATE_TRACE_ENCODER"
#: distinct attribute encodings kept for reuse; past it the cache starts over (values that never
#: repeat, like request ids, pass through it)
CACHE_ENTRIES = 4096
#: a longer encoding is never kept (captured prompt text, say): the cache stays under ~1 MiB
CACHE_VALUE_BYTES = 256

# Field tags (field number << 3 | 2, length-delimited) of the messages joined here as bytes.
_REQUEST_RESOURCE_SPANS = b"\x0a"  # ExportTraceServiceRequest.resource_spans = 1
_RESOURCE = b"\x0a"  # ResourceSpans.resource = 1
_SCOPE_SPANS = b"\x12"  # ResourceSpans.scope_spans = 2
_RESOURCE_SCHEMA = b"\x1a"  # ResourceSpans.schema_url = 3
_SCOPE = b"\x0a"  # ScopeSpans.scope = 1
_SPANS = b"\x12"  # ScopeSpans.spans = 2
_SCOPE_SCHEMA = b"\x1a"  # ScopeSpans.schema_url = 3
_RESOURCE_ATTRIBUTE = b"\x0a"  # Resource.attributes = 1
_SCOPE_ATTRIBUTE = b"\x1a"  # InstrumentationScope.attributes = 3
_SPAN_ATTRIBUTE = b"\x4a"  # Span.attributes = 9
_SPAN_EVENT = b"\x5a"  # Span.events = 11
_SPAN_LINK = b"\x6a"  # Span.links = 13
_EVENT_ATTRIBUTE = b"\x1a"  # Span.Event.attributes = 3
_LINK_ATTRIBUTE = b"\x22"  # Span.Link.attributes = 4

# A span's own fields: tag bytes (field number << 3 | wire type) and, for the fixed ones, the value too.
_TRACE_ID, _SPAN_ID, _PARENT_SPAN_ID = b"\x0a\x10", b"\x12\x08", b"\x22\x08"  # fields 1, 2, 4: 16 and 8 bytes
_TRACE_STATE, _NAME = b"\x1a", b"\x2a"  # fields 3 and 5
_START, _END = b"\x39", b"\x41"  # fields 7 and 8, fixed64
_DROPPED_ATTRIBUTES, _DROPPED_EVENTS, _DROPPED_LINKS = b"\x50", b"\x60", b"\x70"  # fields 10, 12, 14, varint
_STATUS, _STATUS_MESSAGE, _STATUS_CODE = b"\x7a", b"\x12", b"\x18"  # field 15; Status: message 2, code 3
_FIXED64 = struct.Struct("<Q")
_KINDS = {SpanKind.INTERNAL: Span.SPAN_KIND_INTERNAL, SpanKind.SERVER: Span.SPAN_KIND_SERVER,
          SpanKind.CLIENT: Span.SPAN_KIND_CLIENT, SpanKind.PRODUCER: Span.SPAN_KIND_PRODUCER,
          SpanKind.CONSUMER: Span.SPAN_KIND_CONSUMER}
_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE = _HAS_IS_REMOTE | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_SCALARS = (str, int, float, bool)
_KIND_FIELDS = {kind: b"\x30" + bytes((value,)) for kind, value in _KINDS.items()}  # field 6, varint
# field 16, fixed32
_FLAGS_LOCAL, _FLAGS_REMOTE = (b"\x85\x01" + struct.pack("<I", flags) for flags in (_HAS_IS_REMOTE, _REMOTE))


def varint(n: int) -> bytes:
    """Protobuf's base-128 length prefix."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _cache_key(key: str, value: Any) -> tuple[str, type, Any] | None:
    """The cache's key: the value's type is part of it (``True == 1 == 1.0`` encode differently)."""
    kind = value.__class__
    if kind in _SCALARS:
        return key, kind, value
    if (kind is list or kind is tuple) and all(item.__class__ is str for item in value):
        return key, tuple, tuple(value)  # finish reasons: a list of a few strings
    return None


def any_value(value: Any) -> AnyValue:
    """The official encoder's rules for an attribute value (raises on what it would reject)."""
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Sequence):
        return AnyValue(array_value=ArrayValue(values=[any_value(item) for item in value]))
    if isinstance(value, Mapping):
        return AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=str(k), value=any_value(v))
                                                          for k, v in value.items()]))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def string(tag: bytes, text: str) -> bytes:
    return field(tag, text.encode())


def span_fields(span: ReadableSpan) -> bytes:
    """A span's own fields (all but attributes, events and links), as the official encoder sets them.

    Written out rather than through a ``Span`` message: that message's construction was half of
    this encoder's time. Unset (None, 0, "") fields are left out, as protobuf does."""
    context = span.context
    parent = span.parent
    parts = [_TRACE_ID, context.trace_id.to_bytes(16, "big"), _SPAN_ID, context.span_id.to_bytes(8, "big")]
    trace_state = context.trace_state
    if trace_state:
        parts.append(string(_TRACE_STATE, ",".join([f"{k}={v}" for k, v in trace_state.items()])))
    if parent:
        parts += (_PARENT_SPAN_ID, parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(string(_NAME, span.name))
    parts.append(_KIND_FIELDS[span.kind])
    if span.start_time:
        parts.append(_START + _FIXED64.pack(span.start_time))
    if span.end_time:
        parts.append(_END + _FIXED64.pack(span.end_time))
    for tag, count in ((_DROPPED_ATTRIBUTES, span.dropped_attributes), (_DROPPED_EVENTS, span.dropped_events),
                       (_DROPPED_LINKS, span.dropped_links)):
        if count:
            parts.append(tag + varint(count))
    status = span.status
    code, message = status.status_code.value, status.description
    parts.append(field(_STATUS, (string(_STATUS_MESSAGE, message) if message else b"")
                       + (_STATUS_CODE + varint(code) if code else b"")))
    parts.append(_FLAGS_REMOTE if parent and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


class Encoded:
    """What the official exporter gets from ``encode_spans``: it only asks for the bytes."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializePartialToString(self) -> bytes:
        return self.data

    def SerializeToString(self) -> bytes:
        return self.data


class SpanEncoder:
    """Encodes SDK spans as an ``ExportTraceServiceRequest``, reusing repeated attributes' encodings."""

    def __init__(self, entries: int = CACHE_ENTRIES, value_bytes: int = CACHE_VALUE_BYTES) -> None:
        self.entries = entries
        self.value_bytes = value_bytes
        # (key, value type, value) -> the attribute as a Span.attributes field (tag, length, KeyValue)
        self._attributes: dict[tuple[str, type, Any], bytes] = {}

    def forget(self) -> None:
        self._attributes.clear()

    def __call__(self, spans: Sequence[ReadableSpan]) -> Encoded:
        return Encoded(self.encode(spans))

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        # Grouped by resource, then scope, as the official encoder does (dicts keep first-seen order).
        groups: dict[Resource, dict[SdkScope | None, list[bytes]]] = {}
        last_resource: Any = None
        last_scope: Any = None
        current: list[bytes] = []
        span_bytes = self.span
        for span in spans:
            resource, scope = span.resource, span.instrumentation_scope or None
            if resource is not last_resource or scope is not last_scope:
                current = groups.setdefault(resource, {}).setdefault(scope, [])
                last_resource, last_scope = resource, scope
            current.append(span_bytes(span))
        request = []
        for resource, scopes in groups.items():
            parts = [field(_RESOURCE, self.attributes(resource.attributes, _RESOURCE_ATTRIBUTE))]
            for scope, encoded in scopes.items():
                scope_spans = [field(_SCOPE, self.scope(scope)), *[field(_SPANS, one) for one in encoded]]
                if scope is not None and scope.schema_url:
                    scope_spans.append(field(_SCOPE_SCHEMA, scope.schema_url.encode()))
                parts.append(field(_SCOPE_SPANS, b"".join(scope_spans)))
            if resource.schema_url:
                parts.append(field(_RESOURCE_SCHEMA, resource.schema_url.encode()))
            request.append(field(_REQUEST_RESOURCE_SPANS, b"".join(parts)))
        return b"".join(request)

    def span(self, span: ReadableSpan) -> bytes:
        parts = [span_fields(span)]
        attributes = span.attributes
        if attributes:
            cache, attribute = self._attributes, self.attribute
            for key, value in attributes.items():
                kind = value.__class__  # ``_cache_key``'s scalar case, written out: most attributes take it
                encoded = cache.get((key, kind, value)) if kind in _SCALARS else None
                parts.append(encoded if encoded is not None else attribute(key, value))
        for event in span.events:
            parts.append(field(_SPAN_EVENT, self.event(event)))
        for link in span.links:
            parts.append(field(_SPAN_LINK, self.link(link)))
        return b"".join(parts)

    def attribute(self, key: str, value: Any) -> bytes:
        """One attribute as a ``Span.attributes`` field, cached when it may repeat; b"" if unencodable."""
        cache = self._attributes
        cache_key = _cache_key(key, value)
        if cache_key is not None and (hit := cache.get(cache_key)) is not None:
            return hit
        try:
            encoded = field(_SPAN_ATTRIBUTE, KeyValue(key=key, value=any_value(value)).SerializePartialToString())
        except Exception as error:  # the official encoder logs and leaves the attribute out
            logger.error("trace exporter: attribute %r left out: %s", key, error)
            return b""
        if cache_key is not None and len(encoded) <= self.value_bytes:
            if len(cache) >= self.entries:
                cache.clear()
            cache[cache_key] = encoded
        return encoded

    def attributes(self, attributes: Mapping[str, Any] | None, tag: bytes) -> bytes:
        """Every attribute as fields of ``tag`` (resources, scopes, events, links: one tag byte differs)."""
        if not attributes:
            return b""
        encoded = [self.attribute(key, value) for key, value in attributes.items()]
        return b"".join(tag + one[1:] for one in encoded if one)

    def scope(self, scope: SdkScope | None) -> bytes:
        if scope is None:
            return b""
        version: Any = scope.version
        return (InstrumentationScope(name=scope.name, version=version).SerializePartialToString()
                + self.attributes(scope.attributes, _SCOPE_ATTRIBUTE))

    def event(self, event: Event) -> bytes:
        return (Span.Event(name=event.name, time_unix_nano=event.timestamp,
                           dropped_attributes_count=event.dropped_attributes).SerializePartialToString()
                + self.attributes(event.attributes, _EVENT_ATTRIBUTE))

    def link(self, link: Link) -> bytes:
        context = link.context
        return (Span.Link(trace_id=context.trace_id.to_bytes(16, "big"), span_id=context.span_id.to_bytes(8, "big"),
                          dropped_attributes_count=link.dropped_attributes,
                          flags=_REMOTE if context.is_remote else _HAS_IS_REMOTE).SerializePartialToString()
                + self.attributes(link.attributes, _LINK_ATTRIBUTE))


def sample_spans() -> list[ReadableSpan]:
    """One span of every shape the gateway ships, and of the shapes the SDK allows beside them."""
    resource = Resource.create({"service.name": "loopgate", "service.version": "0", "host.cores": 2})
    other = Resource({"service.name": "other"}, schema_url="https://opentelemetry.io/schemas/1.21.0")
    scope = SdkScope("loopgate", "0")
    scoped = SdkScope("other", "1", "https://opentelemetry.io/schemas/1.21.0", {"scope.flag": True})
    sampled = TraceFlags(TraceFlags.SAMPLED)
    trace_id, span_id = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    remote = SpanContext(trace_id, 0x00F067AA0BA902B7, is_remote=True, trace_flags=sampled)
    local = SpanContext(trace_id, span_id, is_remote=False, trace_flags=sampled)
    state = TraceState([("vendor", "value"), ("other", "x")])
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 24,
        "gen_ai.request.temperature": 0.5, "flag": True, "zero": 0, "negative": -(2**63), "empty": "",
        "gen_ai.response.finish_reasons": ["stop", "tool_calls"], "ints": (1, 2, 3), "mixed": [True, 1, 1.5, "x"],
        "raw": b"\x00\xff", "text": "é" * 300, "nothing": None, "map": {"a": 1, "b": ["c"]},
        "too_big": 2**64, "odd": object(),
    }
    spans = [
        ReadableSpan(name="POST /v1/chat/completions", context=local, parent=remote, resource=resource,
                     attributes={"http.response.status_code": 200, "loopgate.route": "bench"},
                     events=[Event("loopgate.pause", {"loopgate.continuation_id": "c1"}, timestamp=5),
                             Event("bare", None, timestamp=6)],
                     kind=SpanKind.SERVER, status=SdkStatus(SdkStatusCode.UNSET), start_time=1, end_time=9,
                     instrumentation_scope=scope),
        ReadableSpan(name="chat m", context=SpanContext(trace_id, 7, is_remote=False, trace_flags=sampled),
                     parent=local, resource=resource, attributes=attributes, kind=SpanKind.CLIENT,
                     status=SdkStatus(SdkStatusCode.ERROR, "upstream_error"), start_time=2, end_time=8,
                     instrumentation_scope=scope),
        ReadableSpan(name="execute_tool t", context=SpanContext(trace_id, 8, trace_state=state, is_remote=False),
                     parent=None, resource=other, attributes={}, kind=SpanKind.INTERNAL,
                     links=[Link(remote, {"why": "follows"})], status=SdkStatus(SdkStatusCode.OK),
                     start_time=3, end_time=4, instrumentation_scope=scoped),
        ReadableSpan(name="no scope", context=SpanContext(trace_id, 9, is_remote=False), resource=resource,
                     kind=SpanKind.PRODUCER, start_time=3, end_time=None, instrumentation_scope=None),
    ]
    return spans


def equivalent(encoder: Callable[[Sequence[ReadableSpan]], Any], spans: Sequence[ReadableSpan]) -> bool:
    """Whether ``encoder`` and the official one give equal messages for ``spans``."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    official = encode_spans(spans)
    try:
        ours = ExportTraceServiceRequest.FromString(encoder(spans).SerializePartialToString())
    except Exception:  # not even a message
        return False
    return bool(ours == official)


def install(exporter_module: Any, encoder: SpanEncoder | None = None) -> bool:
    """Make the official exporter module encode with :class:`SpanEncoder`; False: it keeps its own.

    ``exporter_module`` is ``opentelemetry.exporter.otlp.proto.http.trace_exporter``: its
    ``OTLPSpanExporter.export`` calls the module's ``encode_spans(spans)`` and serializes the result.
    """
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    if os.environ.get(ENCODER_ENV, "").strip().lower() == "official":
        return False
    if getattr(exporter_module, "encode_spans", None) is not encode_spans:
        logger.warning("trace exporter: this OpenTelemetry exporter release encodes spans its own way; "
                       "its encoder is used (slower)")
        return False
    encoder = encoder or SpanEncoder()
    # The samples' unencodable attributes are there on purpose: neither encoder's error goes to the log.
    loggers = (logging.getLogger("opentelemetry.exporter.otlp.proto.common._internal"), logger)
    disabled = [one.disabled for one in loggers]
    for one in loggers:
        one.disabled = True
    try:
        same = equivalent(encoder, sample_spans())
    except Exception:
        same = False
    finally:
        for one, was in zip(loggers, disabled, strict=True):
            one.disabled = was
        encoder.forget()
    if not same:
        logger.warning("trace exporter: the cached span encoder disagrees with this OpenTelemetry release's; "
                       "its encoder is used (slower)")
        return False
    exporter_module.encode_spans = encoder
    return True
