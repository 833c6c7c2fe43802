"""A recording HTTP tool endpoint, so tests can count how often a side-effecting tool really ran."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tests.fakes.threaded import ThreadedApp


class ToolServer(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/delete", self._delete)
        return app

    async def _delete(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.calls.append(body)
        return web.Response(text=f"deleted {body.get('id')}")
