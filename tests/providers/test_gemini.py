"""Gemini adapter: golden translations from the wire-format examples, plus the edge cases around them.

Every request body built here also goes through ``gemini_request_problems`` (the strict-server
rules), so a translation that would earn a 400 from Gemini fails the test that produced it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import ModelRequest, ModelResponse, ReasoningDelta, StreamDelta, TextDelta, stable_tool_call_id
from gateway.config.model import ProviderConfig
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent
from gateway.providers.gemini import GeminiAdapter, clean_schema
from gateway.providers.gemini_contents import DUMMY_THOUGHT_SIGNATURE
from gateway.providers.registry import adapter_for
from tests.fakes.gemini_rules import gemini_request_problems
from tests.providers.streams import content, parse_in_pieces, parse_stream, sse_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gemini"
BASE_URL = "https://generativelanguage.googleapis.com"
MODEL = "gemini-3-flash-preview"
PROVIDER = ProviderConfig(name="google", type="gemini", base_url=BASE_URL, api_key="test-key",
                          headers={"x-team": "blue"})
ADAPTER = GeminiAdapter()

PARIS_SIG = ("CiQBjz1rX2V4YW1wbGUtdGhvdWdodC1zaWduYXR1cmUtbm90LXJlYWwKZQGPPWtfU1lOVEhFVElDX09QQVFVRV9CWVRFU19Q"
             "QVNTX0JBQ0tfVkVSQkFUSU0=")
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for one city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


# --- helpers --------------------------------------------------------------------------


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> Any:
    return orjson.loads(fixture_bytes(name))


def run_stream(events: list[SSEEvent]) -> tuple[list[StreamDelta], ModelResponse]:
    response, deltas = parse_stream(ADAPTER, events)
    return deltas, response


def build(messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
          params: dict[str, Any] | None = None, model: str = MODEL, stream: bool = False) -> dict[str, Any]:
    """The Gemini body for a canonical request, checked against the strict-server rules."""
    request = ModelRequest(messages=messages, tools=tools or [], tool_choice=tool_choice, params=params or {})
    upstream = ADAPTER.build_request(request, PROVIDER, model, stream)
    body = orjson.loads(upstream.body)
    assert gemini_request_problems(body, model) == []
    return body


def call(call_id: str, name: str, arguments: str, google: dict[str, str] | None = None) -> dict[str, Any]:
    tool_call: dict[str, Any] = {"id": call_id, "type": "function",
                                 "function": {"name": name, "arguments": arguments}}
    if google:
        tool_call["extra_content"] = {"google": google}
    return tool_call


def tool(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def http_examples(name: str) -> list[tuple[str, int, dict[str, str], bytes]]:
    """(title, status, headers, body) for each ``### `` block of an ``.http`` example file."""
    examples = []
    for block in fixture_bytes(name).decode().split("\n### ")[1:]:
        title, _, rest = block.partition("\n")
        head, _, body = rest.partition("\n\n")
        status_line, *header_lines = head.strip().splitlines()
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
        examples.append((title, int(status_line.split()[1]), headers, body.strip().encode()))
    return examples


def merge_stream(events: list[SSEEvent]) -> bytes:
    """The whole ``generateContent`` response equivalent to a stream: all parts, last metadata."""
    payloads = [orjson.loads(event.data) for event in events]
    parts = [part for p in payloads for part in p["candidates"][0]["content"]["parts"]]
    whole = copy.deepcopy(payloads[-1])
    whole["candidates"][0]["content"]["parts"] = parts
    return orjson.dumps(whole)


def candidate_response(parts: list[dict[str, Any]], finish: str | None = "STOP", **extra: Any) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return orjson.dumps({"candidates": [candidate], **extra})


# --- request: URL, headers, golden bodies -------------------------------------------


def test_url_and_headers() -> None:
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    whole = ADAPTER.build_request(request, PROVIDER, "gemini-2.5-flash", stream=False)
    assert whole.url == f"{BASE_URL}/v1beta/models/gemini-2.5-flash:generateContent"
    assert whole.headers == {"content-type": "application/json", "x-goog-api-key": "test-key", "x-team": "blue"}
    streamed = ADAPTER.build_request(request, PROVIDER, "models/gemini-2.5-flash", stream=True)
    assert streamed.url == f"{BASE_URL}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert orjson.loads(streamed.body) == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_mapping_example_golden() -> None:
    example = fixture_json("openai_to_gemini_request.json")
    openai_request = example["openai_request"]
    params = {k: v for k, v in openai_request.items() if k not in ("model", "messages", "tools", "tool_choice")}
    request = ModelRequest(messages=openai_request["messages"], tools=openai_request["tools"],
                           tool_choice=openai_request["tool_choice"], params=params)
    upstream = ADAPTER.build_request(request, PROVIDER, openai_request["model"], stream=True)
    assert f"POST {upstream.url}" == example["url"]
    body = orjson.loads(upstream.body)
    assert body == example["gemini_request"]
    assert gemini_request_problems(body, openai_request["model"]) == []


