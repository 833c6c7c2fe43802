"""The soak's HTTP tool endpoints: every execution is recorded with its call token.

The token (``soak_upstream.call_token``) names one tool call the model made, so "no tool ran
twice" is a count per token. ``/echo`` is the plain server tool, ``/delete`` the one that runs
only after a human approved it.
"""

from __future__ import annotations

from collections import Counter

import orjson
from aiohttp import web

from tests.fakes.threaded import ThreadedApp


class SoakToolServer(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.runs: Counter[tuple[str, str]] = Counter()  # (path, token) -> executions

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/echo", self._run)
        app.router.add_post("/delete", self._run)
        return app

    async def _run(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        token = str(body.get("token"))
        self.runs[(request.path, token)] += 1
        return web.Response(text=f"{request.path[1:]} {token}")

    def executed(self, path: str) -> dict[str, int]:
        return {token: count for (where, token), count in list(self.runs.items()) if where == path}
