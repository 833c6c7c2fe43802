"""run_tool: argument parsing and validation, timeouts, failures as results, cancellation."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from gateway.tools import RegisteredTool, ToolRegistry, ToolSpec, run_tool
from tests.tools import sample_tools
from tests.tools.conftest import ToolServer
from tests.tools.helpers import NO_ARGS, ScriptedSource, http_tool, python_tool

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1},
        "units": {"enum": ["c", "f"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.fixture
async def weather(tool_server: ToolServer, session) -> RegisteredTool:
    registry = await ToolRegistry.from_config(
        {"get_weather": http_tool("get_weather", tool_server.url("/echo"), parameters=WEATHER)}, session)
    return registry.get("get_weather")


async def scripted(spec: ToolSpec, fn: Any) -> RegisteredTool:
    registry = ToolRegistry([ScriptedSource("scripted", [spec], {spec.name: fn})])
    await registry.refresh(strict=True)
    return registry.get(spec.name)


def spec(name: str = "probe", timeout_s: float = 5.0, parameters: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(name, "a probe", parameters or {"type": "object"}, timeout_s=timeout_s, source="scripted")


# --- arguments -------------------------------------------------------------------------


async def test_invalid_json_is_reported_with_an_excerpt(weather: RegisteredTool, tool_server: ToolServer) -> None:
    outcome = await run_tool(weather, '{"city": "Par')
    assert outcome.status == "error"
    assert outcome.content.startswith("The arguments for get_weather were not valid JSON (")
    assert outcome.content.endswith('Received: {"city": "Par')
    assert tool_server.received == []  # the tool never ran


async def test_long_invalid_json_excerpt_is_clipped(weather: RegisteredTool) -> None:
    outcome = await run_tool(weather, '{"city": "' + "a" * 5000)
    assert outcome.status == "error"
    assert len(outcome.content) < 500 and outcome.content.endswith("…")


async def test_lone_surrogate_in_arguments_still_gives_a_utf8_message(weather: RegisteredTool) -> None:
    outcome = await run_tool(weather, '{"city": "\ud800"}')
    assert outcome.status == "error"
    outcome.content.encode("utf-8")  # would raise on a lone surrogate


@pytest.mark.parametrize(("raw", "kind"), [("[1, 2]", "an array"), ('"Paris"', "a string"), ("3", "a number"),
                                           ("null", "null"), ("true", "a boolean")])
async def test_non_object_arguments_are_rejected(weather: RegisteredTool, raw: str, kind: str) -> None:
    outcome = await run_tool(weather, raw)
    assert (outcome.status, outcome.content) == (
        "error", f"Invalid arguments for get_weather: expected a JSON object, got {kind}")


async def test_missing_required_property(weather: RegisteredTool, tool_server: ToolServer) -> None:
    outcome = await run_tool(weather, '{"days": 2}')
    assert (outcome.status, outcome.content) == (
        "error", "Invalid arguments for get_weather: 'city' is a required property")
    assert tool_server.received == []


async def test_wrong_type_names_the_json_path(weather: RegisteredTool) -> None:
    outcome = await run_tool(weather, '{"city": 5}')
    assert outcome.content == "Invalid arguments for get_weather: $.city: 5 is not of type 'string'"


async def test_every_violation_is_listed(weather: RegisteredTool) -> None:
    outcome = await run_tool(weather, '{"days": 0, "units": "k", "extra": true}')
    assert outcome.status == "error"
    parts = outcome.content.removeprefix("Invalid arguments for get_weather: ").split("; ")
    assert sorted(parts) == sorted([
        "'city' is a required property",
        "Additional properties are not allowed ('extra' was unexpected)",
        "$.days: 0 is less than the minimum of 1",
        "$.units: 'k' is not one of ['c', 'f']",
    ])


async def test_valid_arguments_reach_the_tool(weather: RegisteredTool, tool_server: ToolServer) -> None:
    outcome = await run_tool(weather, '{"city": "Lima", "days": 3, "units": "c"}')
    assert outcome.status == "ok"
    assert tool_server.received == [{"city": "Lima", "days": 3, "units": "c"}]


@pytest.mark.parametrize("raw", ["{}", "", "  "])
async def test_empty_arguments_on_a_no_arg_tool_are_fine(raw: str) -> None:
    registry = await ToolRegistry.from_config({"ping": python_tool("ping", "no_args", parameters=NO_ARGS)})
    outcome = await run_tool(registry.get("ping"), raw)
    assert (outcome.status, outcome.content) == ("ok", "pong")


# --- failures ----------------------------------------------------------------------------


async def test_timeout_of_an_async_python_tool() -> None:
    registry = await ToolRegistry.from_config({"nap": python_tool("nap", "sleep_async", timeout_s=0.1)})
    outcome = await run_tool(registry.get("nap"), '{"tag": "t", "delay": 5}')
    assert (outcome.status, outcome.content) == ("error", "Tool nap timed out after 0.1s")
    assert 90 <= outcome.elapsed_ms < 1500
    assert sample_tools.cancelled == ["t"]  # the call was really stopped


@pytest.mark.slow
async def test_timeout_of_a_sync_python_tool_does_not_block_the_loop() -> None:
    registry = await ToolRegistry.from_config({"nap": python_tool("nap", "sleep_sync", timeout_s=0.1)})
    sample_tools.finished.clear()
    outcome = await run_tool(registry.get("nap"), '{"tag": "nap-sync", "delay": 1.5}')
    assert (outcome.status, outcome.content) == ("error", "Tool nap timed out after 0.1s")
    # The outcome came back while the thread was still sleeping (shown by the thread, not by a time budget).
    assert "nap-sync" not in sample_tools.finished
    deadline = time.monotonic() + 30  # let the abandoned thread finish before the next test
    while "nap-sync" not in sample_tools.finished:
        assert time.monotonic() < deadline, "the abandoned thread never finished"
        await asyncio.sleep(0.05)


async def test_unexpected_source_exception_is_logged_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def boom(arguments: dict[str, Any]) -> str:
        raise KeyError("internal state")

    tool = await scripted(spec(), boom)
    with caplog.at_level(logging.ERROR, logger="loopgate.tools"):
        outcome = await run_tool(tool, "{}")
    assert outcome.status == "error"
    assert outcome.content == "Tool probe failed with an internal error (KeyError: 'internal state')"
    [record] = [r for r in caplog.records if r.name == "loopgate.tools"]
    assert record.exc_info is not None and record.exc_info[0] is KeyError


async def test_a_sources_own_timeout_error_is_not_reported_as_our_timeout() -> None:
    async def own_timeout(arguments: dict[str, Any]) -> str:
        raise TimeoutError("client gave up")

    outcome = await run_tool(await scripted(spec(timeout_s=5), own_timeout), "{}")
    assert outcome.content == "Tool probe failed with an internal error (TimeoutError: client gave up)"


async def test_fractional_timeout_is_formatted_without_trailing_zeros() -> None:
    async def slow(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "late"

    outcome = await run_tool(await scripted(spec(timeout_s=0.05), slow), "{}")
    assert outcome.content == "Tool probe timed out after 0.05s"


# --- cancellation ------------------------------------------------------------------------


async def test_cancellation_propagates_from_a_python_tool() -> None:
    registry = await ToolRegistry.from_config({"nap": python_tool("nap", "sleep_async", timeout_s=10)})
    task = asyncio.create_task(run_tool(registry.get("nap"), '{"tag": "c", "delay": 5}'))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sample_tools.cancelled == ["c"]


async def test_cancellation_propagates_from_an_http_tool(tool_server: ToolServer, session) -> None:
    registry = await ToolRegistry.from_config({"slow": http_tool("slow", tool_server.url("/slow"), timeout_s=10)},
                                              session)
    task = asyncio.create_task(run_tool(registry.get("slow"), '{"delay": 5}'))
    await asyncio.sleep(0.1)
    assert tool_server.received == [{"delay": 5}]  # the request is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancellation_inside_a_timeout_is_not_turned_into_a_timeout() -> None:
    async def slow(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "late"

    task = asyncio.create_task(run_tool(await scripted(spec(timeout_s=0.2), slow), "{}"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