def test_foreign_history_gets_dummy_signature_golden() -> None:
    """An OpenAI-produced turn (id call_..., no signature) replayed to Gemini 3 (example 06)."""
    messages = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("call_Xb12", "get_weather", '{"city": "Paris", "unit": "celsius"}')]},
        tool("call_Xb12", '{"temp_c": 18, "conditions": "sunny"}'),
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city", "unit"]}}}]
    assert build(messages, tools=tools) == fixture_json("06_request_foreign_history_dummy_signature.json")


def test_parsed_turn_replays_as_example_04() -> None:
    """Parse example 02, answer its calls, build the follow-up: example 04 minus what is not replayed."""
    turn = ADAPTER.parse_response(fixture_bytes("02_response_parallel_function_calls.json"))
    system = "You are a travel assistant. Use tools for live data; never guess the weather."
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "What's the weather in Paris and in Tokyo right now? Celsius please."},
        turn.message,
        tool("x7k2m9pq", '{"temp_c": 18, "conditions": "sunny"}'),
        tool("r4n8w1zc", "Weather service timeout for Tokyo after 10s"),
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for one city.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"},
                                                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                                   "required": ["city", "unit"]}, "strict": True}}]
    params = {"max_completion_tokens": 4096, "reasoning_effort": "low", "include_reasoning": True}
    expected = fixture_json("04_request_function_responses.json")
    # Thought summaries are not replayed (the signature carries the state), and an OpenAI tool
    # message cannot say it failed, so its text goes under "output", not "error".
    del expected["contents"][1]["parts"][0]
    expected["contents"][2]["parts"][1]["functionResponse"]["response"] = {
        "output": "Weather service timeout for Tokyo after 10s"}
    assert build(messages, tools=tools, params=params) == expected


# --- request: pieces ------------------------------------------------------------------


def test_system_and_developer_become_system_instruction_in_order() -> None:
    body = build([
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": "Hello"},
    ])
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hello"}]}]


def test_user_media_parts() -> None:
    body = build([{"role": "user", "content": [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/render?id=7"}},
    ]}])
    assert body["contents"][0]["parts"] == [
        {"text": "Compare"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
        {"fileData": {"fileUri": "https://example.com/render?id=7"}},
    ]


def test_tools_use_parameters_json_schema_cleaned() -> None:
    tools = [
        {"type": "function", "function": {"name": "search", "description": "Search.", "strict": True,
                                          "parameters": {
                                              "$schema": "http://json-schema.org/draft-07/schema#",
                                              "type": "object",
                                              "properties": {
                                                  "$schema": {"type": "string"},
                                                  "filter": {"$ref": "#/$defs/Filter", "description": "dropped"},
                                                  "tags": {"type": "array",
                                                           "items": {"$schema": "x", "type": "string"}},
                                              },
                                              "$defs": {"Filter": {"type": "object", "additionalProperties": False}},
                                              "additionalProperties": False}}},
        {"type": "function", "function": {"name": "ping", "description": "Health check."}},
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
        {"type": "custom", "custom": {"name": "grammar_tool"}},
    ]
    body = build([{"role": "user", "content": "go"}], tools=tools)
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "search", "description": "Search.", "parametersJsonSchema": {
            "type": "object",
            "properties": {"$schema": {"type": "string"}, "filter": {"$ref": "#/$defs/Filter"},
                           "tags": {"type": "array", "items": {"type": "string"}}},
            "$defs": {"Filter": {"type": "object", "additionalProperties": False}},
            "additionalProperties": False}},
        {"name": "ping", "description": "Health check."},
        {"name": "now"},
    ]}]
    assert "toolConfig" not in body


def test_clean_schema_leaves_input_untouched() -> None:
    schema = {"$schema": "x", "type": "object", "properties": {"a": {"$schema": "y", "type": "string"}}}
    snapshot = copy.deepcopy(schema)
    assert clean_schema(schema) == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert schema == snapshot


@pytest.mark.parametrize(("choice", "config", "declared"), [
    ("auto", {"mode": "AUTO"}, ["get_weather", "get_time"]),
    ("none", {"mode": "NONE"}, ["get_weather", "get_time"]),
    ("required", {"mode": "ANY"}, ["get_weather", "get_time"]),
    ({"type": "function", "function": {"name": "get_time"}}, {"mode": "ANY", "allowedFunctionNames": ["get_time"]},
     ["get_weather", "get_time"]),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}},
     {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}, ["get_weather", "get_time"]),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "get_time"}}]}}, {"mode": "AUTO"}, ["get_time"]),
    (None, None, ["get_weather", "get_time"]),
])
def test_tool_choice(choice: Any, config: dict[str, Any] | None, declared: list[str]) -> None:
    tools = [WEATHER_TOOL, {"type": "function", "function": {"name": "get_time"}}]
    body = build([{"role": "user", "content": "go"}], tools=tools, tool_choice=choice)
    assert body.get("toolConfig") == ({"functionCallingConfig": config} if config else None)
    assert [d["name"] for d in body["tools"][0]["functionDeclarations"]] == declared


