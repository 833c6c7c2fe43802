"""OpenAI Responses adapter, the request side: the transcript as ``input`` items, tools, parameters, URL, headers.

Every body built here also goes through ``responses_request_problems``, the rules a strict Responses
server enforces (tests/fakes/openai_responses_rules.py), with ``ISSUER`` as the account whose encrypted
reasoning the server can read.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import ModelRequest, NativeRequest, mark_origin, strip_artifacts
from gateway.config.loader import parse_config
from gateway.config.model import ProviderConfig
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.openai_responses import OpenAIResponsesAdapter
from gateway.providers.registry import adapter_for
from gateway.routing.reasoning import ReasoningSupport, takes_reasoning
from tests.fakes.openai_responses_rules import input_tokens_problems, responses_request_problems

ADAPTER = OpenAIResponsesAdapter()
ISSUER = "acct-test"
PROVIDER = ProviderConfig(name="oai", type="openai_responses", base_url="https://api.openai.com/v1", api_key="sk-test",
                          headers={"openai-organization": "org-test"})
MODEL = "gpt-5.2"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for one city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
USER = {"role": "user", "content": "Weather in Paris?"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}
REASONING_ITEM = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}],
                  "encrypted_content": f"enc:{ISSUER}:1"}
CALL_ITEM = {"type": "function_call", "id": "fc_1", "status": "completed", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}'}


def build(request: ModelRequest, provider: ProviderConfig = PROVIDER, model: str = MODEL,
          stream: bool = False) -> dict[str, Any]:
    native = ADAPTER.build_request(request, provider, model, stream)
    body = orjson.loads(native.body)
    problems = responses_request_problems(body, model, ISSUER)
    assert not problems, problems
    return body


def answered_turn(provider: str | None = "oai", items: list[dict[str, Any]] | None = None,
                  content: str | None = None) -> dict[str, Any]:
    """An assistant turn this adapter parsed (``openai_output``), tagged by the loop as ``provider``'s."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": [CALL],
                               "reasoning_content": "Look it up.",
                               "openai_output": {"items": items if items is not None else [REASONING_ITEM, CALL_ITEM]}}
    if provider is not None:
        mark_origin(message, provider)
    return message


# --- the transcript ------------------------------------------------------------------------------


def test_every_role_becomes_its_item() -> None:
    body = build(ModelRequest(messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Dev."}]},
        USER, {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]}, RESULT,
        {"role": "assistant", "content": "18 C."}, {"role": "user", "content": "Thanks"}]))
    assert body["input"] == [
        {"type": "message", "role": "system", "content": "Be brief."},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Dev."}]},
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "18 C."}]},
        {"type": "message", "role": "user", "content": "Thanks"}]
    assert body["model"] == MODEL and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert "stream" not in body and "tools" not in body


def test_stream_asks_for_a_stream() -> None:
    assert build(ModelRequest(messages=[USER]), stream=True)["stream"] is True


@pytest.mark.parametrize("model", ["gpt-4.1", "gpt-4o-mini", "openai/gpt-4.1", "gpt-5-chat-latest"])
def test_models_that_do_not_reason_are_not_asked_for_encrypted_reasoning(model: str) -> None:
    assert "include" not in build(ModelRequest(messages=[USER]), model=model)


def test_images_files_and_tool_result_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    detailed = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
    pdf = {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"}}
    body = build(ModelRequest(messages=[
        {"role": "user", "content": [{"type": "text", "text": "Look"}, image, detailed, pdf]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "a chart"}, image]}]))
    assert body["input"][0]["content"] == [
        {"type": "input_text", "text": "Look"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,AAAA", "filename": "a.pdf"}]
    assert body["input"][2]["output"] == [{"type": "input_text", "text": "a chart"},
                                          {"type": "input_image", "image_url": "data:image/png;base64,AAAA",
                                           "detail": "auto"}]


@pytest.mark.parametrize(("message", "named"), [
    ({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]},
     "input_audio"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}, "no url"),
    ({"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf"}}]}, "file_id or file_data"),
    ({"role": "function", "content": "x"}, "role 'function'"),
    ({"role": "tool", "content": "x"}, "without tool_call_id"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]}, "needs an id"),
])
def test_what_cannot_be_sent_is_a_clear_400(message: dict[str, Any], named: str) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.build_request(ModelRequest(messages=[USER, message]), PROVIDER, MODEL, False)
    assert info.value.error_class is ErrorClass.BAD_REQUEST and info.value.status == 400
    assert named in info.value.message


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", "", None])
def test_malformed_history_arguments_go_as_an_empty_object(arguments: Any) -> None:
    call = {**CALL, "function": {"name": "get_weather", "arguments": arguments}}
    body = build(ModelRequest(messages=[USER, {"role": "assistant", "content": None, "tool_calls": [call]}, RESULT]))
    assert body["input"][1]["arguments"] == "{}"


