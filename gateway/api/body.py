"""Reading a JSON request body with a size cap, parsed once with orjson."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from gateway.errors import GatewayError, bad_request


async def read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit():
        if int(declared) > limit:
            raise _too_large(limit)
        raw = await request.body()  # the server enforces the declared length
    else:
        # Chunked upload: count while reading, so an endless body is cut off at the limit.
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        raw = b"".join(chunks)
    if not raw:
        raise bad_request("the request body is empty; send a JSON object")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"the request body is larger than the limit of {limit} bytes",
                        "invalid_request_error", code="request_too_large")
