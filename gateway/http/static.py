"""Immutable files served from memory, with an ETag and 304s, and a fixed redirect.

The bytes are read and hashed once, when the routes are built: a GET costs a header
comparison and two ASGI messages.
"""

from __future__ import annotations

import hashlib

from starlette.types import Receive, Scope, Send

from gateway.http.headers import header

Headers = tuple[tuple[bytes, bytes], ...]


class StaticFile:
    """One file's bytes, type and ETag, prepared at start-up; a GET answers with them, or 304."""

    __slots__ = ("_body", "_etag", "_headers", "_type")

    def __init__(self, body: bytes, content_type: str, headers: Headers = ()) -> None:
        self._body = body
        self._etag = b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"'
        self._type = content_type.encode()
        self._headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        not_modified = header(scope, b"if-none-match") == self._etag
        headers = [(b"content-type", self._type), (b"etag", self._etag), *self._headers]
        if not not_modified:
            headers.append((b"content-length", b"%d" % len(self._body)))
        await send({"type": "http.response.start", "status": 304 if not_modified else 200, "headers": headers})
        body = b"" if not_modified or scope["method"] == "HEAD" else self._body
        await send({"type": "http.response.body", "body": body})


class Redirect:
    """A permanent redirect (308: the method is kept) to a fixed ``location``."""

    __slots__ = ("_headers",)

    def __init__(self, location: bytes, headers: Headers = ()) -> None:
        self._headers = [(b"location", location), (b"content-length", b"0"), *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 308, "headers": self._headers})
        await send({"type": "http.response.body", "body": b""})
