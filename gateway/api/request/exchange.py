"""One request from arrival to its last byte: its id, its server span, its metrics and its access record.

:class:`Exchange` is the record half of the one object a request lives in: the lifecycle's
``Work`` (``gateway/api/request/lifecycle.py``) is an ``Exchange``, so the key, the work's record (a loop's
state or a loopless call's: ``canonical.WorkRecord``) and the meter are set once, on that object,
and read by :meth:`Exchange.done`, the one place a request is counted, its span ended and its
access record written.

``x-request-id`` is chosen by :mod:`gateway.http.request_id`.

The access record (``logging.access``) holds ids, names the gateway chose, numbers and the
error's class: never message text, tool arguments or results, or a key.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gateway.errors import GatewayError
from gateway.http.request_id import REQUEST_ID_HEADER
from gateway.observability import access_log, metrics, tracing
from gateway.observability.access_log import AccessLog
from gateway.usage.pricing import NANO

if TYPE_CHECKING:  # types only: the request's parts are set by the lifecycle, read here at the end
    from gateway.canonical import WorkRecord
    from gateway.config.model import ApiKey
    from gateway.usage.meter import Meter

# The access record writer (``logging.access``, chosen at start-up: ``observability.startup``), kept
# as this module's own global for ``done``; None: no access records.
ACCESS: AccessLog | None = None


def _use_access(writer: AccessLog | None) -> None:
    global ACCESS
    ACCESS = writer


access_log.subscribe(_use_access)


class Exchange:
    __slots__ = ("error", "headers", "key", "label", "meter", "metered", "method", "path", "request_id", "span",
                 "started", "state")

    def __init__(self, method: str, path: str, request_id: bytes, traceparent: bytes | None, echo: bool = True,
                 metered: bool = True) -> None:
        self.started = time.perf_counter()
        self.method = method
        self.path = path
        self.request_id = request_id
        #: the metrics label and logged route: a configured route, ``PROVIDER/*`` or ``unknown``, never caller text
        self.label = "unknown"
        #: the key the request is charged to (the caller's, the asker's on a resume; an admin's by name)
        self.key: ApiKey | None = None
        #: the loop's state or a loopless call's record, read at the end (iterations, usage, tool calls)
        self.state: WorkRecord | None = None
        self.error: GatewayError | None = None
        #: the request's usage meter (gateway/usage/meter.py), closed by ``done``
        self.meter: Meter | None = None
        self.metered = metered
        #: the response headers this exchange adds (None where the app's wrapper adds ``x-request-id``)
        self.headers = [(REQUEST_ID_HEADER, request_id)] if echo else None
        tracer = tracing.TRACER
        self.span = tracer.server(method, path, traceparent) if tracer.enabled else tracing.NOOP

    def add_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        """More response headers, encoded (the rate limits'), on every answer this exchange gives from now on."""
        if headers:
            if self.headers is None:
                self.headers = list(headers)  # its own list: a later call extends it
            else:
                self.headers.extend(headers)

    def ended_with(self, error: GatewayError) -> GatewayError:
        """Remember the error a stream ended with after its 200 (for the span and the access record)."""
        self.error = error
        return error

    def done(self, status: int, error: GatewayError | None = None) -> None:
        """Count the request, end its span, write its access record: once per request."""
        elapsed = time.perf_counter() - self.started
        meter = self.meter
        if meter is not None:
            meter.close(status)  # an unfinished loop (an error frame, a disconnect) counts as an error
        state = self.state
        if self.metered:
            metrics.REQUESTS.inc(self.path, self.label, str(status))
            metrics.LATENCY.observe(elapsed, self.path)
            if state is not None:  # it ran model calls: what it did beyond waiting on them and its tools
                metrics.OVERHEAD.observe(elapsed - state.waited_s, self.label)
        error = error or self.error
        request_id = self.request_id.decode("ascii")
        span = self.span
        if span.recording:
            span.finish(status, _error_class(error) if error is not None else None, self.label, request_id,
                        None if self.key is None else self.key.tenant)
        if ACCESS is not None:
            ACCESS.write(self._record(status, elapsed, error, request_id))

    def _record(self, status: int, elapsed: float, error: GatewayError | None, request_id: str) -> dict[str, Any]:
        """The access record's fields, built as one dict (serialised at once by ``AccessLog.write``)."""
        key = self.key
        if key is None:
            tenant = key_id = None
        else:
            tenant = key.tenant
            key_id = key.id or key.name
        state = self.state
        if state is None:
            record: dict[str, Any] = {
                "request_id": request_id, "method": self.method, "path": self.path,
                "route": self.label, "tenant": tenant, "key_id": key_id, "status": status,
                "latency_ms": int(elapsed * 100_000 + 0.5) / 100,  # ms to 2 decimals (round() is slower)
            }
        else:
            usage = state.usage
            record = {
                "request_id": request_id, "method": self.method, "path": self.path,
                "route": self.label, "tenant": tenant, "key_id": key_id, "status": status,
                "latency_ms": int(elapsed * 100_000 + 0.5) / 100, "iterations": state.iterations,
                "answered_by": state.answered_by,  # serialised before the state could change
                "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                "tool_calls": len(state.tool_records),
            }
        meter = self.meter
        if meter is not None and meter.cost_nano is not None:
            record["cost_usd"] = meter.cost_nano / NANO
        if error is not None:
            record["error"] = _error_class(error)
        return record


def _error_class(error: GatewayError) -> str:
    return error.code or error.type