def test_tool_choice_without_tools_is_dropped() -> None:
    body = build([{"role": "user", "content": "go"}], tool_choice="required")
    assert set(body) == {"contents"}


def test_generation_config_mapping_and_unknown_fields_dropped() -> None:
    params = {
        "max_completion_tokens": 900, "max_tokens": 100, "temperature": 0.3, "top_p": 0.9, "stop": "END",
        "seed": 7, "n": 2, "presence_penalty": 0.1, "frequency_penalty": 0.2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
        "user": "u-1", "parallel_tool_calls": False, "logit_bias": {"1": 2}, "stream": True,
        "stream_options": {"include_usage": True}, "metadata": {"k": "v"}, "store": True, "service_tier": "auto",
    }
    body = build([{"role": "user", "content": "go"}], params=params)
    assert set(body) == {"contents", "generationConfig"}
    assert body["generationConfig"] == {
        "maxOutputTokens": 900, "temperature": 0.3, "topP": 0.9, "stopSequences": ["END"], "seed": 7,
        "candidateCount": 2, "presencePenalty": 0.1, "frequencyPenalty": 0.2,
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    }


def test_generation_config_fallbacks() -> None:
    body = build([{"role": "user", "content": "go"}],
                 params={"max_tokens": 100, "stop": ["a", "b"], "response_format": {"type": "json_object"}})
    assert body["generationConfig"] == {"maxOutputTokens": 100, "stopSequences": ["a", "b"],
                                        "responseMimeType": "application/json"}
    body = build([{"role": "user", "content": "go"}], params={"response_format": {"type": "text"}})
    assert "generationConfig" not in body


@pytest.mark.parametrize(("model", "params", "thinking"), [
    ("gemini-3-flash-preview", {"reasoning_effort": "low"}, {"thinkingLevel": "low"}),
    ("gemini-3-flash-preview", {"reasoning_effort": "MEDIUM"}, {"thinkingLevel": "medium"}),
    ("gemini-3-pro-preview", {"reasoning_effort": "none"}, {"thinkingLevel": "minimal"}),
    ("gemini-3.1-pro", {"reasoning_effort": "xhigh"}, {"thinkingLevel": "high"}),
    ("gemini-2.5-flash", {"reasoning_effort": "medium"}, {"thinkingBudget": 8192}),
    ("gemini-2.5-pro", {"reasoning_effort": "high"}, {"thinkingBudget": 24576}),
    ("gemini-2.5-flash", {"reasoning_effort": "none", "include_reasoning": True}, {"thinkingBudget": 0}),
    ("gemini-flash-latest", {"reasoning_effort": "low"}, {"thinkingBudget": 1024}),
    ("gemini-3-flash-preview", {"reasoning_effort": "low", "include_reasoning": True},
     {"thinkingLevel": "low", "includeThoughts": True}),
    ("gemini-2.5-flash", {"include_reasoning": True}, {"includeThoughts": True}),
    ("gemini-3-flash-preview", {"reasoning_effort": "turbo"}, None),
    ("gemini-3-flash-preview", {}, None),
])
def test_thinking_policy(model: str, params: dict[str, Any], thinking: dict[str, Any] | None) -> None:
    body = build([{"role": "user", "content": "go"}], params=params, model=model)
    assert body.get("generationConfig", {}).get("thinkingConfig") == thinking


def test_function_responses_grouped_in_call_order_with_following_user_text() -> None:
    messages = [
        {"role": "user", "content": "plan"},
        {"role": "assistant", "content": "Checking three things.", "tool_calls": [
            call("c1", "get_weather", '{"city":"Paris"}'),
            call("c2", "get_time", '{"timezone":"Asia/Tokyo"}'),
            call("c3", "lookup", ""),
        ]},
        tool("c3", '["a", "b"]'),
        tool("c1", '{"temp_c": 18}'),
        tool("c2", [{"type": "text", "text": "09:15"}]),
        {"role": "user", "content": "And be quick."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
    ]
    body = build(messages)
    assert len(body["contents"]) == 3
    model_turn, results = body["contents"][1], body["contents"][2]
    assert model_turn == {"role": "model", "parts": [
        {"text": "Checking three things."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
         "thoughtSignature": DUMMY_THOUGHT_SIGNATURE},
        {"functionCall": {"name": "get_time", "args": {"timezone": "Asia/Tokyo"}}},
        {"functionCall": {"name": "lookup", "args": {}}},
    ]}
    assert results == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"output": {"temp_c": 18}}}},
        {"functionResponse": {"name": "get_time", "response": {"output": "09:15"}}},
        {"functionResponse": {"name": "lookup", "response": {"output": ["a", "b"]}}},
        {"text": "And be quick."},
        {"text": "Thanks."},
    ]}


