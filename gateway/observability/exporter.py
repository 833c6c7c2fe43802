"""The exporter process: rebuilds the gateway's spans as SDK spans and exports them with the official exporter.

Started by ``gateway/observability/shipper.py`` as ``python -m gateway.observability.exporter``, one
per worker process. It reads length-prefixed orjson frames on stdin: first its configuration, then lists of
one entry per request (see ``Entry`` in ``gateway/observability/span_entries.py``: values by position, which get
their attribute names, the conventions' value rules and missing span ids here, where it costs no
request any time). Each span becomes an
``opentelemetry.sdk.trace.ReadableSpan`` handed to a ``BatchSpanProcessor`` over
``OTLPSpanExporter``: the protobuf encoding and the HTTP posts happen here, on this process's
CPU, not in the gateway's (its ``OTEL_BSP_*`` environment variables apply).

Stdin closing (the gateway shut down or died) ends it: the processor exports what it holds, then
it exits. Ctrl-C reaches the whole process group, so SIGINT is ignored here: the gateway decides.

When ``OTEL_BSP_MAX_QUEUE_SIZE`` spans wait here (the collector or this process cannot keep up),
it stops reading until an export takes some: the pipe fills, then the worker's buffer, which drops
whole requests' spans past ``max_buffered_spans`` and counts them in the worker's metrics. A
moment's stall (this process waiting for a CPU) is absorbed by those buffers instead of losing
spans here one by one, which would break traces apart.

An export the collector refused or did not answer loses its batch: counted and reported, never
silently. The first loss is logged at once, later ones as one line with their numbers at most
every ``REPORT_INTERVAL_S`` and at exit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import orjson
from opentelemetry.exporter.otlp.proto.http import trace_exporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from gateway import redact
from gateway.observability.logs import FORMAT, JsonFormatter, SafeFormatter
from gateway.observability.otlp_encoder import install as install_encoder
from gateway.observability.span_entries import rebuild
from gateway.redact import Redactor, header_secrets

_HEADER = struct.Struct(">I")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_KINDS = {kind.value: kind for kind in SpanKind}
_UNSET = Status(StatusCode.UNSET)
logger = logging.getLogger("loopgate.tracing")
#: the longest time a loss of spans waits to be reported (the first one is reported at once)
REPORT_INTERVAL_S = 10.0
_SDK_QUEUE, _SDK_BATCH = 2048, 512  # the SDK's defaults of OTEL_BSP_MAX_QUEUE_SIZE / _MAX_EXPORT_BATCH_SIZE
#: this process's CPU priority: unset, the idle scheduling class; N, ``nice`` +N; 0, the gateway's (``lower_priority``)
NICE_ENV, FALLBACK_NICENESS = "LOOPGATE_TRACE_EXPORTER_NICE", 19


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


class CountingExporter(SpanExporter):
    """The official exporter, with the spans it was handed and the ones it could not deliver counted."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.taken = 0  # spans the processor took off its queue (read by the main thread)
        self.failed = 0
        self._room = threading.Condition()

    def wait_for_room(self, handed: int, queue: int, poll_s: float = 1.0) -> None:
        """Return once fewer than ``queue`` of the ``handed`` spans wait for an export."""
        if handed - self.taken < queue:
            return
        with self._room:
            while handed - self.taken >= queue:
                self._room.wait(poll_s)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._room:
            self.taken += len(spans)
            self._room.notify_all()
        try:
            result = self.inner.export(spans)
        except Exception:
            self.failed += len(spans)
            raise
        if result is not SpanExportResult.SUCCESS:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class Losses:
    """Spans the collector refused or did not take, reported as described in the module docstring."""

    def __init__(self, exporter: CountingExporter, interval_s: float = REPORT_INTERVAL_S) -> None:
        self.exporter = exporter
        self.interval_s = interval_s
        self._reported = 0  # failed at the last report
        self._last = -math.inf

    def report(self, final: bool = False) -> None:
        failed = self.exporter.failed
        if failed == self._reported:
            return
        now = time.monotonic()
        if not final and now - self._last < self.interval_s:
            return
        new_failed, self._reported, self._last = failed - self._reported, failed, now
        logger.warning("trace exporter: %d span(s) not delivered (the collector refused or did not answer) "
                       "since the last report; %d in all", new_failed, failed)


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


