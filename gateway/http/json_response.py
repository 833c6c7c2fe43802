"""A lean ASGI response for a JSON body that is already encoded.

Starlette's ``Response`` builds its header list through a ``MutableHeaders`` pass and checks
for background tasks on every call; on the hot path the gateway only ever needs two fixed
headers (plus ``Retry-After`` on some errors), so this sends the two ASGI messages directly.
Starlette endpoints may return it too: it is a plain ASGI callable.

Served by Loopgate's own server (``gateway/http/server_protocol.py``), a response without
``headers`` is written whole, in one write: its ``raw_headers`` are the gateway's own
(``x-request-id``, the ``x-ratelimit-*`` numbers), encoded here without uvicorn's per-header
checks. ``headers`` (an error's, such as ``Retry-After``) and any other server take the two
ASGI messages, checked as usual.
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from gateway.http.server_protocol import whole_response_cycle, write_whole_response

_CONTENT_TYPE = (b"content-type", b"application/json")
_HEAD = b"content-type: application/json\r\ncontent-length: %d\r\n"


_COLON = b": "


class JSONResponse:
    __slots__ = ("body", "headers", "raw_headers", "status_code")

    def __init__(self, body: bytes, status_code: int = 200, headers: dict[str, str] | None = None,
                 raw_headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.body = body
        self.status_code = status_code
        self.headers = headers
        #: already encoded by the gateway from its own values (``x-request-id``, ``x-ratelimit-*``)
        self.raw_headers = raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.headers:
            cycle = whole_response_cycle(send)
            if cycle is not None:
                head = _HEAD % len(self.body)
                if self.raw_headers:  # joined in C: no Python step per header
                    head += b"\r\n".join(map(_COLON.join, self.raw_headers)) + b"\r\n"
                write_whole_response(cycle, self.status_code, head, self.body)
                return
        raw = [_CONTENT_TYPE, (b"content-length", b"%d" % len(self.body))]
        if self.headers:
            raw += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self.headers.items()]
        if self.raw_headers:
            raw += self.raw_headers
        await send({"type": "http.response.start", "status": self.status_code, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})
