"""Every failure a client can see, in OpenAI's error shape with a fitting status.

OpenAI SDKs raise typed exceptions from the status and read ``error.message``; keeping that
shape means callers need no Loopgate-specific error handling.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway import redact
from gateway.upstream.errors import ErrorClass, ProviderError

# How much of an upstream's error message a client sees.
UPSTREAM_MESSAGE_CHARS = 1000


class GatewayError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body(self) -> bytes:
        return orjson.dumps(self.payload())


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, "invalid_request_error", param, code)


# Caller values quoted in an error message or a log line are cut to this many characters (a 60 KB
# model name is not echoed back whole, nor written whole to every log line).
QUOTE_LIMIT = 100


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """A caller value for a message: a string escaped and quoted (``repr``), cut with an ellipsis.

    Containers are named by type only: printing one would mean serialising something of any size
    and depth just to throw most of it away.
    """
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else repr(value[:limit] + "…")
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = "null" if value is None else "true" if value is True else "false" if value is False else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


# Upstream failure class -> (status, type, code) once no target could answer.
_UPSTREAM_STATUS: dict[ErrorClass, tuple[int, str, str | None]] = {
    ErrorClass.RATE_LIMITED: (429, "rate_limit_error", "rate_limit_exceeded"),
    ErrorClass.OVERLOADED: (503, "service_unavailable_error", "upstream_overloaded"),
    ErrorClass.SERVER_ERROR: (502, "upstream_error", "upstream_server_error"),
    ErrorClass.INVALID_RESPONSE: (502, "upstream_error", "upstream_invalid_response"),
    ErrorClass.CONNECTION: (502, "upstream_error", "upstream_unreachable"),
    ErrorClass.TIMEOUT: (504, "timeout_error", "upstream_timeout"),
    # The gateway's own credentials for the provider: not the caller's key, so not a 401.
    ErrorClass.AUTH: (502, "upstream_error", "upstream_auth_failed"),
    ErrorClass.NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    ErrorClass.CONTEXT_LENGTH: (400, "invalid_request_error", "context_length_exceeded"),
}


def upstream_message(error: ProviderError) -> str:
    """An upstream's error text as a client may see it: configured secrets redacted, length bounded."""
    text = redact.scrub(error.message)
    return text if len(text) <= UPSTREAM_MESSAGE_CHARS else f"{text[:UPSTREAM_MESSAGE_CHARS]}... (truncated)"


def from_upstream(error: ProviderError, target: str) -> GatewayError:
    """The client's view of the last upstream failure, naming which target said it."""
    text = upstream_message(error)
    if error.error_class is ErrorClass.BAD_REQUEST:
        status = error.status if error.status and 400 <= error.status < 500 else 400
        return GatewayError(status, f"{target}: {text}", "invalid_request_error")
    status, kind, code = _UPSTREAM_STATUS[error.error_class]
    headers = {}
    if error.retry_after is not None and status in (429, 503):
        headers["retry-after"] = str(max(1, round(error.retry_after)))
    message = f"no upstream could answer; last error from {target}: {text}"
    if error.error_class in (ErrorClass.CONTEXT_LENGTH, ErrorClass.NOT_FOUND):
        message = f"{target}: {text}"
    return GatewayError(status, message, kind, None, code, headers)
