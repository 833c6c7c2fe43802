"""Property: whatever JSON an upstream sends, every adapter either returns a well-typed turn or raises ProviderError.

Documents are generated near the real shapes (the right keys, any values), which is where a
missing type check shows up as a TypeError / AttributeError escaping as the gateway's 500.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.canonical import (
    Answering,
    HostedToolCall,
    ModelResponse,
    ReasoningDelta,
    ReasoningSignature,
    RedactedReasoning,
    TextDelta,
)
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.base import MAX_RETRY_AFTER_S, ProviderError, SSEEvent
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.openai_responses import OpenAIResponsesAdapter

ADAPTERS = {"openai": OpenAIAdapter(), "anthropic": AnthropicAdapter(), "gemini": GeminiAdapter(),
            "openai_responses": OpenAIResponsesAdapter()}

INTS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
scalars = st.one_of(st.none(), st.booleans(), INTS,
                    st.floats(allow_nan=False), st.text(max_size=8))
anything = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                        max_leaves=8)


def shaped(keys: dict[str, Any]) -> st.SearchStrategy[Any]:
    """An object with (some of) the given keys, each either its real shape or anything at all."""
    return st.fixed_dictionaries({}, optional={key: st.one_of(value, anything) for key, value in keys.items()})


usage = shaped({"prompt_tokens": INTS, "completion_tokens": st.floats(), "input_tokens": INTS,
                "output_tokens": INTS, "promptTokenCount": INTS,
                "candidatesTokenCount": INTS, "thoughtsTokenCount": st.text(max_size=3),
                "prompt_tokens_details": shaped({"cached_tokens": INTS})})
call = shaped({"id": st.text(max_size=4), "index": st.integers(0, 3), "type": st.just("function"),
               "function": shaped({"name": st.text(max_size=4), "arguments": st.text(max_size=6)})})
openai_message = shaped({"content": st.text(max_size=6), "tool_calls": st.lists(call, max_size=2),
                         "refusal": st.text(max_size=4), "reasoning_content": st.text(max_size=4)})
openai_doc = shaped({"id": st.text(max_size=4), "model": st.text(max_size=6), "usage": usage,
                     "choices": st.lists(shaped({"index": st.integers(0, 1), "message": openai_message,
                                                 "delta": openai_message, "finish_reason": st.text(max_size=6)}),
                                         max_size=2)})
block = shaped({"type": st.sampled_from(["text", "tool_use", "thinking", "redacted_thinking", "x"]),
                "text": st.text(max_size=4), "id": st.text(max_size=4), "name": st.text(max_size=4),
                "input": st.dictionaries(st.text(max_size=3), scalars, max_size=2), "thinking": st.text(max_size=4),
                "signature": st.text(max_size=4)})
anthropic_doc = shaped({"type": st.sampled_from(["message", "error", "message_start", "content_block_start",
                                                 "content_block_delta", "content_block_stop", "message_delta",
                                                 "message_stop"]),
                        "id": st.text(max_size=4), "model": st.text(max_size=6), "content": st.lists(block, max_size=3),
                        "stop_reason": st.text(max_size=6), "usage": usage, "index": st.integers(0, 2),
                        "content_block": block, "message": shaped({"model": st.text(max_size=4), "usage": usage}),
                        "delta": shaped({"type": st.sampled_from(["text_delta", "thinking_delta", "input_json_delta",
                                                                  "signature_delta"]),
                                         "text": st.text(max_size=4), "partial_json": st.text(max_size=4),
                                         "stop_reason": st.text(max_size=4)}),
                        "error": shaped({"type": st.text(max_size=6), "message": st.text(max_size=6)})})
part = shaped({"text": st.text(max_size=4), "thought": st.booleans(), "thoughtSignature": st.text(max_size=4),
               "functionCall": shaped({"name": st.text(max_size=4), "id": st.text(max_size=3),
                                       "args": st.dictionaries(st.text(max_size=3), scalars, max_size=2)})})
gemini_doc = shaped({"candidates": st.lists(shaped({"index": st.integers(0, 1), "finishReason": st.text(max_size=6),
                                                    "content": shaped({"parts": st.lists(part, max_size=3)})}),
                                            max_size=2),
                     "usageMetadata": usage, "modelVersion": st.text(max_size=6), "responseId": st.text(max_size=4),
                     "promptFeedback": shaped({"blockReason": st.text(max_size=4)}),
                     "error": shaped({"code": INTS, "message": st.text(max_size=4),
                                      "status": st.text(max_size=6), "details": st.lists(anything, max_size=2)})})
summary = st.lists(shaped({"type": st.sampled_from(["summary_text", "reasoning_text", "x"]),
                           "text": st.text(max_size=4)}), max_size=2)
item = shaped({"type": st.sampled_from(["message", "function_call", "reasoning", "web_search_call", "x"]),
               "id": st.text(max_size=3), "call_id": st.text(max_size=3), "name": st.text(max_size=4),
               "arguments": st.text(max_size=6), "encrypted_content": st.text(max_size=4), "summary": summary,
               "content": st.lists(shaped({"type": st.sampled_from(["output_text", "refusal", "reasoning_text"]),
                                           "text": st.text(max_size=4), "refusal": st.text(max_size=4)}),
                                   max_size=2)})
responses_usage = shaped({"input_tokens": INTS, "output_tokens": INTS,
                          "input_tokens_details": shaped({"cached_tokens": INTS}),
                          "output_tokens_details": shaped({"reasoning_tokens": INTS})})
responses_object = shaped({"id": st.text(max_size=4), "model": st.text(max_size=6), "usage": responses_usage,
                           "status": st.sampled_from(["completed", "incomplete", "failed", "cancelled", "queued"]),
                           "output": st.lists(item, max_size=3),
                           "incomplete_details": shaped({"reason": st.text(max_size=6)}),
                           "error": shaped({"code": st.text(max_size=6), "message": st.text(max_size=6)})})
responses_doc = st.one_of(responses_object, shaped({
    "type": st.sampled_from(["response.created", "response.output_item.added", "response.output_item.done",
                             "response.output_text.delta", "response.refusal.delta",
                             "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
                             "response.function_call_arguments.delta", "response.function_call_arguments.done",
                             "response.completed", "response.incomplete", "response.failed", "error"]),
    "output_index": st.integers(-1, 3), "content_index": st.integers(0, 2), "summary_index": st.integers(0, 2),
    "delta": st.text(max_size=4), "arguments": st.text(max_size=4), "item": item, "response": responses_object,
    "code": st.text(max_size=6), "message": st.text(max_size=6)}))
DOCS = {"openai": openai_doc, "anthropic": anthropic_doc, "gemini": gemini_doc, "openai_responses": responses_doc}


def assert_well_typed(response: ModelResponse) -> None:
    message = response.message
    assert message["content"] is None or isinstance(message["content"], str)
    for tool_call in response.tool_calls:
        assert isinstance(tool_call["id"], str) and tool_call["id"]
        assert isinstance(tool_call["function"]["name"], str)
        assert isinstance(tool_call["function"]["arguments"], str)
    assert isinstance(message.get("reasoning_content", ""), str)
    for count in (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.cached_tokens,
                  response.usage.reasoning_tokens):
        assert type(count) is int and 0 <= count <= 2**33
    assert isinstance(response.model, str) and isinstance(response.id, str)
    assert response.finish_reason in ("stop", "length", "tool_calls", "content_filter")


FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@pytest.mark.parametrize("wire", list(ADAPTERS))
def test_any_body_is_a_well_typed_turn_or_a_provider_error(wire: str) -> None:
    adapter = ADAPTERS[wire]

    @FUZZ
    @given(st.one_of(DOCS[wire], anything))
    def check(document: Any) -> None:
        try:
            response = adapter.parse_response(orjson.dumps(document))
        except ProviderError:
            return
        assert_well_typed(response)

    check()


def assert_well_typed_delta(delta: Any) -> None:
    """Each of the stream deltas a renderer reads (``canonical.StreamDelta``), its fields of their types."""
    fields = {TextDelta: ("text",), ReasoningDelta: ("text",), ReasoningSignature: ("signature",),
              RedactedReasoning: ("data",), Answering: ("model",), HostedToolCall: ("kind", "call_id", "status")}
    assert type(delta) in fields, f"not a stream delta: {delta!r}"
    assert all(isinstance(getattr(delta, name), str) for name in fields[type(delta)]), delta
    if type(delta) is HostedToolCall:
        assert isinstance(delta.action, dict)


@pytest.mark.slow
@pytest.mark.parametrize("wire", list(ADAPTERS))
def test_any_stream_gives_typed_deltas_then_a_turn_or_a_provider_error(wire: str) -> None:
    adapter = ADAPTERS[wire]

    @FUZZ
    @given(st.lists(st.one_of(DOCS[wire], anything), max_size=6))
    def check(documents: list[Any]) -> None:
        parser = adapter.new_stream_parser("fuzz", "fuzz-model")
        try:
            for document in documents:
                deltas = parser.feed(SSEEvent(None, orjson.dumps(document)))
                for delta in deltas:
                    assert_well_typed_delta(delta)
            response = parser.finish()
        except ProviderError:
            return
        assert_well_typed(response)

    check()


@pytest.mark.slow
@pytest.mark.parametrize("wire", list(ADAPTERS))
def test_any_error_body_and_retry_after_is_a_provider_error(wire: str) -> None:
    adapter = ADAPTERS[wire]

    @FUZZ
    @given(st.integers(400, 599), st.one_of(DOCS[wire], anything, st.fixed_dictionaries({"error": anything})),
           st.text(max_size=12))
    def check(status: int, document: Any, retry_after: str) -> None:
        error = adapter.parse_error(status, {"retry-after": retry_after}, orjson.dumps(document))
        assert isinstance(error, ProviderError) and isinstance(error.message, str)
        assert error.retry_after is None or 0 <= error.retry_after <= MAX_RETRY_AFTER_S

    check()
