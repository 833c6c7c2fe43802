"""ToolRegistry: build from config, lookups, definitions, compiled validators, refresh of sources."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.config.model import ToolConfig
from gateway.tools import HttpToolSource, PythonToolSource, ToolRegistry, ToolSpec, run_tool
from tests.tools.helpers import NO_ARGS, ScriptedSource, http_tool, python_tool


def spec(name: str, parameters: dict[str, Any] | None = None, source: str = "mcp") -> ToolSpec:
    return ToolSpec(name, f"{name} tool", parameters or {"type": "object"}, source=source)


async def echo(arguments: dict[str, Any]) -> str:
    return str(arguments)


async def test_from_config_groups_tools_into_sources() -> None:
    registry = await ToolRegistry.from_config({
        "get_weather": http_tool("get_weather", "http://127.0.0.1:9/run"),
        "ping": python_tool("ping", "no_args", parameters=NO_ARGS),
    })
    assert sorted(registry.names) == ["get_weather", "ping"]
    assert len(registry) == 2 and "ping" in registry and "nope" not in registry
    assert [type(s) for s in registry.sources] == [HttpToolSource, PythonToolSource]
    weather = registry.get("get_weather")
    assert weather is not None
    assert (weather.spec.source, weather.source) == ("http", registry.sources[0])
    assert registry.get("nope") is None
    await registry.aclose()


async def test_definitions_follow_the_requested_order() -> None:
    registry = await ToolRegistry.from_config({n: python_tool(n, "no_args") for n in ("a", "b", "c")})
    defs = registry.definitions(["c", "a", "b"])
    assert [d["function"]["name"] for d in defs] == ["c", "a", "b"]
    assert defs[0] == {"type": "function",
                       "function": {"name": "c", "description": "c in Python", "parameters": {"type": "object"}}}
    assert registry.definitions([]) == []
    with pytest.raises(KeyError, match="unknown tool 'zzz'"):
        registry.definitions(["a", "zzz"])


async def test_validator_is_compiled_once_and_kept_across_refreshes() -> None:
    registry = await ToolRegistry.from_config({"ping": python_tool("ping", "no_args", parameters=NO_ARGS)})
    tool = registry.get("ping")
    validator = tool.validator
    assert validator.schema == NO_ARGS
    await run_tool(tool, "{}")
    await registry.refresh()
    assert registry.get("ping") is tool and registry.get("ping").validator is validator


async def test_schema_dialect_follows_dollar_schema() -> None:
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"n": {"type": "integer"}}}
    registry = await ToolRegistry.from_config({"t": python_tool("t", "no_args", parameters=draft7)})
    assert type(registry.get("t").validator).__name__ == "Draft7Validator"
    default = await ToolRegistry.from_config({"t": python_tool("t", "no_args")})
    assert type(default.get("t").validator).__name__ == "Draft202012Validator"


async def test_invalid_schema_fails_the_build_naming_the_tool() -> None:
    bad = {"type": "object", "properties": {"n": {"type": "integr"}}}
    with pytest.raises(ValueError, match=r"tool 'broken' \(source 'python'\): invalid JSON Schema"):
        await ToolRegistry.from_config({"broken": python_tool("broken", "no_args", parameters=bad)})


async def test_tool_with_both_or_neither_target_is_rejected() -> None:
    neither = ToolConfig(name="x", description="", parameters={"type": "object"})
    with pytest.raises(ValueError, match="tool 'x' needs exactly one of"):
        await ToolRegistry.from_config({"x": neither})


async def test_refresh_picks_up_added_changed_and_removed_tools() -> None:
    mcp = ScriptedSource("mcp", [spec("search")], {"search": echo, "fetch": echo})
    registry = await ToolRegistry.from_config({"ping": python_tool("ping", "no_args")})
    registry.add_source(mcp)
    assert registry.get("search") is None  # not listed until the next refresh
    await registry.refresh()
    search = registry.get("search")
    assert search is not None and search.source is mcp
    assert (await run_tool(search, '{"q": "x"}')).content == "{'q': 'x'}"

    changed = {"type": "object", "required": ["q"]}
    mcp.specs = [spec("search", changed), spec("fetch")]
    await registry.refresh()
    assert registry.get("search") is not search and registry.get("search").validator.schema == changed
    assert (await run_tool(registry.get("search"), "{}")).content == (
        "Invalid arguments for search: 'q' is a required property")
    assert registry.get("fetch") is not None

    mcp.specs = [spec("fetch")]
    await registry.refresh()
    assert registry.get("search") is None and sorted(registry.names) == ["fetch", "ping"]


async def test_a_failing_source_keeps_its_previous_tools(caplog: pytest.LogCaptureFixture) -> None:
    mcp = ScriptedSource("mcp", [spec("search")])
    registry = ToolRegistry([mcp])
    await registry.refresh()
    mcp.fail_listing = True
    mcp.specs = []
    with caplog.at_level(logging.ERROR, logger="loopgate.tools"):
        await registry.refresh()
    assert registry.get("search") is not None
    assert "tool source mcp failed to list its tools" in caplog.text


async def test_strict_refresh_raises_and_leaves_the_table_untouched() -> None:
    mcp = ScriptedSource("mcp", [spec("search")])
    registry = ToolRegistry([mcp])
    await registry.refresh(strict=True)
    mcp.fail_listing = True
    mcp.specs = [spec("other")]
    with pytest.raises(ConnectionError, match="mcp is down"):
        await registry.refresh(strict=True)
    assert registry.names == ["search"]


async def test_duplicate_tool_names_across_sources(caplog: pytest.LogCaptureFixture) -> None:
    first = ScriptedSource("one", [spec("dup", source="one")])
    second = ScriptedSource("two", [spec("dup", source="two")])
    registry = ToolRegistry([first, second])
    with pytest.raises(ValueError, match="tool 'dup' is provided by both source 'one' and source 'two'"):
        await registry.refresh(strict=True)
    assert registry.names == []
    with caplog.at_level(logging.ERROR, logger="loopgate.tools"):
        await registry.refresh()
    assert registry.get("dup").source is first
    assert "keeping the first" in caplog.text


async def test_a_source_listing_a_name_twice_is_an_error() -> None:
    registry = ToolRegistry([ScriptedSource("mcp", [spec("x"), spec("x")])])
    with pytest.raises(ValueError, match="lists tool 'x' twice"):
        await registry.refresh(strict=True)


async def test_source_names_are_unique() -> None:
    registry = ToolRegistry([ScriptedSource("mcp")])
    with pytest.raises(ValueError, match="already registered"):
        registry.add_source(ScriptedSource("mcp"))


async def test_aclose_closes_every_source() -> None:
    sources = [ScriptedSource("a"), ScriptedSource("b")]
    registry = ToolRegistry(sources)
    await registry.aclose()
    assert all(s.closed for s in sources)


def test_tool_spec_is_hashable_and_compares_parameters() -> None:
    a, b = spec("x", {"type": "object"}), spec("x", {"type": "object", "required": ["q"]})
    assert a != b and a == spec("x", {"type": "object"})
    assert hash(a) == hash(b)  # parameters take no part in the hash
