"""OpenAI-format adapter: golden translations from the wire-format examples, parsing, streaming, errors.

The adapter serves OpenAI itself and every server that speaks its format (DeepSeek, Azure, Groq, Mistral,
Ollama, vLLM, Gemini's compat endpoint); the compat examples and the stream edge cases of the reference
(``tool_call_stream_cases.json``) are all run through it. Every request body built here also goes through
``openai_request_problems``, the rules a strict OpenAI server enforces.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import ModelRequest, ModelResponse, ReasoningDelta, StreamDelta, TextDelta, stable_tool_call_id
from gateway.config.model import ProviderConfig
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.registry import adapter_for
from gateway.upstream.sse import SSEDecoder
from tests.fakes.openai_rules import openai_request_problems
from tests.providers.streams import parse_in_pieces, parse_stream, sse_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openai"
ADAPTER = OpenAIAdapter()
PROVIDER = ProviderConfig(name="openai", type="openai", base_url="https://api.openai.com/v1", api_key="sk-test",
                          headers={"openai-organization": "org-test"})
DEEPSEEK = ProviderConfig(name="deepseek", type="openai", base_url="https://api.deepseek.com", api_key="sk-ds",
                          reasoning_passback=True)
MODEL = "gpt-4.1-2025-04-14"
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for one city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
USER = {"role": "user", "content": "Weather in Paris?"}


# --- helpers --------------------------------------------------------------------------


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture(name: str) -> Any:
    return orjson.loads(fixture_bytes(name))


def http_blocks(name: str) -> list[tuple[str, str]]:
    """(title, text) for each ``### `` block of an ``.http`` example file; blocks without text are skipped."""
    blocks = []
    for block in fixture_bytes(name).decode().split("\n### ")[1:]:
        title, _, rest = block.partition("\n")
        if rest.strip():
            blocks.append((title, rest))
    return blocks


def http_responses(name: str) -> list[tuple[str, int, dict[str, str], bytes]]:
    """(title, status, headers, body) for each response block."""
    examples = []
    for title, rest in http_blocks(name):
        if not rest.startswith("HTTP/1.1 "):
            continue
        head, _, body = rest.partition("\n\n")
        status_line, *header_lines = head.strip().splitlines()
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
        examples.append((title, int(status_line.split()[1]), headers, body.strip().encode() + b"\n\n"))
    return examples


def http_requests(name: str) -> list[tuple[str, str, dict[str, str], Any]]:
    """(title, url, headers, JSON body) for each request block."""
    examples = []
    for title, rest in http_blocks(name):
        if not rest.startswith("POST "):
            continue
        head, _, body = rest.partition("\n\n")
        request_line, *header_lines = head.strip().splitlines()
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
        examples.append((title, request_line.split()[1], headers, orjson.loads(body)))
    return examples


def sse_data(text: str) -> bytes:
    """The ``data:`` lines of an example section as a stream body (comment lines dropped)."""
    return b"".join(line.encode() + b"\n\n" for line in text.splitlines() if line.startswith("data:"))


def azure_stream() -> bytes:
    return sse_data(next(rest for title, rest in http_blocks("azure_openai.http") if "data:" in rest))


def compat_stream(which: str) -> bytes:
    """One of the two streams of ``vllm_and_gemini_openai_compat.sse``: "vllm" or "gemini"."""
    text = fixture_bytes("vllm_and_gemini_openai_compat.sse").decode()
    vllm, _, gemini = text.partition("# Gemini's OpenAI-compatible endpoint")
    return sse_data(vllm if which == "vllm" else gemini)


def run_stream(events: list[SSEEvent]) -> tuple[ModelResponse, list[StreamDelta]]:
    return parse_stream(ADAPTER, events)


def stream_of(data: bytes) -> tuple[ModelResponse, list[StreamDelta]]:
    return run_stream(sse_events(data))


def chunk(choices: list[dict[str, Any]], id: str = "chatcmpl-t", model: str = "m", **extra: Any) -> SSEEvent:
    return SSEEvent(None, orjson.dumps({"id": id, "object": "chat.completion.chunk", "created": 1, "model": model,
                                        "choices": choices, **extra}))


def delta_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> SSEEvent:
    return chunk([{"index": 0, "delta": delta, "finish_reason": finish}], **extra)


DONE = SSEEvent(None, b"[DONE]")


def build(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
          model: str = MODEL, stream: bool = False, provider: ProviderConfig = PROVIDER,
          **params: Any) -> dict[str, Any]:
    request = ModelRequest(messages=messages, tools=tools or [], tool_choice=tool_choice, params=params)
    body = orjson.loads(ADAPTER.build_request(request, provider, model, stream).body)
    assert openai_request_problems(body, model) == []
    return body


def from_openai(openai_body: dict[str, Any], model: str = MODEL, provider: ProviderConfig = PROVIDER) -> dict[str, Any]:
    """Build from a whole OpenAI request body the way the API layer splits it."""
    rest = {k: v for k, v in openai_body.items()
            if k not in ("model", "messages", "tools", "tool_choice", "stream", "stream_options")}
    return build(openai_body["messages"], openai_body.get("tools"), openai_body.get("tool_choice"), model,
                 bool(openai_body.get("stream")), provider, **rest)


def parse(payload: dict[str, Any]) -> ModelResponse:
    return ADAPTER.parse_response(orjson.dumps(payload))