def test_signatures_per_step_real_kept_dummy_only_on_first_unsigned_call() -> None:
    messages = [
        {"role": "user", "content": "go"},
        # step 1: Gemini's own, signed first call -> replayed as is, with the real ids
        {"role": "assistant", "content": None, "tool_calls": [
            call("g1", "a", "{}", {"thought_signature": "REAL-1", "function_call_id": "g1"}),
            call("g2", "b", "{}", {"function_call_id": "g2"})]},
        tool("g1", "1"), tool("g2", "2"),
        # step 2: unsigned parallel calls from another provider -> dummy on the first only
        {"role": "assistant", "content": "", "tool_calls": [call("toolu_1", "a", "{}"), call("toolu_2", "b", "{}")]},
        tool("toolu_1", "3"), tool("toolu_2", "4"),
        # step 3: a real signature on the second call is never overwritten; the first gets the dummy
        {"role": "assistant", "content": None, "tool_calls": [
            call("x1", "a", "{}"), call("x2", "b", "{}", {"thought_signature": "REAL-3"})]},
        tool("x1", "5"), tool("x2", "6"),
    ]
    contents = build(messages)["contents"]
    steps = [c["parts"] for c in contents if c["role"] == "model"]
    assert steps[0] == [{"functionCall": {"id": "g1", "name": "a", "args": {}}, "thoughtSignature": "REAL-1"},
                        {"functionCall": {"id": "g2", "name": "b", "args": {}}}]
    assert [p.get("thoughtSignature") for p in steps[1]] == [DUMMY_THOUGHT_SIGNATURE, None]
    assert [p.get("thoughtSignature") for p in steps[2]] == [DUMMY_THOUGHT_SIGNATURE, "REAL-3"]
    responses = contents[2]["parts"]
    assert [r["functionResponse"].get("id") for r in responses] == ["g1", "g2"]
    assert all("id" not in p["functionCall"] for step in steps[1:] for p in step)


def test_openai_compat_history_keeps_signature_without_id() -> None:
    """Turns from Gemini's OpenAI-compatible endpoint: a signature but no id marker."""
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("function-call-123", "a", '{"x":1}', {"thought_signature": "COMPAT-SIG"})]},
        tool("function-call-123", "ok"),
    ]
    model_turn = build(messages)["contents"][1]
    assert model_turn["parts"] == [{"functionCall": {"name": "a", "args": {"x": 1}}, "thoughtSignature": "COMPAT-SIG"}]


def test_anthropic_produced_history_sends_no_foreign_artifacts() -> None:
    example = fixture_json("openai_to_anthropic_request.json")["openai_request"]
    params = {k: v for k, v in example.items() if k not in ("model", "messages", "tools", "tool_choice")}
    body = build(example["messages"], tools=example["tools"], tool_choice=example["tool_choice"], params=params)
    raw = orjson.dumps(body)
    assert b"reasoning_content" not in raw and b"thinking_blocks" not in raw and b"Eiffel" not in raw
    assert b"EqQBCkYI" not in raw  # the Anthropic thinking signature never reaches Gemini
    assert b"toolu_" not in raw  # foreign ids are not Gemini ids
    assert body["systemInstruction"] == {"parts": [{"text": "You are a travel assistant."},
                                                   {"text": "Always answer in one sentence."}]}
    user, model_turn, results = body["contents"]
    assert user["parts"][1]["inlineData"]["mimeType"] == "image/png"
    assert model_turn["parts"] == [
        {"text": "I'll look up both cities."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris", "unit": "celsius"}},
         "thoughtSignature": DUMMY_THOUGHT_SIGNATURE},
        {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo", "unit": "celsius"}}},
    ]
    assert results["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": {"temp_c": 18, "conditions": "sunny"}}}},
        {"functionResponse": {"name": "get_weather",
                              "response": {"output": {"temp_c": 24, "conditions": "light rain"}}}},
        {"text": "Also: is it warmer than yesterday in Paris?"},
    ]
    assert body["tools"][0]["functionDeclarations"][1] == {"name": "ping", "description": "No-argument health check."}
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["generationConfig"] == {"maxOutputTokens": 4096, "temperature": 1.0, "stopSequences": ["\n\nEND"],
                                        "thinkingConfig": {"thinkingLevel": "medium"}}


def test_text_signature_goes_back_on_the_text_part() -> None:
    turn = ADAPTER.parse_response(fixture_bytes("05_response_text_with_thoughts.json"))
    body = build([{"role": "user", "content": "weather?"}, turn.message, {"role": "user", "content": "retry Tokyo"}])
    assert body["contents"][1] == {"role": "model", "parts": [{
        "text": turn.message["content"],
        "thoughtSignature": "Ci4Bjz1rX3RleHQtdHVybi1zaWduYXR1cmUtZXhhbXBsZS1ub3QtcmVhbA=="}]}


def test_empty_assistant_message_is_skipped() -> None:
    body = build([{"role": "user", "content": "a"}, {"role": "assistant", "content": ""},
                  {"role": "user", "content": "b"}])
    assert [c["role"] for c in body["contents"]] == ["user", "user"]


