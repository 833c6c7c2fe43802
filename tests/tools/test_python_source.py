"""Python tools: threads for sync functions, the event loop for async ones, results and errors."""

from __future__ import annotations

import threading

import orjson
import pytest

from gateway.tools import PythonToolSource, ToolRegistry, run_tool
from tests.tools.helpers import NO_ARGS, python_tool


async def registry_for(*configs) -> ToolRegistry:
    return await ToolRegistry.from_config({c.name: c for c in configs})


async def test_sync_function_runs_in_a_worker_thread_with_keyword_arguments() -> None:
    registry = await registry_for(python_tool("who", "sync_thread_id"))
    outcome = await run_tool(registry.get("who"), '{"city": "Oslo", "days": 2}')
    assert outcome.status == "ok"
    thread_id, kwargs = outcome.content.split("|")
    assert int(thread_id) != threading.get_ident()
    assert kwargs == str([("city", "Oslo"), ("days", 2)])


async def test_async_function_is_awaited_on_the_loop() -> None:
    registry = await registry_for(python_tool("who", "async_thread_id", parameters=NO_ARGS),
                                  python_tool("add", "add"))
    assert (await run_tool(registry.get("who"), "{}")).content == str(threading.get_ident())
    outcome = await run_tool(registry.get("add"), '{"a": 2, "b": 3}')
    assert (outcome.status, outcome.content) == ("ok", "5")


async def test_object_with_async_call_is_awaited() -> None:
    registry = await registry_for(python_tool("double", "async_callable"))
    assert (await run_tool(registry.get("double"), '{"x": 21}')).content == "42"


async def test_exception_becomes_an_error_result() -> None:
    registry = await registry_for(python_tool("weather", "raises"))
    outcome = await run_tool(registry.get("weather"), '{"city": "Atlantis"}')
    assert (outcome.status, outcome.content) == ("error", "ValueError: no weather for Atlantis")


async def test_tool_failure_raised_by_the_tool_keeps_its_message() -> None:
    registry = await registry_for(python_tool("delete", "raises_tool_failure"))
    outcome = await run_tool(registry.get("delete"), "{}")
    assert (outcome.status, outcome.content) == ("error", "the record is locked, try again later")


async def test_unexpected_keyword_is_an_error_result() -> None:
    registry = await registry_for(python_tool("ping", "no_args"))  # open schema lets "x" through
    outcome = await run_tool(registry.get("ping"), '{"x": 1}')
    assert outcome.status == "error"
    assert outcome.content.startswith("TypeError: ") and "'x'" in outcome.content


async def test_non_string_results_are_serialised_as_json() -> None:
    registry = await registry_for(python_tool("forecast", "returns_dict"), python_tool("nothing", "returns_none"))
    outcome = await run_tool(registry.get("forecast"), '{"city": "Rome"}')
    assert outcome.status == "ok"
    assert orjson.loads(outcome.content) == {"city": "Rome", "temp_c": 21.5, "tags": "{'sunny'}",
                                             "at": "2024-05-01", "7": "seven"}
    assert (await run_tool(registry.get("nothing"), "{}")).content == "null"


@pytest.mark.parametrize(("target", "expected"), [
    ("tests.tools.no_such_module:fn", r"tool 'broken': cannot import module 'tests.tools.no_such_module'"),
    ("tests.tools.sample_tools:missing", r"tool 'broken': 'tests.tools.sample_tools' has no attribute 'missing'"),
    ("tests.tools.sample_tools:NOT_CALLABLE", r"tool 'broken': '.*:NOT_CALLABLE' is not callable"),
    ("tests.tools.sample_tools", r"tool 'broken': python target must look like 'package.module:function'"),
    ("tests.tools.sample_tools:", r"tool 'broken': python target must look like"),
])
async def test_bad_targets_fail_the_registry_build(target: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        await registry_for(python_tool("ok", "no_args"), python_tool("broken", target))


def test_targets_resolve_at_construction() -> None:
    with pytest.raises(ValueError, match="tool 'x'"):
        PythonToolSource([python_tool("x", "tests.tools.sample_tools:nope")])


async def test_source_lists_specs_from_config() -> None:
    source = PythonToolSource([python_tool("ping", "no_args", parameters=NO_ARGS, timeout_s=3, approval="required")])
    [spec] = await source.list_tools()
    assert (spec.name, spec.source, spec.timeout_s, spec.approval) == ("ping", "python", 3, "required")
    assert spec.definition() == {"type": "function", "function": {
        "name": "ping", "description": "ping in Python", "parameters": NO_ARGS}}
