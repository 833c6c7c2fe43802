"""HTTP tools against a real local server: body, headers, errors, timeouts, pooling."""

from __future__ import annotations

import time

import aiohttp
import orjson
import pytest

from gateway.tools import HttpToolSource, ToolFailure, ToolRegistry, run_tool
from tests.ports import free_port
from tests.tools.conftest import ToolServer
from tests.tools.helpers import http_tool

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def registry_for(session: aiohttp.ClientSession, *configs) -> ToolRegistry:
    return await ToolRegistry.from_config({c.name: c for c in configs}, session)


async def test_posts_arguments_as_json_and_returns_the_body(tool_server: ToolServer, session) -> None:
    registry = await registry_for(session, http_tool("get_weather", tool_server.url("/echo"), parameters=WEATHER))
    args = {"city": "Paris", "note": "é ✓"}
    outcome = await run_tool(registry.get("get_weather"), orjson.dumps(args).decode())
    assert outcome.status == "ok"
    assert orjson.loads(outcome.content) == {"echo": args}
    assert tool_server.received == [args]
    assert tool_server.headers[0]["Content-Type"] == "application/json"
    assert outcome.elapsed_ms > 0


async def test_any_2xx_body_is_the_result_verbatim(tool_server: ToolServer, session) -> None:
    registry = await registry_for(session, http_tool("plain", tool_server.url("/plain")))
    outcome = await run_tool(registry.get("plain"), "{}")
    assert (outcome.status, outcome.content) == ("ok", "sunny, 21°C")


async def test_configured_headers_are_sent(tool_server: ToolServer, session) -> None:
    headers = {"X-Api-Key": "s3cret", "content-type": "application/json"}
    tool = http_tool("echo", tool_server.url("/echo"), headers=headers)
    registry = await registry_for(session, tool)
    assert (await run_tool(registry.get("echo"), '{"a": 1}')).status == "ok"
    assert tool_server.headers[0]["X-Api-Key"] == "s3cret"
    assert tool_server.received == [{"a": 1}]


async def test_non_2xx_is_an_error_with_status_and_body(tool_server: ToolServer, session) -> None:
    registry = await registry_for(session, http_tool("get_weather", tool_server.url("/fail")))
    outcome = await run_tool(registry.get("get_weather"), '{"status": 503, "message": "maintenance"}')
    assert outcome.status == "error"
    assert outcome.content == "HTTP 503 from get_weather: maintenance"


async def test_error_body_is_cut_to_500_chars(tool_server: ToolServer, session) -> None:
    registry = await registry_for(session, http_tool("get_weather", tool_server.url("/fail")))
    outcome = await run_tool(registry.get("get_weather"), orjson.dumps({"message": "x" * 2000}).decode())
    assert outcome.content == "HTTP 500 from get_weather: " + "x" * 500


async def test_connection_refused_is_a_clear_error(session) -> None:
    url = f"http://127.0.0.1:{free_port()}/run"
    registry = await registry_for(session, http_tool("get_weather", url))
    outcome = await run_tool(registry.get("get_weather"), '{"city": "Paris"}')
    assert outcome.status == "error"
    assert outcome.content == "Could not connect to the get_weather service (Connection refused)"


async def test_slow_endpoint_times_out_at_the_tool_timeout(tool_server: ToolServer, session) -> None:
    registry = await registry_for(session, http_tool("get_weather", tool_server.url("/slow"), timeout_s=0.2))
    started = time.perf_counter()
    outcome = await run_tool(registry.get("get_weather"), '{"delay": 5}')
    assert outcome.status == "error"
    assert outcome.content == "Tool get_weather timed out after 0.2s"
    assert 0.15 < time.perf_counter() - started < 2.0
    assert 150 < outcome.elapsed_ms < 2000


async def test_tool_timeout_longer_than_session_default_is_honoured(tool_server: ToolServer) -> None:
    # A shared session with a short total timeout must not cut a tool configured for longer.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.1)) as short:
        registry = await registry_for(short, http_tool("slowish", tool_server.url("/slow"), timeout_s=5))
        outcome = await run_tool(registry.get("slowish"), '{"delay": 0.3}')
    assert (outcome.status, outcome.content) == ("ok", "finally")


async def test_calls_share_one_pooled_session(tool_server: ToolServer, session) -> None:
    url = tool_server.url("/echo")
    registry = await registry_for(session, http_tool("a", url), http_tool("b", url))
    for name in ("a", "b", "a"):
        assert (await run_tool(registry.get(name), "{}")).status == "ok"
    assert len(set(tool_server.peers)) == 1  # one keep-alive connection served all three calls
    await registry.aclose()
    assert not session.closed  # the registry never closes a session it was given


async def test_source_without_session_creates_and_closes_its_own(tool_server: ToolServer) -> None:
    source = HttpToolSource([http_tool("echo", tool_server.url("/echo"))])
    assert orjson.loads(await source.call("echo", {"x": 1})) == {"echo": {"x": 1}}
    own = source._session
    assert own is not None and not own.closed
    await source.aclose()
    assert own.closed


async def test_source_lists_specs_from_config(tool_server: ToolServer, session) -> None:
    source = HttpToolSource([http_tool("get_weather", tool_server.url("/echo"), parameters=WEATHER, timeout_s=10)],
                            session)
    [spec] = await source.list_tools()
    assert (spec.name, spec.timeout_s, spec.source, spec.approval, spec.parameters) == (
        "get_weather", 10, "http", "never", WEATHER)
    with pytest.raises(ToolFailure, match="Unknown tool nope"):
        await source.call("nope", {})