@pytest.mark.parametrize("arguments", ['{"city": "Par', "not json", "[1, 2]", '"Paris"'])
def test_malformed_tool_arguments_go_back_as_an_empty_object(arguments: str) -> None:
    """A model's invalid arguments (the loop answered them with an error result) never make the next call a 400."""
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", arguments)]},
                tool("c1", "x")]
    body = orjson.loads(ADAPTER.build_request(ModelRequest(messages=messages), PROVIDER, MODEL, stream=False).body)
    call_part = next(p for c in body["contents"] for p in c["parts"] if "functionCall" in p)
    assert call_part["functionCall"]["args"] == {}
    assert gemini_request_problems(body, MODEL) == []


@pytest.mark.parametrize(("messages", "fragment"), [
    ([{"role": "user", "content": "go"},
      {"role": "assistant", "content": None, "tool_calls": [call("c1", "a", "{}"), call("c2", "b", "{}")]},
      tool("c1", "x")], "no tool message"),
    ([{"role": "user", "content": "go"},
      {"role": "assistant", "content": None, "tool_calls": [call("c1", "a", "{}")]},
      tool("c1", "x"), tool("zz", "y")], "answer no call"),
    ([{"role": "user", "content": "go"}, tool("c1", "x")], "does not follow"),
    ([{"role": "function", "name": "a", "content": "x"}], "unsupported role"),
])
def test_unpairable_tool_history_is_a_400(messages: list[dict[str, Any]], fragment: str) -> None:
    with pytest.raises(ProviderError) as caught:
        ADAPTER.build_request(ModelRequest(messages=messages), PROVIDER, MODEL, stream=False)
    assert caught.value.error_class is ErrorClass.BAD_REQUEST
    assert fragment in caught.value.message


# --- responses ------------------------------------------------------------------------


def test_parse_parallel_calls_signature_on_first_only() -> None:
    response = ADAPTER.parse_response(fixture_bytes("02_response_parallel_function_calls.json"))
    assert response.finish_reason == "tool_calls"
    assert response.id == "Zq3taK2nL5mRz7IPw8uJ6Qc" and response.model == "gemini-3-flash-preview"
    assert response.message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "x7k2m9pq", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"celsius"}'},
             "extra_content": {"google": {"function_call_id": "x7k2m9pq", "thought_signature": PARIS_SIG}}},
            {"id": "r4n8w1zc", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Tokyo","unit":"celsius"}'},
             "extra_content": {"google": {"function_call_id": "r4n8w1zc"}}},
        ],
        "reasoning_content": "**Planning the lookups**\nThe user asked for two cities; I'll request both at once.",
    }
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) == (
        118, 133, 0, 87)


def test_parse_text_with_thoughts_and_signature() -> None:
    response = ADAPTER.parse_response(fixture_bytes("05_response_text_with_thoughts.json"))
    assert response.finish_reason == "stop"
    assert response.message["content"].startswith("Paris is 18 °C and sunny.")
    assert response.message["reasoning_content"].startswith("**Summarising results**")
    assert response.message["extra_content"] == {"google": {
        "thought_signature": "Ci4Bjz1rX3RleHQtdHVybi1zaWduYXR1cmUtZXhhbXBsZS1ub3QtcmVhbA=="}}
    assert "tool_calls" not in response.message
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.reasoning_tokens) == (
        301, 79, 52)


def test_parse_single_call_without_id_or_args() -> None:
    body = candidate_response([{"functionCall": {"name": "ping"}}], responseId="resp-1")
    response = ADAPTER.parse_response(body)
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [{"id": stable_tool_call_id("resp-1", 0), "type": "function",
                                    "function": {"name": "ping", "arguments": "{}"}}]
    assert ADAPTER.parse_response(body).tool_calls[0]["id"] == response.tool_calls[0]["id"]  # deterministic


def test_generated_ids_are_distinct_and_salted() -> None:
    parts = [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
             {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}}]
    first = ADAPTER.parse_response(candidate_response(parts, responseId="r-a")).tool_calls
    other = ADAPTER.parse_response(candidate_response(parts, responseId="r-b")).tool_calls
    assert len({c["id"] for c in first + other}) == 4
    # No responseId: the seed is the turn itself, so different calls still get different ids.
    paris = ADAPTER.parse_response(candidate_response(parts[:1])).tool_calls[0]["id"]
    tokyo = ADAPTER.parse_response(candidate_response(parts[1:])).tool_calls[0]["id"]
    assert paris != tokyo and paris.startswith("call_")