def completion(message: dict[str, Any], finish: str | None = "stop", id: str = "chatcmpl-t", model: str = "m",
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"id": id, "object": "chat.completion", "created": 1, "model": model,
                               "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                            "finish_reason": finish}]}
    if usage is not None:
        payload["usage"] = usage
    return payload


def call(call_id: str, name: str = "get_weather", arguments: Any = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- request translation -------------------------------------------------------------------


def test_tools_request_example_passes_through_with_model_substituted() -> None:
    example = fixture("01_request_tools.json")
    assert from_openai(example) == {**example, "model": MODEL}


def test_json_schema_reasoning_request_example_passes_through() -> None:
    example = fixture("01b_request_json_schema_reasoning.json")
    body = from_openai(example, model="o4-mini-2025-04-16")
    assert body == {**example, "model": "o4-mini-2025-04-16"}
    assert "stream" not in body and "stream_options" not in body


def test_tool_results_request_example_passes_through() -> None:
    example = fixture("04_request_tool_results.json")
    expected = {k: v for k, v in example.items() if k != "stream"}  # stream=false is the default upstream too
    assert from_openai(example, model="gpt-4.1") == expected


def test_deepseek_passback_example_is_sent_verbatim() -> None:
    example = fixture("deepseek_03_request_passback.json")
    assert from_openai(example, model="deepseek-v4-pro", provider=DEEPSEEK) == example


def test_reasoning_content_is_stripped_without_passback() -> None:
    example = fixture("deepseek_03_request_passback.json")
    body = from_openai(example, model="deepseek-v4-pro")
    expected = copy.deepcopy(example)
    for message in expected["messages"]:
        message.pop("reasoning_content", None)
    assert body == expected
    assert example["messages"][2]["reasoning_content"]  # the caller's transcript is not mutated


def test_passback_adds_empty_reasoning_to_tool_call_turns_lacking_it() -> None:
    messages = [USER,
                {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
                {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
                {"role": "assistant", "content": "Rain.", "reasoning_content": "It rains."},
                {"role": "user", "content": "Thanks"},
                {"role": "assistant", "content": "You're welcome."}]
    original = copy.deepcopy(messages)
    body = build(messages, tools=[WEATHER_TOOL], provider=DEEPSEEK)
    assert body["messages"][1] == {**messages[1], "reasoning_content": ""}
    assert body["messages"][3] == messages[3]  # kept on a tool-less turn that has it
    assert "reasoning_content" not in body["messages"][5]  # not invented for a tool-less turn
    assert messages == original


@pytest.mark.parametrize("provider", [PROVIDER, DEEPSEEK], ids=["openai", "passback"])
def test_foreign_artifacts_are_always_stripped(provider: ProviderConfig) -> None:
    signed = {**call("call_1"), "extra_content": {"google": {"thought_signature": "c2ln"}}}
    messages = [USER,
                {"role": "assistant", "content": "On it.", "reasoning_content": "I should check.",
                 "thinking_blocks": [{"type": "thinking", "thinking": "I should check.", "signature": "EqQB"}],
                 "extra_content": {"google": {"thought_signature": "dGV4dA=="}}, "tool_calls": [signed]},
                {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
    original = copy.deepcopy(messages)
    request = ModelRequest(messages=messages, tools=[WEATHER_TOOL])
    raw = ADAPTER.build_request(request, provider, MODEL, False).body
    assert b"thinking_blocks" not in raw and b"extra_content" not in raw and b"thought_signature" not in raw
    assistant = orjson.loads(raw)["messages"][1]
    assert assistant["tool_calls"] == [call("call_1")]
    if provider.reasoning_passback is True:
        assert assistant["reasoning_content"] == "I should check."
    else:
        assert "reasoning_content" not in assistant
    assert messages == original


@pytest.mark.parametrize("arguments", ['{"city": "Par', "not json", "[1, 2]", '"Paris"', "", None])
def test_malformed_history_arguments_go_as_an_empty_object(arguments: Any) -> None:
    """A model's invalid arguments (answered with an error result) would make a strict server answer 400."""
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [call("call_1", arguments=arguments),
                                                                              call("call_2")]},
                {"role": "tool", "tool_call_id": "call_1", "content": "invalid arguments"},
                {"role": "tool", "tool_call_id": "call_2", "content": "rain"}]
    original = copy.deepcopy(messages)
    sent = build(messages, tools=[WEATHER_TOOL])["messages"][1]["tool_calls"]  # build() applies the strict rules
    assert [c["function"]["arguments"] for c in sent] == ["{}", '{"city": "Paris"}']
    assert messages == original  # the transcript keeps what the model emitted


def test_valid_history_arguments_keep_their_bytes() -> None:
    arguments = '{ "city" :  "Zürich" }'
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [call("call_1", arguments=arguments)]},
                {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
    assert build(messages, tools=[WEATHER_TOOL])["messages"][1]["tool_calls"][0]["function"]["arguments"] == arguments


AUTO = ProviderConfig(name="deepseek", type="openai", base_url="https://api.deepseek.com", api_key="sk-ds")


def _turn(call_id: str, reasoning: str | None = None, origin: str | None = None) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call(call_id)]}
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    if origin is not None:
        assistant["reasoning_origin"] = origin
    return [assistant, {"role": "tool", "tool_call_id": call_id, "content": "rain"}]


def test_auto_passback_returns_reasoning_to_the_provider_that_produced_it() -> None:
    assert AUTO.reasoning_passback == "auto"  # the default
    messages = [USER, *_turn("c1", "first", "deepseek"), *_turn("c2"), *_turn("c3", "theirs", "kimi"),
                *_turn("c4", "", None)]
    sent = build(messages, tools=[WEATHER_TOOL], provider=AUTO)["messages"]
    # Every tool-call turn of the current request carries the field; only this provider's text is sent.
    assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == ["first", "", "", ""]
    assert all("reasoning_origin" not in m for m in sent)


def test_auto_passback_sends_nothing_without_own_reasoning_in_the_current_request() -> None:
    earlier = [USER, *_turn("c1", "old", "deepseek"), {"role": "assistant", "content": "Rain."},
               {"role": "user", "content": "And Rome?"}]
    for messages in ([*earlier, *_turn("c2")],  # own reasoning only before the last user message
                     [USER, *_turn("c1", "theirs", "groq")],  # another provider's reasoning
                     [USER, *_turn("c1", "client-kept", None)],  # reasoning without provenance
                     [USER, *_turn("c1", "as reasoning", "")]):  # arrived as ``reasoning``: goes back nowhere
        sent = build(messages, tools=[WEATHER_TOOL], provider=AUTO)["messages"]
        assert all("reasoning_content" not in m and "reasoning_origin" not in m for m in sent), messages


@pytest.mark.parametrize(("passback", "expected"), [(True, ["mine", "theirs", ""]), (False, [None, None, None])])
def test_passback_true_and_false(passback: bool, expected: list[str | None]) -> None:
    provider = ProviderConfig(name="deepseek", type="openai", base_url="https://api.deepseek.com",
                              reasoning_passback=passback)
    messages = [USER, *_turn("c1", "mine", "deepseek"), *_turn("c2", "theirs", "kimi"), *_turn("c3")]
    sent = build(messages, tools=[WEATHER_TOOL], provider=provider)["messages"]
    assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == expected


def test_messages_without_artifacts_are_sent_as_given() -> None:
    messages = [{"role": "system", "content": "Be brief."}, USER,
                {"role": "assistant", "content": None, "tool_calls": [call("call_1")], "name": "bot"},
                {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "rain"}]}]
    assert build(messages, tools=[WEATHER_TOOL])["messages"] == messages


