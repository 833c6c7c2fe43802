"""A lean ASGI response for a JSON body that is already encoded.

Starlette's ``Response`` builds its header list through a ``MutableHeaders`` pass and checks
for background tasks on every call; on the hot path the gateway only ever needs two fixed
headers (plus ``Retry-After`` on some errors), so this sends the two ASGI messages directly.
Starlette endpoints may return it too: it is a plain ASGI callable.
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

_CONTENT_TYPE = (b"content-type", b"application/json")


class JSONResponse:
    __slots__ = ("body", "headers", "raw_headers", "status_code")

    def __init__(self, body: bytes, status_code: int = 200, headers: dict[str, str] | None = None,
                 raw_headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.body = body
        self.status_code = status_code
        self.headers = headers
        self.raw_headers = raw_headers  # already encoded (``x-request-id``)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = [_CONTENT_TYPE, (b"content-length", b"%d" % len(self.body))]
        if self.headers:
            raw += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self.headers.items()]
        if self.raw_headers:
            raw += self.raw_headers
        await send({"type": "http.response.start", "status": self.status_code, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})
