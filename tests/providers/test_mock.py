"""The mock provider: schema-driven arguments, the answer rules, streams and its config keys."""

from __future__ import annotations

import asyncio
from typing import Any

import jsonschema
import orjson
import pytest

from gateway.canonical import Answering, ModelRequest, ModelResponse, TextDelta
from gateway.config.loader import parse_config
from gateway.config.model import ProviderConfig
from gateway.config.transport import Timeouts
from gateway.config.validate import ConfigError
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.mock import MockAdapter, pieces, respond, tools_to_call
from gateway.providers.mock_arguments import sample_arguments
from gateway.providers.registry import adapter_for

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    {"type": "object", "properties": {
        "when": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
        "mail": {"type": "string", "format": "email"}, "id": {"type": "string", "format": "uuid"},
        "short": {"type": "string", "maxLength": 3}, "long": {"type": "string", "minLength": 40},
    }},
    {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 10, "maximum": 20},
        "neg": {"type": "integer", "maximum": -5},
        "open": {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 3},
        "step": {"type": "integer", "minimum": 7, "multipleOf": 5},
        "x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "big": {"type": "number", "minimum": 1000.5},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
    }, "required": ["n", "x", "flag"]},
    {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "mode": {"const": "fast"},
        "level": {"type": "integer", "default": 3},
        "city": {"type": "string", "examples": ["Paris"]},
        "maybe": {"type": ["null", "integer"], "minimum": 4},
    }, "required": ["unit", "mode"]},
    {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3, "uniqueItems": True},
        "ids": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2,
                "uniqueItems": True},
        "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 3, "uniqueItems": True},
        "empty": {"type": "array", "maxItems": 0},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
    }, "required": ["tags"]},
    {"type": "object", "properties": {
        "filter": {"type": "object", "properties": {
            "field": {"type": "string"}, "range": {"type": "object", "properties": {
                "from": {"type": "number", "minimum": 5}, "to": {"type": "number"}}, "required": ["from", "to"]},
        }, "required": ["field", "range"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"},
                                                                             "qty": {"type": "integer", "minimum": 1}},
                                             "required": ["sku", "qty"]}},
    }, "required": ["filter"]},
    {"type": "object", "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"},
                                                                          "y": {"type": "number"}},
                                           "required": ["x", "y"]}},
     "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/point"}]},
                    "c": {"oneOf": [{"type": "integer", "minimum": 2}, {"type": "string"}]},
                    "d": {"allOf": [{"type": "object", "properties": {"p": {"type": "string"}}, "required": ["p"]},
                                    {"properties": {"q": {"type": "boolean"}}, "required": ["q"]}]}},
     "required": ["a", "b", "c", "d"]},
    {"type": "object", "required": ["undeclared"]},
    {"type": "object", "properties": {}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {
        "draft4": {"type": "number", "minimum": 1.5, "exclusiveMinimum": True, "maximum": 2},
        "tuple": {"type": "array", "items": [{"type": "boolean"}, {"type": "integer", "maximum": 0}]}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_generated_arguments_satisfy_their_schema(schema: dict[str, Any]) -> None:
    arguments = sample_arguments(schema)
    jsonschema.validate(arguments, schema)
    assert sample_arguments(schema) == arguments  # deterministic


def test_generated_values_follow_the_documented_rule() -> None:
    assert sample_arguments(SCHEMAS[0]) == {"city": "sample-city"}
    assert sample_arguments(SCHEMAS[3]) == {"unit": "celsius", "mode": "fast", "level": 3, "city": "Paris",
                                            "maybe": 4}
    formats = sample_arguments(SCHEMAS[1])
    assert formats["when"] == "2026-01-01T12:00:00Z" and formats["short"] == "sam" and len(formats["long"]) == 40
    numbers = sample_arguments(SCHEMAS[2])
    assert (numbers["n"], numbers["neg"], numbers["open"], numbers["step"]) == (10, -5, 2, 10)
    assert 0 < numbers["x"] < 1 and numbers["big"] == 1000.5
    draft4 = sample_arguments(SCHEMAS[9])
    assert 1.5 < draft4["draft4"] <= 2 and draft4["tuple"] == [False, 0]
    assert numbers["flag"] is False and numbers["nothing"] is None
    arrays = sample_arguments(SCHEMAS[4])
    assert arrays["tags"] == ["sample-tags", "sample-tags-1", "sample-tags-2"]
    assert arrays["colors"] == ["red", "green", "blue"] and arrays["empty"] == []
    assert arrays["pair"] == ["sample-pair", 2]
    assert sample_arguments(SCHEMAS[7]) == {"undeclared": "sample-undeclared"}


def test_booleans_are_false_unless_the_schema_says_otherwise() -> None:
    # Claude Code's Bash tool: the mock turned on every flag, the sandbox's disabling included.
    bash = {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout": {"type": "number"}, "description": {"type": "string"},
        "run_in_background": {"type": "boolean"}, "dangerouslyDisableSandbox": {"type": "boolean"}},
        "required": ["command"]}
    arguments = sample_arguments(bash)
    assert arguments["run_in_background"] is False and arguments["dangerouslyDisableSandbox"] is False
    said = {"type": "object", "properties": {
        "default_on": {"type": "boolean", "default": True}, "const_on": {"const": True},
        "enum_on": {"type": "boolean", "enum": [True]}, "either": {"type": ["null", "boolean"]},
        "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "uniqueItems": True}}}
    assert sample_arguments(said) == {"default_on": True, "const_on": True, "enum_on": True, "either": False,
                                      "flags": [False, True]}
    jsonschema.validate(sample_arguments(said), said)


def test_recursive_and_hostile_schemas_stay_bounded() -> None:
    recursive = {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "next": {"$ref": "#/$defs/node"}}, "required": ["next"]}}, "properties": {"root": {"$ref": "#/$defs/node"}}}
    depth, node = 0, sample_arguments(recursive)["root"]
    while isinstance(node, dict):
        node, depth = node["next"], depth + 1
    assert node is None and depth < 10
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1000)}}
    assert len(sample_arguments(wide)) == 64
    many = {"type": "object", "properties": {"xs": {"type": "array", "minItems": 10**9}}}
    assert len(sample_arguments(many)["xs"]) == 8
    assert sample_arguments({"type": "object", "properties": {"r": {"$ref": "https://x.test/s.json"}}}) == {
        "r": "sample-r"}
    assert sample_arguments("not a schema") == {}
    assert sample_arguments({"type": "string"}) == {}  # arguments are always an object


