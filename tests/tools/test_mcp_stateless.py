"""A stateless MCP server (the 2026-07-28 revision), written with the SDK's own server side.

Such a server has no session and no back channel: a tool that needs input answers
``input_required`` with its request state, and the client retries the call with the answers. The
answers come from the handlers of the call, exactly as for a session-holding server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Annotated

import pytest
import uvicorn
from mcp.server.mcpserver import Elicit, MCPServer, Resolve
from pydantic import BaseModel

from gateway.tools.base import ToolFailure, ToolTimeouts
from gateway.tools.interaction import CALL_INTERACTIONS, CallInteractions, ElicitationAnswer, ElicitationRequest
from gateway.tools.mcp.source import McpHttpSource
from tests.ports import free_port


class Name(BaseModel):
    name: str


def ask(greeting: str) -> Elicit[Name]:
    return Elicit(f"Whom should I greet with {greeting!r}?", Name)


def stateless_app() -> object:
    server = MCPServer("stateless-test")

    @server.tool()
    def greet(greeting: str, who: Annotated[Name, Resolve(ask)]) -> str:
        """Greet someone the user names."""
        return f"{greeting}, {who.name}!"

    return server.streamable_http_app(stateless_http=True, json_response=True)


@pytest.fixture(scope="module")
def stateless_url() -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(stateless_app(), host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    waited = threading.Event()
    for _ in range(1500):  # up to 30 s
        if server.started:
            break
        assert thread.is_alive(), "the stateless server did not start"
        waited.wait(0.02)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(10)


async def test_input_required_is_answered_by_the_calls_handler_and_the_call_retried(stateless_url: str) -> None:
    asked: list[ElicitationRequest] = []

    async def elicit(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        return ElicitationAnswer("accept", {"name": "Ada"})

    source = McpHttpSource("stateless", stateless_url, timeouts=ToolTimeouts(call=10.0))
    try:
        assert [spec.name for spec in await source.list_tools()] == ["greet"]
        assert source.protocol_version == "2026-07-28" and source.session_id is None
        token = CALL_INTERACTIONS.set(CallInteractions(elicit=elicit))
        try:
            result = await source.call("greet", {"greeting": "Hello"})
        finally:
            CALL_INTERACTIONS.reset(token)
        # No handler outside a request's call: the server hears "decline" (its tool then fails).
        with pytest.raises(ToolFailure, match="elicitation was decline"):
            await asyncio.wait_for(source.call("greet", {"greeting": "Hi"}), 10)
    finally:
        await source.aclose()
    assert isinstance(result, str) and result.startswith("Hello, Ada!")
    (request,) = asked
    assert (request.mode, request.message) == ("form", "Whom should I greet with 'Hello'?")
    assert request.requested_schema is not None and request.requested_schema["required"] == ["name"]
