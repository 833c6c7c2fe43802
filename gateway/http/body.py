"""Reading a JSON request body with a size cap, parsed once with orjson."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.http.incoming import Incoming

# Arrays and objects nested deeper than this are refused. orjson parses up to 1024 levels but
# serialises only up to 255, and every upstream request wraps the caller's values a few levels deeper:
# 200 leaves that room, and no real request comes near it.
MAX_DEPTH = 200


class BodyError(Exception):
    """A request body that cannot be used: ``status`` 400 or 413, with a message for the caller.

    This layer knows no API's error shape; the application maps it (``gateway.api.errors``).
    """

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def _bad(message: str) -> BodyError:
    return BodyError(400, message)


async def read_json(request: Incoming, limit: int) -> Any:
    declared = request.content_length
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    # Straight from the ASGI receive channel: Request.body()'s generator and aclosing wrapper were
    # a measurable cost per request (bench/README.md). Counting as we read also caps chunked uploads.
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _bad("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request.body_bytes = size
    if not raw:
        raise _bad("the request body is empty; send a JSON object")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"the request body is not valid JSON: {exc}") from None
    # Only a body with more brackets than the limit can be nested that deep: one C-speed count skips the walk.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _too_deep(value):
        raise _bad(f"the request body is nested deeper than {MAX_DEPTH} levels")
    return value


def _too_deep(value: Any) -> bool:
    """Is any value nested deeper than MAX_DEPTH? Iterative: the depth is what is in question."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def _too_large(limit: int) -> BodyError:
    return BodyError(413, f"the request body is larger than the limit of {limit} bytes", "request_too_large")