def test_params_pass_through_including_unknown_fields() -> None:
    params = {"temperature": 0.2, "top_p": 0.9, "max_completion_tokens": 300, "max_tokens": 200, "stop": ["END"],
              "seed": 7, "n": 2, "user": "u-1", "logit_bias": {"50256": -100}, "logprobs": True, "top_logprobs": 2,
              "response_format": {"type": "json_object"}, "reasoning_effort": "xhigh", "service_tier": "flex",
              "metadata": {"k": "v"}, "store": True, "thinking": {"type": "enabled"},
              "something_new": {"nested": [1, 2]}, "parallel_tool_calls": False}
    body = build([USER], tools=[WEATHER_TOOL], tool_choice="required", model="upstream-model", **params)
    assert body == {"model": "upstream-model", "messages": [USER], "tools": [WEATHER_TOOL],
                    "tool_choice": "required", **params}


def test_model_param_from_the_client_is_replaced() -> None:
    request = ModelRequest(messages=[USER], params={"model": "client-alias"})
    assert orjson.loads(ADAPTER.build_request(request, PROVIDER, "deployment-1", False).body)["model"] == "deployment-1"


@pytest.mark.parametrize("choice", ["auto", "none", "required", {"type": "function", "function": {"name": "x"}},
                                    {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}])
def test_tool_choice_passes_through_with_tools(choice: Any) -> None:
    body = build([USER], tools=[WEATHER_TOOL], tool_choice=choice, parallel_tool_calls=True)
    assert (body["tools"], body["tool_choice"], body["parallel_tool_calls"]) == ([WEATHER_TOOL], choice, True)


def test_no_tools_drops_tool_choice_and_parallel_tool_calls() -> None:
    body = build([USER], tool_choice="auto", parallel_tool_calls=False)
    assert body == {"model": MODEL, "messages": [USER]}


def test_tools_without_tool_choice_send_no_tool_choice() -> None:
    body = build([USER], tools=[WEATHER_TOOL])
    assert "tool_choice" not in body and body["tools"] == [WEATHER_TOOL]


def test_stream_adds_include_usage() -> None:
    body = build([USER], stream=True)
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})
    body = build([USER], stream=False)
    assert "stream" not in body and "stream_options" not in body


def test_url_and_authorization_header() -> None:
    upstream = ADAPTER.build_request(ModelRequest(messages=[USER]), PROVIDER, MODEL, stream=False)
    assert upstream.url == "https://api.openai.com/v1/chat/completions"
    assert upstream.headers == {"content-type": "application/json", "authorization": "Bearer sk-test",
                                "openai-organization": "org-test"}
    keyless = ProviderConfig(name="vllm", type="openai", base_url="http://localhost:8000/v1")
    upstream = ADAPTER.build_request(ModelRequest(messages=[USER]), keyless, "Qwen/Qwen3-8B", stream=False)
    assert upstream.url == "http://localhost:8000/v1/chat/completions"
    assert upstream.headers == {"content-type": "application/json"}


def test_azure_dated_api_example() -> None:
    _, url, headers, native = next(e for e in http_requests("azure_openai.http") if e[0].startswith("A)"))
    azure = ProviderConfig(name="azure", type="openai", base_url="https://my-resource.openai.azure.com",
                           api_key="<AZURE_OPENAI_API_KEY>", api_version="2024-10-21")
    upstream = ADAPTER.build_request(ModelRequest(messages=native["messages"], params={"max_tokens": 50}), azure,
                                     "gpt-4o-prod", stream=False)
    assert upstream.url == url
    assert upstream.headers == headers
    assert "authorization" not in upstream.headers
    assert orjson.loads(upstream.body) == {**native, "model": "gpt-4o-prod"}  # the body model is ignored by Azure


def test_azure_v1_api_example() -> None:
    _, url, headers, native = next(e for e in http_requests("azure_openai.http") if e[0].startswith("B)"))
    azure = ProviderConfig(name="azure", type="openai", base_url="https://my-resource.openai.azure.com/openai/v1",
                           headers={"api-key": "<AZURE_OPENAI_API_KEY>"})
    request = ModelRequest(messages=native["messages"], params={"max_completion_tokens": 50})
    upstream = ADAPTER.build_request(request, azure, native["model"], stream=False)
    assert (upstream.url, upstream.headers, orjson.loads(upstream.body)) == (url, headers, native)


def test_registered() -> None:
    assert isinstance(adapter_for("openai"), OpenAIAdapter)
    assert adapter_for("openai").wire_format == "openai"


# --- response parsing ----------------------------------------------------------------------


