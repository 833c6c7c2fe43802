"""MCP sources against real fakes: an aiohttp Streamable-HTTP server and a stdio subprocess."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.tools import ToolFailure, ToolRegistry, ToolSource, run_tool
from gateway.tools.base import ToolContent, ToolTimeouts
from gateway.tools.mcp.source import McpHttpSource, McpStdioSource
from tests.fakes import mcp_server as fake_mcp_server
from tests.fakes.mcp_server import NUMBERS, FakeMcpServer
from tests.ports import free_port

STDIO_SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "fakes" / "mcp_stdio_server.py")]
ALL_TOOLS = ["add", "fail", "slow", "mixed"]


@pytest.fixture
async def server() -> AsyncIterator[FakeMcpServer]:
    fake = await FakeMcpServer().start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def http(server: FakeMcpServer) -> AsyncIterator[McpHttpSource]:
    source = McpHttpSource("mcp", server.url, headers={"X-Api-Key": "k"}, timeouts=ToolTimeouts(call=5.0))
    try:
        yield source
    finally:
        await source.aclose()


@pytest.fixture
async def stdio() -> AsyncIterator[McpStdioSource]:
    source = McpStdioSource("local", STDIO_SERVER, env={"FAKE_MCP": "1"}, timeouts=ToolTimeouts(call=5.0),
                            approval="required")
    try:
        yield source
    finally:
        await source.aclose()


# -- Streamable HTTP -------------------------------------------------------------------------


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_lists_every_page_and_maps_tools_to_specs(server: FakeMcpServer, http: McpHttpSource,
                                                        sse: bool) -> None:
    server.sse = sse
    specs = await http.list_tools()
    assert [s.name for s in specs] == ALL_TOOLS
    add = specs[0]
    assert (add.description, add.parameters, add.source, add.approval, add.timeout_s) == (
        "Add two numbers", NUMBERS, "mcp", "never", 5.0)
    assert specs[2].description == "Sleep, then echo the tag"  # falls back to the title
    # The SDK probes for the stateless revision first; this server only knows the handshake.
    # (None: the client's answers to the server's pings on the SSE streams.)
    assert [m for m in server.methods() if m is not None] == [
        "server/discover", "initialize", "notifications/initialized", "tools/list", "tools/list"]
    assert http.protocol_version == "2025-06-18"


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_call_returns_text_and_is_error_raises(server: FakeMcpServer, http: McpHttpSource, sse: bool) -> None:
    server.sse = sse
    assert await http.call("add", {"a": 2, "b": 3}) == '5\n{"sum":5}'  # structuredContent as JSON
    with pytest.raises(ToolFailure) as failure:
        await http.call("fail", {})
    assert failure.value.message == "boom: the tool failed"


async def test_an_image_is_an_image_part_with_a_text_view(http: McpHttpSource) -> None:
    result = await http.call("mixed", {})
    assert isinstance(result, ToolContent)
    assert result.text == "a chart:\n[image: image/png, 8 B]"
    assert result.parts == ({"type": "text", "text": "a chart:"},
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})


async def test_json_rpc_error_becomes_tool_failure(http: McpHttpSource) -> None:
    with pytest.raises(ToolFailure, match=r"MCP error -32602: Unknown tool: nope"):
        await http.call("nope", {})


async def test_session_id_and_protocol_version_are_sent_after_initialize(server: FakeMcpServer,
                                                                         http: McpHttpSource) -> None:
    await http.list_tools()
    await http.call("add", {"a": 1, "b": 1})
    probe, first, *later = server.requests
    assert (probe.rpc_method, probe.session_id, probe.protocol_version) == ("server/discover", None, "2026-07-28")
    assert (first.rpc_method, first.session_id, first.protocol_version) == ("initialize", None, None)
    assert http.session_id in server.sessions
    assert {(r.session_id, r.protocol_version) for r in later} == {(http.session_id, "2025-06-18")}
    assert {r.accept for r in server.requests} == {"application/json, text/event-stream"}


async def test_expired_session_reinitializes_once_and_retries(server: FakeMcpServer, http: McpHttpSource) -> None:
    assert (await http.call("add", {"a": 1, "b": 2})).startswith("3")
    old = http.session_id
    server.forget_sessions()
    assert (await http.call("add", {"a": 2, "b": 2})).startswith("4")
    assert http.session_id not in (None, old)
    # The era is known after the first session: the new one goes straight to the handshake.
    assert [m for m in server.methods() if m != "tools/list"] == [
        "server/discover", "initialize", "notifications/initialized", "tools/call",
        "tools/call", "initialize", "notifications/initialized", "tools/call"]
    assert server.requests[-1].session_id == http.session_id


async def test_concurrent_expiry_reinitializes_only_once(server: FakeMcpServer, http: McpHttpSource) -> None:
    await http.list_tools()
    server.forget_sessions()
    results = await asyncio.gather(*(http.call("add", {"a": i, "b": 1}) for i in range(5)))
    assert results == [f'{i + 1}\n{{"sum":{i + 1}}}' for i in range(5)]
    assert server.methods().count("initialize") == 2


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_concurrent_calls_each_get_their_own_answer(server: FakeMcpServer, http: McpHttpSource,
                                                          sse: bool) -> None:
    server.sse = sse
    # Reverse sleeps (answers come back in the opposite order); each call waits at the server until all five are
    # held there at once, so calls made one after another would be seen (and each kept 5 s).
    calls = [http.call("slow", {"seconds": 0.05 * (5 - i), "tag": str(i), "meet": 5}) for i in range(5)]
    assert await asyncio.gather(*calls) == [f"done {i}" for i in range(5)]
    assert server.most_slow_in_flight == 5  # in parallel, not one after another
    assert server.methods().count("initialize") == 1


async def test_http_status_error_is_a_tool_failure(server: FakeMcpServer, http: McpHttpSource) -> None:
    server.fail_status = 503
    with pytest.raises(ToolFailure, match=r"^HTTP 503 from MCP server mcp \(initialize\): server on fire$"):
        await http.call("add", {"a": 1, "b": 1})


async def test_unreachable_server_is_a_clear_tool_failure() -> None:
    source = McpHttpSource("down", f"http://127.0.0.1:{free_port()}/mcp")
    try:
        with pytest.raises(ToolFailure, match=r"^Could not connect to MCP server down \(Connection refused\)$"):
            await source.list_tools()
    finally:
        await source.aclose()


async def test_aclose_deletes_the_session(server: FakeMcpServer, http: McpHttpSource) -> None:
    await http.list_tools()
    session_id = http.session_id
    await http.aclose()
    deletes = [r for r in server.requests if r.http_method == "DELETE"]
    assert [r.session_id for r in deletes] == [session_id]
    assert server.sessions == set()


async def test_end_to_end_through_registry_and_executor(server: FakeMcpServer, http: McpHttpSource) -> None:
    assert isinstance(http, ToolSource)
    registry = ToolRegistry([http])
    await registry.refresh(strict=True)
    assert registry.names == ALL_TOOLS
    ok = await run_tool(registry.get("add"), '{"a": 2, "b": 3}')
    assert (ok.status, ok.content) == ("ok", '5\n{"sum":5}')
    bad = await run_tool(registry.get("add"), '{"a": "two", "b": 3}')
    assert bad.status == "error" and "Invalid arguments for add" in bad.content
    failed = await run_tool(registry.get("fail"), "{}")
    assert (failed.status, failed.content) == ("error", "boom: the tool failed")
    assert server.methods().count("tools/call") == 2  # the invalid call never reached the server


async def test_executor_timeout_cancels_a_slow_mcp_call(server: FakeMcpServer) -> None:
    # The call clock bounds the listing too: 2 s lets a busy machine list (0.2 s did not), the slow tool takes 10.
    source = McpHttpSource("mcp", server.url, timeouts=ToolTimeouts(call=2.0))
    try:
        registry = ToolRegistry([source])
        await registry.refresh(strict=True)
        outcome = await run_tool(registry.get("slow"), '{"seconds": 10}')
        assert (outcome.status, outcome.content) == ("error", "Tool slow timed out after 2s")
    finally:
        await source.aclose()


# -- stdio -----------------------------------------------------------------------------------


async def test_stdio_lists_pages_and_calls(stdio: McpStdioSource) -> None:
    specs = await stdio.list_tools()
    assert [s.name for s in specs] == ALL_TOOLS
    assert {(s.source, s.approval, s.timeout_s) for s in specs} == {("local", "required", 5.0)}
    assert specs[0].parameters == NUMBERS
    assert await stdio.call("add", {"a": 2, "b": 3}) == '5\n{"sum":5}'
    with pytest.raises(ToolFailure, match=r"^boom: the tool failed$"):
        await stdio.call("fail", {})
    with pytest.raises(ToolFailure, match=r"Unknown tool: nope"):
        await stdio.call("nope", {})


async def test_stdio_env_extends_the_safe_part_of_the_gateway_environment_and_stderr_is_logged(
        stdio: McpStdioSource, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level("INFO", logger="loopgate.tools.mcp")
    assert await stdio.call("env", {"name": "FAKE_MCP"}) == "1"
    assert await stdio.call("env", {"name": "PATH"}) == os.environ["PATH"]
    # A provider key in the gateway's environment never reaches a third-party server by default.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-gateway-secret")
    guarded = McpStdioSource("guarded", STDIO_SERVER, timeouts=ToolTimeouts(call=5.0))
    trusting = McpStdioSource("trusting", STDIO_SERVER, env_inherit="all", timeouts=ToolTimeouts(call=5.0))
    try:
        assert await guarded.call("env", {"name": "OPENAI_API_KEY"}) == "<unset>"
        assert await guarded.call("env", {"name": "PATH"}) == os.environ["PATH"]
        assert await trusting.call("env", {"name": "OPENAI_API_KEY"}) == "sk-gateway-secret"
    finally:
        await guarded.aclose()
        await trusting.aclose()
    for _ in range(100):
        if "fake MCP stdio server starting" in caplog.text:
            break
        await asyncio.sleep(0.01)
    assert "MCP server local stderr: fake MCP stdio server starting" in caplog.text


@pytest.mark.slow
async def test_stdio_concurrent_calls_are_matched_by_id(stdio: McpStdioSource) -> None:
    # Reverse sleeps: the answers arrive in the opposite order of the requests.
    calls = [stdio.call("slow", {"seconds": 0.05 * (5 - i), "tag": str(i)}) for i in range(5)]
    assert await asyncio.gather(*calls) == [f"done {i}" for i in range(5)]


async def test_stdio_restarts_a_killed_process_on_next_call(stdio: McpStdioSource) -> None:
    first = int(await stdio.call("pid", {}))
    assert first == stdio.pid
    os.kill(first, signal.SIGKILL)
    for _ in range(200):
        if not stdio.running:
            break
        await asyncio.sleep(0.01)
    assert not stdio.running
    second = int(await stdio.call("pid", {}))
    assert second != first and second == stdio.pid


@pytest.mark.slow
async def test_stdio_call_in_flight_when_process_dies_fails_then_recovers(stdio: McpStdioSource) -> None:
    await stdio.list_tools()
    pid = stdio.pid
    assert pid is not None
    call = asyncio.create_task(stdio.call("slow", {"seconds": 5}))
    await asyncio.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ToolFailure, match=r"^MCP server local exited"):
        await asyncio.wait_for(call, 3)
    assert (await stdio.call("add", {"a": 1, "b": 1})).startswith("2")


async def test_stdio_aclose_terminates_the_process(stdio: McpStdioSource) -> None:
    pid = int(await stdio.call("pid", {}))
    await stdio.aclose()
    assert stdio.pid is None and not stdio.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: the pid no longer exists
    with pytest.raises(ToolFailure, match="closed"):
        await stdio.call("add", {"a": 1, "b": 1})


async def test_stdio_command_that_cannot_start_is_a_tool_failure() -> None:
    source = McpStdioSource("ghost", ["/nonexistent/mcp-server"])
    with pytest.raises(ToolFailure, match=r"^Could not start MCP server ghost \(No such file or directory\)$"):
        await source.list_tools()
    await source.aclose()


async def test_stdio_end_to_end_through_registry(stdio: McpStdioSource) -> None:
    assert isinstance(stdio, ToolSource)
    registry = ToolRegistry([stdio])
    await registry.refresh(strict=True)
    outcome = await run_tool(registry.get("add"), '{"a": 2, "b": 3}')
    assert (outcome.status, outcome.content) == ("ok", '5\n{"sum":5}')


async def test_a_2024_11_05_server_is_spoken_to_in_its_version(server: FakeMcpServer, http: McpHttpSource,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The oldest revision the gateway accepts: the handshake settles on it and calls work as with any other.
    monkeypatch.setattr(fake_mcp_server, "SERVER_VERSION", "2024-11-05")
    assert [s.name for s in await http.list_tools()] == ALL_TOOLS
    assert http.protocol_version == "2024-11-05"
    assert (await http.call("add", {"a": 2, "b": 3})).startswith("5")


async def test_a_server_of_an_unknown_revision_fails_its_listing_cleanly(server: FakeMcpServer,
                                                                         http: McpHttpSource,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_mcp_server, "SERVER_VERSION", "2023-01-01")
    with pytest.raises(ToolFailure) as caught:
        await http.call("add", {"a": 2, "b": 3})
    # The protocol mismatch is the reason given, not the stateless probe the server refused before it.
    assert "2023-01-01" in caught.value.message and "server/discover" not in caught.value.message
