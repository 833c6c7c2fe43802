"""MCP servers built with the SDK's own server side, served by uvicorn in a thread on a free port.

* :class:`StatelessServer` (the 2026-07-28 revision): its ``greet`` tool needs the user's name: it
  answers ``input_required`` (an elicitation and its request state) and runs only when the client
  retries with the answer. ``runs`` counts the times its body ran, so a test can prove a call
  completed exactly once, whichever replica retried it.
* :class:`GrowingServer`: its ``grow`` tool registers a new tool ``grownN`` and announces it, as a
  server that serves both eras does: to ``subscriptions/listen`` streams (2026-07-28, which the SDK
  negotiates by default) and with ``notifications/tools/list_changed`` on a session. With
  ``hold_listen`` it keeps every ``subscriptions/listen`` request waiting until
  :meth:`GrowingServer.release_listen`, so a test can change the tools while no stream is open.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from tests.ports import free_port


class _Served:
    """An ASGI app of the SDK's on a free local port (``url``), stopped with :meth:`stop`."""

    def __init__(self, app: Any, port: int = 0) -> None:
        port = port or free_port()
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        waited = threading.Event()
        for _ in range(1500):  # up to 30 s
            if self._server.started:
                return
            assert self._thread.is_alive(), f"{type(self).__name__} did not start"
            waited.wait(0.02)
        raise AssertionError(f"{type(self).__name__} did not start in 30 s")

    def stop(self, abruptly: bool = False) -> None:
        """``abruptly``: drop open streams (as a killed process does) instead of waiting for them to end."""
        self._server.should_exit = True
        self._server.force_exit = abruptly
        self._thread.join(10)
        assert not self._thread.is_alive(), f"{type(self).__name__} did not stop in 10 s"


class _ListenGate:
    """ASGI middleware: holds ``subscriptions/listen`` POSTs until ``open`` is set (then replays their body)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.open = threading.Event()
        self.held = 0  # listen requests that have waited at the gate

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"subscriptions/listen"' in body and not self.open.is_set():
            self.held += 1
            while not self.open.is_set():
                await asyncio.sleep(0.01)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class Name(BaseModel):
    name: str


def ask(greeting: str) -> Elicit[Name]:
    return Elicit(f"Whom should I greet with {greeting!r}?", Name)


class StatelessServer(_Served):
    def __init__(self) -> None:
        self.runs = 0
        server = MCPServer("stateless-test")

        @server.tool()
        def greet(greeting: str, who: Annotated[Name, Resolve(ask)]) -> str:
            """Greet someone the user names."""
            self.runs += 1
            return f"{greeting}, {who.name}!"

        super().__init__(server.streamable_http_app(stateless_http=True, json_response=True))


class GrowingServer(_Served):
    """``grown`` tools already registered at start (a restarted server that changed meanwhile), on ``port``."""

    def __init__(self, port: int = 0, grown: int = 0, hold_listen: bool = False) -> None:
        self.grown = 0
        self._mcp = server = MCPServer("growing-test")

        @server.tool()
        async def grow(ctx: Context) -> str:
            """Add a tool, then tell the client its tool list changed."""
            name = self.add()
            await ctx.notify_tools_changed()
            if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                await ctx.session.send_tool_list_changed()
            return name

        for _ in range(grown):
            self.add()
        self._gate = _ListenGate(server.streamable_http_app())
        if not hold_listen:
            self._gate.open.set()
        super().__init__(self._gate, port)

    def add(self) -> str:
        """Registers the next ``grownN`` tool without telling anyone (``grow`` announces it)."""
        self.grown += 1
        name = f"grown{self.grown}"
        self._mcp.add_tool(lambda: name, name=name, description="A tool added at run time")
        return name

    @property
    def listen_requests_held(self) -> int:
        return self._gate.held

    def release_listen(self) -> None:
        self._gate.open.set()
