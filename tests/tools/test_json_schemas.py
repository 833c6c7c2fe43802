"""Outside schemas never make the gateway fetch: a non-local ``$ref`` is refused at listing, unresolvable in a
validator (an error result, not a request), and refused in a config; a schema's size and nesting are bounded."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from referencing.exceptions import Unresolvable

from gateway.config import ConfigError, parse_config
from gateway.json_schemas import MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_DEPTH, compile_schema, schema_problem
from gateway.tools import ToolRegistry, ToolSpec, run_tool
from tests.e2e.test_mcp_hostile import CountingServer
from tests.tools.helpers import ScriptedSource


@pytest.fixture
def counting() -> Any:
    server = CountingServer()
    yield server
    server.stop()


def spec(name: str, parameters: dict[str, Any]) -> ToolSpec:
    return ToolSpec(name, "a probe", parameters, timeout_s=5.0, source="scripted")


def deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(("schema", "problem"), [
    ({"properties": {"q": {"$ref": "http://x/s.json"}}}, "refers to 'http://x/s.json'"),
    ({"$defs": {"a": {"$dynamicRef": "other.json#a"}}}, "refers to 'other.json#a'"),
    ({"items": [{"$ref": "file:///etc/passwd"}]}, "refers to 'file:///etc/passwd'"),
    (deep(MAX_TOOL_SCHEMA_DEPTH), "nested deeper than"),
    ({"description": "x" * MAX_TOOL_SCHEMA_BYTES}, "larger than"),
])
def test_refused_schemas(schema: dict[str, Any], problem: str) -> None:
    assert problem in (schema_problem(schema) or "")


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"properties": {"a": {"enum": [{"$ref": "http://x/"}]}, "b": {"default": {"$ref": "http://x/"}}}},
    {"properties": {"$ref": {"type": "string"}}},  # a property named "$ref" is no reference
])
def test_accepted_schemas(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None


async def test_a_reference_the_schema_cannot_resolve_fails_the_call_with_an_error_result(
        counting: CountingServer) -> None:
    # "#/..." under a remote "$id": local-looking, passes the listing, and points nowhere when resolved.
    schema = {"type": "object", "properties": {"a": {"$id": counting.url, "$ref": "#/definitions/x"}}}
    assert schema_problem(schema) is None
    calls: list[Any] = []
    registry = ToolRegistry([ScriptedSource("scripted", [spec("probe", schema)],
                                            {"probe": lambda **kw: calls.append(kw) or "ran"})])
    await registry.refresh(strict=True)
    outcome = await run_tool(registry.get("probe"), '{"a": 1}')
    assert counting.hits == [] and calls == []
    assert outcome.status == "error" and "only local references are followed" in outcome.content


async def test_a_listed_tool_with_a_remote_ref_is_left_out_with_a_warning(
        counting: CountingServer, caplog: pytest.LogCaptureFixture) -> None:
    tools = [spec("bad", {"type": "object", "properties": {"q": {"$ref": counting.url}}}),
             spec("good", {"type": "object"})]
    registry = ToolRegistry([ScriptedSource("scripted", tools, {"good": lambda: "ok", "bad": lambda: "no"})])
    with caplog.at_level(logging.WARNING, "loopgate.tools"):
        await registry.refresh(strict=True)
    assert registry.names == ["good"]
    assert "tool 'bad' left out: its input schema refers to" in caplog.text
    assert counting.hits == []


def test_a_validator_never_fetches(counting: CountingServer) -> None:
    validator = compile_schema({"properties": {"q": {"$ref": counting.url}}}, "probe")
    with pytest.raises(Unresolvable):
        list(validator.iter_errors({"q": 1}))
    assert counting.hits == []


def test_a_config_tool_with_a_remote_ref_is_a_config_error() -> None:
    text = """
providers: {p: {type: openai, base_url: "http://127.0.0.1:9/v1"}}
tools:
  t:
    parameters: {type: object, properties: {q: {$ref: "http://169.254.169.254/latest"}}}
    http: {url: "http://127.0.0.1:9/run"}
models: {m: {targets: [{provider: p, model: x}], tools: [t]}}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, {})
    assert "tools.t.parameters" in str(caught.value) and "only local references" in str(caught.value)


def test_an_elicitation_answer_is_checked_without_fetching(counting: CountingServer) -> None:
    from gateway.errors import GatewayError
    from gateway.loop.elicitation import check_content

    schema = {"type": "object", "$id": counting.url, "properties": {"name": {"$ref": counting.url, "type": "string"},
                                                                    "age": {"type": "integer", "$ref": "#/$defs/x"}}}
    check_content(schema, {"name": "Ada"}, "content")
    with pytest.raises(GatewayError):
        check_content(schema, {"name": 5}, "content")
    assert counting.hits == []
