"""A stateless MCP server (the 2026-07-28 revision) built with the SDK's own server side, in a thread.

Its ``greet`` tool needs the user's name: it answers ``input_required`` (an elicitation and its
request state) and runs only when the client retries with the answer. ``runs`` counts the times
its body ran, so a test can prove a call completed exactly once, whichever replica retried it.
"""

from __future__ import annotations

import socket
import threading
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from pydantic import BaseModel


class Name(BaseModel):
    name: str


def ask(greeting: str) -> Elicit[Name]:
    return Elicit(f"Whom should I greet with {greeting!r}?", Name)


class StatelessServer:
    """The server on a free local port (``url``), stopped with :meth:`stop`."""

    def __init__(self) -> None:
        self.runs = 0
        server = MCPServer("stateless-test")

        @server.tool()
        def greet(greeting: str, who: Annotated[Name, Resolve(ask)]) -> str:
            """Greet someone the user names."""
            self.runs += 1
            return f"{greeting}, {who.name}!"

        app = server.streamable_http_app(stateless_http=True, json_response=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/mcp"
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        waited = threading.Event()
        for _ in range(1500):  # up to 30 s
            if self._server.started:
                return
            assert self._thread.is_alive(), "the stateless server did not start"
            waited.wait(0.02)
        raise AssertionError("the stateless server did not start in 30 s")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
