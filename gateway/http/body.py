"""Reading a JSON request body with a size cap, parsed once with orjson."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.http.incoming import Incoming
from gateway.http.json_depth import MAX_DEPTH, JSONTooDeep, loads


class BodyError(Exception):
    """A request body that cannot be used: ``status`` 400 or 413, with a message for the caller.

    This layer knows no API's error shape; the application maps it (``gateway.api.request.errors``).
    """

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def _bad(message: str) -> BodyError:
    return BodyError(400, message)


async def read_json(request: Incoming, limit: int) -> Any:
    if request.parsed is not None:  # a WebSocket message, parsed as it arrived (Incoming.for_message)
        if request.body_bytes > limit:
            raise _too_large(limit)
        return request.parsed
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
        return loads(raw)
    except JSONTooDeep:
        raise _bad(f"the request body is nested deeper than {MAX_DEPTH} levels") from None
    except orjson.JSONDecodeError as exc:
        raise _bad(f"the request body is not valid JSON: {exc}") from None



def _too_large(limit: int) -> BodyError:
    return BodyError(413, f"the request body is larger than the limit of {limit} bytes", "request_too_large")
