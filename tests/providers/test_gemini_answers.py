"""Gemini answers of the wrong shape: INVALID_RESPONSE (fail over), never an exception or an empty 200.

Also: a blocked prompt stays a (filtered) answer, absurd usage numbers, ``retryDelay`` values,
malformed stream events (skipped and counted), the ``Answering`` marker.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import Answering, TextDelta, Usage
from gateway.observability import metrics
from gateway.providers.base import MAX_RETRY_AFTER_S, ErrorClass, ProviderError, SSEEvent
from gateway.providers.gemini import GeminiAdapter

ADAPTER = GeminiAdapter()


def candidate(parts: Any = None, finish: Any = "STOP", **extra: Any) -> dict[str, Any]:
    return {"content": {"role": "model", "parts": [{"text": "Hi"}] if parts is None else parts},
            "finishReason": finish, "index": 0, **extra}


def body(candidates: Any = None, **top: Any) -> bytes:
    payload: dict[str, Any] = {"candidates": [candidate()] if candidates is None else candidates,
                               "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
                               "modelVersion": "gemini-2.5-flash", "responseId": "r1"}
    payload.update(top)
    return orjson.dumps(payload)


@pytest.mark.parametrize("raw", [
    b"{}", b"[]", b"null", b"5", b'{"usageMetadata": {"promptTokenCount": 3}}',
    body([]),  # no candidates and no block reason: nothing was answered
    body([{"index": 1, "content": {"parts": [{"text": "other"}]}}]),  # no candidate 0
    body({"0": candidate()}),  # candidates as an object
    body(["Hi"]),
    body([candidate("Hi")]),  # parts as a string
    body([{"content": "Hi", "finishReason": "STOP"}]),
    body([candidate([5])]),
    body([candidate([{"text": 5}])]),
    body([candidate([{"functionCall": "get_weather"}])]),
    body([candidate([{"functionCall": {"name": 5, "args": {}}}])]),
    body([candidate([{"functionCall": {"name": "f", "args": [1]}}])]),
    body([candidate([{"functionCall": {"name": "f", "args": {}, "id": 3}}])]),
    body([candidate(finish=["STOP"])]),
], ids=lambda raw: raw.decode()[:70])
def test_unreadable_bodies_are_invalid_responses(raw: bytes) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(raw)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE and info.value.retryable


def test_a_blocked_prompt_is_a_filtered_answer_not_a_failure() -> None:
    """promptFeedback.blockReason is Gemini's refusal: another target of the same model would refuse too."""
    response = ADAPTER.parse_response(orjson.dumps({"promptFeedback": {"blockReason": "SAFETY"},
                                                    "modelVersion": "gemini-2.5-flash"}))
    assert (response.message["content"], response.finish_reason) == (None, "content_filter")


def test_wrong_types_in_optional_fields_are_ignored() -> None:
    response = ADAPTER.parse_response(body(responseId=5, modelVersion={"v": 1}))
    assert (response.message["content"], response.id, response.model) == ("Hi", "", "")


@pytest.mark.parametrize(("usage", "expected"), [
    ({"promptTokenCount": -1, "candidatesTokenCount": 2}, Usage(0, 2)),
    ({"promptTokenCount": 5, "candidatesTokenCount": 1e300, "thoughtsTokenCount": "3"}, Usage(5, 0)),
    ({"promptTokenCount": 5.0, "candidatesTokenCount": 2, "cachedContentTokenCount": float("inf")}, Usage(5, 2)),
    ({"promptTokenCount": 5, "candidatesTokenCount": 2, "thoughtsTokenCount": 3}, Usage(5, 5, 0, 3)),
])
def test_absurd_usage_numbers_count_as_not_reported(usage: Any, expected: Usage) -> None:
    assert ADAPTER.parse_response(body(usageMetadata=usage)).usage == expected


def error_body(details: Any) -> bytes:
    return orjson.dumps({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED",
                                   "details": details}})


RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@pytest.mark.parametrize(("details", "expected"), [
    ([{"@type": RETRY_INFO, "retryDelay": "37s"}], 37.0),
    ([{"@type": RETRY_INFO, "retryDelay": "infs"}], None),
    ([{"@type": RETRY_INFO, "retryDelay": "nans"}], None),
    ([{"@type": RETRY_INFO, "retryDelay": "-5s"}], None),
    ([{"@type": RETRY_INFO, "retryDelay": "1e308s"}], MAX_RETRY_AFTER_S),
    ([{"@type": RETRY_INFO, "retryDelay": {"seconds": "1e400", "nanos": 0}}], None),
    ([{"@type": RETRY_INFO, "retryDelay": {"seconds": [1], "nanos": 0}}], None),
    ([{"@type": RETRY_INFO, "retryDelay": {"seconds": "2", "nanos": 500000000}}], 2.5),
    (5, None),  # details not a list
    ([{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": 5}], None),
])
def test_retry_delay_is_finite_or_absent(details: Any, expected: float | None) -> None:
    error = ADAPTER.parse_error(429, {}, error_body(details))
    assert error.error_class is ErrorClass.RATE_LIMITED and error.retry_after == expected


def test_error_bodies_of_any_shape_map_by_status() -> None:
    for raw in (b"<html>oops</html>", b"[1]", b'{"error": 5}', b'{"error": {"message": [1], "details": {"a": 1}}}'):
        error = ADAPTER.parse_error(503, {"retry-after": "-1"}, raw)
        assert error.error_class is ErrorClass.OVERLOADED and error.retry_after is None


# --- streams ------------------------------------------------------------------------------


def event(payload: Any) -> SSEEvent:
    return SSEEvent(None, payload if isinstance(payload, bytes) else orjson.dumps(payload))


def chunk(text: str, final: bool = False, model: Any = "gemini-2.5-flash") -> SSEEvent:
    part_candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    payload: dict[str, Any] = {"candidates": [part_candidate], "modelVersion": model, "responseId": "r1"}
    if final:
        part_candidate["finishReason"] = "STOP"
        payload["usageMetadata"] = {"promptTokenCount": 5, "candidatesTokenCount": 2}
    return event(payload)


MALFORMED_EVENTS = [
    b"{not json", b"[1]", b"null", b"data: {}",
    orjson.dumps({"candidates": {"0": {}}}),
    orjson.dumps({"candidates": [{"content": {"parts": "X"}, "index": 0}]}),
    orjson.dumps({"candidates": [{"content": {"parts": [{"text": "X"}, {"text": 5}]}, "index": 0}]}),
    orjson.dumps({"candidates": [{"content": {"parts": [{"text": "X"}, {"functionCall": {"name": 5}}]}}]}),
    orjson.dumps({"candidates": [{"content": {"parts": [{"text": "X"}]}, "finishReason": 1}]}),
]


@pytest.mark.parametrize("bad", MALFORMED_EVENTS, ids=lambda raw: raw.decode()[:50])
def test_a_malformed_event_mid_stream_is_skipped_counted_and_leaves_no_trace(bad: bytes) -> None:
    before = metrics.UPSTREAM_MALFORMED_EVENTS.get("gem:m")
    parser = ADAPTER.new_stream_parser("gem:m", "m")
    deltas = []
    for item in (chunk("Hello"), event(bad), chunk(" world", final=True)):
        deltas += parser.feed(item)
    response = parser.finish()
    assert deltas == [Answering("gemini-2.5-flash"), TextDelta("Hello"), TextDelta(" world")]
    assert response.message == {"role": "assistant", "content": "Hello world"}
    assert response.usage == Usage(5, 2)
    assert metrics.UPSTREAM_MALFORMED_EVENTS.get("gem:m") == before + 1


def test_an_in_stream_error_still_fails() -> None:
    parser = ADAPTER.new_stream_parser("gem:m", "m")
    parser.feed(chunk("Hello"))
    with pytest.raises(ProviderError) as info:
        parser.feed(event({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE", "details": 5}}))
    assert info.value.error_class is ErrorClass.OVERLOADED


def test_a_stream_of_nothing_but_malformed_events_is_an_invalid_response() -> None:
    parser = ADAPTER.new_stream_parser("gem:m", "m")
    for bad in MALFORMED_EVENTS:
        assert parser.feed(event(bad)) == []
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


@pytest.mark.parametrize(("reported", "named"), [("gemini-3-pro", "gemini-3-pro"), (None, "configured"),
                                                 (["x"], "configured")])
def test_the_stream_names_the_model_that_answers_once(reported: Any, named: str) -> None:
    parser = ADAPTER.new_stream_parser("t", "configured")
    assert parser.feed(chunk("A", model=reported)) == [Answering(named), TextDelta("A")]
    assert parser.feed(chunk("B", final=True, model=reported)) == [TextDelta("B")]
    assert parser.finish().model == (named if named != "configured" else "")
