"""OpenAI-format answers of the wrong shape: INVALID_RESPONSE (fail over), never an exception of another kind.

Also: absurd usage numbers, malformed stream events (skipped and counted) and the ``Answering``
marker that names the model producing a stream.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import Answering, TextDelta, Usage
from gateway.observability import metrics
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent
from gateway.providers.openai import OpenAIAdapter

ADAPTER = OpenAIAdapter()


def body(message: Any = None, **top: Any) -> bytes:
    payload: dict[str, Any] = {"id": "chatcmpl-1", "model": "gpt-4.1-2025-04-14",
                               "choices": [{"index": 0, "message": message if message is not None else
                                            {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}
    payload.update(top)
    return orjson.dumps(payload)


def invalid(raw: bytes) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(raw)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE, info.value
    assert info.value.retryable
    return info.value


@pytest.mark.parametrize("raw", [
    b"{}", b"[]", b"null", b"5", b'"text"',
    orjson.dumps({"choices": {"0": {"message": {"content": "Hi"}}}}),  # choices as a dict
    orjson.dumps({"choices": [5]}),
    orjson.dumps({"choices": ["Hi"]}),
    body("Hi"),  # message as a string
    body({"role": "assistant", "content": 5}),  # content as a number
    body({"role": "assistant", "content": {"text": "Hi"}}),
    body({"role": "assistant", "content": None, "tool_calls": {"id": "c1"}}),  # tool_calls not a list
    body({"role": "assistant", "content": None, "tool_calls": [5]}),
    body({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": "get_weather"}]}),
    body({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": 5}}]}),  # arguments a number
    body({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ["a"]}}]}),
    body({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": 7, "arguments": "{}"}}]}),  # name a number
    body({"role": "assistant", "content": None, "tool_calls": [
        {"id": ["c1"], "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
], ids=lambda raw: raw.decode()[:60])
def test_wrong_shaped_bodies_are_invalid_responses(raw: bytes) -> None:
    error = invalid(raw)
    assert "Hi" not in error.message and "get_weather" not in error.message  # upstream text is not echoed


def test_arguments_as_an_object_are_accepted_and_serialised() -> None:
    """Ollama and other compatible servers send an object instead of a JSON string: taken as meant."""
    response = ADAPTER.parse_response(body({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"city": "Paris"}}}]}))
    assert response.tool_calls[0]["function"]["arguments"] == '{"city":"Paris"}'


def test_content_as_a_list_of_parts_is_flattened() -> None:
    response = ADAPTER.parse_response(body({"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}))
    assert response.message["content"] == "Hi"


def test_wrong_types_in_optional_fields_are_ignored() -> None:
    response = ADAPTER.parse_response(body({"role": "assistant", "content": "Hi", "refusal": 5, "reasoning": [1]},
                                           id=12, model={"name": "x"}))
    assert (response.message, response.id, response.model) == ({"role": "assistant", "content": "Hi"}, "", "")
    assert response.finish_reason == "stop"


def test_a_finish_reason_of_the_wrong_type_is_not_trusted() -> None:
    payload = orjson.loads(body())
    payload["choices"][0]["finish_reason"] = ["length"]
    assert ADAPTER.parse_response(orjson.dumps(payload)).finish_reason == "stop"


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": -5, "completion_tokens": 3}, Usage(0, 3)),
    ({"prompt_tokens": 1e300, "completion_tokens": 2.0}, Usage(0, 2)),
    ({"prompt_tokens": "12", "completion_tokens": True}, Usage(0, 0)),
    ({"prompt_tokens": 2**31 + 1, "completion_tokens": 2**31}, Usage(0, 2**31)),
    ({"prompt_tokens": 10, "completion_tokens": 2.5, "prompt_tokens_details": [1],
      "completion_tokens_details": {"reasoning_tokens": float("nan")}}, Usage(10, 0)),
    ({"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": -1},
      "prompt_cache_hit_tokens": 6}, Usage(10, 4, 6)),
    ([1, 2], Usage()),
    ("lots", Usage()),
])
def test_absurd_usage_numbers_count_as_not_reported(usage: Any, expected: Usage) -> None:
    assert ADAPTER.parse_response(body(usage=usage)).usage == expected


def test_error_bodies_of_any_shape_map_by_status() -> None:
    for raw in (b"<html>502 Bad Gateway</html>", b"[1, 2]", b'{"error": [1]}', b'{"error": {"message": {"a": 1},'
                b' "code": [1], "type": 5}}', b"null", b""):
        error = ADAPTER.parse_error(503, {"retry-after": "nan"}, raw)
        assert error.error_class is ErrorClass.OVERLOADED and error.retry_after is None


# --- streams ------------------------------------------------------------------------------


def event(payload: Any) -> SSEEvent:
    return SSEEvent(None, payload if isinstance(payload, bytes) else orjson.dumps(payload))


def delta(content: Any = None, finish: str | None = None, model: str = "gpt-4.1-2025-04-14", **fields: Any) -> SSEEvent:
    piece = {"content": content, **fields} if content is not None else fields
    return event({"id": "chatcmpl-s", "model": model,
                  "choices": [{"index": 0, "delta": piece, "finish_reason": finish}]})


MALFORMED_EVENTS = [
    b"{not json", b"data: {}", b"[1, 2]", b"null",
    orjson.dumps({"choices": {"0": {"delta": {"content": "X"}}}}),
    orjson.dumps({"choices": 5}),
    orjson.dumps({"choices": [{"index": 0, "delta": "X"}]}),
    orjson.dumps({"choices": [{"index": 0, "delta": {"content": 5}}]}),
    orjson.dumps({"choices": [{"index": 0, "delta": {"content": "X", "tool_calls": {"index": 0}}}]}),
    orjson.dumps({"choices": [{"index": 0, "delta": {"content": "X", "tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "f", "arguments": 5}}]}}]}),
    orjson.dumps({"choices": [{"index": 0, "delta": {"content": "X"}, "finish_reason": ["stop"]}]}),
    orjson.dumps({"choices": [{"index": 0, "delta": {"content": "X"}}], "usage": None,
                  "x_groq": 5}),
]


@pytest.mark.parametrize("bad", MALFORMED_EVENTS, ids=lambda raw: raw.decode()[:50])
def test_a_malformed_event_mid_stream_is_skipped_counted_and_leaves_no_trace(bad: bytes) -> None:
    before = metrics.UPSTREAM_MALFORMED_EVENTS.get("openai-t:m")
    parser = ADAPTER.new_stream_parser("openai-t:m", "m")
    deltas = parser.feed(delta("Hello"))
    deltas += parser.feed(event(bad))
    deltas += parser.feed(delta(" world", "stop"))
    deltas += parser.feed(event(b"[DONE]"))
    response = parser.finish()
    assert deltas == [Answering("gpt-4.1-2025-04-14"), TextDelta("Hello"), TextDelta(" world")]
    assert response.message == {"role": "assistant", "content": "Hello world"}  # nothing of the skipped event
    assert response.finish_reason == "stop"
    assert metrics.UPSTREAM_MALFORMED_EVENTS.get("openai-t:m") == before + 1


def test_the_first_malformed_event_is_logged_escaped(caplog: pytest.LogCaptureFixture) -> None:
    parser = ADAPTER.new_stream_parser("openai-t:m", "m")
    with caplog.at_level("WARNING", logger="loopgate.providers"):
        parser.feed(event(b"{\n[fake] log line\x1b[31m"))
        parser.feed(event(b"{again"))
    assert len(caplog.records) == 1  # one warning per stream, the rest at debug
    line = caplog.records[0].getMessage()
    assert "openai-t:m" in line and "\n" not in line and "\x1b" not in line


def test_an_in_stream_error_still_fails() -> None:
    parser = ADAPTER.new_stream_parser("openai-t:m", "m")
    parser.feed(delta("Hello"))
    with pytest.raises(ProviderError) as info:
        parser.feed(event({"error": {"message": "overloaded", "type": "server_error", "code": "server_is_overloaded"}}))
    assert info.value.error_class is ErrorClass.OVERLOADED


def test_a_stream_of_nothing_but_malformed_events_is_an_invalid_response() -> None:
    parser = ADAPTER.new_stream_parser("openai-t:m", "m")
    for bad in MALFORMED_EVENTS:
        assert parser.feed(event(bad)) == []
    parser.feed(event(b"[DONE]"))
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


def test_absurd_usage_in_a_stream_counts_as_not_reported() -> None:
    parser = ADAPTER.new_stream_parser()
    parser.feed(delta("Hi", "stop"))
    parser.feed(event({"id": "chatcmpl-s", "choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 1e300}}))
    assert parser.finish().usage == Usage()


def test_the_stream_names_the_model_that_answers_once() -> None:
    parser = ADAPTER.new_stream_parser("t", "configured-model")
    assert parser.feed(delta("", role="assistant")) == []  # no content yet: not committed, nothing announced
    assert parser.feed(delta("A")) == [Answering("gpt-4.1-2025-04-14"), TextDelta("A")]
    assert parser.feed(delta("B")) == [TextDelta("B")]
    parser.feed(delta(None, "stop"))
    assert parser.finish().model == "gpt-4.1-2025-04-14"


@pytest.mark.parametrize("reported", ["", None, 5, "x" * 300, "bad\nname"])
def test_without_a_plausible_reported_model_the_configured_one_is_named(reported: Any) -> None:
    parser = ADAPTER.new_stream_parser("t", "configured-model")
    assert parser.feed(delta("A", model=reported))[0] == Answering("configured-model")



def test_an_error_field_that_is_null_is_no_error() -> None:
    """Some compatible servers send ``"error": null`` beside a normal answer."""
    assert ADAPTER.parse_response(body(error=None)).message["content"] == "Hi"
    parser = ADAPTER.new_stream_parser()
    payload = orjson.loads(delta("Hi", "stop").data)
    assert parser.feed(event({**payload, "error": None}))[1:] == [TextDelta("Hi")]
