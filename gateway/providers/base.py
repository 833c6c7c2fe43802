"""What every wire-format adapter provides, and the canonical error classes the router acts on.

Adapters are pure translators: no I/O, no state beyond one stream's parser. The router does
the HTTP and hands the bytes to the adapter of the target that produced them, so a fallback
response can never be parsed by the wrong handler.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from gateway.canonical import ModelRequest, ModelResponse, StreamDelta
from gateway.config.model import ProviderConfig
from gateway.upstream.errors import RETRYABLE, TARGET_FAULTS, ErrorClass, ProviderError
from gateway.upstream.pool import UpstreamRequest
from gateway.upstream.sse import SSEEvent

__all__ = ["RETRYABLE", "TARGET_FAULTS", "Adapter", "ErrorClass", "ProviderError", "SSEEvent", "StreamParser",
           "UpstreamRequest"]


class StreamParser(Protocol):
    """Incremental parser for one native stream."""

    def feed(self, event: SSEEvent) -> list[StreamDelta]:
        """Consume one SSE event; return text/reasoning deltas. Raises ProviderError on an in-stream error."""
        ...

    def finish(self) -> ModelResponse:
        """The whole turn. Raises ProviderError(CONNECTION) when the stream ended before its end marker."""
        ...


class Adapter(Protocol):
    wire_format: str

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest: ...

    def parse_response(self, body: bytes) -> ModelResponse: ...

    def new_stream_parser(self) -> StreamParser: ...

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError: ...


# --- shared helpers ---------------------------------------------------------------------


def load_body(body: bytes) -> Any:
    """A 2xx body as JSON; anything else is the upstream's fault (retryable, not the caller's)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned a body that is not JSON") from None


def load_error_body(body: bytes) -> Any:
    """An error body as JSON when it is JSON (proxies answer with HTML), else None."""
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None


_MEDIA_TYPE = re.compile(r"[A-Za-z0-9.+-]{1,40}/[A-Za-z0-9.+-]{1,60}")


def unreadable_error(status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
    """An error body the adapter cannot read (an HTML page, plain text, JSON of another shape).

    The client is told what came back, never the bytes: a proxy's page may quote the request,
    credentials included. The text still decides a context overflow, as a readable body would.
    """
    if not body:
        return error_from_status(status, headers, f"upstream returned HTTP {status}")
    kind = "a non-JSON body" if load_error_body(body) is None else "an error body of an unknown shape"
    media = _MEDIA_TYPE.match(headers.get("content-type", "").strip())
    described = (f"upstream answered {status} with {kind} "
                 f"({media.group() if media else 'no content type'}, {len(body)} bytes)")
    error = error_from_status(status, headers, described)
    if error.error_class is ErrorClass.BAD_REQUEST and looks_like_context_overflow(
            body[:2000].decode("utf-8", "replace")):
        error.error_class = ErrorClass.CONTEXT_LENGTH
    return error



def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` first, then ``retry-after`` as seconds or an HTTP date (what the SDKs do)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def class_for_status(status: int) -> ErrorClass:
    if status == 429:
        return ErrorClass.RATE_LIMITED
    if status in (401, 403):
        return ErrorClass.AUTH
    if status == 404:
        return ErrorClass.NOT_FOUND
    if status == 409:  # a lock or concurrent-update conflict upstream: the SDKs retry it
        return ErrorClass.SERVER_ERROR
    if status in (408, 504):
        return ErrorClass.TIMEOUT
    if status in (503, 529):
        return ErrorClass.OVERLOADED
    if status >= 500:
        return ErrorClass.SERVER_ERROR
    return ErrorClass.BAD_REQUEST


_CONTEXT_MARKERS = ("context_length_exceeded", "context length", "context window", "maximum context",
                    "prompt is too long", "too many tokens", "input token count", "exceeds the maximum")


def looks_like_context_overflow(message: str, code: Any = None) -> bool:
    text = f"{code or ''} {message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def error_from_status(status: int, headers: Mapping[str, str], message: str, code: Any = None,
                      no_retry: bool = False) -> ProviderError:
    """The status-driven part of error mapping that every wire format shares."""
    error_class = class_for_status(status)
    if error_class is ErrorClass.BAD_REQUEST and looks_like_context_overflow(message, code):
        error_class = ErrorClass.CONTEXT_LENGTH
    should_retry = headers.get("x-should-retry")
    if should_retry == "false":
        no_retry = True
    return ProviderError(error_class, message, status=status, retry_after=retry_after_seconds(headers),
                         no_retry=no_retry)