def test_parse_parallel_tool_calls_example() -> None:
    response = ADAPTER.parse_response(fixture_bytes("02_response_parallel_tool_calls.json"))
    assert response.message == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_Qk3v9Zb1mXw7RtY2pLs8NdAe", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"celsius"}'}},
        {"id": "call_H8dTn2Wq5cVz0JkR4uFy6MbG", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Tokyo","unit":"celsius"}'}}]}
    assert response.finish_reason == "tool_calls"
    assert (response.id, response.model) == ("chatcmpl-C7xQ2mZr8Lw1kTq9pE3vYb5nHs0aU", MODEL)
    assert response.usage.to_openai() == {
        "prompt_tokens": 142, "completion_tokens": 52, "total_tokens": 194,
        "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}


def test_parse_final_text_example_with_cached_tokens() -> None:
    response = ADAPTER.parse_response(fixture_bytes("05_response_final_text.json"))
    assert response.message == {"role": "assistant",
                                "content": "Paris is 18 °C and sunny; Tokyo is 24 °C with light rain."}
    assert response.finish_reason == "stop"
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) == \
        (260, 19, 128, 0)


def test_parse_deepseek_reasoning_with_tool_call_example() -> None:
    native = fixture("deepseek_01_response_thinking_tool_call.json")
    response = ADAPTER.parse_response(fixture_bytes("deepseek_01_response_thinking_tool_call.json"))
    assert response.message == {
        "role": "assistant", "content": None,  # DeepSeek's "" beside tool calls, as a stream parses it
        "reasoning_content": native["choices"][0]["message"]["reasoning_content"],
        "tool_calls": [{"id": "call_00_kR7vT2mQ9wXz4LpB8nC1dF6s", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]}
    assert response.finish_reason == "tool_calls"
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) == \
        (310, 61, 256, 34)


def test_deepseek_prompt_cache_hit_tokens_alone_count_as_cached() -> None:
    usage = {"prompt_tokens": 310, "completion_tokens": 61, "total_tokens": 371,
             "prompt_cache_hit_tokens": 200, "prompt_cache_miss_tokens": 110}
    assert parse(completion({"content": "x"}, usage=usage)).usage.cached_tokens == 200


def test_missing_usage_is_zero() -> None:
    assert parse(completion({"content": "x"})).usage.to_openai()["total_tokens"] == 0
    assert parse(completion({"content": "x"}, usage={"prompt_tokens": None})).usage.prompt_tokens == 0


def test_parse_refusal_becomes_content() -> None:
    response = parse(completion({"content": None, "refusal": "I can't help with that."}))
    assert response.message == {"role": "assistant", "content": "I can't help with that."}
    assert response.finish_reason == "stop"
    # content, when present, wins over a refusal
    assert parse(completion({"content": "Sure.", "refusal": "No."})).message["content"] == "Sure."


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_field_names(key: str) -> None:
    # Reasoning sent as ``reasoning`` (Groq, OpenRouter) is marked as going back to no provider.
    origin = {"reasoning_origin": ""} if key == "reasoning" else {}
    assert parse(completion({"content": "4", key: "2+2"})).message == {
        "role": "assistant", "content": "4", "reasoning_content": "2+2", **origin}


@pytest.mark.parametrize(("native", "expected"), [
    ("stop", "tool_calls"), (None, "tool_calls"), ("tool_calls", "tool_calls"), ("function_call", "tool_calls"),
    ("length", "length"), ("some_future_reason", "tool_calls")])
def test_tool_calls_decide_the_finish_reason(native: str | None, expected: str) -> None:
    assert parse(completion({"content": None, "tool_calls": [call("c1")]}, native)).finish_reason == expected


@pytest.mark.parametrize(("native", "expected"), [
    ("stop", "stop"), ("length", "length"), ("content_filter", "content_filter"), ("tool_calls", "stop"),
    ("function_call", "stop"), (None, "stop"), ("some_future_reason", "stop"),
    ("insufficient_system_resource", "length")])
def test_finish_reasons_without_calls(native: str | None, expected: str) -> None:
    assert parse(completion({"content": "x"}, native)).finish_reason == expected


def test_empty_tool_calls_array_with_tool_calls_finish_is_stop() -> None:
    response = parse(completion({"content": "Done.", "tool_calls": []}, "tool_calls"))
    assert response.finish_reason == "stop" and "tool_calls" not in response.message


@pytest.mark.parametrize(("arguments", "expected"), [
    ("", "{}"), ("  ", "{}"), (None, "{}"), ({}, "{}"), ({"city": "Paris"}, '{"city":"Paris"}'),
    ('{"city": "Paris"}', '{"city": "Paris"}'), ('{"city": "Par', '{"city": "Par')])
def test_arguments_are_always_a_json_string(arguments: Any, expected: str) -> None:
    response = parse(completion({"content": None, "tool_calls": [call("c1", "ping", arguments)]}))
    assert response.tool_calls[0]["function"]["arguments"] == expected
    no_arguments = {"id": "c1", "type": "function", "function": {"name": "ping"}}
    assert parse(completion({"tool_calls": [no_arguments]})).tool_calls[0]["function"]["arguments"] == "{}"


def test_missing_tool_call_ids_get_stable_distinct_ids() -> None:
    payload = completion({"content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Lima"}'}},
        {"id": "", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Quito"}'}}]},
        id="chatcmpl-noids")
    ids = [c["id"] for c in parse(payload).tool_calls]
    assert ids == [stable_tool_call_id("chatcmpl-noids", 0), stable_tool_call_id("chatcmpl-noids", 1)]
    assert ids[0] != ids[1] and all(i.startswith("call_") for i in ids)
    assert [c["id"] for c in parse(payload).tool_calls] == ids  # re-parsing gives the same ids
    other = [c["id"] for c in parse({**payload, "id": "chatcmpl-other"}).tool_calls]
    assert set(other).isdisjoint(ids)


def test_given_ids_and_mistral_style_index_field() -> None:
    example = fixture("mistral.json")["response_tool_call_example"]
    response = parse(completion({"content": "", "tool_calls": [example]}, "tool_calls"))
    assert response.tool_calls == [{"id": "D681PevKs", "type": "function",
                                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]


def test_gemini_compat_signature_is_kept_on_the_call() -> None:
    signed = {**call("function-call-1"), "extra_content": {"google": {"thought_signature": "c2ln"}}}
    assert parse(completion({"content": None, "tool_calls": [signed]})).tool_calls == [signed]


@pytest.mark.parametrize("body", [b"<html>502</html>", b"", b"[1, 2]", b'"text"', b'{"choices": []}',
                                  b'{"choices": {"0": {}}}', b'{"id": "x"}'])
def test_parse_invalid_bodies(body: bytes) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(body)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE and info.value.retryable


def test_parse_error_object_in_a_200_body() -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(b'{"error": {"message": "The server is overloaded", "code": "server_is_overloaded"}}')
    assert (info.value.error_class, info.value.message) == (ErrorClass.OVERLOADED, "The server is overloaded")


# --- streaming: examples ---------------------------------------------------------------------


def test_parallel_tool_call_stream_equals_the_response_example() -> None:
    # The two example files were written independently: the stream has its own id and spaced arguments.
    native = fixture("02_response_parallel_tool_calls.json")
    native["id"] = "chatcmpl-C7xQ5aP1rT9uWc3eYk7mNb2vLq0Zs"
    for tool_call, city in zip(native["choices"][0]["message"]["tool_calls"], ["Paris", "Tokyo"], strict=True):
        tool_call["function"]["arguments"] = f'{{"city": "{city}", "unit": "celsius"}}'
    response, deltas = stream_of(fixture_bytes("03_stream_parallel_tool_calls.sse"))
    assert response == parse(native)
    assert deltas == []


def test_text_stream_equals_the_response_example() -> None:
    expected = ADAPTER.parse_response(fixture_bytes("05_response_final_text.json"))
    response, deltas = stream_of(fixture_bytes("06_stream_text_with_usage.sse"))
    assert response == expected
    assert deltas == [TextDelta("Paris is "), TextDelta("18 °C and sunny; "),
                      TextDelta("Tokyo is 24 °C with light rain.")]


def test_deepseek_reasoning_stream_equals_the_response_example() -> None:
    # Different id, and the stream's reasoning is shorter than the response example's.
    native = fixture("deepseek_01_response_thinking_tool_call.json")
    native["id"] = "6b1f0d3e-8c2a-4f5e-9a7b-2d4c6e8f0a1c"
    reasoning = "The user wants current weather for Paris. I must not guess; call get_weather."
    native["choices"][0]["message"]["reasoning_content"] = reasoning
    response, deltas = stream_of(fixture_bytes("deepseek_02_stream_reasoning_tool_call.sse"))
    assert response == parse(native)
    assert all(isinstance(d, ReasoningDelta) for d in deltas)
    assert "".join(d.text for d in deltas) == reasoning
    assert response.usage.cached_tokens == 256 and response.usage.reasoning_tokens == 34  # usage on the finish chunk


def test_azure_stream_with_empty_first_chunk() -> None:
    response, deltas = stream_of(azure_stream())
    assert response == parse(completion({"content": "Hello!"}, "stop", id="chatcmpl-AzX1", model="gpt-4o-2024-11-20"))
    assert deltas == [TextDelta("Hello!")]


def test_vllm_named_tool_choice_stream_ends_with_stop_but_has_a_call() -> None:
    response, deltas = stream_of(compat_stream("vllm"))
    expected = parse(completion({"content": "", "tool_calls": [
        call("chatcmpl-tool-4e1b6f0a9c2d4b7e", arguments='{"city": "Paris", "unit": "celsius"}')]},
        "stop", id="chatcmpl-9c1", model="Qwen/Qwen3-8B"))
    assert response == expected
    assert response.finish_reason == "tool_calls" and response.message["content"] is None
    assert deltas == []


def test_gemini_compat_stream_without_index_keeps_the_signature() -> None:
    response, _ = stream_of(compat_stream("gemini"))
    signed = {**call("function-call-1358297021", arguments='{"city":"Paris","unit":"celsius"}'),
              "extra_content": {"google": {"thought_signature": "CiQBjz1rX2V4YW1wbGU="}}}
    assert response == parse(completion({"content": None, "tool_calls": [signed]}, "tool_calls", id="kK3taJm2",
                                        model="gemini-3-flash-preview"))


def test_ollama_compat_stream_reporting_stop_after_a_call() -> None:
    chunks = fixture("ollama.json")["openai_compat_stream_chunks_observed"]
    response, _ = run_stream([SSEEvent(None, orjson.dumps(c)) for c in chunks] + [DONE])
    assert response.tool_calls == [call("call_k3j2h1g0", arguments='{"city":"Paris"}')]
    assert response.finish_reason == "tool_calls" and response.message["content"] is None


def test_groq_whole_calls_at_one_index_and_x_groq_usage() -> None:
    example = fixture("groq.json")["stream_tool_call_chunk_example"]
    second = copy.deepcopy(example)
    second["choices"][0]["delta"]["tool_calls"][0].update(id="call_9zq2", function={
        "name": "get_weather", "arguments": '{"city":"Tokyo"}'})
    final = {**example, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
             "x_groq": {"id": "req_1", "usage": {"prompt_tokens": 90, "completion_tokens": 30, "total_tokens": 120}}}
    response, _ = run_stream([SSEEvent(None, orjson.dumps(c)) for c in (example, second, final)] + [DONE])
    assert response.tool_calls == [call("call_4mv1", arguments='{"city":"Paris"}'),
                                   call("call_9zq2", arguments='{"city":"Tokyo"}')]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (90, 30)


# --- streaming: the reference's tool-call assembly cases ------------------------------------------


EDGE_CASES = fixture("tool_call_stream_cases.json")["cases"]


def edge_events(case: dict[str, Any]) -> list[SSEEvent]:
    return [chunk([{"index": 0, **choice}], id="chatcmpl-edge") for choice in case["chunks"]] + [DONE]


@pytest.mark.parametrize("case", EDGE_CASES, ids=[c["name"] for c in EDGE_CASES])
def test_tool_call_stream_case(case: dict[str, Any]) -> None:
    response, deltas = run_stream(edge_events(case))
    expected = copy.deepcopy(case["expected"]["tool_calls"])
    for position, expected_call in enumerate(expected):
        if expected_call["id"] == "call_<generated>":
            expected_call["id"] = stable_tool_call_id("chatcmpl-edge", position)
    assert response.tool_calls == expected
    assert response.finish_reason == case["expected"]["finish_reason"]
    text = "".join(choice["delta"].get("content") or "" for choice in case["chunks"])
    assert response.message["content"] == (text or None)
    assert deltas == ([TextDelta(text)] if text else [])
    # ... and equals the non-stream parse of the same turn, the generated id included.
    native_calls = [{k: v for k, v in c.items() if v != "call_<generated>"} for c in case["expected"]["tool_calls"]]
    whole = completion({"content": text or None, "tool_calls": native_calls}, case["chunks"][-1]["finish_reason"],
                       id="chatcmpl-edge")
    assert response == parse(whole)


def test_every_reference_case_is_covered() -> None:
    assert len(EDGE_CASES) == 12
    assert len({c["name"] for c in EDGE_CASES}) == 12


def test_several_calls_in_one_chunk() -> None:
    whole = [call("call_a", arguments='{"city":"Paris"}'), call("call_b", "get_time", '{"timezone":"UTC"}')]
    indexed = [{**c, "index": i} for i, c in enumerate(whole)]
    for calls in (indexed, whole):  # with indexes, and without (Gemini compat)
        response, _ = run_stream([delta_chunk({"role": "assistant", "tool_calls": calls}),
                                  delta_chunk({}, "tool_calls"), DONE])
        assert response.tool_calls == whole


def test_several_fragmented_calls_interleaved_in_chunks() -> None:
    events = [delta_chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                           "function": {"name": "get_weather", "arguments": '{"ci'}},
                                          {"index": 1, "id": "call_b", "type": "function",
                                           "function": {"name": "get_time", "arguments": ""}}]}),
              delta_chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"timezone":"UTC"}'}},
                                          {"index": 0, "function": {"arguments": 'ty":"Paris"}'}}]}),
              delta_chunk({}, "tool_calls"), DONE]
    response, _ = run_stream(events)
    assert response.tool_calls == [call("call_a", arguments='{"city":"Paris"}'),
                                   call("call_b", "get_time", '{"timezone":"UTC"}')]


