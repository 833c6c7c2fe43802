"""A real local HTTP tool server and a shared client session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.tools import sample_tools


@dataclass
class ToolServer:
    base_url: str
    received: list[dict[str, Any]] = field(default_factory=list)  # JSON bodies, in arrival order
    headers: list[dict[str, str]] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)  # client address per request

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"


@pytest.fixture
async def tool_server() -> AsyncIterator[ToolServer]:
    server = ToolServer(base_url="")

    async def record(request: web.Request) -> Any:
        body = await request.json()
        server.received.append(body)
        server.headers.append(dict(request.headers))
        server.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return body

    async def echo(request: web.Request) -> web.Response:
        body = await record(request)
        return web.json_response({"echo": body})

    async def plain(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(text="sunny, 21°C", status=201)

    async def fail(request: web.Request) -> web.Response:
        body = await record(request)
        return web.Response(text=body.get("message", "upstream exploded"), status=int(body.get("status", 500)))

    async def slow(request: web.Request) -> web.Response:
        body = await record(request)
        await asyncio.sleep(float(body.get("delay", 5)))
        return web.Response(text="finally")

    app = web.Application()
    app.router.add_post("/echo", echo)
    app.router.add_post("/plain", plain)
    app.router.add_post("/fail", fail)
    app.router.add_post("/slow", slow)
    # handler_cancellation: a client that gave up cancels /slow, so teardown does not wait for it.
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.base_url = f"http://{host}:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture(autouse=True)
def _reset_sample_state() -> None:
    sample_tools.finished.clear()
    sample_tools.cancelled.clear()
