"""Anthropic Messages adapter: golden translations from the reference examples, parsing, streaming, errors.

Every request body the adapter builds is also run through ``anthropic_request_problems``, the rules a
strict Anthropic server enforces, so "translates as intended" and "would be accepted" are both checked.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import ModelRequest, ModelResponse, ReasoningDelta, StreamDelta, TextDelta
from gateway.config.model import ProviderConfig
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.anthropic_messages import sanitize_tool_id
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.providers.streams import content, parse_in_pieces, parse_stream, sse_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "anthropic"
ADAPTER = AnthropicAdapter()
PROVIDER = ProviderConfig(name="claude", type="anthropic", base_url="https://api.anthropic.com", api_key="sk-test",
                          headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
MODEL = "claude-sonnet-4-5"
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for one city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def fixture(name: str) -> Any:
    return orjson.loads((FIXTURES / name).read_bytes())


def build(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
          model: str = MODEL, stream: bool = False, provider: ProviderConfig = PROVIDER,
          **params: Any) -> dict[str, Any]:
    request = ModelRequest(messages=messages, tools=tools or [], tool_choice=tool_choice, params=params)
    body = orjson.loads(ADAPTER.build_request(request, provider, model, stream).body)
    assert anthropic_request_problems(body) == []
    return body


def from_openai(openai_body: dict[str, Any], model: str = MODEL) -> dict[str, Any]:
    """Build from a whole OpenAI request body the way the API layer splits it."""
    rest = {k: v for k, v in openai_body.items() if k not in ("model", "messages", "tools", "tool_choice")}
    stream = bool(rest.pop("stream", False))
    return build(openai_body["messages"], openai_body.get("tools"), openai_body.get("tool_choice"), model,
                 stream, **rest)


def bad_request(messages: list[dict[str, Any]], **kwargs: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        build(messages, **kwargs)
    assert info.value.error_class is ErrorClass.BAD_REQUEST
    assert info.value.status == 400
    return info.value


def call(call_id: str, name: str = "get_weather", arguments: Any = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


USER = {"role": "user", "content": "Weather in Paris?"}


# --- request translation -------------------------------------------------------------------


def test_mapping_example_translates_exactly() -> None:
    example = fixture("openai_to_anthropic_request.json")
    assert from_openai(example["openai_request"]) == example["anthropic_request"]


def test_first_request_example_matches_native_fixture() -> None:
    native = fixture("01_request_tools_thinking.json")
    openai_body = {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "system", "content": native["system"][0]["text"]},
                     {"role": "user", "content": native["messages"][0]["content"]}],
        "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                    "parameters": t["input_schema"]}} for t in native["tools"]],
        "tool_choice": "auto", "max_tokens": 4096, "reasoning_effort": "medium", "stream": True,
        "stream_options": {"include_usage": True}, "user": "end-user-4711",
    }
    assert from_openai(openai_body) == native


def test_tool_results_passback_example() -> None:
    native = fixture("04_request_tool_results_passback.json")
    assistant = native["messages"][1]["content"]
    results = native["messages"][2]["content"]
    body = build(
        [{"role": "system", "content": native["system"][0]["text"]},
         {"role": "user", "content": native["messages"][0]["content"]},
         {"role": "assistant", "content": assistant[1]["text"], "thinking_blocks": [assistant[0]],
          "reasoning_content": assistant[0]["thinking"],
          "tool_calls": [call(b["id"], b["name"], orjson.dumps(b["input"]).decode()) for b in assistant[2:]]},
         {"role": "tool", "tool_call_id": results[0]["tool_use_id"], "content": results[0]["content"]},
         {"role": "tool", "tool_call_id": results[1]["tool_use_id"], "content": results[1]["content"]}],
        tools=[{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                 "parameters": t["input_schema"]}} for t in native["tools"]],
        max_tokens=4096, reasoning_effort="medium")
    # OpenAI tool messages have no error flag, so is_error is the one thing that cannot round-trip.
    expected = copy.deepcopy(native)
    del expected["messages"][2]["content"][1]["is_error"]
    assert body == expected


def test_url_headers_and_provider_headers() -> None:
    request = ADAPTER.build_request(ModelRequest(messages=[USER]), PROVIDER, MODEL, stream=True)
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers == {"content-type": "application/json", "anthropic-version": "2023-06-01",
                               "x-api-key": "sk-test", "anthropic-beta": "interleaved-thinking-2025-05-14"}
    assert orjson.loads(request.body)["stream"] is True
    v1 = ProviderConfig(name="p", type="anthropic", base_url="https://proxy.example/v1")
    assert ADAPTER.build_request(ModelRequest(messages=[USER]), v1, MODEL, False).url == \
        "https://proxy.example/v1/messages"
    assert "stream" not in orjson.loads(ADAPTER.build_request(ModelRequest(messages=[USER]), v1, MODEL, False).body)


def test_system_and_developer_messages_are_hoisted_in_order() -> None:
    body = build([{"role": "system", "content": "Be brief."}, USER,
                  {"role": "developer", "content": [{"type": "text", "text": "Use metric."},
                                                    {"type": "text", "text": " "},
                                                    {"type": "text", "text": "No emoji.",
                                                     "cache_control": {"type": "ephemeral"}}]}])
    assert body["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric."},
                              {"type": "text", "text": "No emoji.", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"] == [{"role": "user", "content": "Weather in Paris?"}]


def test_user_images_data_and_http() -> None:
    body = build([{"role": "user", "content": [
        {"type": "text", "text": "Compare"},
        {"type": "text", "text": ""},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}}]}])
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]
    bad_request([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}])
    bad_request([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "..."}}]}])


def test_tools_schema_cleanup() -> None:
    tools = [{"type": "function", "function": {
        "name": "lookup", "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "anyOf": [{"properties": {"id": {"type": "string"}}, "required": ["id"]},
                      {"properties": {"email": {"type": "string"}}}]}}},
        {"type": "function", "function": {"name": "ping", "description": ""}}]
    body = build([USER], tools=tools)
    assert body["tools"] == [
        {"name": "lookup", "input_schema": {"type": "object", "properties": {
            "id": {"type": "string"}, "email": {"type": "string"}}}},
        {"name": "ping", "input_schema": {"type": "object", "properties": {}}}]
    assert "$schema" in tools[0]["function"]["parameters"]  # the caller's definition is not mutated
    bad_request([USER], tools=[{"type": "custom", "custom": {"name": "grammar"}}])


@pytest.mark.parametrize(("choice", "params", "expected"), [
    ("auto", {}, {"type": "auto"}),
    ("none", {}, {"type": "none"}),
    ("required", {}, {"type": "any"}),
    ({"type": "function", "function": {"name": "get_weather"}}, {}, {"type": "tool", "name": "get_weather"}),
    (None, {"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", {"parallel_tool_calls": False}, {"type": "any", "disable_parallel_tool_use": True}),
    ({"type": "function", "function": {"name": "get_weather"}}, {"parallel_tool_calls": False},
     {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
    ("none", {"parallel_tool_calls": False}, {"type": "none"}),  # none takes no parallel flag
    ("auto", {"parallel_tool_calls": True}, {"type": "auto"}),
    (None, {}, None),
])
def test_tool_choice_mapping(choice: Any, params: dict[str, Any], expected: dict[str, Any] | None) -> None:
    body = build([USER], tools=[WEATHER_TOOL], tool_choice=choice, **params)
    assert body.get("tool_choice") == expected


def test_allowed_tools_filters_and_maps_mode() -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    choice = {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}
    body = build([USER], tools=[WEATHER_TOOL, other], tool_choice=choice)
    assert [t["name"] for t in body["tools"]] == ["get_time"]
    assert body["tool_choice"] == {"type": "any"}


def test_no_tools_means_no_tool_choice() -> None:
    body = build([USER], tool_choice="auto", parallel_tool_calls=False)
    assert "tools" not in body and "tool_choice" not in body


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_choice_with_thinking_downgrades_to_auto(choice: Any) -> None:
    body = build([USER], tools=[WEATHER_TOOL], tool_choice=choice, reasoning_effort="low", parallel_tool_calls=False)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_max_tokens_sources() -> None:
    assert build([USER])["max_tokens"] == PROVIDER.default_max_tokens
    assert build([USER], max_tokens=300)["max_tokens"] == 300
    assert build([USER], max_tokens=300, max_completion_tokens=500)["max_tokens"] == 500
    small = ProviderConfig(name="p", type="anthropic", base_url="https://x", default_max_tokens=1000)
    assert build([USER], provider=small)["max_tokens"] == 1000
    bad_request([USER], max_tokens="lots")
    bad_request([USER], max_completion_tokens=-5)


def test_thinking_budget_policy() -> None:
    # No client maximum: max_tokens grows to twice the budget.
    body = build([USER], reasoning_effort="high")
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert body["max_tokens"] == 16384
    # A client maximum is respected; the budget takes at most half of it.
    body = build([USER], reasoning_effort="high", max_completion_tokens=6000)
    assert (body["thinking"], body["max_tokens"]) == ({"type": "enabled", "budget_tokens": 3000}, 6000)
    # Half of the maximum is under Anthropic's 1024 minimum: no thinking.
    assert "thinking" not in build([USER], reasoning_effort="low", max_tokens=1500)
    assert "thinking" not in build([USER], reasoning_effort="none")
    bad_request([USER], reasoning_effort="extreme")
    bad_request([USER], reasoning_effort=["high"])


@pytest.mark.parametrize("model", ["claude-opus-4-7", "claude-sonnet-5", "claude-fable-5",
                                   "anthropic.claude-opus-4-6-v1"])
def test_adaptive_thinking_models_get_effort(model: str) -> None:
    body = build([USER], model=model, reasoning_effort="medium", temperature=0.3)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "medium"}
    assert body["max_tokens"] == PROVIDER.default_max_tokens
    assert "temperature" not in body


@pytest.mark.parametrize("model", ["claude-sonnet-4-20250514", "claude-opus-4-1-20250805", "claude-3-7-sonnet-latest",
                                   "claude-haiku-4-5", "my-deployment"])
def test_budget_thinking_models(model: str) -> None:
    assert build([USER], model=model, reasoning_effort="low")["thinking"]["type"] == "enabled"


def test_sampling_params() -> None:
    body = build([USER], temperature=1.7, stop="END", top_k=5)
    assert (body["temperature"], body["stop_sequences"], body["top_k"]) == (1.0, ["END"], 5)
    assert build([USER], temperature=-0.5)["temperature"] == 0.0
    assert build([USER], stop=["a", "\n", "", "b"])["stop_sequences"] == ["a", "b"]
    assert "stop_sequences" not in build([USER], stop=["\n\n"])
    # Newer models reject temperature together with top_p: temperature wins.
    body = build([USER], temperature=0.2, top_p=0.5)
    assert body["temperature"] == 0.2 and "top_p" not in body
    assert build([USER], top_p=0.5)["top_p"] == 0.5
    # Thinking forbids temperature other than 1 and top_k, and needs top_p >= 0.95.
    body = build([USER], reasoning_effort="low", temperature=0.2, top_p=0.5, top_k=5)
    assert "temperature" not in body and "top_k" not in body and body["top_p"] == 0.95


def test_user_becomes_metadata_and_unknown_params_are_dropped() -> None:
    body = build([USER], user="u-1", seed=7, frequency_penalty=0.5, presence_penalty=0.1, logit_bias={"1": 2},
                 logprobs=True, top_logprobs=2, stream_options={"include_usage": True}, n=1, store=True,
                 service_tier="flex", metadata={"k": "v"}, something_new={"x": 1})
    assert body == {"model": MODEL, "max_tokens": PROVIDER.default_max_tokens,
                    "messages": [{"role": "user", "content": "Weather in Paris?"}], "metadata": {"user_id": "u-1"}}


def test_n_greater_than_one_is_rejected() -> None:
    assert "n > 1" in bad_request([USER], n=2).message


def test_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    body = build([USER], response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "output_config" not in build([USER], response_format={"type": "text"})
    error = bad_request([USER], response_format={"type": "json_object"})
    assert "json_object" in error.message and "json_schema" in error.message


def test_tool_ids_are_sanitised_on_both_sides_and_stay_distinct() -> None:
    ids = ["call.1|fc", "call:1|fc", "toolu_01ok-_"]
    body = build([USER, {"role": "assistant", "content": None,
                         "tool_calls": [call(i, arguments='{"city": "X"}') for i in ids]},
                  *({"role": "tool", "tool_call_id": i, "content": "sunny"} for i in ids)], tools=[WEATHER_TOOL])
    uses = [b["id"] for b in body["messages"][1]["content"]]
    results = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    assert uses == results
    assert uses[2] == "toolu_01ok-_"
    assert len(set(uses)) == 3
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", i) for i in uses)
    assert uses[0].startswith("call_1_fc_") and sanitize_tool_id("call.1|fc") == uses[0]


def test_tool_results_merge_with_following_user_text() -> None:
    body = build([USER, {"role": "assistant", "content": "Checking.", "tool_calls": [call("a"), call("b")]},
                  {"role": "tool", "tool_call_id": "a", "content": "18C"},
                  {"role": "tool", "tool_call_id": "b", "content": ""},
                  {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]}], tools=[WEATHER_TOOL])
    assert len(body["messages"]) == 3
    assert body["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "b"},
        {"type": "text", "text": "And tomorrow?"}]}


def test_thinking_blocks_replayed_first_verbatim_and_artifacts_stripped() -> None:
    blocks = fixture("06_response_redacted_thinking.json")["content"][:2]
    call_with_signature = {**call("toolu_1"), "extra_content": {"google": {"thought_signature": "c2ln"}}}
    messages = [USER, {"role": "assistant", "content": "On it.", "reasoning_content": "I should check.",
                       "thinking_blocks": blocks, "tool_calls": [call_with_signature]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "rain"}]
    request = ModelRequest(messages=messages, tools=[WEATHER_TOOL], params={"reasoning_effort": "low"})
    raw = ADAPTER.build_request(request, PROVIDER, MODEL, False).body
    assert b"reasoning_content" not in raw and b"extra_content" not in raw and b"thought_signature" not in raw
    body = orjson.loads(raw)
    assert anthropic_request_problems(body) == []
    assert body["thinking"]["type"] == "enabled"
    assert body["messages"][1]["content"] == [*blocks, {"type": "text", "text": "On it."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]


def test_tool_calls_without_thinking_blocks_disable_thinking_for_the_turn() -> None:
    foreign = [USER, {"role": "assistant", "content": None, "tool_calls": [call("call_1")],
                      "reasoning_content": "DeepSeek reasoning, not an Anthropic block"},
               {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
    body = build(foreign, tools=[WEATHER_TOOL], tool_choice="required", reasoning_effort="medium")
    assert "thinking" not in body
    assert body["tool_choice"] == {"type": "any"}  # nothing left to conflict with
    # Once a new user turn starts, earlier blockless calls no longer matter.
    body = build([*foreign, {"role": "assistant", "content": "Rain."}, {"role": "user", "content": "Thanks"}],
                 tools=[WEATHER_TOOL], reasoning_effort="medium")
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_assistant_argument_edge_cases() -> None:
    body = build([USER, {"role": "assistant", "content": "", "tool_calls": [
        call("a", "ping", ""), call("b", "ping", None), call("c", "ping", {"x": 1})]},
        *({"role": "tool", "tool_call_id": i, "content": "ok"} for i in "abc")],
        tools=[{"type": "function", "function": {"name": "ping"}}])
    assert [b["input"] for b in body["messages"][1]["content"]] == [{}, {}, {"x": 1}]
    # A model's malformed arguments (answered with an error result by the loop) go back as {}, never a 400.
    for arguments in ('{"city": ', "[1, 2]", '"Paris"'):
        body = build([USER, {"role": "assistant", "content": None, "tool_calls": [call("a", arguments=arguments)]},
                      {"role": "tool", "tool_call_id": "a", "content": "x"}], tools=[WEATHER_TOOL])
        assert body["messages"][1]["content"][0]["input"] == {}


def test_empty_assistant_messages_are_skipped() -> None:
    body = build([USER, {"role": "assistant", "content": None}, {"role": "assistant", "content": "  "},
                  {"role": "user", "content": "Hello?"}])
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                                                             {"type": "text", "text": "Hello?"}]}]


# --- response parsing ----------------------------------------------------------------------


def parse(payload: dict[str, Any]) -> ModelResponse:
    return ADAPTER.parse_response(orjson.dumps(payload))


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": content,
            "stop_reason": stop_reason, "usage": {"input_tokens": 10, "output_tokens": 5, **usage}}


def test_parse_text_response_with_cache_usage() -> None:
    response = ADAPTER.parse_response((FIXTURES / "05_response_final.json").read_bytes())
    native = fixture("05_response_final.json")["content"]
    assert response.message == {"role": "assistant", "content": native[0]["text"], "anthropic_content": native}
    assert response.finish_reason == "stop"
    assert (response.id, response.model) == ("msg_01Pq8Rs0Tu2Vw4Xy6Za8Bc0D", "claude-sonnet-4-5-20250929")
    assert response.usage.to_openai() == {
        "prompt_tokens": 735 + 512, "completion_tokens": 41, "total_tokens": 735 + 512 + 41,
        "prompt_tokens_details": {"cached_tokens": 512}, "completion_tokens_details": {"reasoning_tokens": 0}}
    usage = parse(message([{"type": "text", "text": "x"}], cache_creation_input_tokens=100,
                          cache_read_input_tokens=30, output_tokens_details={"thinking_tokens": 3})).usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens, usage.reasoning_tokens) == \
        (140, 30, 5, 3)


def test_parse_thinking_and_parallel_tool_use() -> None:
    native = fixture("02_response_thinking_tool_use.json")
    response = ADAPTER.parse_response((FIXTURES / "02_response_thinking_tool_use.json").read_bytes())
    assert response.message == {
        "role": "assistant", "content": "I'll look up both cities.",
        "tool_calls": [
            {"id": "toolu_01A7bC9dE2fG4hJ6kL8mN0pQ", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"celsius"}'}},
            {"id": "toolu_01R3sT5uV7wX9yZ1aB3cD5eF", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Tokyo","unit":"celsius"}'}}],
        "thinking_blocks": [native["content"][0]],
        "reasoning_content": native["content"][0]["thinking"],
        "anthropic_content": native["content"]}
    assert response.finish_reason == "tool_calls"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (512, 168)


def test_parse_single_tool_call_without_text() -> None:
    content = [{"type": "tool_use", "id": "toolu_9", "name": "ping", "input": {}}]
    response = parse(message(content, "tool_use"))
    assert response.message == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "toolu_9", "type": "function", "function": {"name": "ping", "arguments": "{}"}}],
        "anthropic_content": content}


def test_parse_redacted_thinking_keeps_every_block_in_order() -> None:
    native = fixture("06_response_redacted_thinking.json")
    response = ADAPTER.parse_response((FIXTURES / "06_response_redacted_thinking.json").read_bytes())
    assert response.message["thinking_blocks"] == native["content"][:2]
    assert response.message["reasoning_content"] == "I should check the weather first."
    assert response.message["content"] is None
    assert response.tool_calls[0]["function"]["arguments"] == '{"city":"Oslo","unit":"celsius"}'


@pytest.mark.parametrize(("stop_reason", "expected"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "stop"),
    ("refusal", "content_filter"), ("model_context_window_exceeded", "length"), ("pause_turn", "stop"),
    ("some_future_reason", "stop"),
])
def test_stop_reasons(stop_reason: str, expected: str) -> None:
    assert parse(message([{"type": "text", "text": "x"}], stop_reason)).finish_reason == expected


@pytest.mark.parametrize(("stop_reason", "expected"), [
    ("end_turn", "tool_calls"), ("tool_use", "tool_calls"), ("max_tokens", "length")])
def test_tool_use_blocks_decide_the_finish_reason(stop_reason: str, expected: str) -> None:
    content = [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}]
    assert parse(message(content, stop_reason)).finish_reason == expected


def test_parse_ignores_server_tool_blocks_and_keeps_multiple_thinking_blocks() -> None:
    response = parse(message([
        {"type": "thinking", "thinking": "First.", "signature": "s1"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "thinking", "thinking": "Second.", "signature": "s2"},
        {"type": "text", "text": "Done", "citations": [{"type": "web_search_result_location"}]}]))
    assert response.message["reasoning_content"] == "First.\n\nSecond."
    assert [b["signature"] for b in response.message["thinking_blocks"]] == ["s1", "s2"]
    assert response.message["content"] == "Done" and "tool_calls" not in response.message


@pytest.mark.parametrize("body", [b"<html>502</html>", b"[1, 2]", b'{"type": "message", "content": "text"}', b""])
def test_parse_invalid_bodies(body: bytes) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(body)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


def test_parse_error_body_with_status_200() -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    assert (info.value.error_class, info.value.message) == (ErrorClass.OVERLOADED, "Overloaded")


# --- streaming ------------------------------------------------------------------------------


def run_stream(events: list[SSEEvent]) -> tuple[ModelResponse, list[StreamDelta]]:
    return parse_stream(ADAPTER, events)


def event(payload: dict[str, Any]) -> SSEEvent:
    return SSEEvent(payload["type"], orjson.dumps(payload))


def native_stream(native: dict[str, Any]) -> list[SSEEvent]:
    """The event sequence Anthropic sends for ``native``, with every payload split into two fragments."""
    start = {**native, "content": [], "stop_reason": None, "usage": {**native["usage"], "output_tokens": 1}}
    events = [event({"type": "message_start", "message": start})]
    for index, block in enumerate(native["content"]):
        kind = block["type"]
        empty = {"text": {"type": "text", "text": ""},
                 "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "tool_use": {**block, "input": {}}}.get(kind, block)
        events.append(event({"type": "content_block_start", "index": index, "content_block": empty}))
        pieces: list[dict[str, Any]] = []
        if kind == "text":
            text = block["text"]
            pieces = [{"type": "text_delta", "text": part} for part in (text[:3], text[3:])]
        elif kind == "thinking":
            text = block["thinking"]
            pieces = [{"type": "thinking_delta", "thinking": part} for part in (text[:5], text[5:])]
            pieces.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            raw = orjson.dumps(block["input"]).decode()
            pieces = [{"type": "input_json_delta", "partial_json": part} for part in ("", raw[:4], raw[4:])]
        for piece in pieces:
            events.append(event({"type": "content_block_delta", "index": index, "delta": piece}))
        events.append(event({"type": "content_block_stop", "index": index}))
    events.append(event({"type": "message_delta", "delta": {"stop_reason": native["stop_reason"],
                                                            "stop_sequence": None},
                         "usage": {"output_tokens": native["usage"]["output_tokens"]}}))
    events.append(event({"type": "message_stop"}))
    return events


def test_example_stream_equals_non_stream_parse() -> None:
    expected = ADAPTER.parse_response((FIXTURES / "02_response_thinking_tool_use.json").read_bytes())
    response, deltas = run_stream(sse_events((FIXTURES / "03_stream_thinking_tool_use.sse").read_bytes()))
    assert response == expected
    assert response.message["thinking_blocks"][0]["signature"].startswith("EqQBCkYIBxgC")
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == expected.message["content"]
    assert "".join(d.text for d in deltas if isinstance(d, ReasoningDelta)) == expected.message["reasoning_content"]


@pytest.mark.parametrize("name", ["02_response_thinking_tool_use.json", "05_response_final.json",
                                  "06_response_redacted_thinking.json"])
def test_streamed_fixtures_equal_non_stream_parse(name: str) -> None:
    expected = ADAPTER.parse_response((FIXTURES / name).read_bytes())
    response, _ = run_stream(native_stream(fixture(name)))
    assert response == expected


def test_reasoning_deltas_match_joined_thinking_of_several_blocks() -> None:
    native = message([{"type": "thinking", "thinking": "First thought.", "signature": "s1"},
                      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}},
                      {"type": "thinking", "thinking": "Second thought.", "signature": "s2"},
                      {"type": "text", "text": "Rome is warm."}], "end_turn")
    response, deltas = run_stream(native_stream(native))
    assert response == parse(native)
    assert "".join(d.text for d in deltas if isinstance(d, ReasoningDelta)) == response.message["reasoning_content"]


def test_mid_stream_overloaded_error_raises() -> None:
    events = sse_events((FIXTURES / "07_stream_error_overloaded.sse").read_bytes())
    parser = ADAPTER.new_stream_parser()
    deltas: list[StreamDelta] = []
    with pytest.raises(ProviderError) as info:
        for item in events:
            deltas.extend(parser.feed(item))
    assert info.value.error_class is ErrorClass.OVERLOADED and info.value.retryable
    assert content(deltas) == [TextDelta("Paris is")]


def test_stream_cut_before_message_stop_raises_connection() -> None:
    events = sse_events((FIXTURES / "03_stream_thinking_tool_use.sse").read_bytes())
    parser = ADAPTER.new_stream_parser()
    for item in events[:-1]:
        parser.feed(item)
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.CONNECTION


def test_unknown_events_pings_and_deltas_are_ignored() -> None:
    events = sse_events((FIXTURES / "03_stream_thinking_tool_use.sse").read_bytes())
    noise = [SSEEvent("ping", b'{"type": "ping"}'),
             event({"type": "content_block_delta", "index": 1, "delta": {"type": "future_delta", "x": 1}}),
             event({"type": "brand_new_event", "payload": [1, 2]})]
    noisy = [*events[:12], *noise, *events[12:]]
    expected, expected_deltas = run_stream(events)
    assert run_stream(noisy) == (expected, expected_deltas)


def test_tool_use_without_input_fragments_gives_empty_object() -> None:
    events = [event({"type": "message_start", "message": message([], "")}),
              event({"type": "content_block_start", "index": 0,
                     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {}}}),
              event({"type": "content_block_stop", "index": 0}),
              event({"type": "content_block_start", "index": 1,
                     "content_block": {"type": "tool_use", "id": "toolu_2", "name": "ping", "input": {}}}),
              event({"type": "content_block_delta", "index": 1,
                     "delta": {"type": "input_json_delta", "partial_json": ""}}),
              event({"type": "content_block_stop", "index": 1}),
              event({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
              event({"type": "message_stop"})]
    response, deltas = run_stream(events)
    assert deltas == []
    calls = [(c["id"], c["function"]["arguments"]) for c in response.tool_calls]
    assert calls == [("toolu_1", "{}"), ("toolu_2", "{}")]
    assert response.finish_reason == "tool_calls"
    assert response.usage.completion_tokens == 9 and response.usage.prompt_tokens == 10


def test_truncated_tool_input_is_kept_with_length_finish() -> None:
    events = [event({"type": "message_start", "message": message([], "")}),
              event({"type": "content_block_start", "index": 0,
                     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
              event({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "input_json_delta", "partial_json": '{"city": "Ro'}}),
              event({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
              event({"type": "message_stop"})]
    response, _ = run_stream(events)
    assert response.tool_calls[0]["function"]["arguments"] == '{"city": "Ro'
    assert response.finish_reason == "length"


@pytest.mark.parametrize(("error_type", "message_text", "expected"), [
    ("overloaded_error", "Overloaded", ErrorClass.OVERLOADED),
    ("rate_limit_error", "slow down", ErrorClass.RATE_LIMITED),
    ("api_error", "Internal server error", ErrorClass.SERVER_ERROR),
    ("timeout_error", "timed out", ErrorClass.TIMEOUT),
    ("invalid_request_error", "messages.1: bad block", ErrorClass.BAD_REQUEST),
    ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", ErrorClass.CONTEXT_LENGTH),
    ("authentication_error", "invalid x-api-key", ErrorClass.AUTH),
    ("permission_error", "no access", ErrorClass.AUTH),
    ("not_found_error", "model: claude-9", ErrorClass.NOT_FOUND),
    ("mystery_error", "?", ErrorClass.SERVER_ERROR),
])
def test_stream_error_event_classes(error_type: str, message_text: str, expected: ErrorClass) -> None:
    parser = ADAPTER.new_stream_parser()
    parser.feed(event({"type": "message_start", "message": message([], "")}))
    with pytest.raises(ProviderError) as info:
        parser.feed(event({"type": "error", "error": {"type": error_type, "message": message_text}}))
    assert (info.value.error_class, info.value.message) == (expected, message_text)


def test_malformed_stream_event_is_skipped() -> None:
    """Lenient clients skip an event they cannot read (more in test_anthropic_answers)."""
    assert ADAPTER.new_stream_parser().feed(SSEEvent("content_block_delta", b"{not json")) == []


STREAM_BYTES = (FIXTURES / "03_stream_thinking_tool_use.sse").read_bytes()
WHOLE = run_stream(sse_events(STREAM_BYTES))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM_BYTES)), max_size=40))
def test_stream_split_at_arbitrary_bytes_gives_the_same_response(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM_BYTES)]
    assert parse_in_pieces(ADAPTER, STREAM_BYTES, bounds) == WHOLE


# --- HTTP errors ----------------------------------------------------------------------------


def http_examples() -> list[tuple[str, int, dict[str, str], bytes]]:
    """(title, status, headers, body) for each response in 08_errors.http."""
    examples = []
    for section in (FIXTURES / "08_errors.http").read_text().split("\n### ")[1:]:
        lines = section.splitlines()
        if len(lines) < 2 or not lines[1].startswith("HTTP/"):
            continue
        status = int(lines[1].split()[1])
        blank = lines.index("", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[2:blank])}
        body = "\n".join(lines[blank + 1:]).strip().encode()
        examples.append((lines[0], status, headers, body))
    return examples


EXPECTED_ERRORS = [
    (400, ErrorClass.BAD_REQUEST, False), (400, ErrorClass.BAD_REQUEST, False), (400, ErrorClass.BAD_REQUEST, False),
    (400, ErrorClass.BAD_REQUEST, False), (401, ErrorClass.AUTH, False), (404, ErrorClass.NOT_FOUND, False),
    (429, ErrorClass.RATE_LIMITED, True), (429, ErrorClass.RATE_LIMITED, False), (500, ErrorClass.SERVER_ERROR, True),
    (529, ErrorClass.OVERLOADED, True),
]


@pytest.mark.parametrize(("example", "expected"), list(zip(http_examples(), EXPECTED_ERRORS, strict=True)),
                         ids=[title for title, *_ in http_examples()])
def test_error_examples(example: tuple[str, int, dict[str, str], bytes],
                        expected: tuple[int, ErrorClass, bool]) -> None:
    _, status, headers, body = example
    error = ADAPTER.parse_error(status, headers, body)
    assert (status, error.error_class, error.retryable) == expected
    assert error.status == status
    assert error.message == orjson.loads(body)["error"]["message"]
    if status == 429 and "retry-after" in headers:
        assert error.retry_after == 17.0
    if "enforced_spend_limit_reached" in body.decode():
        assert error.no_retry


def test_error_edge_cases() -> None:
    too_long = b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 1 > 0"}}'
    assert ADAPTER.parse_error(400, {}, too_long).error_class is ErrorClass.CONTEXT_LENGTH
    limit = (b'{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` '
             b'exceed context limit: 188240 + 21333 > 200000"}}')
    assert ADAPTER.parse_error(400, {}, limit).error_class is ErrorClass.CONTEXT_LENGTH
    billing = ADAPTER.parse_error(402, {}, b'{"type":"error","error":{"type":"billing_error","message":"credit"}}')
    assert (billing.error_class, billing.retryable) == (ErrorClass.RATE_LIMITED, False)
    proxy = ADAPTER.parse_error(502, {"retry-after": "2"}, b"<html>Bad Gateway</html>")
    assert (proxy.error_class, proxy.message, proxy.retry_after) == (
        ErrorClass.SERVER_ERROR, "upstream answered 502 with a non-JSON body (no content type, 24 bytes)", 2.0)
    assert ADAPTER.parse_error(529, {}, b"").message == "upstream returned HTTP 529"
    assert ADAPTER.parse_error(529, {"x-should-retry": "false"}, b"").retryable is False


def test_registered() -> None:
    from gateway.providers.registry import ADAPTERS, adapter_for

    assert isinstance(ADAPTERS["anthropic"], AnthropicAdapter)
    assert adapter_for("anthropic").wire_format == "anthropic"


# --- the strict-server rules themselves -------------------------------------------------------


def test_rules_accept_the_reference_requests() -> None:
    assert anthropic_request_problems(fixture("01_request_tools_thinking.json")) == []
    assert anthropic_request_problems(fixture("04_request_tool_results_passback.json")) == []
    assert anthropic_request_problems(fixture("openai_to_anthropic_request.json")["anthropic_request"]) == []


def _mutate(path: list[Any], value: Any) -> Any:
    def apply(body: dict[str, Any]) -> None:
        target: Any = body
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return apply


_DELETE = object()


@pytest.mark.parametrize(("mutation", "fragment"), [
    (_mutate(["max_tokens"], _DELETE), "max_tokens"),
    (_mutate(["messages", 0, "role"], "system"), "immediately after a user message"),
    (_mutate(["messages", 0, "role"], "tool"), "'user' or 'assistant'"),
    (_mutate(["messages", 2, "content", 1, "tool_use_id"], "toolu_other"), "without `tool_result`"),
    (lambda body: body["messages"][2]["content"].insert(0, {"type": "text", "text": "first"}), "Did not find 2"),
    (_mutate(["messages", 1, "content", 2, "id"], "toolu.bad"), "pattern"),
    (_mutate(["messages", 1, "content", 0], {"type": "text", "text": "no thinking"}), "Expected `thinking`"),
    (_mutate(["messages", 1, "content", 1, "text"], "  "), "non-whitespace"),
    (_mutate(["messages", 1, "reasoning_content"], "leak"), "reasoning_content"),
    (_mutate(["messages", 1, "content", 2, "extra_content"], {"google": {}}), "extra_content"),
    (_mutate(["messages", 2], {"role": "user", "content": "no results"}), "without `tool_result`"),
    (_mutate(["tool_choice"], {"type": "any"}), "forces tool use"),
    (_mutate(["temperature"], 0.5), "temperature"),
    (_mutate(["stop_sequences"], ["\n"]), "non-whitespace"),
    (_mutate(["seed"], 3), "seed: Extra inputs"),
    (_mutate(["thinking", "budget_tokens"], 4096), "greater than `thinking.budget_tokens`"),
    (_mutate(["tools", 0, "input_schema", "type"], "array"), "'object'"),
])
def test_rules_reject_broken_bodies(mutation: Any, fragment: str) -> None:
    body = copy.deepcopy(fixture("04_request_tool_results_passback.json"))
    body["tool_choice"] = {"type": "auto"}
    assert anthropic_request_problems(body) == []
    mutation(body)
    problems = anthropic_request_problems(body)
    assert any(fragment in problem for problem in problems), problems


def test_rules_reject_stray_tool_results_and_both_sampling_params() -> None:
    body = {"model": "m", "max_tokens": 10, "temperature": 0.5, "top_p": 0.5, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]}
    problems = anthropic_request_problems(body)
    assert any("unexpected `tool_use_id`" in p for p in problems)
    assert any("cannot both be specified" in p for p in problems)


def test_rules_only_check_thinking_in_the_current_turn() -> None:
    body = copy.deepcopy(fixture("04_request_tool_results_passback.json"))
    del body["messages"][1]["content"][0]  # the tool_use turn lost its thinking block ...
    assert any("Expected `thinking`" in p for p in anthropic_request_problems(body))
    body["messages"] += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks"}]
    assert anthropic_request_problems(body) == []  # ... which is fine once a new user turn began


def test_an_answer_nested_deeper_than_the_gateway_parses_is_an_invalid_response() -> None:
    """A tool_use input 300 deep parsed, then failed to serialise as the call's arguments: a 500 (issue 29)."""
    deep = '{"a":' * 300 + "1" + "}" * 300
    body = ('{"id":"msg_1","type":"message","role":"assistant","model":"m","stop_reason":"tool_use",'
            '"content":[{"type":"tool_use","id":"t1","name":"lookup","input":' + deep + '}],'
            '"usage":{"input_tokens":1,"output_tokens":1}}').encode()
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(body)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE and "nested deeper than 200" in str(info.value)
