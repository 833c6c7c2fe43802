"""MCP servers built with the SDK's own server side, served by uvicorn in a thread on a free port.

* :class:`StatelessServer` (the 2026-07-28 revision): its ``greet`` tool needs the user's name: it
  answers ``input_required`` (an elicitation and its request state) and runs only when the client
  retries with the answer. ``runs`` counts the times its body ran, so a test can prove a call
  completed exactly once, whichever replica retried it.
* :class:`GrowingServer`: its ``grow`` tool registers a new tool ``grownN`` and announces it, as a
  server that serves both eras does: to ``subscriptions/listen`` streams (2026-07-28, which the SDK
  negotiates by default) and with ``notifications/tools/list_changed`` on a session.
"""

from __future__ import annotations

import socket
import threading
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel


class _Served:
    """An ASGI app of the SDK's on a free local port (``url``), stopped with :meth:`stop`."""

    def __init__(self, app: Any, port: int = 0) -> None:
        if not port:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
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

    def __init__(self, port: int = 0, grown: int = 0) -> None:
        self.grown = 0
        server = MCPServer("growing-test")

        def add() -> str:
            self.grown += 1
            name = f"grown{self.grown}"
            server.add_tool(lambda: name, name=name, description="A tool added at run time")
            return name

        @server.tool()
        async def grow(ctx: Context) -> str:
            """Add a tool, then tell the client its tool list changed."""
            name = add()
            await ctx.notify_tools_changed()
            if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                await ctx.session.send_tool_list_changed()
            return name

        for _ in range(grown):
            add()
        super().__init__(server.streamable_http_app(), port)
