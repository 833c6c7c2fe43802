"""``/ui/approvals``: the approvals inbox page, served from static files shipped in the package.

The page is plain HTML, CSS and JavaScript (no build step, no CDN, no framework): it signs in
with a tenant or approver key kept in the browser's sessionStorage and talks to the public API
(``/v1/continuations``, ``/v1/audit``) with it as a Bearer token, exactly like any other client.
So the gateway serves only immutable bytes here: no session, no cookie, no server-side state,
and nothing the page does can reach further than its key could through the API.

The files are read once when the routes are built, and every answer carries strict security
headers: the page renders caller and model text (hostile by default) only as text, and the
Content-Security-Policy forbids inline script, foreign origins and framing as a second wall.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE = "/ui/approvals"

# 'self' only: no inline script or style, no foreign origin, never inside a frame, no <base> or
# plugin tricks, forms post nowhere (the page sends its requests with fetch()).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=()"),
    # Always revalidated: a new gateway version never runs against an old cached script.
    (b"cache-control", b"no-cache"),
)

# name in gateway/ui/static -> (URL path, content type)
_FILES = {
    "approvals.html": (PAGE, "text/html; charset=utf-8"),
    "approvals.css": (f"{PAGE}/approvals.css", "text/css; charset=utf-8"),
    "approvals.js": (f"{PAGE}/approvals.js", "text/javascript; charset=utf-8"),
}


class StaticFile:
    """One file's bytes, type and ETag, prepared at start-up; a GET answers with them, or 304."""

    __slots__ = ("_body", "_etag", "_type")

    def __init__(self, body: bytes, content_type: str) -> None:
        self._body = body
        self._etag = b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"'
        self._type = content_type.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        not_modified = _header(scope, b"if-none-match") == self._etag
        headers = [(b"content-type", self._type), (b"etag", self._etag), *SECURITY_HEADERS]
        if not not_modified:
            headers.append((b"content-length", b"%d" % len(self._body)))
        await send({"type": "http.response.start", "status": 304 if not_modified else 200, "headers": headers})
        body = b"" if not_modified or scope["method"] == "HEAD" else self._body
        await send({"type": "http.response.body", "body": body})


class _Redirect:
    """``/ui/approvals/`` -> ``/ui/approvals``: the page's relative URLs resolve against the latter.

    The location is relative too, so the page also works behind a proxy that mounts it under a prefix.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"location", b"../approvals"), (b"content-length", b"0"), *SECURITY_HEADERS]
        await send({"type": "http.response.start", "status": 308, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _load(name: str) -> bytes:
    return resources.files("gateway").joinpath("ui", "static", name).read_bytes()


def ui_routes() -> list[Route]:
    """The page's routes, with every file read and hashed now, once, rather than per request.

    Starlette's ``Route`` treats a non-function endpoint as a raw ASGI app, which is what these are.
    """
    routes = [Route(path, StaticFile(_load(name), content_type), methods=["GET", "HEAD"])
              for name, (path, content_type) in _FILES.items()]
    routes.append(Route(f"{PAGE}/", _Redirect(), methods=["GET", "HEAD"]))
    return routes


# ---------------------------------------------------------------------------------------------
# Conditional GET for what the page polls.

# The page polls these every ~2 s; the answer is bounded by the API's page size, so buffering it
# to hash it is cheap, and a 304 spares the browser the body and a re-render when nothing changed.
POLLED = frozenset({"/v1/continuations", "/v1/audit"})
MAX_BUFFERED = 4 * 1024 * 1024


class ConditionalGet:
    """ETag / If-None-Match on the polled listings, as a thin ASGI layer in front of the app.

    The tag is a digest of the exact body (which already depends on the caller's tenant), so a
    304 can only ever confirm bytes the same caller would have received anyway.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] not in POLLED:
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
                if size > MAX_BUFFERED:  # not ours to hold: send what we have and step aside
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
    matched = _header(scope, b"if-none-match")
    if matched is not None and etag in {tag.strip() for tag in matched.split(b",")}:
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
