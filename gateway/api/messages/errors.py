"""Errors and rate-limit headers in Anthropic's shape, so the Anthropic SDKs raise their own classes.

The status decides the SDK's exception class (400 ``BadRequestError`` ... 429 ``RateLimitError``,
529 ``OverloadedError``, other 5xx ``InternalServerError``), so the gateway's statuses are kept
except "every target was overloaded" (503 on the OpenAI surfaces), which is Anthropic's 529 here:
Claude Code retries it with its own backoff. ``request-id`` is Anthropic's name for the id the
gateway already sends as ``x-request-id``. The ``x-ratelimit-*`` headers get their
``anthropic-ratelimit-*`` twins (resets as RFC 3339 times, as Anthropic writes them).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import orjson

from gateway.api.messages.render import error_payload
from gateway.errors import GatewayError
from gateway.http.json_response import JSONResponse
from gateway.http.request_id import REQUEST_ID_HEADER

_TWINS = {
    b"x-ratelimit-limit-requests": b"anthropic-ratelimit-requests-limit",
    b"x-ratelimit-remaining-requests": b"anthropic-ratelimit-requests-remaining",
    b"x-ratelimit-reset-requests": b"anthropic-ratelimit-requests-reset",
    b"x-ratelimit-limit-tokens": b"anthropic-ratelimit-tokens-limit",
    b"x-ratelimit-remaining-tokens": b"anthropic-ratelimit-tokens-remaining",
    b"x-ratelimit-reset-tokens": b"anthropic-ratelimit-tokens-reset",
}
_DURATION = re.compile(rb"(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")


def _reset_at(duration: bytes, now: float) -> bytes:
    """OpenAI's ``6m0s`` / ``250ms`` as the RFC 3339 time it points at."""
    match = _DURATION.fullmatch(duration)
    seconds = 0.0
    if match:
        minutes, whole, millis = (int(group) if group else 0 for group in match.groups())
        seconds = minutes * 60 + whole + millis / 1000
    moment = datetime.fromtimestamp(now + seconds, UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z").encode()


def anthropic_limit_headers(headers: list[tuple[bytes, bytes]] | None) -> list[tuple[bytes, bytes]]:
    """The ``anthropic-ratelimit-*`` twins of the ``x-ratelimit-*`` headers in ``headers``."""
    twins: list[tuple[bytes, bytes]] = []
    now = time.time()
    for name, value in headers or ():
        twin = _TWINS.get(name)
        if twin is not None:
            twins.append((twin, _reset_at(value, now) if name.startswith(b"x-ratelimit-reset") else value))
    return twins


def with_anthropic_headers(headers: list[tuple[bytes, bytes]] | None) -> list[tuple[bytes, bytes]]:
    """``headers`` plus ``request-id`` and the rate-limit twins."""
    out = list(headers or ())
    for name, value in headers or ():
        if name == REQUEST_ID_HEADER:
            out.append((b"request-id", value))
            break
    out.extend(anthropic_limit_headers(headers))
    return out


def anthropic_error(error: GatewayError, raw_headers: list[tuple[bytes, bytes]] | None = None) -> JSONResponse:
    """The lifecycle's error renderer for ``/v1/messages``."""
    status = 529 if error.code == "upstream_overloaded" else error.status
    request_id = next((value.decode("latin-1") for name, value in raw_headers or () if name == REQUEST_ID_HEADER),
                      None)
    extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    body = orjson.dumps(error_payload(error, request_id))
    return JSONResponse(body, status, None, with_anthropic_headers([*(raw_headers or ()), *extra]))
