"""Every exception a request can end with, mapped to the OpenAI-shaped HTTP error the client sees."""

from __future__ import annotations

import logging

from gateway.errors import GatewayError, from_upstream, upstream_message
from gateway.http.body import BodyError
from gateway.http.json_response import JSONResponse
from gateway.routing.router import AllTargetsFailed, StreamInterrupted
from gateway.store.continuations.base import ContinuationConflict, ContinuationNotFound
from gateway.store.errors import StoreUnavailable

log = logging.getLogger("loopgate.api")


def to_gateway_error(exc: BaseException) -> GatewayError:
    """Every exception a request can end with, as the error the client should see."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, BodyError):
        return GatewayError(exc.status, exc.message, "invalid_request_error", code=exc.code)
    if isinstance(exc, AllTargetsFailed):
        log.info("upstream failure from %s (%s, HTTP %s): %s", exc.target, exc.last.error_class.value,
                 exc.last.status, upstream_message(exc.last))
        return from_upstream(exc.last, exc.target)
    if isinstance(exc, StreamInterrupted):
        log.info("stream from %s interrupted (%s, HTTP %s): %s", exc.target, exc.error.error_class.value,
                 exc.error.status, upstream_message(exc.error))
        return GatewayError(502, f"the upstream stream from {exc.target} failed after it started "
                            f"({exc.error.error_class.value}): {upstream_message(exc.error)}", "upstream_error",
                            code="stream_interrupted")
    if isinstance(exc, StoreUnavailable):
        return GatewayError(503, "the continuation store is unavailable; nothing was paused or resumed, retry later",
                            "service_unavailable_error", code="store_unavailable")
    if isinstance(exc, ContinuationNotFound):
        return GatewayError(404, str(exc), "invalid_request_error", code="continuation_not_found")
    if isinstance(exc, ContinuationConflict):
        return GatewayError(409, str(exc), "invalid_request_error", code="continuation_conflict")
    log.error("unexpected error while serving a request", exc_info=exc)
    return GatewayError(500, "internal gateway error (logged); nothing about it is your request's fault",
                        "server_error", code="internal_error")


def error_response(error: GatewayError, raw_headers: list[tuple[bytes, bytes]] | None = None) -> JSONResponse:
    return JSONResponse(error.body(), error.status, error.headers, raw_headers)


def protocol_error_body(status: int, message: str, code: str) -> bytes:
    """The body of an answer the HTTP server gives itself (431, 408, 400 for unparsable HTTP)."""
    kind = "timeout_error" if status == 408 else "invalid_request_error"
    return GatewayError(status, message, kind, code=code).body()