@pytest.mark.parametrize(("native", "expected"), [
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
    ("BLOCKLIST", "content_filter"), ("PROHIBITED_CONTENT", "content_filter"), ("SPII", "content_filter"),
    ("LANGUAGE", "content_filter"), ("IMAGE_SAFETY", "content_filter"), ("IMAGE_PROHIBITED_CONTENT", "content_filter"),
    ("MALFORMED_FUNCTION_CALL", "stop"), ("UNEXPECTED_TOOL_CALL", "stop"), ("TOO_MANY_TOOL_CALLS", "stop"),
    ("OTHER", "stop"), ("FINISH_REASON_UNSPECIFIED", "stop"), ("SOMETHING_NEW", "stop"), (None, "stop"),
])
def test_finish_reasons_without_calls(native: str | None, expected: str) -> None:
    assert ADAPTER.parse_response(candidate_response([{"text": "x"}], native)).finish_reason == expected


@pytest.mark.parametrize(("native", "expected"), [("STOP", "tool_calls"), ("MAX_TOKENS", "length"),
                                                  ("OTHER", "tool_calls")])
def test_finish_reasons_with_calls(native: str, expected: str) -> None:
    body = candidate_response([{"functionCall": {"name": "a", "args": {}}}], native)
    assert ADAPTER.parse_response(body).finish_reason == expected


def test_prompt_blocked_is_an_empty_filtered_answer() -> None:
    body = orjson.dumps({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9},
                         "modelVersion": "gemini-2.5-flash", "responseId": "blk"})
    response = ADAPTER.parse_response(body)
    assert response.message == {"role": "assistant", "content": None}
    assert response.finish_reason == "content_filter"
    assert response.usage.prompt_tokens == 9 and response.id == "blk"


def test_usage_cached_and_tool_use_prompt_tokens() -> None:
    body = candidate_response([{"text": "x"}], usageMetadata={
        "promptTokenCount": 1000, "toolUsePromptTokenCount": 50, "cachedContentTokenCount": 800,
        "candidatesTokenCount": 20, "totalTokenCount": 1070})
    usage = ADAPTER.parse_response(body).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) == (
        1050, 20, 800, 0)


@pytest.mark.parametrize("body", [b"<html>502</html>", b"[1, 2]", b'{"candidates": []}', b"{}"])
def test_unusable_bodies_are_invalid_responses(body: bytes) -> None:
    with pytest.raises(ProviderError) as caught:
        ADAPTER.parse_response(body)
    assert caught.value.error_class is ErrorClass.INVALID_RESPONSE


def test_error_object_in_a_200_body() -> None:
    body = b'{"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}'
    with pytest.raises(ProviderError) as caught:
        ADAPTER.parse_response(body)
    assert caught.value.error_class is ErrorClass.RATE_LIMITED


# --- streaming ------------------------------------------------------------------------


def test_stream_parallel_calls_equals_whole_response() -> None:
    deltas, response = run_stream(sse_events(fixture_bytes("03_stream_function_calls.sse")))
    assert deltas == [ReasoningDelta("**Planning the lookups**\nThe user asked for two cities; "),
                      ReasoningDelta("I'll request both at once.")]
    assert response == ADAPTER.parse_response(fixture_bytes("02_response_parallel_function_calls.json"))


def test_stream_trailing_signature_on_empty_text_part_is_kept() -> None:
    events = sse_events(fixture_bytes("03b_stream_text_trailing_signature.sse"))
    deltas, response = run_stream(events)
    assert deltas == [TextDelta("Paris is 18 °C and sunny; "), TextDelta("Tokyo is 24 °C with light rain.")]
    assert response.message["content"] == "Paris is 18 °C and sunny; Tokyo is 24 °C with light rain."
    assert response.message["extra_content"] == {"google": {
        "thought_signature": "Ci4Bjz1rX3RyYWlsaW5nLXNpZ25hdHVyZS1wYXJ0LWV4YW1wbGUtbm90LXJlYWw="}}
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (301, 59)
    assert response == ADAPTER.parse_response(merge_stream(events))


def test_stream_calls_without_ids_match_whole_parse() -> None:
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "On it. "}]}}], "responseId": "s1"},
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "a", "args": {"q": 1}}, "thoughtSignature": "SIG"}]}}], "responseId": "s1"},
        {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "b"}}]},
                         "finishReason": "STOP"}], "responseId": "s1"},
    ]
    events = [SSEEvent(None, orjson.dumps(chunk)) for chunk in chunks]
    _, response = run_stream(events)
    assert [c["id"] for c in response.tool_calls] == [stable_tool_call_id("s1", 0), stable_tool_call_id("s1", 1)]
    assert response.tool_calls[0]["extra_content"] == {"google": {"thought_signature": "SIG"}}
    assert response.tool_calls[1]["function"]["arguments"] == "{}"
    assert response.finish_reason == "tool_calls"
    assert response == ADAPTER.parse_response(merge_stream(events))


def test_mid_stream_error_from_example() -> None:
    title, status, _, body = http_examples("07_errors.http")[-1]
    assert status == 200 and "streaming started" in title
    parser = ADAPTER.new_stream_parser()
    first, second = sse_events(body)
    assert content(parser.feed(first)) == [TextDelta("Paris is")]
    with pytest.raises(ProviderError) as caught:
        parser.feed(second)
    assert caught.value.error_class is ErrorClass.OVERLOADED
    assert caught.value.retryable