def test_refusal_without_text_goes_back_as_the_text() -> None:
    body = build(ModelRequest(messages=[USER, {"role": "assistant", "content": None, "refusal": "I can't."}, USER]))
    assert body["input"][1]["content"] == [{"type": "output_text", "text": "I can't."}]


# --- this provider's own output items, and everyone else's -----------------------------------------


def test_own_items_go_back_verbatim_with_the_encrypted_reasoning() -> None:
    body = build(ModelRequest(messages=[USER, answered_turn(), RESULT]))
    assert body["input"][1:3] == [REASONING_ITEM, CALL_ITEM]
    assert body["input"][3]["type"] == "function_call_output"


@pytest.mark.parametrize("issuer", ["other", None], ids=["another provider", "no known origin"])
def test_foreign_or_unmarked_items_are_dropped_never_sent(issuer: str | None) -> None:
    body = build(ModelRequest(messages=[USER, answered_turn(issuer), RESULT]))
    assert [item["type"] for item in body["input"]] == ["message", "function_call", "function_call_output"]
    assert "rs_1" not in orjson.dumps(body).decode() and f"enc:{ISSUER}" not in orjson.dumps(body).decode()


def test_items_that_no_longer_fit_the_message_are_dropped() -> None:
    changed_text = answered_turn(content="A rescue's text")
    changed_calls = answered_turn()
    changed_calls["tool_calls"] = [{**CALL, "id": "call_other"}]
    for message, result in ((changed_text, RESULT), (changed_calls, {**RESULT, "tool_call_id": "call_other"})):
        body = build(ModelRequest(messages=[USER, message, result]))
        assert not [item for item in body["input"] if item["type"] == "reasoning"]


def test_reasoning_without_encrypted_content_is_left_out_of_the_items() -> None:
    bare = {k: v for k, v in REASONING_ITEM.items() if k != "encrypted_content"}
    hosted = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "paris weather"}}
    body = build(ModelRequest(messages=[USER, answered_turn(items=[bare, hosted, CALL_ITEM]), RESULT]))
    assert body["input"][1:3] == [hosted, CALL_ITEM]


def test_a_turn_that_ended_in_its_reasoning_sends_the_reasoning_no_more() -> None:
    cut = {"role": "assistant", "content": None, "openai_output": {"provider": "oai", "items": [REASONING_ITEM]}}
    body = build(ModelRequest(messages=[USER, cut, {"role": "user", "content": "Go on."}]))
    assert [item["type"] for item in body["input"]] == ["message", "message"]


def test_mark_origin_tags_only_untagged_output_and_strip_artifacts_removes_it() -> None:
    message = answered_turn("first")
    mark_origin(message, "second")
    assert message["openai_output"]["provider"] == "first" and message["reasoning_origin"] == "first"
    assert "openai_output" not in strip_artifacts(message)


def test_no_other_wire_format_receives_the_items() -> None:
    request = ModelRequest(messages=[USER, answered_turn(), RESULT], tools=[WEATHER])
    chat = ProviderConfig(name="oai", type="openai", base_url="https://api.openai.com/v1")
    claude = ProviderConfig(name="oai", type="anthropic", base_url="https://api.anthropic.com")
    gemini = ProviderConfig(name="oai", type="gemini", base_url="https://generativelanguage.googleapis.com")
    for adapter, provider, model in ((OpenAIAdapter(), chat, "gpt-4.1"), (AnthropicAdapter(), claude, "claude-x"),
                                     (GeminiAdapter(), gemini, "gemini-3-pro")):
        sent = adapter.build_request(request, provider, model, False).body.decode()
        assert "openai_output" not in sent and "enc:" not in sent and "rs_1" not in sent, adapter


