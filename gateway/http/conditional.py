"""Conditional GET (ETag / If-None-Match) for JSON listings, as a thin ASGI layer in front of the app.

For answers a page polls: the answer is bounded by the API's page size, so buffering it to
hash it is cheap, and a 304 spares the browser the body and a re-render when nothing changed.
"""

from __future__ import annotations

import hashlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.headers import header

#: an answer larger than this is passed on as it is, untagged
MAX_BUFFERED = 4 * 1024 * 1024


class ConditionalGet:
    """ETag / If-None-Match on the polled listings, as a thin ASGI layer in front of the app.

    The tag is a digest of the exact body (which already depends on the caller's tenant), so a
    304 can only ever confirm bytes the same caller would have received anyway.
    """

    def __init__(self, app: ASGIApp, paths: frozenset[str], max_buffered: int = MAX_BUFFERED) -> None:
        self.app = app
        self.paths = paths
        self.max_buffered = max_buffered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []
        size = 0
        passthrough = False

        async def capture(message: Message) -> None:
            nonlocal start, size, passthrough
            if passthrough:
                await send(message)
            elif message["type"] == "http.response.start":
                start = message
                if message["status"] != 200:
                    passthrough = True
                    await send(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_buffered:  # not ours to hold: send what we have and step aside
                    passthrough = True
                    assert start is not None
                    await send(start)
                    await send({"type": "http.response.body", "body": b"".join(chunks),
                                "more_body": message.get("more_body", False)})
                elif not message.get("more_body", False):
                    assert start is not None
                    await _finish(scope, start, b"".join(chunks), send)
            else:
                await send(message)

        await self.app(scope, receive, capture)


async def _finish(scope: Scope, start: Message, body: bytes, send: Send) -> None:
    etag = b'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest().encode() + b'"'
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"etag", b"content-length")]
    headers += [(b"etag", etag), (b"cache-control", b"private, no-cache"), (b"vary", b"authorization")]
    matched = header(scope, b"if-none-match")
    if matched is not None and etag in {tag.strip() for tag in matched.split(b",")}:
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