class FixedResource(Resource):
    """The process's one resource, its hash taken once.

    The official encoder groups every span by its resource, and ``Resource`` hashes by JSON-encoding
    its attributes each time, a noticeable share of this process's CPU for a value that never
    changes (the attributes are fixed when it is made; bench/README.md)."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


class Rebuilder:
    """Turns shipped entries into SDK ``ReadableSpan`` objects of one resource and scope."""

    def __init__(self, service_name: str, service_version: str) -> None:
        self.resource = FixedResource(Resource.create({"service.name": service_name,
                                                       "service.version": service_version}))
        self.scope = InstrumentationScope("loopgate", service_version)

    def spans(self, batch: list[Any]) -> Iterator[ReadableSpan]:
        resource, scope = self.resource, self.scope
        for entry in batch:
            for trace_hex, span_id, parent_id, remote, kind, name, start, end, attributes, events, failure in \
                    rebuild(entry):
                trace_id = int(trace_hex, 16)
                parent = None
                if parent_id:
                    parent = SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=_SAMPLED)
                yield ReadableSpan(
                    name=name, context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED),
                    parent=parent, resource=resource, attributes=attributes,
                    events=[Event(event, attrs, timestamp=at) for event, at, attrs in events],
                    kind=_KINDS.get(kind, SpanKind.INTERNAL),
                    status=Status(StatusCode.ERROR, failure) if failure else _UNSET,
                    start_time=start, end_time=end, instrumentation_scope=scope)


def _logging(kind: str, level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else SafeFormatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def lower_priority() -> None:
    """Run below the gateway: on a busy host the request path gets the CPU, the export what is left.

    By default in Linux's idle scheduling class (``SCHED_IDLE``): this process runs only on a CPU
    no other process wants. A mere ``nice`` step is not enough: the scheduler often places the
    exporter on its worker's CPU, where even at +10 it takes a real share of that CPU from requests
    (bench/README.md, "Every control on").
    ``LOOPGATE_TRACE_EXPORTER_NICE=N`` asks for ``nice`` +N instead (a fixed small share of a busy
    CPU), ``0`` for the worker's own priority; where the idle class is unavailable, +19.

    Spans wait here, then in the pipe, then in the worker's buffer while this process is behind;
    a backlog that outgrows them is dropped and counted there, never slowing a request.
    """
    raw = os.environ.get(NICE_ENV, "").strip()
    if raw == "0":
        return
    niceness = _env_int(NICE_ENV, 0)
    if not niceness:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except (AttributeError, OSError):  # not Linux, or a sandbox that forbids it
            niceness = FALLBACK_NICENESS
    with contextlib.suppress(OSError):  # a container without the capability: stay as is
        os.nice(min(niceness, 19))


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # leaves the read loop through ``finally``: the processor exports what it holds


def main() -> int:
    lower_priority()
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
    install_encoder(trace_exporter)
    exporter = CountingExporter(OTLPSpanExporter(endpoint=f"{settings['endpoint']}/v1/traces",
                                                 headers=settings["headers"]))
    queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", _SDK_QUEUE)
    batch = _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", _SDK_BATCH)
    # The queue bound is kept here (``wait_for_room`` holds the input back at it): the SDK's queue is
    # one batch larger (the batch being taken off it is counted as taken a moment late), so it never
    # drops a span itself.
    processor = BatchSpanProcessor(exporter, max_queue_size=queue + batch, max_export_batch_size=min(batch, queue))
    losses = Losses(exporter)
    rebuilder = Rebuilder(settings["service_name"], settings["service_version"])
    limit = settings["frame_max"]
    handed = 0
    try:
        while (payload := read_frame(stream, limit)) is not None:
            for span in rebuilder.spans(orjson.loads(payload)):
                exporter.wait_for_room(handed, queue)
                processor.on_end(span)
                handed += 1
            losses.report()
    except ValueError as exc:  # a frame that is not ours: nothing after it can be trusted
        logger.error("trace exporter: bad input from the gateway: %s", exc)
        return 1
    except Exception:  # logged in the gateway's log format, not as a bare traceback; the gateway restarts it
        logger.exception("trace exporter failed")
        return 1
    finally:
        processor.shutdown()
        losses.report(final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
