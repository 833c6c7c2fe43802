"""Custom (freeform) and hosted tools on every wire format: what each target is sent, what comes back.

A custom tool is a function of one string argument (``input``) everywhere but OpenAI's own GPT-5
family, which takes it natively; a Responses caller's hosted ``web_search`` becomes Anthropic's web
search tool and Gemini's Google Search grounding, and what they searched comes back as a
``HostedToolCall``. Every body built here goes through the strict fake servers' rules.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import (
    HostedToolCall,
    HostedTools,
    ModelRequest,
    custom_arguments,
    custom_input,
    custom_tool_def,
)
from gateway.config.model import ProviderConfig
from gateway.providers import hosted
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.litellm import LiteLLMAdapter
from gateway.providers.mock import MockAdapter
from gateway.providers.openai import OpenAIAdapter, takes_custom_tools
from gateway.providers.openai_responses import OpenAIResponsesAdapter
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.gemini_rules import gemini_request_problems
from tests.fakes.openai_responses_rules import responses_request_problems
from tests.fakes.openai_rules import openai_request_problems
from tests.providers.streams import parse_stream, sse_events

GRAMMAR = {"syntax": "lark", "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch"'}
PATCH = custom_tool_def("apply_patch", "Edit files.", GRAMMAR)
FREE = custom_tool_def("note", None, None)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
USER = {"role": "user", "content": "Patch the file."}
PATCH_CALL = {"id": "call_1", "type": "custom",
              "function": {"name": "apply_patch", "arguments": custom_arguments("*** Begin Patch\n*** End Patch")}}
HISTORY = [USER, {"role": "assistant", "content": None, "tool_calls": [PATCH_CALL]},
           {"role": "tool", "tool_call_id": "call_1", "content": "Done"}]
SEARCH = {"type": "web_search", "external_web_access": True, "filters": {"allowed_domains": ["docs.python.org"]},
          "user_location": {"type": "approximate", "city": "Paris", "country": "FR", "region": 7}}


def provider(kind: str, base_url: str) -> ProviderConfig:
    return ProviderConfig(name=kind, type=kind, base_url=base_url, api_key="k")


OPENAI = provider("openai", "https://api.openai.com/v1")
COMPATIBLE = provider("openai", "http://vllm.internal:8000/v1")
ANTHROPIC = provider("anthropic", "https://api.anthropic.com")
GEMINI = provider("gemini", "https://generativelanguage.googleapis.com")


def openai_body(request: ModelRequest, target: ProviderConfig = OPENAI, model: str = "gpt-5.1") -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(OpenAIAdapter().build_request(request, target, model, False).body)
    assert not openai_request_problems(body, model)
    return body


def anthropic_body(request: ModelRequest) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(AnthropicAdapter().build_request(request, ANTHROPIC, "claude-x", False).body)
    assert not anthropic_request_problems(body), anthropic_request_problems(body)
    return body


def gemini_body(request: ModelRequest, model: str = "gemini-3-pro-preview") -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(GeminiAdapter().build_request(request, GEMINI, model, False).body)
    assert not gemini_request_problems(body, model), gemini_request_problems(body, model)
    return body


# --- custom tools ---------------------------------------------------------------------------------------


def test_custom_tool_input_round_trips_through_its_function_form() -> None:
    assert custom_input(custom_arguments("a\n{not json}")) == "a\n{not json}"
    assert custom_input('{"patch": "text"}') == "text"  # a model naming its one string otherwise
    assert custom_input("raw text") == "raw text"
    assert custom_input('{"input": 3, "other": 4}') == '{"input": 3, "other": 4}'
    assert custom_input(None) == ""
    said = PATCH["function"]["description"]
    assert "lark grammar" in said and GRAMMAR["definition"] in said
    assert PATCH["function"]["parameters"]["required"] == ["input"]


@pytest.mark.parametrize(("base_url", "model", "native"), [
    ("https://api.openai.com/v1", "gpt-5.1", True), ("https://api.openai.com/v1", "gpt-5-codex", True),
    ("https://res.openai.azure.com/openai", "gpt-5", True), ("https://api.openai.com/v1", "gpt-4.1", False),
    ("http://vllm.internal/v1", "gpt-5.1", False), ("https://api.openai.com/v1", "o3", False),
])
def test_openai_takes_custom_tools_natively_on_its_own_gpt5_family(base_url: str, model: str, native: bool) -> None:
    assert takes_custom_tools(base_url, model) is native


def test_openai_native_custom_tool_its_history_call_and_its_choice() -> None:
    request = ModelRequest(messages=HISTORY, tools=[WEATHER, PATCH],
                           tool_choice={"type": "function", "function": {"name": "apply_patch"}})
    body = openai_body(request)
    assert body["tools"][1] == {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files.",
                                                             "format": {"type": "grammar", "grammar": GRAMMAR}}}
    assert body["tools"][0] == WEATHER
    assert body["messages"][1]["tool_calls"] == [{"id": "call_1", "type": "custom", "custom": {
        "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}}]
    assert body["tool_choice"] == {"type": "custom", "custom": {"name": "apply_patch"}}


def test_openai_compatible_servers_get_the_function_form() -> None:
    request = ModelRequest(messages=HISTORY, tools=[PATCH, FREE], tool_choice="auto")
    body = openai_body(request, COMPATIBLE)
    assert [tool["type"] for tool in body["tools"]] == ["function", "function"]
    assert all("custom" not in tool for tool in body["tools"])
    assert body["messages"][1]["tool_calls"][0]["type"] == "function"
    assert orjson.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "input": "*** Begin Patch\n*** End Patch"}


def test_openai_never_sends_hosted_tools() -> None:
    body = openai_body(ModelRequest(messages=[USER], tools=[WEATHER], hosted=HostedTools([SEARCH])))
    assert body["tools"] == [WEATHER] and "web_search" not in orjson.dumps(body).decode()


def test_openai_native_custom_call_parses_whole_and_streamed_alike() -> None:
    adapter = OpenAIAdapter()
    whole = adapter.parse_response(orjson.dumps({"id": "chatcmpl-9", "model": "gpt-5.1", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_p", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch {x}"}}]}}]}))
    chunks = [{"tool_calls": [{"index": 0, "id": "call_p", "type": "custom", "custom": {"name": "apply_patch",
                                                                                          "input": ""}}]},
              {"tool_calls": [{"index": 0, "type": "custom", "custom": {"input": "*** Begin "}}]},
              {"tool_calls": [{"index": 0, "type": "custom", "custom": {"input": "Patch {x}"}}]}]
    raw = b"".join(b"data: " + orjson.dumps({"id": "chatcmpl-9", "model": "gpt-5.1", "choices": [
        {"index": 0, "delta": delta, "finish_reason": None}]}) + b"\n\n" for delta in chunks)
    raw += (b'data: {"id":"chatcmpl-9","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
            b"data: [DONE]\n\n")
    streamed, _ = parse_stream(adapter, sse_events(raw))
    for response in (whole, streamed):
        (call,) = response.tool_calls
        assert call["type"] == "custom" and call["id"] == "call_p"
        assert call["function"] == {"name": "apply_patch", "arguments": custom_arguments("*** Begin Patch {x}")}
    # An empty ``custom`` beside a function fragment (some relays echo one) is a function call still.
    relayed = {"id": "c", "type": "function", "custom": {}, "function": {"name": "f", "arguments": "{}"}}
    echoed = adapter.parse_response(orjson.dumps({"choices": [{"index": 0, "message": {"role": "assistant",
                                                                                       "tool_calls": [relayed]}}]}))
    assert echoed.tool_calls[0]["type"] == "function"


def test_anthropic_and_gemini_get_the_function_form() -> None:
    request = ModelRequest(messages=HISTORY, tools=[PATCH], tool_choice="auto")
    tool = anthropic_body(request)["tools"][0]
    assert tool["name"] == "apply_patch" and tool["input_schema"]["properties"]["input"]["type"] == "string"
    assert GRAMMAR["definition"] in tool["description"] and "custom" not in tool
    body = anthropic_body(request)
    assert body["messages"][1]["content"][0] == {"type": "tool_use", "id": "call_1", "name": "apply_patch",
                                                  "input": {"input": "*** Begin Patch\n*** End Patch"}}
    declaration = gemini_body(request)["tools"][0]["functionDeclarations"][0]
    assert declaration["name"] == "apply_patch" and GRAMMAR["definition"] in declaration["description"]


# --- hosted tools: what each format honours -------------------------------------------------------------


@pytest.mark.parametrize(("adapter", "model", "functions", "expected"), [
    (AnthropicAdapter(), "claude-x", True, hosted.MAPPED), (GeminiAdapter(), "gemini-2.5-pro", False, hosted.MAPPED),
    (GeminiAdapter(), "gemini-2.5-pro", True, None), (GeminiAdapter(), "gemini-3-pro-preview", True, hosted.MAPPED),
    (OpenAIAdapter(), "gpt-5", True, None), (LiteLLMAdapter(), "x", False, None), (MockAdapter(), "x", False, None),
])
def test_which_target_honours_a_web_search(adapter: Any, model: str, functions: bool, expected: str | None) -> None:
    assert hosted.support(adapter, "web_search_2025_08_26", model, functions) == expected
    assert hosted.support(adapter, "file_search", model, functions) is None


def test_anthropic_maps_web_search_when_the_route_allows_it() -> None:
    body = anthropic_body(ModelRequest(messages=[USER], tools=[WEATHER], tool_choice="auto",
                                       hosted=HostedTools([{"type": "file_search"}, SEARCH])))
    assert body["tools"][1] == {"type": "web_search_20250305", "name": "web_search",
                                "allowed_domains": ["docs.python.org"],
                                "user_location": {"type": "approximate", "city": "Paris", "country": "FR"}}
    unmapped = anthropic_body(ModelRequest(messages=[USER], tools=[WEATHER], hosted=HostedTools([SEARCH], False)))
    assert [tool["name"] for tool in unmapped["tools"]] == ["get_weather"]
    # A caller's own function named web_search keeps the name: no second tool of that name.
    own = {"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}
    clash = anthropic_body(ModelRequest(messages=[USER], tools=[own], hosted=HostedTools([SEARCH])))
    assert [tool.get("type") for tool in clash["tools"]] == [None]
    alone = anthropic_body(ModelRequest(messages=[USER], hosted=HostedTools([{"type": "web_search"}])))
    assert alone["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]


ANTHROPIC_SEARCHED = [
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "python 3.14"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
        {"type": "web_search_result", "url": "https://docs.python.org/3.14/", "title": "Python 3.14",
         "encrypted_content": "e1"}, {"type": "web_search_result", "title": "no url"}]},
    {"type": "text", "text": "Python 3.14 is out.", "citations": [{"type": "web_search_result_location",
                                                                   "url": "https://docs.python.org/3.14/"}]}]


def test_anthropic_reports_the_search_whole_and_streamed() -> None:
    adapter = AnthropicAdapter()
    whole = adapter.parse_response(orjson.dumps({"id": "msg_1", "type": "message", "role": "assistant",
                                                 "content": ANTHROPIC_SEARCHED, "stop_reason": "end_turn"}))
    expected = HostedToolCall("web_search", "srvtoolu_1", {"type": "search", "query": "python 3.14", "sources": [
        {"type": "url", "url": "https://docs.python.org/3.14/", "title": "Python 3.14"}]})
    assert list(whole.hosted_calls) == [expected]
    assert whole.message["content"] == "Python 3.14 is out."
    assert whole.message["anthropic_content"] == ANTHROPIC_SEARCHED

    def event(name: str, **payload: Any) -> bytes:
        return f"event: {name}\ndata: ".encode() + orjson.dumps({"type": name, **payload}) + b"\n\n"

    use, result, _text = ANTHROPIC_SEARCHED
    raw = (event("message_start", message={"id": "msg_1", "type": "message", "role": "assistant", "content": []})
           + event("content_block_start", index=0, content_block={**use, "input": {}})
           + event("content_block_delta", index=0, delta={"type": "input_json_delta",
                                                          "partial_json": '{"query": "python 3.14"}'})
           + event("content_block_stop", index=0) + event("content_block_start", index=1, content_block=result)
           + event("content_block_stop", index=1)
           + event("content_block_start", index=2, content_block={"type": "text", "text": ""})
           + event("content_block_delta", index=2, delta={"type": "text_delta", "text": "Python 3.14 is out."})
           + event("content_block_stop", index=2) + event("message_delta", delta={"stop_reason": "end_turn"})
           + event("message_stop"))
    streamed, deltas = parse_stream(adapter, sse_events(raw))
    assert [type(delta).__name__ for delta in deltas] == ["HostedToolCall", "TextDelta"]
    assert deltas[0] == expected and list(streamed.hosted_calls) == [expected]
    # An error result is a failed search; a result whose use is missing is no search at all.
    failed = adapter.parse_response(orjson.dumps({"type": "message", "role": "assistant", "content": [
        use, {**result, "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}},
        {**result, "tool_use_id": "srvtoolu_unknown"}], "stop_reason": "end_turn"}))
    assert [(call.status, call.action["sources"]) for call in failed.hosted_calls] == [("failed", [])]


def test_a_hostile_search_result_is_bounded() -> None:
    many = [{"type": "web_search_result", "url": "https://x/" + "y" * 3000, "title": "t"}] * (hosted.MAX_SOURCES + 6)
    content = [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"query": "q" * 10_000}},
               {"type": "web_search_tool_result", "tool_use_id": "s", "content": many}] * (hosted.MAX_HOSTED_CALLS + 6)
    response = AnthropicAdapter().parse_response(orjson.dumps({"type": "message", "role": "assistant",
                                                               "content": content, "stop_reason": "end_turn"}))
    assert len(response.hosted_calls) == hosted.MAX_HOSTED_CALLS
    action = response.hosted_calls[0].action
    assert len(action["sources"]) == hosted.MAX_SOURCES and len(action["query"]) == hosted.MAX_HOSTED_CHARS
    assert all(len(source["url"]) <= hosted.MAX_HOSTED_CHARS for source in action["sources"])


def test_gemini_maps_web_search_to_google_search() -> None:
    alone = gemini_body(ModelRequest(messages=[USER], hosted=HostedTools([SEARCH])), "gemini-2.5-pro")
    assert alone["tools"] == [{"googleSearch": {}}] and "toolConfig" not in alone
    combined = gemini_body(ModelRequest(messages=[USER], tools=[WEATHER], tool_choice="auto",
                                        hosted=HostedTools([SEARCH])))
    assert combined["tools"][1] == {"googleSearch": {}}
    assert combined["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"},
                                      "includeServerSideToolInvocations": True}
    older = gemini_body(ModelRequest(messages=[USER], tools=[WEATHER], hosted=HostedTools([SEARCH])), "gemini-2.5-pro")
    assert older["tools"] == [{"functionDeclarations": older["tools"][0]["functionDeclarations"]}]
    unmapped = gemini_body(ModelRequest(messages=[USER], hosted=HostedTools([SEARCH], mapped=False)))
    assert "tools" not in unmapped


def test_gemini_reports_the_grounding_and_circulates_the_search_parts() -> None:
    adapter = GeminiAdapter()
    parts = [{"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH_WEB", "args": {"queries": ["paris weather"]}},
              "thoughtSignature": "ts1"},
             {"toolResponse": {"id": "t1", "toolType": "GOOGLE_SEARCH_WEB", "response": {"ok": True}}},
             {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "fs1"}]
    grounding = {"webSearchQueries": ["paris weather", "paris forecast"],
                 "groundingChunks": [{"web": {"uri": "https://meteo.example/paris", "title": "Meteo"}}, {"maps": {}}]}
    payload = {"responseId": "r1", "candidates": [{"index": 0, "content": {"role": "model", "parts": parts},
                                                   "finishReason": "STOP", "groundingMetadata": grounding}]}
    whole = adapter.parse_response(orjson.dumps(payload))
    expected = HostedToolCall("web_search", "ws_r1", {
        "type": "search", "query": "paris weather", "queries": ["paris weather", "paris forecast"],
        "sources": [{"type": "url", "url": "https://meteo.example/paris", "title": "Meteo"}]})
    assert list(whole.hosted_calls) == [expected]
    chunks = [{"responseId": "r1", "candidates": [{"index": 0, "content": {"role": "model", "parts": [part]}}]}
              for part in parts]
    chunks.append({"responseId": "r1", "candidates": [{"index": 0, "content": {"role": "model", "parts": [
        {"text": ""}]}, "finishReason": "STOP", "groundingMetadata": grounding}]})
    raw = b"".join(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n" for chunk in chunks)
    streamed, deltas = parse_stream(adapter, sse_events(raw))
    assert [delta for delta in deltas if isinstance(delta, HostedToolCall)] == [expected]
    assert list(streamed.hosted_calls) == [expected]
    assert list(streamed.hosted_calls) == [expected] and streamed.message == whole.message
    # The next call of the loop sends the search's parts back first, then the call and its answer.
    history = [USER, whole.message, {"role": "tool", "tool_call_id": whole.tool_calls[0]["id"], "content": "18C"}]
    body = gemini_body(ModelRequest(messages=history, tools=[WEATHER], hosted=HostedTools([SEARCH])))
    model_parts = body["contents"][1]["parts"]
    assert model_parts[:2] == parts[:2] and model_parts[2]["functionCall"]["name"] == "get_weather"
    assert "server_parts" not in orjson.dumps(body).decode()


# --- the OpenAI Responses upstream: it runs hosted tools, and takes custom tools natively ---------------------


RESPONSES = provider("openai_responses", "https://api.openai.com/v1")


def responses_body(request: ModelRequest, model: str = "gpt-5.1") -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(OpenAIResponsesAdapter().build_request(request, RESPONSES, model, False).body)
    assert not responses_request_problems(body, model), responses_request_problems(body, model)
    return body


def test_a_responses_upstream_runs_every_hosted_tool_and_takes_custom_tools() -> None:
    assert hosted.support(OpenAIResponsesAdapter(), "file_search", "gpt-4.1", True) == hosted.NATIVE
    body = responses_body(ModelRequest(messages=HISTORY, tools=[WEATHER, PATCH], tool_choice={
        "type": "function", "function": {"name": "apply_patch"}}, hosted=HostedTools([SEARCH], mapped=False)))
    assert body["tools"][1:] == [{"type": "custom", "name": "apply_patch", "description": "Edit files.",
                                  "format": {"type": "grammar", **GRAMMAR}}, SEARCH]
    assert body["tool_choice"] == {"type": "custom", "name": "apply_patch"}
    assert body["input"][1:] == [
        {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch",
         "input": "*** Begin Patch\n*** End Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Done"}]
    alone = responses_body(ModelRequest(messages=[USER], hosted=HostedTools([{"type": "file_search"}])))
    assert alone["tools"] == [{"type": "file_search"}]
    older = responses_body(ModelRequest(messages=HISTORY, tools=[PATCH]), "gpt-4.1")
    assert older["tools"][0]["type"] == "function" and older["input"][1]["type"] == "function_call"


def test_a_responses_upstream_reports_custom_calls_and_searches() -> None:
    adapter = OpenAIResponsesAdapter()
    search_item = {"type": "web_search_call", "id": "ws_9", "status": "completed", "action": {
        "type": "search", "query": "pytest", "sources": [{"type": "url", "url": "https://docs.pytest.org"}]}}
    payload = {"id": "resp_9", "status": "completed", "model": "gpt-5.1", "output": [
        search_item, {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_9", "name": "apply_patch",
                      "input": "*** Begin Patch"}]}
    response = adapter.parse_response(orjson.dumps(payload))
    (call,) = response.tool_calls
    assert call["type"] == "custom" and call["function"] == {"name": "apply_patch",
                                                             "arguments": custom_arguments("*** Begin Patch")}
    expected = HostedToolCall("web_search", "ws_9", {"type": "search", "query": "pytest", "sources": [
        {"type": "url", "url": "https://docs.pytest.org"}]})
    assert list(response.hosted_calls) == [expected]
    assert response.message["openai_output"]["items"] == payload["output"]  # replayed verbatim to its issuer

    def event(kind: str, **fields: Any) -> bytes:
        return f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **fields}) + b"\n\n"

    raw = (event("response.created", response={"id": "resp_9", "model": "gpt-5.1"})
           + event("response.output_item.added", output_index=0, item={**search_item, "status": "in_progress"})
           + event("response.output_item.done", output_index=0, item=search_item)
           + event("response.completed", response={**payload, "output": [search_item]}))
    streamed, deltas = parse_stream(adapter, sse_events(raw))
    assert [delta for delta in deltas if isinstance(delta, HostedToolCall)] == [expected]
    assert list(streamed.hosted_calls) == [expected]