def test_stream_without_any_ids_matches_the_non_stream_parse() -> None:
    calls = [{"type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Lima"}'}},
             {"type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Quito"}'}}]
    events = [SSEEvent(None, orjson.dumps({"choices": [{"index": 0, "delta": {
        "tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}, "finish_reason": "stop"}]})), DONE]
    response, _ = run_stream(events)
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": calls},
                          "finish_reason": "stop"}]}
    assert response == parse(whole)
    ids = [c["id"] for c in response.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


def test_usage_on_the_finish_chunk_or_a_separate_chunk() -> None:
    events = sse_events(fixture_bytes("06_stream_text_with_usage.sse"))
    expected, deltas = run_stream(events)
    finish, usage_chunk, done = events[-3:]
    merged = {**orjson.loads(finish.data), "usage": orjson.loads(usage_chunk.data)["usage"]}
    assert run_stream([*events[:-3], SSEEvent(None, orjson.dumps(merged)), done]) == (expected, deltas)
    # No usage at all (include_usage unsupported) is zero usage, not a failure.
    response, _ = run_stream([*events[:-2], done])
    assert response.usage.to_openai()["total_tokens"] == 0
    assert response.message == expected.message


def test_streamed_refusal_is_text() -> None:
    response, deltas = run_stream([delta_chunk({"role": "assistant", "content": None, "refusal": ""}),
                                   delta_chunk({"refusal": "I can't "}), delta_chunk({"refusal": "help."}),
                                   delta_chunk({}, "stop"), DONE])
    assert response == parse(completion({"content": None, "refusal": "I can't help."}))
    assert "".join(d.text for d in deltas) == "I can't help."


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_streamed_reasoning_field_names(key: str) -> None:
    response, deltas = run_stream([delta_chunk({key: "2+2"}), delta_chunk({"content": "4"}, "stop"), DONE])
    assert response == parse(completion({"content": "4", key: "2+2"}))
    assert deltas == [ReasoningDelta("2+2"), TextDelta("4")]


def test_other_choices_keep_alives_and_unknown_fields_are_ignored() -> None:
    data = (b": keep-alive\n\n"
            + b"".join(b"data: " + e.data + b"\n\n" for e in [
                chunk([{"index": 1, "delta": {"content": "other choice"}, "finish_reason": None}]),
                chunk([{"index": 0, "delta": {"content": "Hi", "annotations": []}, "finish_reason": None,
                        "logprobs": None}], obfuscation="zz", system_fingerprint="fp"),
                SSEEvent(None, b"[1, 2]"),
                chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])])
            + b"data: [DONE]\n\n")
    response, deltas = stream_of(data)
    assert response == parse(completion({"content": "Hi"}))
    assert deltas == [TextDelta("Hi")]


def test_finish_reason_is_enough_without_done_and_done_is_enough_without_finish_reason() -> None:
    events = sse_events(fixture_bytes("06_stream_text_with_usage.sse"))
    expected, _ = run_stream(events)
    assert run_stream(events[:-1])[0] == expected  # no [DONE]
    without_finish = [*events[:-3], *events[-2:]]
    assert run_stream(without_finish)[0] == expected  # no finish chunk: "stop"


@pytest.mark.parametrize("keep", [0, 1, 5, 12])
def test_stream_cut_before_finish_and_done_raises_connection(keep: int) -> None:
    events = sse_events(fixture_bytes("03_stream_parallel_tool_calls.sse"))[:keep]
    parser = ADAPTER.new_stream_parser()
    for event in events:
        parser.feed(event)
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.CONNECTION and info.value.retryable


@pytest.mark.parametrize("data", [b'{"id": "x", "choices": [', b"not json", b"data: {}"])
def test_malformed_chunk_is_skipped(data: bytes) -> None:
    """Lenient clients skip an event they cannot read; the rest of the answer survives (see test_openai_answers)."""
    parser = ADAPTER.new_stream_parser()
    parser.feed(delta_chunk({"content": "Hi"}))
    assert parser.feed(SSEEvent(None, data)) == []
    parser.feed(delta_chunk({}, "stop"))
    assert parser.finish().message["content"] == "Hi"


def test_mid_stream_error_example() -> None:
    body = next(e for e in http_responses("07_errors.http") if e[1] == 200)[3]
    assert "error" in body.decode()
    parser = ADAPTER.new_stream_parser()
    events = sse_events(body)
    assert parser.feed(events[0]) == []
    with pytest.raises(ProviderError) as info:
        parser.feed(events[1])
    error = info.value
    assert error.error_class is ErrorClass.SERVER_ERROR and error.retryable
    assert error.message == "The server had an error while processing your request. Sorry about that!"


@pytest.mark.parametrize(("error", "expected"), [
    ({"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error",
      "code": "context_length_exceeded"}, ErrorClass.CONTEXT_LENGTH),
    ({"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"}, ErrorClass.RATE_LIMITED),
    ({"message": "The server is overloaded", "type": "service_unavailable_error", "code": "server_is_overloaded"},
     ErrorClass.OVERLOADED),
    ({"message": "Slow down", "code": "slow_down"}, ErrorClass.OVERLOADED),
    ({"message": "bad", "type": "invalid_request_error"}, ErrorClass.BAD_REQUEST),
    ({"message": "boom", "type": "server_error"}, ErrorClass.SERVER_ERROR),
    ("upstream exploded", ErrorClass.SERVER_ERROR),
])
def test_in_stream_error_classes(error: Any, expected: ErrorClass) -> None:
    parser = ADAPTER.new_stream_parser()
    with pytest.raises(ProviderError) as info:
        parser.feed(SSEEvent(None, orjson.dumps({"error": error})))
    assert info.value.error_class is expected


# --- streaming: byte boundaries ------------------------------------------------------------


STREAMS = {
    "03_stream_parallel_tool_calls": lambda: fixture_bytes("03_stream_parallel_tool_calls.sse"),
    "06_stream_text_with_usage": lambda: fixture_bytes("06_stream_text_with_usage.sse"),
    "deepseek_02_stream_reasoning_tool_call": lambda: fixture_bytes("deepseek_02_stream_reasoning_tool_call.sse"),
    "azure": azure_stream,
    "vllm": lambda: compat_stream("vllm"),
    "gemini_compat": lambda: compat_stream("gemini"),
}


def feed_in_pieces(data: bytes, bounds: list[int]) -> tuple[ModelResponse, list[StreamDelta]]:
    return parse_in_pieces(ADAPTER, data, bounds)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(STREAMS)), crlf=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=40))
def test_stream_split_at_any_byte_boundary_equals_whole(name: str, crlf: bool, cuts: list[int]) -> None:
    original = STREAMS[name]()
    expected = stream_of(original)
    data = original.replace(b"\n", b"\r\n") if crlf else original
    bounds = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    assert feed_in_pieces(data, bounds) == expected


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_stream_split_inside_every_crlf(name: str) -> None:
    original = STREAMS[name]()
    expected = stream_of(original)
    data = original.replace(b"\n", b"\r\n")
    for position in (i + 1 for i in range(len(data)) if data[i:i + 2] == b"\r\n"):
        assert feed_in_pieces(data, [0, position, len(data)]) == expected
    assert feed_in_pieces(data, list(range(len(data) + 1))) == expected  # one byte at a time


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("final_blank_line", [True, False])
def test_sse_decoder_multi_line_events_split_anywhere(newline: bytes, final_blank_line: bool) -> None:
    # OpenAI events are single data lines; a split inside "\r\n" only shows on multi-line events.
    lines = [b": keep-alive", b"event: chunk", b'data: {"a":', b"data:1}", b"", b"data: [DONE]", b""]
    data = newline.join(lines if final_blank_line else lines[:-1]) + (newline if final_blank_line else b"")
    expected = [SSEEvent("chunk", b'{"a":\n1}'), SSEEvent(None, b"[DONE]")]
    for bounds in [[0, len(data)], list(range(len(data) + 1)),
                   *([0, cut, len(data)] for cut in range(1, len(data)))]:
        decoder = SSEDecoder()
        events = [e for start, end in itertools.pairwise(bounds) for e in decoder.feed(data[start:end])]
        assert events + decoder.close() == expected, bounds


# --- errors ---------------------------------------------------------------------------


ERROR_EXAMPLES = [e for e in http_responses("07_errors.http") if e[1] >= 400]
# status -> (class, retry_after, no_retry), in file order
EXPECTED_ERRORS = [
    (400, ErrorClass.BAD_REQUEST, None, False),
    (400, ErrorClass.BAD_REQUEST, None, False),
    (401, ErrorClass.AUTH, None, False),
    (404, ErrorClass.NOT_FOUND, None, False),
    (429, ErrorClass.RATE_LIMITED, 1.42, False),  # retry-after-ms wins over retry-after: 2
    (429, ErrorClass.RATE_LIMITED, None, True),  # insufficient_quota
    (500, ErrorClass.SERVER_ERROR, None, False),
    (503, ErrorClass.OVERLOADED, None, False),
]


@pytest.mark.parametrize(("example", "expected"), list(zip(ERROR_EXAMPLES, EXPECTED_ERRORS, strict=True)),
                         ids=[e[0][:40] for e in ERROR_EXAMPLES])
def test_error_examples(example: tuple[str, int, dict[str, str], bytes],
                        expected: tuple[int, ErrorClass, float | None, bool]) -> None:
    _, status, headers, body = example
    expected_status, error_class, retry_after, no_retry = expected
    error = ADAPTER.parse_error(status, headers, body)
    assert (error.status, error.error_class, error.retry_after, error.no_retry) == \
        (expected_status, error_class, retry_after, no_retry)
    assert error.message == orjson.loads(body)["error"]["message"]
    assert error.retryable == (error_class in (ErrorClass.RATE_LIMITED, ErrorClass.SERVER_ERROR,
                                               ErrorClass.OVERLOADED) and not no_retry)


def test_every_error_example_is_checked() -> None:
    assert [e[1] for e in ERROR_EXAMPLES] == [e[0] for e in EXPECTED_ERRORS]


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after": "2"}, 2.0), ({"retry-after": "0.5"}, 0.5), ({"retry-after-ms": "1420"}, 1.42),
    ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0), ({"retry-after": "never"}, None), ({}, None),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0)])  # a date in the past: retry now