def _tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters or {"type": "object"}}}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


TOOLS = [_tool("get_weather", SCHEMAS[0]), _tool("add"), _tool("read_file")]


@pytest.mark.parametrize(("text", "choice", "params", "expected"), [
    ("What is the weather? Use get_weather.", None, {}, ["get_weather"]),
    ("call GET_WEATHER and add", None, {}, ["get_weather", "add"]),
    ("an address, not a tool", None, {}, []),  # "add" only as a whole word
    ("please use the tools", None, {}, ["get_weather", "add", "read_file"]),
    ("please use tools", None, {"parallel_tool_calls": False}, ["get_weather"]),
    ("hello", "required", {}, ["get_weather"]),
    ("hello", {"type": "function", "function": {"name": "read_file"}}, {}, ["read_file"]),
    ("use get_weather", "none", {}, []),
])
def test_which_tools_are_called(text: str, choice: Any, params: dict[str, Any], expected: list[str]) -> None:
    request = ModelRequest(messages=[_user(text)], tools=TOOLS, tool_choice=choice, params=params)
    assert [tool["function"]["name"] for tool in tools_to_call(request)] == expected


def test_a_tool_turn_then_an_answer_from_the_results() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"},
                                      _user("What is the weather in Paris? Use get_weather.")]
    first, parts = respond(ModelRequest(messages=messages, tools=TOOLS), "mock-1")
    assert parts == [] and first.finish_reason == "tool_calls" and first.message["content"] is None
    (call,) = first.tool_calls
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"sample-city"}'}
    assert first.model == "mock-1" and first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    again, _ = respond(ModelRequest(messages=messages, tools=TOOLS), "mock-1")
    # Same request, same answer; but each call's id is its own (identical paused requests must not share one).
    (again_call,) = again.tool_calls
    assert again_call["function"] == call["function"] and again.usage == first.usage
    assert again_call["id"] != call["id"] and again_call["id"].startswith("call_") and call["id"].startswith("call_")
    assert len({respond(ModelRequest(messages=messages, tools=TOOLS), "mock-1")[0].tool_calls[0]["id"]
                for _ in range(50)}) == 50
    messages += [first.message, {"role": "tool", "tool_call_id": call["id"], "content": "Paris: 18C" + "!" * 900}]
    final, parts = respond(ModelRequest(messages=messages, tools=TOOLS), "mock-1")
    assert final.finish_reason == "stop" and not final.tool_calls
    assert final.message["content"] == "The get_weather tool returned: Paris: 18C" + "!" * 490 + "…"
    assert "".join(parts) == final.message["content"]
    assert final.id != first.id


def test_text_answers_echo_and_respect_max_tokens() -> None:
    response, parts = respond(ModelRequest(messages=[_user("hello there, gateway")]), "m")
    assert response.message["content"] == "You said: hello there, gateway" and response.finish_reason == "stop"
    assert parts == ["You", " said:", " hello", " there,", " gateway"]
    assert response.usage.completion_tokens == 5
    cut, parts = respond(ModelRequest(messages=[_user("one two three four")], params={"max_tokens": 3}), "m")
    assert cut.message["content"] == "You said: one" and cut.finish_reason == "length" and len(parts) == 3
    empty, _ = respond(ModelRequest(messages=[{"role": "system", "content": "x"}]), "m")
    assert empty.message["content"] == "Hello from the mock provider."
    long_word = "x" * 30
    assert pieces(f"a {long_word}") == ["a", " xxxxxxxxxxxx", "xxxxxxxxxxxx", "xxxxxx"]


def _provider(**pace: float) -> ProviderConfig:
    return ProviderConfig(name="demo", type="mock", base_url="", **pace)  # type: ignore[arg-type]


