"""``/ui/``: the operations console, static files shipped in the package (no build step, no CDN).

Like the approvals inbox (``gateway/api/approvals/inbox.py``, whose security headers it shares)
the page signs in with a key kept in the tab's sessionStorage and calls the admin API with it
as a Bearer token; the gateway serves only immutable bytes here. The charts are drawn by uPlot
(MIT, ``gateway/ui/vendor/``, licence beside it), served from this gateway: the page needs no
other origin and works offline.
"""

from __future__ import annotations

from importlib import resources

from starlette.routing import Route

from gateway.api.approvals.inbox import SECURITY_HEADERS
from gateway.http.static import Redirect, StaticFile

ROOT = "/ui/"

# (folder under gateway/ui, file name) -> (URL path, content type)
_FILES = {
    ("static", "console.html"): (ROOT, "text/html; charset=utf-8"),
    ("static", "console.css"): (f"{ROOT}console.css", "text/css; charset=utf-8"),
    ("static", "console.js"): (f"{ROOT}console.js", "text/javascript; charset=utf-8"),
    ("static", "console-charts.js"): (f"{ROOT}console-charts.js", "text/javascript; charset=utf-8"),
    ("static", "console-keys.js"): (f"{ROOT}console-keys.js", "text/javascript; charset=utf-8"),
    ("vendor", "uplot.min.js"): (f"{ROOT}vendor/uplot.min.js", "text/javascript; charset=utf-8"),
    ("vendor", "uplot.min.css"): (f"{ROOT}vendor/uplot.min.css", "text/css; charset=utf-8"),
    ("vendor", "uplot.LICENSE.txt"): (f"{ROOT}vendor/uplot.LICENSE.txt", "text/plain; charset=utf-8"),
}


def _load(folder: str, name: str) -> bytes:
    return resources.files("gateway").joinpath("ui", folder, name).read_bytes()


#: with auth off, the page shows this panel instead of the sign-in form (no key can open the console)
AUTH_OFF_PANEL = b'<section id="auth-off" class="panel" hidden'
SIGN_IN_PANEL = b'<section id="sign-in" '


def _page_bytes(folder: str, name: str, auth_enabled: bool) -> bytes:
    """A file as served. With auth off there is no admin key, so the page says that, and how to enable the
    console, rather than taking any string as an "approvals only" key."""
    body = _load(folder, name)
    if name == "console.html" and not auth_enabled:
        assert AUTH_OFF_PANEL in body and SIGN_IN_PANEL in body, "console.html lost its auth-off or sign-in panel"
        body = body.replace(AUTH_OFF_PANEL, AUTH_OFF_PANEL.replace(b" hidden", b""))
        body = body.replace(SIGN_IN_PANEL, SIGN_IN_PANEL + b"hidden ")
    return body


def console_page_routes(auth_enabled: bool = True) -> list[Route]:
    """The console's routes, every file read and hashed once, now."""
    routes = [Route(path, StaticFile(_page_bytes(folder, name, auth_enabled), content_type, SECURITY_HEADERS),
                    methods=["GET", "HEAD"])
              for (folder, name), (path, content_type) in _FILES.items()]
    # ``/ui`` -> ``/ui/``: relative, so it also works behind a proxy that mounts the gateway under a prefix.
    routes.append(Route("/ui", Redirect(b"ui/", SECURITY_HEADERS), methods=["GET", "HEAD"]))
    return routes