def test_retry_after_headers(headers: dict[str, str], expected: float | None) -> None:
    body = b'{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}'
    assert ADAPTER.parse_error(429, headers, body).retry_after == expected


def test_retry_after_http_date_in_the_future() -> None:
    import email.utils
    import time

    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    retry_after = ADAPTER.parse_error(503, {"retry-after": date}, b"").retry_after
    assert retry_after is not None and 25 <= retry_after <= 30


def test_x_should_retry_false_is_no_retry() -> None:
    error = ADAPTER.parse_error(500, {"x-should-retry": "false"}, b'{"error": {"message": "boom"}}')
    assert error.error_class is ErrorClass.SERVER_ERROR and error.no_retry and not error.retryable
    assert ADAPTER.parse_error(500, {"x-should-retry": "true"}, b"").retryable


@pytest.mark.parametrize("error", [
    {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
                "130000 tokens.", "type": "invalid_request_error", "param": "messages", "code":
                "context_length_exceeded"},
    {"message": "Input is too long.", "type": "invalid_request_error", "code": "context_length_exceeded"},
    {"message": "This model's maximum context length is 32768 tokens.", "type": "BadRequestError", "code": 400},
])
def test_context_length_exceeded_is_detected(error: dict[str, Any]) -> None:
    result = ADAPTER.parse_error(400, {}, orjson.dumps({"error": error}))
    assert result.error_class is ErrorClass.CONTEXT_LENGTH and not result.retryable


