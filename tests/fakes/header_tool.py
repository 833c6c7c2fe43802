"""An HTTP tool endpoint that records the headers of every call (trace propagation into tools)."""

from __future__ import annotations

from aiohttp import web

from tests.fakes.threaded import ThreadedApp


class HeaderTool(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.headers: list[dict[str, str]] = []

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/lookup", self._lookup)
        return app

    async def _lookup(self, request: web.Request) -> web.Response:
        self.headers.append({name.lower(): value for name, value in request.headers.items()})
        return web.Response(text="found 42")
