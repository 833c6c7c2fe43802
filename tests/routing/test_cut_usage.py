"""A cut attempt's usage (routing/cut_usage.py) and what each stream parser says it produced before the cut."""

from __future__ import annotations

import orjson

from gateway.canonical import ModelRequest, Usage
from gateway.context.encodings import get_encoding
from gateway.providers.anthropic_stream import AnthropicStreamParser
from gateway.providers.gemini_stream import GeminiStreamParser
from gateway.providers.openai import OpenAIStreamParser
from gateway.routing.cut_usage import COUNTED_CHARS, cut_attempt_usage
from gateway.upstream.sse import SSEEvent

REQUEST = ModelRequest(messages=[{"role": "user", "content": "What is the weather in Paris today?"}])


def event(data: object, name: str | None = None) -> SSEEvent:
    return SSEEvent(name, orjson.dumps(data))


async def test_reported_counts_stand_and_only_missing_ones_are_estimated() -> None:
    reported = Usage(prompt_tokens=100, completion_tokens=7, cached_tokens=50)
    assert await cut_attempt_usage(reported, REQUEST, "a long answer that is not counted", "gpt-4o") is reported
    partial = await cut_attempt_usage(Usage(prompt_tokens=100, cached_tokens=50), REQUEST, "Sunny and mild.", "gpt-4o")
    assert (partial.prompt_tokens, partial.cached_tokens) == (100, 50)
    assert partial.completion_tokens == len(get_encoding().encode("Sunny and mild."))
    nothing = await cut_attempt_usage(Usage(), REQUEST, "", "gpt-4o")
    assert nothing.completion_tokens == 0
    assert nothing.prompt_tokens > len(get_encoding().encode("What is the weather in Paris today?"))


async def test_tool_definitions_count_towards_the_estimated_prompt() -> None:
    tool = {"type": "function", "function": {"name": "weather", "description": "Current weather for a city",
                                             "parameters": {"type": "object", "properties": {"city": {
                                                 "type": "string"}}}}}
    bare = (await cut_attempt_usage(Usage(), REQUEST, "", "gpt-4o")).prompt_tokens
    with_tools = await cut_attempt_usage(Usage(), ModelRequest(messages=REQUEST.messages, tools=[tool]), "", "gpt-4o")
    assert with_tools.prompt_tokens > bare


def test_openai_parser_produced_text_reasoning_refusal_and_call_arguments() -> None:
    parser = OpenAIStreamParser("t", "gpt-4o")
    parser.feed(event({"choices": [{"index": 0, "delta": {"content": "Hello "}}]}))
    parser.feed(event({"choices": [{"index": 0, "delta": {"reasoning_content": "thinking"}}]}))
    parser.feed(event({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "weather", "arguments": '{"city": "Par'}}]}}]}))
    produced = parser.produced_so_far()
    for part in ("Hello ", "thinking", "weather", '{"city": "Par'):
        assert part in produced
    assert parser.usage_so_far() == Usage()  # nothing reported: the estimate is what bills it


async def test_anthropic_parser_produced_text_thinking_and_partial_json() -> None:
    parser = AnthropicStreamParser("t", "claude-sonnet-4-5")
    parser.feed(event({"type": "message_start", "message": {"id": "m", "model": "claude-sonnet-4-5", "content": [],
                                                            "usage": {"input_tokens": 40, "output_tokens": 1}}}))
    parser.feed(event({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking",
                                                                                  "thinking": ""}}))
    parser.feed(event({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta",
                                                                          "thinking": "Let me see."}}))
    parser.feed(event({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}))
    parser.feed(event({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "It is"}}))
    parser.feed(event({"type": "content_block_start", "index": 2, "content_block": {
        "type": "tool_use", "id": "t1", "name": "weather", "input": {}}}))
    parser.feed(event({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                                          "partial_json": '{"city":'}}))
    produced = parser.produced_so_far()
    for part in ("Let me see.", "It is", '{"city":'):
        assert part in produced
    usage = await cut_attempt_usage(parser.usage_so_far(), REQUEST, produced, "claude-sonnet-4-5")
    assert usage.prompt_tokens == 40 and usage.completion_tokens == 1  # reported as it started: kept


def test_gemini_parser_produced_text_and_calls() -> None:
    parser = GeminiStreamParser("t", "gemini-2.5-pro")
    parser.feed(event({"candidates": [{"content": {"role": "model", "parts": [{"text": "Checking"}]}}]}))
    parser.feed(event({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]}}]}))
    produced = parser.produced_so_far()
    assert "Checking" in produced and "weather" in produced and "Paris" in produced


async def test_a_long_cut_output_is_estimated_past_the_counted_part() -> None:
    """Megabytes of output are not tokenised on the event loop: past COUNTED_CHARS, four characters a token."""
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    produced = "word " * (COUNTED_CHARS // 5) + "x" * 4_000_000
    usage = await cut_attempt_usage(Usage(prompt_tokens=5), request, produced, "gpt-4.1")
    head = await cut_attempt_usage(Usage(prompt_tokens=5), request, produced[:COUNTED_CHARS], "gpt-4.1")
    assert usage.completion_tokens == head.completion_tokens + (len(produced) - COUNTED_CHARS) // 4