async def _collect(adapter: MockAdapter, request: ModelRequest, provider: ProviderConfig,
                   timeout: float = 30.0) -> tuple[list[list[Any]], ModelResponse]:
    batches: list[list[Any]] = []
    final = None
    async for item in adapter.stream(request, provider, "mock-1", timeout):
        if isinstance(item, ModelResponse):
            final = item
        else:
            batches.append(item)
    assert final is not None
    return batches, final


async def test_stream_pieces_and_the_answering_marker() -> None:
    adapter = adapter_for("mock")
    assert isinstance(adapter, MockAdapter) and adapter.in_process
    request = ModelRequest(messages=[_user("stream me please")])
    unpaced, final = await _collect(adapter, request, _provider())
    assert unpaced == [[Answering("mock-1"), TextDelta("You"), TextDelta(" said:"), TextDelta(" stream"),
                        TextDelta(" me"), TextDelta(" please")]]
    paced, paced_final = await _collect(adapter, request, _provider(tokens_per_s=1000))
    assert paced[0] == [Answering("mock-1"), TextDelta("You")] and len(paced) == 5
    assert paced_final == final == await adapter.complete(request, _provider(), "mock-1", 30)
    tool_turn, response = await _collect(adapter, ModelRequest(messages=[_user("use add")], tools=TOOLS), _provider())
    assert tool_turn == [] and response.tool_calls[0]["function"]["name"] == "add"


async def test_latency_beyond_the_time_allowed_is_a_timeout() -> None:
    adapter = MockAdapter()
    slow = ProviderConfig(name="demo", type="mock", base_url="", latency_ms=60_000,
                          timeouts=Timeouts(read=0.01))
    with pytest.raises(ProviderError) as caught:
        await adapter.complete(ModelRequest(messages=[_user("hi")]), slow, "m", 30)
    assert caught.value.error_class is ErrorClass.TIMEOUT
    with pytest.raises(ProviderError) as caught:
        await _collect(adapter, ModelRequest(messages=[_user("hi")]), _provider(latency_ms=60_000), timeout=0.01)
    assert caught.value.error_class is ErrorClass.TIMEOUT
    crawl = ProviderConfig(name="demo", type="mock", base_url="", tokens_per_s=0.001,
                           timeouts=Timeouts(read=0.01))
    with pytest.raises(ProviderError) as caught:
        await _collect(adapter, ModelRequest(messages=[_user("two words")]), crawl)
    assert caught.value.error_class is ErrorClass.TIMEOUT
    await asyncio.sleep(0)


def _config(provider: str) -> str:
    return f"providers:\n  demo: {provider}\nmodels:\n  demo: {{targets: [{{provider: demo, model: m}}]}}\n"


def test_config_keys_of_the_mock_provider() -> None:
    config = parse_config(_config("{type: mock}"), env={})
    demo = config.providers["demo"]
    assert (demo.type, demo.base_url, demo.api_key, demo.latency_ms, demo.tokens_per_s) == ("mock", "", "", 0, 0)
    paced = parse_config(_config("{type: mock, latency_ms: 250, tokens_per_s: 20}"), env={}).providers["demo"]
    assert (paced.latency_ms, paced.tokens_per_s) == (250.0, 20.0)
    for bad, path in [("{type: mock, latency_ms: -1}", "providers.demo.latency_ms"),
                      ("{type: mock, latency_ms: 600001}", "providers.demo.latency_ms"),
                      ("{type: mock, tokens_per_s: .nan}", "providers.demo.tokens_per_s"),
                      ("{type: mock, tokens_per_s: fast}", "providers.demo.tokens_per_s"),
                      ("{type: openai, latency_ms: 5}", "providers.demo.latency_ms")]:
        with pytest.raises(ConfigError) as caught:
            parse_config(_config(bad), env={})
        assert caught.value.path == path, bad


def test_the_example_config_serves_route_demo_with_the_demo_tools() -> None:
    from pathlib import Path

    from gateway.demo import book_meeting, get_weather

    text = (Path(__file__).resolve().parents[2] / "config" / "gateway.yaml").read_text()
    config = parse_config(text, env={})
    route = config.models["demo"]
    assert config.providers[route.targets[0].provider].type == "mock"
    assert route.tools == ("get_weather", "book_meeting")
    tool = config.tools["get_weather"]
    assert tool.python == "gateway.demo:get_weather" and tool.approval == "never"
    arguments = sample_arguments(tool.parameters)
    jsonschema.validate(arguments, tool.parameters)
    report = get_weather(**arguments)
    assert report == get_weather(**arguments) and report["city"] == "Paris"
    assert orjson.loads(orjson.dumps(report)) == report
    # The one that waits for a person: what the mock asks it, it answers, deterministically and JSON-safe.
    booking = config.tools["book_meeting"]
    assert booking.python == "gateway.demo:book_meeting" and booking.approval == "required"
    arguments = sample_arguments(booking.parameters)
    jsonschema.validate(arguments, booking.parameters)
    booked = book_meeting(**arguments)
    assert booked == book_meeting(**arguments) and booked["booked"] is True and booked["title"] == "Planning"
    assert orjson.loads(orjson.dumps(booked)) == booked