@pytest.mark.parametrize(("status", "message", "expected"), [
    ("RESOURCE_EXHAUSTED", "quota", ErrorClass.RATE_LIMITED),
    ("UNAVAILABLE", "The model is overloaded.", ErrorClass.OVERLOADED),
    ("INTERNAL", "oops", ErrorClass.SERVER_ERROR),
    ("DEADLINE_EXCEEDED", "too slow", ErrorClass.TIMEOUT),
    ("INVALID_ARGUMENT", "Request contains an invalid argument.", ErrorClass.BAD_REQUEST),
    ("INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
     ErrorClass.CONTEXT_LENGTH),
    ("PERMISSION_DENIED", "denied", ErrorClass.AUTH),
    ("UNAUTHENTICATED", "who?", ErrorClass.AUTH),
    ("NOT_FOUND", "models/x is not found", ErrorClass.NOT_FOUND),
])
def test_in_stream_error_classes(status: str, message: str, expected: ErrorClass) -> None:
    parser = ADAPTER.new_stream_parser()
    event = SSEEvent(None, orjson.dumps({"error": {"code": 500, "message": message, "status": status}}))
    with pytest.raises(ProviderError) as caught:
        parser.feed(event)
    assert caught.value.error_class is expected
    assert caught.value.message == message


@pytest.mark.parametrize("keep", [0, 1, 2, 3])
def test_cut_stream_raises_connection(keep: int) -> None:
    events = sse_events(fixture_bytes("03_stream_function_calls.sse"))[:keep]
    with pytest.raises(ProviderError) as caught:
        run_stream(events)
    assert caught.value.error_class is ErrorClass.CONNECTION
    assert caught.value.retryable


def test_stream_blocked_prompt_finishes_filtered() -> None:
    event = SSEEvent(None, b'{"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "responseId": "b"}')
    deltas, response = run_stream([event])
    assert deltas == [] and response.finish_reason == "content_filter" and response.message["content"] is None


def test_malformed_stream_chunk_is_skipped() -> None:
    """Lenient clients skip an event they cannot read (more in test_gemini_answers)."""
    assert ADAPTER.new_stream_parser().feed(SSEEvent(None, b'{"candidates": [{"content": ')) == []


STREAMS = ["03_stream_function_calls.sse", "03b_stream_text_trailing_signature.sse"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(STREAMS), cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=25))
def test_stream_split_at_any_byte_boundary_equals_whole(name: str, cuts: list[int]) -> None:
    data = fixture_bytes(name)
    whole_deltas, whole = run_stream(sse_events(data))
    bounds = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    response, deltas = parse_in_pieces(ADAPTER, data, bounds)
    assert deltas == whole_deltas
    assert response == whole


# --- errors ---------------------------------------------------------------------------


EXPECTED_ERRORS = {
    400: ErrorClass.BAD_REQUEST, 403: ErrorClass.AUTH, 404: ErrorClass.NOT_FOUND, 429: ErrorClass.RATE_LIMITED,
    500: ErrorClass.SERVER_ERROR, 503: ErrorClass.OVERLOADED,
}


@pytest.mark.parametrize("example", [e for e in http_examples("07_errors.http") if e[1] >= 400],
                         ids=lambda e: e[0][:40])
def test_error_examples(example: tuple[str, int, dict[str, str], bytes]) -> None:
    _, status, headers, body = example
    error = ADAPTER.parse_error(status, headers, body)
    assert error.error_class is EXPECTED_ERRORS[status]
    assert error.status == status
    assert error.message == orjson.loads(body)["error"]["message"]
    if status == 429:
        assert error.retry_after == 37.0 and error.retryable
    else:
        assert error.retry_after is None


def test_retry_after_header_wins_over_retry_info() -> None:
    body = orjson.dumps({"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.5s"}]}})
    assert ADAPTER.parse_error(429, {}, body).retry_after == 0.5
    assert ADAPTER.parse_error(429, {"retry-after": "5"}, body).retry_after == 5.0


