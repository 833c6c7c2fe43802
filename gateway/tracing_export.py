"""The exporter process: rebuilds the gateway's spans as SDK spans and exports them with the official exporter.

Started by ``gateway/tracing_ship.py`` as ``python -m gateway.tracing_export``, one per worker
process. It reads length-prefixed orjson frames on stdin: first its configuration, then lists of
``[trace id, spans]`` (see ``gateway/tracing_lean.py`` for a span's fields). Each span becomes an
``opentelemetry.sdk.trace.ReadableSpan`` handed to a ``BatchSpanProcessor`` over
``OTLPSpanExporter``: the protobuf encoding and the HTTP posts happen here, on this process's
CPU, not in the gateway's (its ``OTEL_BSP_*`` environment variables apply).

Stdin closing (the gateway shut down or died) ends it: the processor exports what it holds, then
it exits. Ctrl-C reaches the whole process group, so SIGINT is ignored here: the gateway decides.
"""

from __future__ import annotations

import logging
import signal
import struct
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import orjson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from gateway import redact
from gateway.logs import FORMAT, JsonFormatter, SafeFormatter
from gateway.redact import Redactor, header_secrets

_HEADER = struct.Struct(">I")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_KINDS = {kind.value: kind for kind in SpanKind}
_UNSET = Status(StatusCode.UNSET)
logger = logging.getLogger("loopgate.tracing")


def read_frame(stream: BinaryIO, limit: int) -> bytes | None:
    """The next frame's payload; None at end of input (a frame cut short counts as the end)."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise ValueError(f"frame of {size} bytes is over the {limit}-byte limit")
    payload = stream.read(size)
    return payload if len(payload) == size else None


class Rebuilder:
    """Turns shipped span records into SDK ``ReadableSpan`` objects of one resource and scope."""

    def __init__(self, service_name: str, service_version: str) -> None:
        self.resource = Resource.create({"service.name": service_name, "service.version": service_version})
        self.scope = InstrumentationScope("loopgate", service_version)

    def spans(self, batch: list[Any]) -> Iterator[ReadableSpan]:
        resource, scope = self.resource, self.scope
        for trace_hex, records in batch:
            trace_id = int(trace_hex, 16)
            for name, kind, span_id, parent_id, start, end, attributes, events, status, message in records:
                parent = None
                if parent_id:  # only a server span's parent (the caller's span) is remote
                    parent = SpanContext(trace_id, parent_id, is_remote=kind == SpanKind.SERVER.value,
                                         trace_flags=_SAMPLED)
                yield ReadableSpan(
                    name=name, context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED),
                    parent=parent, resource=resource, attributes=attributes,
                    events=[Event(event, attrs, timestamp=at) for event, at, attrs in events],
                    kind=_KINDS.get(kind, SpanKind.INTERNAL),
                    status=Status(StatusCode.ERROR, message) if status == StatusCode.ERROR.value else _UNSET,
                    start_time=start, end_time=end, instrumentation_scope=scope)


def _logging(kind: str, level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else SafeFormatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # leaves the read loop through ``finally``: the processor exports what it holds


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)
    stream = sys.stdin.buffer
    first = read_frame(stream, 1 << 20)
    if first is None:
        return 0
    settings = orjson.loads(first)
    # The SDK's own log lines (a failed post names the endpoint) are scrubbed like the gateway's.
    password = urlsplit(settings["endpoint"]).password
    redact.install(Redactor([*header_secrets(settings["headers"].values()), *([password] if password else [])]))
    _logging(settings["log_format"], settings["log_level"])
    exporter = OTLPSpanExporter(endpoint=f"{settings['endpoint']}/v1/traces", headers=settings["headers"])
    processor = BatchSpanProcessor(exporter)
    rebuilder = Rebuilder(settings["service_name"], settings["service_version"])
    limit = settings["frame_max"]
    try:
        while (payload := read_frame(stream, limit)) is not None:
            for span in rebuilder.spans(orjson.loads(payload)):
                processor.on_end(span)
    except ValueError as exc:  # a frame that is not ours: nothing after it can be trusted
        logger.error("trace exporter: bad input from the gateway: %s", exc)
        return 1
    except Exception:  # logged in the gateway's log format, not as a bare traceback; the gateway restarts it
        logger.exception("trace exporter failed")
        return 1
    finally:
        processor.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
