"""Anthropic answers of the wrong shape: INVALID_RESPONSE (fail over), never an exception or an empty 200.

Also: absurd usage numbers, malformed stream events (skipped and counted), the ``Answering`` marker.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import Answering, TextDelta, Usage
from gateway.observability import metrics
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent

ADAPTER = AnthropicAdapter()
TEXT = {"type": "text", "text": "Hi"}


def body(content: Any = None, **top: Any) -> bytes:
    payload: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant",
                               "model": "claude-sonnet-4-20250514", "content": [TEXT] if content is None else content,
                               "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 2}}
    payload.update(top)
    return orjson.dumps(payload)


@pytest.mark.parametrize("raw", [
    b"{}", b"[]", b"null", b"5",
    body({"type": "text", "text": "Hi"}),  # content as an object, not a list
    body("Hi"),
    body(["Hi"]),  # a block that is not an object: unreadable, never an empty answer
    body([5]),
    body([{"type": "text", "text": 5}]),
    body([{"type": "text"}]),
    body([{"type": "tool_use", "id": "toolu_1", "name": 7, "input": {}}]),
    body([{"type": "tool_use", "id": 1, "name": "f", "input": {}}]),
    body([{"type": "tool_use", "id": "toolu_1", "name": "f", "input": [1, 2]}]),
    body([{"type": "tool_use", "id": "toolu_1", "name": "f", "input": 5}]),
    body([{"type": "thinking", "thinking": 5, "signature": "s"}]),
], ids=lambda raw: raw.decode()[:70])
def test_unreadable_bodies_are_invalid_responses(raw: bytes) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(raw)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE and info.value.retryable


def test_unknown_block_types_and_an_empty_content_list_are_still_answers() -> None:
    response = ADAPTER.parse_response(body([{"type": "server_tool_use", "id": "s1", "name": "web_search"}, TEXT]))
    assert response.message["content"] == "Hi"
    assert ADAPTER.parse_response(body([])).message["content"] is None  # Anthropic does answer [] after a tool


def test_wrong_types_in_optional_fields_are_ignored() -> None:
    response = ADAPTER.parse_response(body(id=5, model=["claude"], stop_reason={"x": 1}))
    assert (response.id, response.model, response.finish_reason) == ("", "", "stop")


@pytest.mark.parametrize(("usage", "expected"), [
    ({"input_tokens": -3, "output_tokens": 2}, Usage(0, 2)),
    ({"input_tokens": 10, "output_tokens": 1e300, "cache_read_input_tokens": "4"}, Usage(10, 0)),
    ({"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2**40},
     Usage(14, 2, 4)),
    ({"input_tokens": 10, "output_tokens": 2, "output_tokens_details": {"thinking_tokens": -1}}, Usage(10, 2)),
    ("many", Usage()),
])
def test_absurd_usage_numbers_count_as_not_reported(usage: Any, expected: Usage) -> None:
    assert ADAPTER.parse_response(body(usage=usage)).usage == expected


def test_error_bodies_of_any_shape_map_by_status() -> None:
    for raw in (b"<html>oops</html>", b"[1]", b'{"error": 5}', b'{"type": "error", "error": {"type": [1], '
                b'"message": {"a": 1}, "details": 5}}', b""):
        error = ADAPTER.parse_error(529, {"retry-after": "inf"}, raw)
        assert error.error_class is ErrorClass.OVERLOADED and error.retry_after is None


# --- streams ------------------------------------------------------------------------------


def event(payload: Any, name: str | None = None) -> SSEEvent:
    return SSEEvent(name, payload if isinstance(payload, bytes) else orjson.dumps(payload))


def start(model: Any = "claude-sonnet-4-20250514") -> SSEEvent:
    return event({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant",
                                                       "model": model, "content": [], "stop_reason": None,
                                                       "usage": {"input_tokens": 5, "output_tokens": 1}}})


def text_delta(text: Any, index: int = 0) -> SSEEvent:
    return event({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})


OPEN_TEXT = event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
END = [event({"type": "content_block_stop", "index": 0}),
       event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
       event({"type": "message_stop"})]

MALFORMED_EVENTS = [
    b"{not json", b"[1]", b"null", b"data: {}",
    orjson.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}}),
    orjson.dumps({"type": "content_block_delta", "index": 0, "delta": "X"}),
    orjson.dumps({"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta", "text": "X"}}),
    orjson.dumps({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": 5}}),
    orjson.dumps({"type": "content_block_start", "index": 1, "content_block": "tool_use"}),
    orjson.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                                      "partial_json": {"a": 1}}}),
]


@pytest.mark.parametrize("bad", MALFORMED_EVENTS, ids=lambda raw: raw.decode()[:50])
def test_a_malformed_event_mid_stream_is_skipped_counted_and_leaves_no_trace(bad: bytes) -> None:
    before = metrics.UPSTREAM_MALFORMED_EVENTS.get("claude:m")
    parser = ADAPTER.new_stream_parser("claude:m", "m")
    deltas = []
    for item in [start(), OPEN_TEXT, text_delta("Hello"), event(bad), text_delta(" world"), *END]:
        deltas += parser.feed(item)
    response = parser.finish()
    assert deltas == [Answering("claude-sonnet-4-20250514"), TextDelta("Hello"), TextDelta(" world")]
    assert response.message == {"role": "assistant", "content": "Hello world",
                                "anthropic_content": [{"type": "text", "text": "Hello world"}]}
    assert response.usage == Usage(5, 3)
    assert metrics.UPSTREAM_MALFORMED_EVENTS.get("claude:m") == before + 1


def test_an_in_stream_error_still_fails() -> None:
    parser = ADAPTER.new_stream_parser("claude:m", "m")
    for item in (start(), OPEN_TEXT, text_delta("Hello")):
        parser.feed(item)
    with pytest.raises(ProviderError) as info:
        parser.feed(event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"))
    assert info.value.error_class is ErrorClass.OVERLOADED


def test_a_stream_of_nothing_but_malformed_events_is_an_invalid_response() -> None:
    parser = ADAPTER.new_stream_parser("claude:m", "m")
    for bad in MALFORMED_EVENTS:
        assert parser.feed(event(bad)) == []
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


@pytest.mark.parametrize(("reported", "named"), [("claude-opus-4-7", "claude-opus-4-7"), (None, "configured"),
                                                 (5, "configured")])
def test_the_stream_names_the_model_that_answers_once(reported: Any, named: str) -> None:
    parser = ADAPTER.new_stream_parser("t", "configured")
    assert parser.feed(start(reported)) == [] and parser.feed(OPEN_TEXT) == []
    assert parser.feed(text_delta("A")) == [Answering(named), TextDelta("A")]
    assert parser.feed(text_delta("B")) == [TextDelta("B")]
    for item in END:
        parser.feed(item)
    assert parser.finish().model == (named if named != "configured" else "")