@pytest.mark.parametrize(("status", "expected"), [
    (408, ErrorClass.TIMEOUT), (422, ErrorClass.BAD_REQUEST),
    (502, ErrorClass.SERVER_ERROR), (504, ErrorClass.TIMEOUT), (529, ErrorClass.OVERLOADED),
    (403, ErrorClass.AUTH)])
def test_status_classes(status: int, expected: ErrorClass) -> None:
    assert ADAPTER.parse_error(status, {}, b'{"error": {"message": "x"}}').error_class is expected


def test_azure_prompt_content_filter_is_a_bad_request() -> None:
    _, status, headers, body = http_responses("azure_openai.http")[0]
    error = ADAPTER.parse_error(status, headers, body)
    assert (error.status, error.error_class) == (400, ErrorClass.BAD_REQUEST)
    assert error.message.startswith("The response was filtered")


def test_mistral_unwrapped_error_body() -> None:
    body = orjson.dumps(fixture("mistral.json")["error_400_bad_tool_call_id"])
    error = ADAPTER.parse_error(400, {}, body)
    assert error.error_class is ErrorClass.BAD_REQUEST
    assert error.message.startswith("Tool call id was call_Qk3v9Zb1mXw7RtY2pLs8NdAe")


def test_groq_tool_use_failed_is_an_upstream_failure_not_a_client_400() -> None:
    body = orjson.dumps(fixture("groq.json")["error_400_tool_use_failed"])
    error = ADAPTER.parse_error(400, {}, body)
    assert (error.status, error.error_class) == (400, ErrorClass.INVALID_RESPONSE)
    assert error.retryable and error.message.startswith("Failed to call a function")


