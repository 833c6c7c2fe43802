"""An OTLP/HTTP trace receiver: decodes each export with the official protobuf definitions (opentelemetry-proto)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes.threaded import ThreadedApp

KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpReceiver(ThreadedApp):
    """An OTLP/HTTP collector decoding with the official protobuf definitions.

    ``delay_s``: how long each export waits before its answer (a slow collector); ``refuse``: every
    export answered 400 (a collector that will not take them: no retry).
    """

    def __init__(self, delay_s: float = 0.0, refuse: bool = False) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.refuse = refuse
        self.spans: list[ReceivedSpan] = []
        self.content_types: list[str] = []
        self.authorizations: list[str] = []
        self.bodies: list[bytes] = []  # every export as posted (protobuf)
        self._lock = threading.Lock()

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        return app

    async def _traces(self, request: web.Request) -> web.Response:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.refuse:
            return web.Response(status=400, body=b"no")
        self.content_types.append(request.content_type)
        self.authorizations.append(request.headers.get("authorization", ""))
        body = await request.read()
        self.bodies.append(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        received = []
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                        KINDS.get(span.kind, str(span.kind)), _attributes(span.attributes),
                        [(event.name, _attributes(event.attributes)) for event in span.events], resource))
        with self._lock:
            self.spans.extend(received)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def trace(self, trace_id: str, count: int, timeout_s: float = 10.0) -> list[ReceivedSpan]:
        """The spans of one trace, once at least ``count`` have arrived."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                found = [span for span in self.spans if span.trace_id == trace_id]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)
