"""MCP servers as tool sources of a route, end to end: HTTP and stdio servers behind a real gateway."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ROOT, Gateway, gateway_config
from tests.fakes.mcp_server import FakeMcpServer
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "Draw the chart."}]
STDIO_SERVER = Path(ROOT) / "tests" / "fakes" / "mcp_stdio_server.py"


class ThreadedMcp:
    """The fake MCP server on its own event loop, so the gateway subprocess can reach it any time."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = FakeMcpServer()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def mcp_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, ThreadedMcp]]:
    mcp = ThreadedMcp()
    servers = f"mcp_servers:\n  calc: {{url: '{mcp.server.url}', timeout_s: 5}}\n"
    routes = "  mcp_agent:\n    targets: [{provider: primary, model: m}]\n    tools: [get_weather, 'mcp:calc']\n"
    config = gateway_config(fakes, extra_models=routes).replace("models:\n", servers + "models:\n", 1)
    gw = Gateway(config).start()
    yield gw, mcp
    gw.stop()
    mcp.stop()


def test_mcp_tools_join_the_route_and_run_server_side(mcp_gateway: tuple[Gateway, ThreadedMcp],
                                                      fakes: dict[str, FakeUpstream]) -> None:
    gw, mcp = mcp_gateway
    fakes["primary"].queue(Reply(tool_calls=[("mixed", {}), ("fail", {})]), Reply(text="Here is the chart."))
    completion = gw.client().chat.completions.create(model="mcp_agent", messages=USER)
    assert completion.choices[0].message.content == "Here is the chart."
    names = [t["function"]["name"] for t in fakes["primary"].bodies[0]["tools"]]
    # Both pages of the server's list; its "add" and "slow" lose to the config's tools of the same
    # names (the first source wins, logged), so a name never means two tools.
    assert names == ["get_weather", "fail", "mixed"]
    assert "provided by both source" in gw.logs()
    # The fake speaks only 2025-06-18: the SDK's probe for the stateless revision fails, the handshake settles it.
    assert "MCP server mcp:calc connected (protocol 2025-06-18)" in gw.logs()
    results = [m["content"] for m in fakes["primary"].bodies[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("a chart:") and "image/png" in results[0]
    assert results[1] == "boom: the tool failed"
    assert [c["status"] for c in completion.model_extra["gateway"]["tool_calls"]] in (["ok", "error"],
                                                                                       ["error", "ok"])
    assert mcp.server.methods().count("tools/call") >= 2


def test_bad_arguments_never_reach_the_mcp_server(mcp_gateway: tuple[Gateway, ThreadedMcp],
                                                  fakes: dict[str, FakeUpstream]) -> None:
    gw, mcp = mcp_gateway
    calls_before = mcp.server.methods().count("tools/call")
    fakes["primary"].queue(Reply(tool_calls=[("mixed", "{not json")]), Reply(text="Fixed."))
    gw.client().chat.completions.create(model="mcp_agent", messages=USER)
    result = next(m for m in fakes["primary"].bodies[1]["messages"] if m["role"] == "tool")["content"]
    assert "not valid JSON" in result
    assert mcp.server.methods().count("tools/call") == calls_before


def test_client_tool_named_like_an_mcp_tool_is_400(mcp_gateway: tuple[Gateway, ThreadedMcp]) -> None:
    gw, _ = mcp_gateway
    tools = [{"type": "function", "function": {"name": "mixed", "parameters": {"type": "object"}}}]
    response = gw.post("/v1/chat/completions", {"model": "mcp_agent", "messages": USER, "tools": tools})
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools[0]"


@pytest.fixture(scope="module")
def stdio_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    servers = f"mcp_servers:\n  local: {{command: ['{sys.executable}', '{STDIO_SERVER}'], approval: required}}\n"
    routes = "  mcp_local:\n    targets: [{provider: primary, model: m}]\n    tools: ['mcp:local']\n"
    gw = Gateway(gateway_config(fakes, extra_models=routes).replace("models:\n", servers + "models:\n", 1)).start()
    yield gw
    gw.stop()


def test_stdio_mcp_server_with_approval(stdio_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    gw = stdio_gateway
    fakes["primary"].queue(Reply(tool_calls=[("mixed", {})]))
    paused = gw.client().chat.completions.create(model="mcp_local", messages=USER)
    extension = paused.model_extra["gateway"]
    assert extension["status"] == "paused" and extension["pending"][0]["reason"] == "approval"
    fakes["primary"].queue(Reply(text="Chart shown."))
    resumed = httpx.post(f"{gw.url}/v1/continuations/{extension['continuation_id']}", timeout=20,
                         headers={"authorization": "Bearer test-key"},
                         json={"decisions": [{"tool_call_id": extension["pending"][0]["tool_call_id"],
                                              "approve": True}]})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["choices"][0]["message"]["content"] == "Chart shown."
    result = next(m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool")["content"]
    assert result.startswith("a chart:")
