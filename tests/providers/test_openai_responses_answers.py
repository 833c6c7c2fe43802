"""OpenAI Responses adapter, the answer side: JSON responses, every stream event, failures, errors, hostile input.

Streams come from the fake Responses upstream's own event encoder (tests/fakes/openai_responses.py),
so the fake the e2e tests drive and the parser tested here agree on one wire format.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import Answering, ReasoningDelta, TextDelta, Usage
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent
from gateway.providers.openai_responses import OpenAIResponsesAdapter
from gateway.providers.openai_responses_output import MAX_OUTPUT_ITEMS
from gateway.upstream.sse import MAX_EVENT_BYTES, SSEDecoder
from tests.fakes.openai_responses import FakeResponsesUpstream, ResponsesReply
from tests.fakes.upstream import Reply
from tests.providers.streams import parse_in_pieces, parse_stream, sse_events

ADAPTER = OpenAIResponsesAdapter()
MODEL = "gpt-5.2"
TEXT = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}]}
CALL = {"type": "function_call", "id": "fc_1", "status": "completed", "call_id": "call_1", "name": "get_weather",
        "arguments": '{"city":"Paris"}'}
REASONING = {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc:x:1",
             "summary": [{"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Then."}]}
USAGE = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 40,
         "output_tokens_details": {"reasoning_tokens": 25}, "total_tokens": 160}


@pytest.fixture(scope="module")
def fake() -> FakeResponsesUpstream:
    """Not started: only its encoder of answers is used here."""
    return FakeResponsesUpstream()


def response(*output: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "model": MODEL, "output": list(output),
            "usage": USAGE, "error": None, "incomplete_details": None, **top}


def parse(payload: Any) -> Any:
    return ADAPTER.parse_response(orjson.dumps(payload))


def failing(payload: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        parse(payload)
    return info.value


def frames_of(fake: FakeResponsesUpstream, reply: Reply) -> bytes:
    return b"".join(fake._frames(reply, MODEL, 7))


def event(kind: str, **payload: Any) -> SSEEvent:
    return SSEEvent(kind, orjson.dumps({"type": kind, **payload}))


def completed(*output: dict[str, Any], **top: Any) -> SSEEvent:
    return event("response.completed", response=response(*output, **top))


# --- whole answers ----------------------------------------------------------------------------------


def test_text_answer_and_usage() -> None:
    answer = parse(response(TEXT))
    assert answer.message == {"role": "assistant", "content": "It is sunny."}
    assert answer.finish_reason == "stop" and answer.model == MODEL and answer.id == "resp_1"
    assert answer.usage == Usage(prompt_tokens=120, completion_tokens=40, cached_tokens=100, reasoning_tokens=25)


def test_reasoning_and_calls_keep_the_items_for_the_next_iteration() -> None:
    answer = parse(response(REASONING, CALL))
    assert answer.finish_reason == "tool_calls"
    assert answer.tool_calls == [{"id": "call_1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]
    assert answer.message["reasoning_content"] == "First.\n\nThen."
    assert answer.message["openai_output"] == {"items": [REASONING, CALL]}  # the loop adds whose they are


def test_hosted_tool_items_are_kept_plain_answers_carry_nothing_extra() -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}
    assert parse(response(search, TEXT)).message["openai_output"] == {"items": [search, TEXT]}
    assert "openai_output" not in parse(response(TEXT, CALL)).message


def test_raw_reasoning_text_when_there_is_no_summary() -> None:
    raw = {"type": "reasoning", "id": "rs_2", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]}
    assert parse(response(raw, TEXT)).message["reasoning_content"] == "hmm"


def test_refusal_is_the_text() -> None:
    refusal = {**TEXT, "content": [{"type": "refusal", "refusal": "I can't help with that."}]}
    assert parse(response(refusal)).message["content"] == "I can't help with that."


@pytest.mark.parametrize(("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter"),
                                                 ("something_new", "length"), (None, "length")])
def test_incomplete_answers(reason: str | None, finish: str) -> None:
    answer = parse(response(TEXT, status="incomplete", incomplete_details={"reason": reason} if reason else None))
    assert answer.finish_reason == finish and answer.message["content"] == "It is sunny."


def test_a_cut_call_keeps_length() -> None:
    cut = {**CALL, "arguments": '{"city": "Pa'}
    answer = parse(response(cut, status="incomplete", incomplete_details={"reason": "max_output_tokens"}))
    assert answer.finish_reason == "length" and answer.tool_calls[0]["function"]["arguments"] == '{"city": "Pa'


@pytest.mark.parametrize(("error", "error_class"), [
    ({"code": "server_error", "message": "boom"}, ErrorClass.SERVER_ERROR),
    ({"code": "rate_limit_exceeded", "message": "slow down"}, ErrorClass.RATE_LIMITED),
    ({"code": "vector_store_timeout", "message": "late"}, ErrorClass.TIMEOUT),
    ({"code": "invalid_prompt", "message": "flagged"}, ErrorClass.BAD_REQUEST),
    ({"code": "image_too_large", "message": "too big"}, ErrorClass.BAD_REQUEST),
    ({"code": "context_length_exceeded", "message": "too long"}, ErrorClass.CONTEXT_LENGTH),
    ({"code": "something_new", "message": "Your input exceeds the context window of this model."},
     ErrorClass.CONTEXT_LENGTH),
    ({"code": "something_new", "message": "who knows"}, ErrorClass.SERVER_ERROR),
    (None, ErrorClass.SERVER_ERROR),
])
def test_failed_responses_raise_their_error(error: Any, error_class: ErrorClass) -> None:
    raised = failing(response(status="failed", error=error))
    assert raised.error_class is error_class


def test_spent_quota_is_not_retried() -> None:
    raised = failing(response(status="failed", error={"code": "insufficient_quota", "message": "pay up"}))
    assert raised.error_class is ErrorClass.RATE_LIMITED and raised.no_retry


@pytest.mark.parametrize(("payload", "error_class"), [
    (response(status="cancelled"), ErrorClass.SERVER_ERROR),
    (response(status="in_progress"), ErrorClass.INVALID_RESPONSE),
    (response(status="queued"), ErrorClass.INVALID_RESPONSE),
    ({"type": "error", "code": "server_is_overloaded", "message": "overloaded"}, ErrorClass.OVERLOADED),
])
def test_other_statuses_and_an_error_body(payload: Any, error_class: ErrorClass) -> None:
    assert failing(payload).error_class is error_class


@pytest.mark.parametrize("payload", [
    [], 5, "text", None, {}, response(output="plain text"), {**response(), "output": {"0": TEXT}},
    response(5), response({**TEXT, "content": "plain"}), response({**TEXT, "content": [5]}),
    response({**TEXT, "content": [{"type": "output_text", "text": 5}]}),
    response({**CALL, "name": 7}), response({**CALL, "call_id": ["x"]}), response({**CALL, "arguments": 5}),
    response({**REASONING, "summary": "plain"}), response({**REASONING, "summary": [{"type": "summary_text"}]}),
], ids=lambda payload: orjson.dumps(payload).decode()[:50])
def test_wrong_shaped_answers_are_invalid_responses(payload: Any) -> None:
    raised = failing(payload)
    assert raised.error_class is ErrorClass.INVALID_RESPONSE and raised.retryable


def test_answer_that_is_not_json() -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_response(b"<html>")
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


def test_a_hundred_thousand_output_items_are_refused() -> None:
    raised = failing(response(*[CALL] * 100_000))
    assert raised.error_class is ErrorClass.INVALID_RESPONSE and str(MAX_OUTPUT_ITEMS) in raised.message


def test_absurd_usage_counts_are_not_reported() -> None:
    usage = {"input_tokens": -5, "output_tokens": 1e300, "input_tokens_details": {"cached_tokens": "many"},
             "output_tokens_details": None}
    assert parse(response(TEXT, usage=usage)).usage == Usage()


# --- streams ----------------------------------------------------------------------------------------


def test_stream_equals_the_whole_answer(fake: FakeResponsesUpstream) -> None:
    reply = Reply(text="It is sunny in Paris.", reasoning="Check the weather.", pieces=4,
                  tool_calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})], usage=(50, 9))
    whole = ADAPTER.parse_response(orjson.dumps(fake._whole(reply, MODEL, 7)))
    data = frames_of(fake, reply)
    streamed, deltas = parse_stream(ADAPTER, sse_events(data))
    assert streamed == whole
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "It is sunny in Paris."
    assert "".join(d.text for d in deltas if isinstance(d, ReasoningDelta)) == "Check the weather."
    assert streamed.message["openai_output"]["items"][0]["encrypted_content"] == f"enc:{fake.issuer}:7"
    for bounds in ([0, 1, len(data)], [*range(0, len(data), 7), len(data)], [0, len(data) // 3, len(data)]):
        assert parse_in_pieces(ADAPTER, data, bounds)[0] == whole


def test_hosted_items_stream(fake: FakeResponsesUpstream) -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}
    reply = ResponsesReply(text="Found it.", hosted=[search])
    streamed, _ = parse_stream(ADAPTER, sse_events(frames_of(fake, reply)))
    assert streamed.message["openai_output"]["items"][0] == search
    assert streamed.message["content"] == "Found it."


def test_the_first_deltas_name_the_model_of_response_created() -> None:
    parser = ADAPTER.new_stream_parser("t", "configured")
    assert parser.feed(event("response.created", response=response(model="gpt-5.2-2026-01-01", status="in_progress",
                                                                     output=[]))) == []
    deltas = parser.feed(event("response.output_text.delta", output_index=0, content_index=0, delta="Hi"))
    assert deltas == [Answering("gpt-5.2-2026-01-01"), TextDelta("Hi")]
    unnamed = ADAPTER.new_stream_parser("t", "configured")
    assert unnamed.feed(event("response.output_text.delta", output_index=0, delta="Hi"))[0] == Answering("configured")


def test_every_delta_event() -> None:
    parser = ADAPTER.new_stream_parser()
    said = []
    for sse in [
        event("response.output_item.added", output_index=0, item={"type": "reasoning", "id": "rs_1", "summary": []}),
        event("response.reasoning_summary_part.added", output_index=0, summary_index=0, part={}),
        event("response.reasoning_summary_text.delta", output_index=0, summary_index=0, delta="One"),
        event("response.reasoning_summary_text.delta", output_index=0, summary_index=1, delta="Two"),
        event("response.reasoning_text.delta", output_index=1, content_index=0, delta="raw"),
        event("response.output_text.delta", output_index=2, content_index=0, delta="Hel"),
        event("response.output_text.annotation.added", output_index=2, annotation={}),
        event("response.output_text.delta", output_index=2, content_index=0, delta="lo"),
        event("response.refusal.delta", output_index=3, content_index=0, delta="No."),
        event("response.function_call_arguments.delta", output_index=4, delta='{"a"'),
        event("response.function_call_arguments.delta", output_index=4, delta=":1}"),
        event("response.web_search_call.searching", output_index=5, item_id="ws"),
        event("response.queued", response={}),
    ]:
        said += [d for d in parser.feed(sse) if not isinstance(d, Answering)]
    assert said == [ReasoningDelta("One"), ReasoningDelta("\n\nTwo"), ReasoningDelta("\n\nraw"), TextDelta("Hel"),
                    TextDelta("lo"), TextDelta("No.")]
    assert parser.produced_so_far() == "OneTworawHelloNo." + '{"a":1}'
    parser.feed(event("response.completed", response=response(model=MODEL, output=[])))
    answer = parser.finish()  # no output_item.done came: every item is rebuilt from its deltas
    assert answer.message["content"] == "Hello"
    assert answer.message["reasoning_content"] == "One\n\nTwo\n\nraw"


def test_rebuilt_calls_and_the_done_arguments_win() -> None:
    parser = ADAPTER.new_stream_parser()
    for sse in [
        event("response.output_item.added", output_index=0, item={"type": "function_call", "call_id": "c1",
                                                                   "name": "f", "arguments": ""}),
        event("response.function_call_arguments.delta", output_index=0, delta='{"x": 1'),
        event("response.function_call_arguments.done", output_index=0, arguments='{"x": 12}'),
        completed(),
    ]:
        parser.feed(sse)
    assert parser.finish().tool_calls == [{"id": "c1", "type": "function",
                                           "function": {"name": "f", "arguments": '{"x": 12}'}}]


def test_the_done_item_carries_the_final_encrypted_content() -> None:
    parser = ADAPTER.new_stream_parser()
    parser.feed(event("response.output_item.added", output_index=0,
                      item={"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "partial"}))
    parser.feed(event("response.output_item.done", output_index=0, item={**REASONING}))
    parser.feed(event("response.output_item.done", output_index=1, item=CALL))
    parser.feed(completed())
    answer = parser.finish()
    assert answer.message["openai_output"]["items"] == [REASONING, CALL]


def test_items_said_only_whole_are_still_said_once() -> None:
    parser = ADAPTER.new_stream_parser()
    said = parser.feed(event("response.output_item.done", output_index=0, item=REASONING))
    said += parser.feed(event("response.output_item.done", output_index=1, item=TEXT))
    assert [d for d in said if not isinstance(d, Answering)] == [
        ReasoningDelta("First."), ReasoningDelta("\n\nThen."), TextDelta("It is sunny.")]


def test_a_stream_that_says_its_answer_only_in_the_last_event() -> None:
    parser = ADAPTER.new_stream_parser()
    parser.feed(completed(TEXT))
    assert parser.finish().message["content"] == "It is sunny."


def test_incomplete_stream(fake: FakeResponsesUpstream) -> None:
    streamed, _ = parse_stream(ADAPTER, sse_events(frames_of(fake, Reply(text="Cut sho", finish="max_output_tokens"))))
    assert streamed.finish_reason == "length"
    filtered, _ = parse_stream(ADAPTER, sse_events(frames_of(fake, Reply(text="x", finish="content_filter"))))
    assert filtered.finish_reason == "content_filter"


@pytest.mark.parametrize(("sse", "error_class"), [
    (event("response.failed", response=response(status="failed", error={"code": "server_error", "message": "x"})),
     ErrorClass.SERVER_ERROR),
    (event("response.failed", response=response(status="failed", error={"code": "rate_limit_exceeded",
                                                                         "message": "x"})), ErrorClass.RATE_LIMITED),
    (event("response.failed", response=None), ErrorClass.SERVER_ERROR),
    (event("error", code="context_length_exceeded", message="Your input exceeds the context window", param="input"),
     ErrorClass.CONTEXT_LENGTH),
    (event("error", code="server_is_overloaded", message="overloaded"), ErrorClass.OVERLOADED),
    (event("error", error={"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "x"}),
     ErrorClass.RATE_LIMITED),
])
def test_in_stream_failures_raise(sse: SSEEvent, error_class: ErrorClass) -> None:
    parser = ADAPTER.new_stream_parser()
    with pytest.raises(ProviderError) as info:
        parser.feed(sse)
    assert info.value.error_class is error_class


def test_a_failed_stream_from_the_fake(fake: FakeResponsesUpstream) -> None:
    parser = ADAPTER.new_stream_parser()
    with pytest.raises(ProviderError) as info:
        for sse in sse_events(frames_of(fake, ResponsesReply(failed="server_error"))):
            parser.feed(sse)
    assert info.value.error_class is ErrorClass.SERVER_ERROR


def test_usage_so_far_is_the_last_lifecycle_events() -> None:
    parser = ADAPTER.new_stream_parser()
    parser.feed(event("response.in_progress", response=response(status="in_progress", usage=None)))
    assert parser.usage_so_far() == Usage()
    parser.feed(completed(TEXT))
    assert parser.usage_so_far().prompt_tokens == 120


@pytest.mark.parametrize("keep", [0, 3, -1])
def test_stream_cut_before_its_end_is_a_connection_error(fake: FakeResponsesUpstream, keep: int) -> None:
    events = sse_events(frames_of(fake, Reply(text="Partial answer", tool_calls=[("f", {})])))[:-1][:keep or None]
    parser = ADAPTER.new_stream_parser()
    for sse in events:
        parser.feed(sse)
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.CONNECTION


@pytest.mark.parametrize("data", [
    b"{broken", b"[]", b"5", orjson.dumps({"type": 5}),
    orjson.dumps({"type": "response.output_text.delta", "output_index": "0", "delta": "x"}),
    orjson.dumps({"type": "response.output_text.delta", "output_index": -1, "delta": "x"}),
    orjson.dumps({"type": "response.output_text.delta", "output_index": 0, "delta": 42}),
    orjson.dumps({"type": "response.output_item.added", "output_index": 0, "item": "x"}),
    orjson.dumps({"type": "response.completed", "response": "done"}),
    orjson.dumps({"type": "response.function_call_arguments.done", "output_index": 0, "arguments": {}}),
])
def test_malformed_events_are_skipped(data: bytes) -> None:
    parser = ADAPTER.new_stream_parser("malformed-test")
    assert parser.feed(SSEEvent(None, data)) == []
    assert parser.feed(event("response.output_text.delta", output_index=0, delta="ok"))[1:] == [TextDelta("ok")]
    parser.feed(completed())
    assert parser.finish().message["content"] == "ok"


def test_a_stream_of_nothing_but_malformed_events_is_invalid() -> None:
    parser = ADAPTER.new_stream_parser()
    parser.feed(SSEEvent(None, b"{broken"))
    with pytest.raises(ProviderError) as info:
        parser.finish()
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


def test_a_stream_of_a_hundred_thousand_output_items_is_refused() -> None:
    parser = ADAPTER.new_stream_parser()
    with pytest.raises(ProviderError) as info:
        for index in range(100_000):
            parser.feed(event("response.output_item.added", output_index=index, item=CALL))
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE
    assert index == MAX_OUTPUT_ITEMS  # refused at the first one past the bound, not after the lot


def test_a_hundred_thousand_streamed_parts_are_refused() -> None:
    parser = ADAPTER.new_stream_parser()
    with pytest.raises(ProviderError) as info:
        for index in range(100_000):
            parser.feed(event("response.output_text.delta", output_index=0, content_index=index, delta="x"))
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


def test_a_32_mib_stream_event_is_a_clean_upstream_error() -> None:
    decoder = SSEDecoder()
    parser = ADAPTER.new_stream_parser()
    chunk = b"data: " + orjson.dumps({"type": "response.output_text.delta", "output_index": 0, "delta": "x"})[:-1]
    big = chunk + b"y" * (1 << 20)
    with pytest.raises(ProviderError) as info:
        for _ in range(32):
            for sse in decoder.feed(big):
                parser.feed(sse)
            big = b"y" * (1 << 20)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE
    assert str(MAX_EVENT_BYTES) in info.value.message


# --- HTTP errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "body", "headers", "error_class"), [
    (429, {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
     {"retry-after": "2"}, ErrorClass.RATE_LIMITED),
    (500, {"error": {"message": "The server had an error", "type": "server_error", "code": None}}, {},
     ErrorClass.SERVER_ERROR),
    (503, {"error": {"message": "overloaded", "type": "server_error"}}, {}, ErrorClass.OVERLOADED),
    (401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, {}, ErrorClass.AUTH),
    (404, {"error": {"message": "The model does not exist", "code": "model_not_found"}}, {}, ErrorClass.NOT_FOUND),
    (400, {"error": {"message": "Invalid 'input[2]'", "type": "invalid_request_error", "param": "input"}}, {},
     ErrorClass.BAD_REQUEST),
    (400, {"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and "
                                "try again.", "type": "invalid_request_error", "param": "input",
                     "code": "context_length_exceeded"}}, {}, ErrorClass.CONTEXT_LENGTH),
])
def test_http_errors(status: int, body: Any, headers: dict[str, str], error_class: ErrorClass) -> None:
    error = ADAPTER.parse_error(status, headers, orjson.dumps(body))
    assert error.error_class is error_class and error.status == status
    assert error.retryable is (error_class in (ErrorClass.RATE_LIMITED, ErrorClass.SERVER_ERROR,
                                               ErrorClass.OVERLOADED))
    if headers:
        assert error.retry_after == 2.0


def test_spent_quota_and_unreadable_error_bodies() -> None:
    quota = ADAPTER.parse_error(429, {}, orjson.dumps({"error": {"message": "You exceeded your current quota",
                                                                 "type": "insufficient_quota"}}))
    assert quota.error_class is ErrorClass.RATE_LIMITED and quota.no_retry
    page = ADAPTER.parse_error(502, {"content-type": "text/html"}, b"<html>sk-secret bad gateway</html>")
    assert page.error_class is ErrorClass.SERVER_ERROR and "sk-secret" not in page.message
