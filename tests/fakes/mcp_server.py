"""A small MCP server (Streamable HTTP) on 127.0.0.1, so the MCP source is tested against real HTTP.

It implements just what a tools-only client uses: initialize (with a session id),
notifications/initialized, tools/list in two pages, tools/call and DELETE. Knobs let a test
switch between JSON and SSE answers, expire every session (404 -> the client must
re-initialize) or fail with an HTTP status. Every request is recorded for assertions.
The tool behaviour (``TOOL_PAGES`` and ``run_tool``) is shared with the stdio fake.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
           "required": ["a", "b"], "additionalProperties": False}
TOOL_PAGES: list[list[dict[str, Any]]] = [
    [
        {"name": "add", "description": "Add two numbers", "inputSchema": NUMBERS},
        {"name": "fail", "description": "Always reports an error", "inputSchema": {"type": "object"},
         "annotations": {"destructiveHint": True}},
    ],
    [
        {"name": "slow", "title": "Sleep, then echo the tag",
         "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}, "tag": {"type": "string"}}}},
        {"name": "mixed", "description": "Text plus an image", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": True}},
    ],
]
SERVER_VERSION = "2025-06-18"


def list_page(params: dict[str, Any]) -> dict[str, Any]:
    """Page 0 without a cursor, page N for cursor "page-N"; the last page has no nextCursor."""
    cursor = params.get("cursor")
    index = int(cursor.removeprefix("page-")) if cursor else 0
    result: dict[str, Any] = {"tools": TOOL_PAGES[index]}
    if index + 1 < len(TOOL_PAGES):
        result["nextCursor"] = f"page-{index + 1}"
    return result


def tool_result(name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """A tools/call result for the synchronous tools; None for ``slow`` (the caller sleeps) or unknown."""
    if name == "add":
        total = arguments["a"] + arguments["b"]
        return {"content": [{"type": "text", "text": f"{total:g}"}], "structuredContent": {"sum": total}}
    if name == "fail":
        return {"content": [{"type": "text", "text": "boom: the tool failed"}], "isError": True}
    if name == "mixed":
        return {"content": [{"type": "text", "text": "a chart:"},
                            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}]}
    return None


def slow_result(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"done {arguments.get('tag', '')}".strip()}]}


def unknown_tool(rpc_id: Any, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}}


@dataclass
class Recorded:
    http_method: str
    rpc_method: str | None
    session_id: str | None
    protocol_version: str | None
    accept: str | None
    traceparent: str | None = None


@dataclass
class FakeMcpServer:
    """Start with ``await FakeMcpServer().start()``; stop with ``await server.stop()``."""

    sse: bool = False
    fail_status: int | None = None  # answer every POST with this HTTP status
    requests: list[Recorded] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    url: str = ""
    slow_in_flight: int = 0
    most_slow_in_flight: int = 0  # the most ``slow`` calls the server held at once
    _runner: web.AppRunner | None = None

    async def start(self) -> FakeMcpServer:
        app = web.Application()
        app.router.add_post("/mcp", self._post)
        app.router.add_delete("/mcp", self._delete)
        # handler_cancellation: a client that gave up on "slow" cancels it, so stop() does not wait.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/mcp"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def forget_sessions(self) -> None:
        """Expire every session, as a restarted server would: the next request gets 404."""
        self.sessions.clear()

    def methods(self, http_method: str = "POST") -> list[str | None]:
        return [r.rpc_method for r in self.requests if r.http_method == http_method]

    def _record(self, request: web.Request, rpc_method: str | None) -> None:
        self.requests.append(Recorded(request.method, rpc_method, request.headers.get("Mcp-Session-Id"),
                                      request.headers.get("MCP-Protocol-Version"), request.headers.get("Accept"),
                                      request.headers.get("traceparent")))

    async def _delete(self, request: web.Request) -> web.Response:
        self._record(request, None)
        self.sessions.discard(request.headers.get("Mcp-Session-Id", ""))
        return web.Response(status=204)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        message = orjson.loads(await request.read())
        method = message.get("method")
        self._record(request, method)
        if self.fail_status is not None:
            return web.Response(status=self.fail_status, text="server on fire")
        accept = request.headers.get("Accept", "")
        if "application/json" not in accept or "text/event-stream" not in accept:
            return web.Response(status=406, text="must accept application/json and text/event-stream")
        if method == "initialize":
            session_id = uuid.uuid4().hex
            self.sessions.add(session_id)
            result = {"protocolVersion": SERVER_VERSION, "capabilities": {"tools": {"listChanged": False}},
                      "serverInfo": {"name": "fake-mcp", "version": "1.0"}}
            return await self._answer(request, {"jsonrpc": "2.0", "id": message["id"], "result": result},
                                      {"Mcp-Session-Id": session_id})
        session_id = request.headers.get("Mcp-Session-Id")
        if session_id is None:
            return web.Response(status=400, text="missing Mcp-Session-Id")
        if session_id not in self.sessions:
            return web.Response(status=404, text="unknown session")
        if "id" not in message:
            return web.Response(status=202)  # notifications/initialized and friends
        params = message.get("params") or {}
        if method == "tools/list":
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": list_page(params)}
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if name == "slow":
                result = await self._slow(arguments)
            else:
                result = tool_result(name, arguments)
            reply = (unknown_tool(message["id"], name) if result is None
                     else {"jsonrpc": "2.0", "id": message["id"], "result": result})
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
        return await self._answer(request, reply, {})

    async def _slow(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Sleeps ``seconds``. With ``meet: N`` it first waits (5 s at most) until N calls have been held at once:
        proof of parallel calls that does not depend on how fast a busy machine runs them."""
        self.slow_in_flight += 1
        self.most_slow_in_flight = max(self.most_slow_in_flight, self.slow_in_flight)
        try:
            give_up = asyncio.get_running_loop().time() + 5.0
            while (self.most_slow_in_flight < int(arguments.get("meet", 0))
                   and asyncio.get_running_loop().time() < give_up):
                await asyncio.sleep(0.005)
            await asyncio.sleep(float(arguments.get("seconds", 0.1)))
            return slow_result(arguments)
        finally:
            self.slow_in_flight -= 1

    async def _answer(self, request: web.Request, reply: dict[str, Any], headers: dict[str, str]) -> web.StreamResponse:
        if not self.sse:
            return web.Response(body=orjson.dumps(reply), content_type="application/json", headers=headers)
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        # Noise a client must skip: a comment, a log notification, and a server->client request
        # whose id equals the response's (ids are per direction in JSON-RPC).
        await resp.write(b": keep-alive\n\n")
        log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}}
        await resp.write(b"event: message\ndata: " + orjson.dumps(log) + b"\n\n")
        ping = {"jsonrpc": "2.0", "id": reply["id"], "method": "ping"}
        await resp.write(b"id: 1\ndata: " + orjson.dumps(ping) + b"\n\n")
        # The response itself, split over two data lines (joined with a newline: still valid JSON).
        body = orjson.dumps(reply)
        await resp.write(b"id: 2\nevent: message\ndata: " + body[:1] + b"\ndata: " + body[1:] + b"\n\n")
        await resp.write_eof()
        return resp