# --- tools, choice and parameters -----------------------------------------------------------------


def test_tools_are_flat_and_not_strict_unless_said() -> None:
    strict = {"type": "function", "function": {"name": "closed", "strict": True, "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}}}
    bare = {"type": "function", "function": {"name": "bare"}}
    body = build(ModelRequest(messages=[USER], tools=[WEATHER, strict, bare], params={"parallel_tool_calls": False}))
    assert body["tools"] == [
        {"type": "function", "name": "get_weather", "description": "Current weather for one city.",
         "parameters": WEATHER["function"]["parameters"], "strict": False},
        {"type": "function", "name": "closed", "parameters": strict["function"]["parameters"], "strict": True},
        {"type": "function", "name": "bare", "parameters": {"type": "object", "properties": {}}, "strict": False}]
    assert body["parallel_tool_calls"] is False


@pytest.mark.parametrize(("choice", "expected"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    ({"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "name": "get_weather"}),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}},
     {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}),
])
def test_tool_choice(choice: Any, expected: Any) -> None:
    assert build(ModelRequest(messages=[USER], tools=[WEATHER], tool_choice=choice))["tool_choice"] == expected


def test_no_tools_sends_no_choice_and_no_parallel_flag() -> None:
    body = build(ModelRequest(messages=[USER], tool_choice="required", params={"parallel_tool_calls": True}))
    assert "tool_choice" not in body and "parallel_tool_calls" not in body


@pytest.mark.parametrize(("request_", "named"), [
    (ModelRequest(messages=[USER], tools=[WEATHER], tool_choice={"type": "custom"}), "tool_choice"),
    (ModelRequest(messages=[USER], tools=[{"type": "custom", "custom": {"name": "x"}}]), "only function tools"),
    (ModelRequest(messages=[USER], params={"n": 2}), "n > 1"),
    (ModelRequest(messages=[USER], params={"max_tokens": 0}), "positive integer"),
    (ModelRequest(messages=[USER], params={"response_format": {"type": "json_schema", "json_schema": {}}}),
     "json_schema.schema"),
    (ModelRequest(messages=[USER], params={"response_format": {"type": "grammar"}}), "grammar"),
])
def test_parameters_that_cannot_be_honoured_are_a_400(request_: ModelRequest, named: str) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.build_request(request_, PROVIDER, MODEL, False)
    assert info.value.error_class is ErrorClass.BAD_REQUEST and named in info.value.message


def test_parameters_as_responses_fields() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = build(ModelRequest(messages=[USER], params={
        "max_completion_tokens": 900, "max_tokens": 5, "temperature": 0.2, "top_p": 0.9, "user": "u1",
        "safety_identifier": "s1", "prompt_cache_key": "k1", "service_tier": "flex", "metadata": {"a": "b"},
        "reasoning_effort": "high", "verbosity": "low",
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}},
        # chat-only: dropped, the Responses API refuses unknown fields
        "stop": ["\n"], "seed": 3, "frequency_penalty": 0.1, "presence_penalty": 0.1, "logit_bias": {"1": 2},
        "logprobs": True, "modalities": ["text"], "store": True, "stream_options": {"include_usage": True}}))
    assert body["max_output_tokens"] == 900 and body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert (body["user"], body["safety_identifier"], body["prompt_cache_key"]) == ("u1", "s1", "k1")
    assert body["service_tier"] == "flex" and body["metadata"] == {"a": "b"}
    assert body["reasoning"] == {"effort": "high"}
    assert body["text"] == {"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True},
                            "verbosity": "low"}
    assert body["store"] is False
    for dropped in ("stop", "seed", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "modalities",
                    "stream_options", "max_tokens", "max_completion_tokens", "verbosity", "reasoning_effort"):
        assert dropped not in body


@pytest.mark.parametrize(("limit", "sent"), [(1, 16), (16, 16), (17, 17)])
def test_max_output_tokens_is_at_least_the_apis_minimum(limit: int, sent: int) -> None:
    assert build(ModelRequest(messages=[USER], params={"max_tokens": limit}))["max_output_tokens"] == sent


def test_json_object_format() -> None:
    body = build(ModelRequest(messages=[USER], params={"response_format": {"type": "json_object"}}))
    assert body["text"] == {"format": {"type": "json_object"}}


def test_a_native_callers_forced_choice_it_cannot_have_is_a_400() -> None:
    request = ModelRequest(messages=[USER], tool_choice="required",
                           native=NativeRequest("anthropic", tools=[{"type": "web_search_20250305"}]))
    with pytest.raises(ProviderError) as info:
        ADAPTER.build_request(request, PROVIDER, MODEL, False)
    assert info.value.status == 400 and "tool_choice" in info.value.message


def test_reasoning_effort_is_learned_from_the_responses_refusal() -> None:
    support = ReasoningSupport()
    sent = ModelRequest(messages=[USER], params={"reasoning_effort": "low"})
    refusal = ProviderError(ErrorClass.BAD_REQUEST, "Unsupported parameter: 'reasoning.effort' is not supported "
                            "with this model.", status=400)
    assert support.refused("oai", "my-deployment", sent, refusal)
    assert "reasoning_effort" not in support.shaped(True, "oai", "my-deployment", sent).params
    assert not takes_reasoning("openai_responses", "gpt-4.1", None)
    assert takes_reasoning("openai_responses", "gpt-5.2", None)


# --- where it is sent, and how ---------------------------------------------------------------------


def provider_of(section: str) -> ProviderConfig:
    config = parse_config(f"providers:\n  p: {section}\nmodels:\n  m: {{targets: [{{provider: p, model: x}}]}}\n")
    return config.providers["p"]


def test_openai_url_and_bearer_key() -> None:
    native = ADAPTER.build_request(ModelRequest(messages=[USER]), PROVIDER, MODEL, False)
    assert native.url == "https://api.openai.com/v1/responses"
    assert native.headers["authorization"] == "Bearer sk-test" and "api-key" not in native.headers
    assert native.headers["openai-organization"] == "org-test"
    default = provider_of("{type: openai_responses, api_key: k}")
    assert default.base_url == "https://api.openai.com/v1" and not default.azure


@pytest.mark.parametrize(("section", "url"), [
    ("{type: openai_responses, base_url: 'https://res.openai.azure.com', api_key: k}",
     "https://res.openai.azure.com/openai/v1/responses"),
    ("{type: openai_responses, base_url: 'https://res.openai.azure.com/openai/v1/', api_key: k}",
     "https://res.openai.azure.com/openai/v1/responses"),
    ("{type: openai_responses, base_url: 'https://res.cognitiveservices.azure.com', api_key: k, api_version: preview}",
     "https://res.cognitiveservices.azure.com/openai/v1/responses?api-version=preview"),
    ("{type: openai_responses, base_url: 'https://gw.internal', api_key: k, azure: true}",
     "https://gw.internal/openai/v1/responses"),
    ("{type: openai_responses, base_url: 'https://gw.internal', api_key: k, api_version: '2025-04-01-preview'}",
     "https://gw.internal/openai/v1/responses?api-version=2025-04-01-preview"),
])
def test_azure_v1_url_and_api_key_header(section: str, url: str) -> None:
    provider = provider_of(section)
    assert provider.azure
    native = ADAPTER.build_request(ModelRequest(messages=[USER]), provider, "my-gpt5-deployment", False)
    assert native.url == url
    assert native.headers["api-key"] == "k" and "authorization" not in native.headers
    assert orjson.loads(native.body)["model"] == "my-gpt5-deployment"  # the deployment rides in the body


def test_an_azure_host_can_take_a_bearer_token() -> None:
    provider = provider_of("{type: openai_responses, base_url: 'https://res.openai.azure.com', azure: false, "
                           "api_key: entra-token}")
    native = ADAPTER.build_request(ModelRequest(messages=[USER]), provider, MODEL, False)
    assert native.headers["authorization"] == "Bearer entra-token"
    assert native.url == "https://res.openai.azure.com/responses"


@pytest.mark.parametrize(("section", "named"), [
    ("{type: openai, azure: true}", "providers.p.azure"),
    ("{type: openai_responses, azure: maybe}", "providers.p.azure"),
    ("{type: openai_responses, base_url: 'ftp://x'}", "providers.p.base_url"),
    ("{type: openai_response}", "providers.p.type"),
])
def test_config_mistakes_name_the_key(section: str, named: str) -> None:
    with pytest.raises(Exception) as info:
        provider_of(section)
    assert named in str(info.value)


def test_registered_under_its_type() -> None:
    assert isinstance(adapter_for("openai_responses"), OpenAIResponsesAdapter)
    assert ADAPTER.wire_format == "openai_responses"


# --- counting input tokens --------------------------------------------------------------------------


def test_count_tokens_sends_the_request_it_would_send_minus_what_the_endpoint_refuses() -> None:
    request = ModelRequest(messages=[USER, answered_turn(), RESULT], tools=[WEATHER], tool_choice="auto",
                           params={"reasoning_effort": "low", "max_tokens": 100, "temperature": 0.5, "user": "u"})
    native = ADAPTER.build_count_tokens(request, PROVIDER, MODEL)
    body = orjson.loads(native.body)
    assert native.url == "https://api.openai.com/v1/responses/input_tokens"
    assert native.headers["authorization"] == "Bearer sk-test"
    assert set(body) == {"model", "input", "tools", "tool_choice", "reasoning"}
    assert body["input"] == build(request)["input"] and not input_tokens_problems(body, ISSUER)
    azure = provider_of("{type: openai_responses, base_url: 'https://res.openai.azure.com', api_key: k, "
                        "api_version: preview}")
    assert ADAPTER.build_count_tokens(request, azure, "dep").url == \
        "https://res.openai.azure.com/openai/v1/responses/input_tokens?api-version=preview"


@pytest.mark.parametrize(("body", "count"), [
    (b'{"object": "response.input_tokens", "input_tokens": 1234}', 1234),
    (b'{"input_tokens": 0}', 0),
    (b'{"input_tokens": -1}', None), (b'{"input_tokens": "many"}', None), (b'{"input_tokens": 1e300}', None),
    (b"[]", None), (b"<html>", None), (b'{"input_tokens": true}', None),
])
def test_parse_count_tokens(body: bytes, count: int | None) -> None:
    if count is not None:
        assert ADAPTER.parse_count_tokens(body) == count
        return
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_count_tokens(body)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


@pytest.mark.parametrize(("model", "effort", "included"), [
    ("gpt-5.2", None, True), ("o3", None, True), ("openai/o4-mini", None, True), ("gpt-oss-120b", None, True),
    ("codex-mini-latest", None, True), ("gpt-5-chat-latest", None, False), ("gpt-4.1", None, False),
    ("my-deployment", None, False), ("my-deployment", "low", True), ("my-deployment", "none", False),
])
def test_who_is_asked_for_encrypted_reasoning(model: str, effort: str | None, included: bool) -> None:
    params = {"reasoning_effort": effort} if effort else {}
    body = orjson.loads(ADAPTER.build_request(ModelRequest(messages=[USER], params=params), PROVIDER, model,
                                              False).body)
    assert ("include" in body) is included


def test_a_deployment_that_refuses_encrypted_reasoning_is_learned() -> None:
    support = ReasoningSupport()
    sent = ModelRequest(messages=[USER], params={"reasoning_effort": "low"})
    refusal = ProviderError(ErrorClass.BAD_REQUEST, "Encrypted content is not supported with this model.", status=400)
    assert support.refused("azure", "gpt4o-prod", sent, refusal)
    again = support.shaped(True, "azure", "gpt4o-prod", sent)
    assert "include" not in build(again, model="gpt4o-prod") and "reasoning" not in build(again, model="gpt4o-prod")


def test_reasoning_the_target_cannot_read_is_sent_again_without_it() -> None:
    support = ReasoningSupport()
    sent = ModelRequest(messages=[USER, answered_turn(), RESULT])
    unreadable = ProviderError(ErrorClass.BAD_REQUEST, "The encrypted content gAAAA could not be verified. Reason: "
                               "Encrypted content could not be decrypted or parsed.", status=400)
    assert not support.refused("oai", MODEL, ModelRequest(messages=[USER]), unreadable)  # nothing of ours in it
    assert support.refused("oai", MODEL, sent, unreadable)
    again = support.shaped(True, "oai", MODEL, sent)
    assert "openai_output" not in again.messages[1] and "openai_output" in sent.messages[1]
    assert [item["type"] for item in build(again)["input"]] == ["message", "function_call", "function_call_output"]
    assert support.shaped(True, "other", MODEL, sent) is sent