def test_daily_quota_is_not_retried() -> None:
    body = orjson.dumps({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
         "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}})
    error = ADAPTER.parse_error(429, {}, body)
    assert error.error_class is ErrorClass.RATE_LIMITED and not error.retryable


@pytest.mark.parametrize(("status", "body", "expected"), [
    (400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                     "status": "INVALID_ARGUMENT",
                     "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}},
     ErrorClass.AUTH),
    (400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                     "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}},
     ErrorClass.CONTEXT_LENGTH),
    (400, {"error": {"code": 400, "message": "User location is not supported.", "status": "FAILED_PRECONDITION"}},
     ErrorClass.BAD_REQUEST),
    (504, {"error": {"code": 504, "message": "Deadline expired", "status": "DEADLINE_EXCEEDED"}}, ErrorClass.TIMEOUT),
])
def test_error_mapping_cases(status: int, body: dict[str, Any], expected: ErrorClass) -> None:
    assert ADAPTER.parse_error(status, {}, orjson.dumps(body)).error_class is expected


def test_non_json_error_body() -> None:
    error = ADAPTER.parse_error(502, {"content-type": "text/html; charset=utf-8"}, b"<html>Bad Gateway</html>")
    assert error.error_class is ErrorClass.SERVER_ERROR
    assert error.message == "upstream answered 502 with a non-JSON body (text/html, 24 bytes)"
    assert ADAPTER.parse_error(500, {}, b"").message == "upstream returned HTTP 500"


def test_registered() -> None:
    assert isinstance(adapter_for("gemini"), GeminiAdapter)
    assert adapter_for("gemini").wire_format == "gemini"
    assert adapter_for("openai").wire_format == "openai"


# --- the strict-server rules themselves ----------------------------------------------


@pytest.mark.parametrize("name", ["01_request_tools.json", "04_request_function_responses.json",
                                  "06_request_foreign_history_dummy_signature.json"])
def test_rules_accept_the_example_requests(name: str) -> None:
    assert gemini_request_problems(fixture_json(name), MODEL) == []
    assert gemini_request_problems(fixture_json("openai_to_gemini_request.json")["gemini_request"], MODEL) == []


def _good_body() -> dict[str, Any]:
    return copy.deepcopy(fixture_json("04_request_function_responses.json"))


def _mutate_role(body: dict[str, Any]) -> None:
    body["contents"][1]["role"] = "assistant"


def _mutate_drop_response(body: dict[str, Any]) -> None:
    del body["contents"][2]["parts"][1]


def _mutate_no_results(body: dict[str, Any]) -> None:
    del body["contents"][2]


def _mutate_unsigned(body: dict[str, Any]) -> None:
    del body["contents"][1]["parts"][1]["thoughtSignature"]


def _mutate_string_args(body: dict[str, Any]) -> None:
    body["contents"][1]["parts"][1]["functionCall"]["args"] = '{"city": "Paris"}'


def _mutate_string_response(body: dict[str, Any]) -> None:
    body["contents"][2]["parts"][0]["functionResponse"]["response"] = "sunny"


def _mutate_reasoning(body: dict[str, Any]) -> None:
    body["contents"][1]["reasoning_content"] = "thinking"


def _mutate_extra_content(body: dict[str, Any]) -> None:
    body["contents"][1]["parts"][1]["extra_content"] = {"google": {"thought_signature": "x"}}


def _mutate_tool_calls(body: dict[str, Any]) -> None:
    body["contents"][1]["parts"].append({"tool_calls": []})


def _mutate_thinking_blocks(body: dict[str, Any]) -> None:
    body["thinking_blocks"] = []


def _mutate_both_thinking(body: dict[str, Any]) -> None:
    body["generationConfig"]["thinkingConfig"]["thinkingBudget"] = 1024


def _mutate_names_in_auto(body: dict[str, Any]) -> None:
    body["toolConfig"] = {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["get_weather"]}}


def _mutate_wrong_name(body: dict[str, Any]) -> None:
    body["contents"][2]["parts"][0]["functionResponse"]["name"] = "get_time"


def _mutate_empty_parts(body: dict[str, Any]) -> None:
    body["contents"].append({"role": "user", "parts": []})


def _mutate_snake_case(body: dict[str, Any]) -> None:
    body["generationConfig"]["max_output_tokens"] = 5


@pytest.mark.parametrize(("mutate", "fragment"), [
    (_mutate_role, "valid role"),
    (_mutate_drop_response, "number of function response parts"),
    (_mutate_no_results, "number of function response parts"),
    (_mutate_unsigned, "missing a thought_signature"),
    (_mutate_string_args, "args: must be an object"),
    (_mutate_string_response, "response: must be an object"),
    (_mutate_reasoning, "reasoning_content"),
    (_mutate_extra_content, "extra_content"),
    (_mutate_tool_calls, "tool_calls"),
    (_mutate_thinking_blocks, "thinking_blocks"),
    (_mutate_both_thinking, "exclusive"),
    (_mutate_names_in_auto, "requires mode ANY"),
    (_mutate_wrong_name, "answers 'get_weather'"),
    (_mutate_empty_parts, "at least one parts"),
    (_mutate_snake_case, "max_output_tokens"),
])
def test_rules_reject_bad_bodies(mutate: Any, fragment: str) -> None:
    body = _good_body()
    mutate(body)
    problems = gemini_request_problems(body, MODEL)
    assert any(fragment in problem for problem in problems), problems


def test_rules_signature_only_enforced_on_gemini_3_current_turn() -> None:
    body = _good_body()
    _mutate_unsigned(body)
    assert gemini_request_problems(body, "gemini-2.5-flash") == []
    # Once a new plain user message starts the next turn, the old step is no longer validated.
    body["contents"].append({"role": "model", "parts": [{"text": "Paris is sunny."}]})
    body["contents"].append({"role": "user", "parts": [{"text": "thanks"}]})
    assert gemini_request_problems(body, MODEL) == []