@pytest.mark.parametrize(("body", "message"), [
    (b"<html>Bad Gateway</html>", "upstream answered 502 with a non-JSON body (no content type, 24 bytes)"),
    (b"", "upstream returned HTTP 502"),
    (b'{"error": "plain string"}', "plain string"), (b'{"detail": "x"}', "upstream returned HTTP 502"),
    (b"[1]", "upstream returned HTTP 502")])
def test_unusual_error_bodies(body: bytes, message: str) -> None:
    error = ADAPTER.parse_error(502, {}, body)
    assert (error.error_class, error.message) == (ErrorClass.SERVER_ERROR, message)


def test_gemini_openai_compat_endpoint_keeps_thought_signatures() -> None:
    """Gemini's OpenAI-compatible endpoint needs tool_calls[].extra_content back; other servers never get it."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"},
            "extra_content": {"google": {"thought_signature": "sig"}}}
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": "r"},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    compat = ProviderConfig(name="gemini-compat", type="openai",
                            base_url="https://generativelanguage.googleapis.com/v1beta/openai")
    sent = orjson.loads(OpenAIAdapter().build_request(ModelRequest(messages=messages), compat, "gemini-3-pro",
                                                      stream=False).body)
    assert sent["messages"][1]["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "sig"}}
    assert "reasoning_content" not in sent["messages"][1]
    plain = orjson.loads(OpenAIAdapter().build_request(ModelRequest(messages=messages), PROVIDER, "gpt-4.1",
                                                       stream=False).body)
    assert "extra_content" not in plain["messages"][1]["tool_calls"][0]
