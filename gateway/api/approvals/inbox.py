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

from importlib import resources

from starlette.routing import Route

from gateway.http.static import Redirect, StaticFile

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
    "elicitation.js": (f"{PAGE}/elicitation.js", "text/javascript; charset=utf-8"),
}


def _load(name: str) -> bytes:
    return resources.files("gateway").joinpath("ui", "static", name).read_bytes()


#: the page's note that any key works, shown by removing its ``hidden`` when auth is off
AUTH_OFF_NOTE = b'<p id="auth-off" class="note" hidden>'


def _page_bytes(name: str, auth_enabled: bool) -> bytes:
    """A file as served: with auth off, the page says that any string works as a key (else people hunt for one)."""
    body = _load(name)
    if name == "approvals.html" and not auth_enabled:
        assert AUTH_OFF_NOTE in body, "approvals.html lost its auth-off note"
        body = body.replace(AUTH_OFF_NOTE, AUTH_OFF_NOTE.replace(b" hidden", b""))
    return body


def ui_routes(auth_enabled: bool = True) -> list[Route]:
    """The page's routes, with every file read and hashed now, once, rather than per request.

    Starlette's ``Route`` treats a non-function endpoint as a raw ASGI app, which is what these are.
    """
    routes = [Route(path, StaticFile(_page_bytes(name, auth_enabled), content_type, SECURITY_HEADERS),
                    methods=["GET", "HEAD"])
              for name, (path, content_type) in _FILES.items()]
    # ``/ui/approvals/`` -> ``/ui/approvals``: the page's relative URLs resolve against the latter. The
    # location is relative too, so the page also works behind a proxy that mounts it under a prefix.
    routes.append(Route(f"{PAGE}/", Redirect(b"../approvals", SECURITY_HEADERS), methods=["GET", "HEAD"]))
    return routes


#: what the page polls every ~2 s: answered with ETags (``gateway.http.conditional``)
POLLED = frozenset({"/v1/continuations", "/v1/audit"})
