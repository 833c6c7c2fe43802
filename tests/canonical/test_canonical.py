"""The canonical transcript helpers every adapter shares, the pairing invariant, and the client's view of
upstream failures."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from gateway.canonical import (
    ToolCallAccumulator,
    Usage,
    arguments_object,
    normalize_arguments,
    normalize_finish_reason,
    stable_tool_call_id,
    strip_artifacts,
    text_of,
)
from gateway.errors import from_upstream
from gateway.loop.pairing import PairingError, ToolResult, pairing_problem, tool_turn
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.openai import OpenAIAdapter


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(*ids: str, content: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if ids:
        message["tool_calls"] = [call(i) for i in ids]
    return message


def tool(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "Weather in Paris and Tokyo?"}
SYSTEM = {"role": "system", "content": "Be brief."}


# --- ToolCallAccumulator ----------------------------------------------------------------


def test_fragments_concatenate_in_arrival_order_per_index() -> None:
    acc = ToolCallAccumulator()
    acc.add(0, "call_a", "get_weather", "")
    acc.add(0, None, None, '{"ci')
    acc.add(1, "call_b", "get_time", '{"timezone"')
    acc.add(0, None, None, 'ty": "Paris"}')
    acc.add(1, None, None, ': "UTC"}')
    assert acc.result("seed") == [call("call_a", arguments='{"city": "Paris"}'),
                                  call("call_b", "get_time", '{"timezone": "UTC"}')]


def test_first_id_and_name_win() -> None:
    acc = ToolCallAccumulator()
    acc.add(0, "call_a", "search", '{"q":')
    acc.add(0, "", "", '"ra')  # empty id/name on a continuation is ignored
    acc.add(0, None, "other_name", 'in"}')  # a later name does not overwrite the first
    assert acc.result("seed") == [call("call_a", "search", '{"q":"rain"}')]


def test_id_and_name_arriving_late_are_taken() -> None:
    acc = ToolCallAccumulator()
    acc.add(0, None, None, '{"city":')
    acc.add(0, "call_s", "get_weather", '"Rome"}')
    assert acc.result("seed") == [call("call_s", arguments='{"city":"Rome"}')]


def test_new_id_on_a_reused_index_opens_a_new_call() -> None:
    acc = ToolCallAccumulator()
    acc.add(0, "call_1", "get_weather", '{"city":"Paris"}')
    acc.add(0, "call_2", "get_weather", '{"city":')
    acc.add(0, None, None, '"Tokyo"}')  # continues the newest call at that index
    acc.add(0, "call_1", None, "")  # a known id goes back to its own call
    assert acc.result("seed") == [call("call_1", arguments='{"city":"Paris"}'),
                                  call("call_2", arguments='{"city":"Tokyo"}')]


def test_omitted_index_new_id_opens_and_no_id_continues_the_last_call() -> None:
    acc = ToolCallAccumulator()
    acc.add(None, "fc-1", "get_weather", '{"city":')
    acc.add(None, None, None, '"Paris"}')
    acc.add(None, "fc-2", "get_time", '{"timezone":')
    acc.add(None, None, None, '"UTC"}')
    acc.add(None, "fc-1", None, "")  # a known id without index is that call, not a new one
    assert acc.result("seed") == [call("fc-1", arguments='{"city":"Paris"}'),
                                  call("fc-2", "get_time", '{"timezone":"UTC"}')]


def test_index_not_starting_at_zero_makes_no_phantom_call() -> None:
    acc = ToolCallAccumulator()
    acc.add(3, "call_z", "get_weather", '{"city":"Oslo"}')
    assert acc.result("seed") == [call("call_z", arguments='{"city":"Oslo"}')]


def test_object_arguments_and_empty_arguments_are_normalised() -> None:
    acc = ToolCallAccumulator()
    acc.add(0, "call_o", "get_weather", {"city": "Paris"})  # Ollama-style object
    acc.add(1, "call_p", "ping", "")
    acc.add(2, "call_n", "ping", None)
    assert [c["function"]["arguments"] for c in acc.result("seed")] == ['{"city":"Paris"}', "{}", "{}"]


def test_extra_content_is_merged_onto_the_call() -> None:
    acc = ToolCallAccumulator()
    acc.add(None, "fc-1", "get_weather", "{}", {"google": {"thought_signature": "c2ln"}})
    acc.add(None, None, None, None, {"other": 1})
    assert acc.result("seed")[0]["extra_content"] == {"google": {"thought_signature": "c2ln"}, "other": 1}


def test_emptiness() -> None:
    acc = ToolCallAccumulator()
    assert not acc and acc.result("seed") == []
    acc.add(0, None, "ping", None)
    assert acc


def test_stable_ids_are_deterministic_distinct_and_salted() -> None:
    def ids(seed: str) -> list[str]:
        acc = ToolCallAccumulator()
        acc.add(0, None, "get_weather", '{"city":"Lima"}')
        acc.add(1, "given", "get_weather", '{"city":"Quito"}')
        acc.add(2, None, "get_weather", '{"city":"Bogota"}')
        return [c["id"] for c in acc.result(seed)]

    first = ids("chatcmpl-1")
    assert first == ids("chatcmpl-1")
    assert first == [stable_tool_call_id("chatcmpl-1", 0), "given", stable_tool_call_id("chatcmpl-1", 2)]
    assert len(set(first)) == 3
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in (first[0], first[2]))
    assert set(ids("chatcmpl-2")).isdisjoint({first[0], first[2]})


# --- finish reasons, arguments, artifacts, usage ------------------------------------------


@pytest.mark.parametrize(("native", "has_calls", "expected"), [
    (None, False, "stop"), ("stop", False, "stop"), ("length", False, "length"),
    ("content_filter", False, "content_filter"), ("tool_calls", False, "stop"),
    (None, True, "tool_calls"), ("stop", True, "tool_calls"), ("tool_calls", True, "tool_calls"),
    ("content_filter", True, "tool_calls"), ("length", True, "length"),
])
def test_normalize_finish_reason(native: Any, has_calls: bool, expected: str) -> None:
    assert normalize_finish_reason(native, has_calls) == expected


@pytest.mark.parametrize(("arguments", "expected"), [
    (None, "{}"), ("", "{}"), ("  \n", "{}"), ('{"a": 1}', '{"a": 1}'), ('{"a": ', '{"a": '),
    ({"a": 1, "b": [True, None]}, '{"a":1,"b":[true,null]}'), ({}, "{}"),
])
def test_normalize_arguments(arguments: Any, expected: str) -> None:
    assert normalize_arguments(arguments) == expected


def test_arguments_object() -> None:
    assert arguments_object(None) == arguments_object("") == arguments_object(" ") == {}
    assert arguments_object('{"a": 1}') == arguments_object({"a": 1}) == {"a": 1}
    with pytest.raises(ValueError, match="not valid JSON"):
        arguments_object('{"a": ')
    with pytest.raises(ValueError, match="JSON object"):
        arguments_object("[1, 2]")


@pytest.mark.parametrize("message", [
    USER, SYSTEM, tool("call_1"), assistant(content="Hi"), assistant("call_1", "call_2"),
    {"role": "assistant", "content": None, "tool_calls": []},
])
def test_strip_artifacts_returns_the_same_object_when_nothing_to_strip(message: dict[str, Any]) -> None:
    assert strip_artifacts(message) is message


@pytest.mark.parametrize("message", [
    {**assistant("call_1", content="On it."), "reasoning_content": "think",
     "thinking_blocks": [{"type": "thinking", "thinking": "think", "signature": "s"}]},
    {**assistant(content="Hi"), "extra_content": {"google": {"thought_signature": "dA=="}}},
    {"role": "assistant", "content": None, "tool_calls": [
        call("call_1"), {**call("call_2"), "extra_content": {"google": {"thought_signature": "c2ln"}}}]},
    {"role": "assistant", "content": "x", "reasoning_content": ""},
])
def test_strip_artifacts_copies_and_never_mutates(message: dict[str, Any]) -> None:
    before = copy.deepcopy(message)
    clean = strip_artifacts(message)
    assert message == before
    assert clean is not message
    assert not {"reasoning_content", "thinking_blocks", "extra_content"} & clean.keys()
    assert all("extra_content" not in c for c in clean.get("tool_calls", ()))
    assert clean == {k: v for k, v in before.items() if k not in ("reasoning_content", "thinking_blocks",
                                                                   "extra_content", "tool_calls")} | (
        {"tool_calls": [{k: v for k, v in c.items() if k != "extra_content"} for c in before["tool_calls"]]}
        if "tool_calls" in before else {})


def test_usage_add_and_to_openai() -> None:
    total = Usage()
    total.add(Usage(prompt_tokens=100, completion_tokens=20, cached_tokens=64, reasoning_tokens=5))
    total.add(Usage(prompt_tokens=150, completion_tokens=30, cached_tokens=100))
    assert total == Usage(prompt_tokens=250, completion_tokens=50, cached_tokens=164, reasoning_tokens=5)
    assert total.to_openai() == {
        "prompt_tokens": 250, "completion_tokens": 50, "total_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 164}, "completion_tokens_details": {"reasoning_tokens": 5}}
    assert Usage().to_openai()["total_tokens"] == 0


def test_text_of() -> None:
    assert text_of(None) == "" and text_of("hi") == "hi"
    assert text_of([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, "b",
                    {"type": "output_text", "text": "c"}, {"type": "text", "text": None}]) == "abc"


# --- pairing ----------------------------------------------------------------------------


@pytest.mark.parametrize("messages", [
    [],
    [SYSTEM, USER, assistant(content="Hi")],
    [SYSTEM, USER, assistant("call_1", "call_2"), tool("call_2"), tool("call_1"), assistant(content="Done"), USER],
    [USER, assistant("call_1"), tool("call_1"), assistant("call_2"), tool("call_2")],
    [USER, {"role": "assistant", "content": "x", "tool_calls": []}, USER],
])
def test_good_transcripts(messages: list[dict[str, Any]]) -> None:
    assert pairing_problem(messages) is None


@pytest.mark.parametrize(("messages", "index", "fragment"), [
    # An orphan tool message: its own index.
    ([USER, tool("call_1")], 1, "answers 'call_1'"),
    ([USER, assistant("call_1"), tool("call_1"), tool("call_1")], 3, "answers 'call_1'"),
    ([USER, assistant("call_1"), tool("call_9")], 2, "answers 'call_9'"),
    # A tool message answering a call of an earlier (not the closest) assistant message.
    ([USER, assistant("call_1"), tool("call_1"), assistant("call_2"), tool("call_1")], 4, "answers 'call_1'"),
    # A tool message after a user message that followed a fully answered turn.
    ([USER, assistant("call_1"), tool("call_1"), USER, tool("call_1")], 4, "answers 'call_1'"),
    # Unanswered calls: the assistant's index.
    ([USER, assistant("call_1", "call_2"), tool("call_1"), USER], 1, "missing: 'call_2'"),
    ([USER, assistant("call_1"), USER, tool("call_1")], 1, "missing: 'call_1'"),  # user between call and result
    ([USER, assistant("call_1"), assistant(content="x")], 1, "missing: 'call_1'"),
    ([USER, assistant(content="a"), assistant("call_2", "call_1")], 2, "missing: 'call_1', 'call_2'"),  # at the end
    # Duplicate ids and missing ids/tool_call_ids.
    ([USER, assistant("call_1", "call_1"), tool("call_1")], 1, "duplicate tool call id 'call_1'"),
    ([USER, {"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}], 1, "needs an 'id'"),
    ([USER, assistant("call_1"), {"role": "tool", "content": "x"}], 2, "needs a 'tool_call_id'"),
])
def test_bad_transcripts(messages: list[dict[str, Any]], index: int, fragment: str) -> None:
    problem = pairing_problem(messages)
    assert isinstance(problem, PairingError)
    assert problem.index == index
    assert str(problem).startswith(f"messages[{index}]:")
    assert fragment in str(problem)


def test_tool_turn_orders_results_by_call_order() -> None:
    turn = assistant("call_1", "call_2", "call_3", content="Checking.")
    results = {"call_3": ToolResult("error", "boom"), "call_1": ToolResult("ok", "18C"),
               "call_2": ToolResult("denied", "not allowed"), "unrelated": ToolResult("ok", "ignored")}
    messages = tool_turn(turn, results)
    assert messages == [turn, tool("call_1", "18C"), tool("call_2", "not allowed"), tool("call_3", "boom")]
    assert messages[0] is turn
    assert pairing_problem([USER, *messages]) is None


def test_tool_turn_without_calls_is_just_the_assistant_message() -> None:
    turn = assistant(content="Hello")
    assert tool_turn(turn, {}) == [turn]


def test_tool_turn_missing_result_raises() -> None:
    with pytest.raises(PairingError) as info:
        tool_turn(assistant("call_1", "call_2"), {"call_1": ToolResult("ok", "x")})
    assert info.value.index == -1
    assert "call_2" in str(info.value) and "get_weather" in str(info.value)


# --- the client's view of upstream failures ---------------------------------------------------


@pytest.mark.parametrize(("error_class", "status", "kind", "code"), [
    (ErrorClass.RATE_LIMITED, 429, "rate_limit_error", "rate_limit_exceeded"),
    (ErrorClass.OVERLOADED, 503, "service_unavailable_error", "upstream_overloaded"),
    (ErrorClass.SERVER_ERROR, 502, "upstream_error", "upstream_server_error"),
    (ErrorClass.TIMEOUT, 504, "timeout_error", "upstream_timeout"),
    (ErrorClass.CONNECTION, 502, "upstream_error", "upstream_unreachable"),
    (ErrorClass.AUTH, 502, "upstream_error", "upstream_auth_failed"),
    (ErrorClass.BAD_REQUEST, 400, "invalid_request_error", None),
    (ErrorClass.CONTEXT_LENGTH, 400, "invalid_request_error", "context_length_exceeded"),
    (ErrorClass.NOT_FOUND, 404, "invalid_request_error", "model_not_found"),
    (ErrorClass.INVALID_RESPONSE, 502, "upstream_error", "upstream_invalid_response"),
])
def test_from_upstream_status_mapping(error_class: ErrorClass, status: int, kind: str, code: str | None) -> None:
    error = from_upstream(ProviderError(error_class, "it failed", status=None), "openai/gpt-4.1")
    assert (error.status, error.type, error.code) == (status, kind, code)
    assert error.payload()["error"]["message"] == error.message
    assert "openai/gpt-4.1: it failed" in error.message
    if error_class in (ErrorClass.BAD_REQUEST, ErrorClass.CONTEXT_LENGTH, ErrorClass.NOT_FOUND):
        assert error.message == "openai/gpt-4.1: it failed"
    else:
        assert error.message.startswith("no upstream could answer; last error from openai/gpt-4.1")


def test_from_upstream_covers_every_error_class() -> None:
    for error_class in ErrorClass:
        assert from_upstream(ProviderError(error_class, "x"), "t").status in (400, 404, 429, 502, 503, 504)


@pytest.mark.parametrize(("retry_after", "header"), [(1.42, "1"), (2.6, "3"), (0.2, "1"), (37.0, "37")])
def test_rate_limited_keeps_retry_after(retry_after: float, header: str) -> None:
    error = from_upstream(ProviderError(ErrorClass.RATE_LIMITED, "slow down", 429, retry_after), "t")
    assert (error.status, error.headers) == (429, {"retry-after": header})
    overloaded = from_upstream(ProviderError(ErrorClass.OVERLOADED, "busy", 503, retry_after), "t")
    assert overloaded.headers == {"retry-after": header}


def test_retry_after_only_on_429_and_503() -> None:
    assert from_upstream(ProviderError(ErrorClass.RATE_LIMITED, "x", 429), "t").headers == {}
    assert from_upstream(ProviderError(ErrorClass.SERVER_ERROR, "x", 500, 5.0), "t").headers == {}


def test_rate_limit_example_through_the_adapter() -> None:
    upstream = OpenAIAdapter().parse_error(
        429, {"retry-after": "2", "retry-after-ms": "1420"},
        b'{"error": {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"}}')
    error = from_upstream(upstream, "openai/gpt-4.1")
    assert (error.status, error.headers["retry-after"]) == (429, "1")


@pytest.mark.parametrize("status", [401, 403])
def test_upstream_auth_failure_is_a_502_not_the_clients_401(status: int) -> None:
    upstream = OpenAIAdapter().parse_error(status, {}, b'{"error": {"message": "Incorrect API key provided"}}')
    assert upstream.error_class is ErrorClass.AUTH
    error = from_upstream(upstream, "t")
    assert (error.status, error.code) == (502, "upstream_auth_failed")


def test_not_found_is_a_404() -> None:
    upstream = OpenAIAdapter().parse_error(404, {}, b'{"error": {"message": "The model does not exist"}}')
    error = from_upstream(upstream, "openai/gpt-9")
    assert (error.status, error.message) == (404, "openai/gpt-9: The model does not exist")


@pytest.mark.parametrize(("upstream_status", "status"), [
    (400, 400), (409, 409), (413, 413), (422, 422), (None, 400), (500, 400), (200, 400)])
def test_bad_request_keeps_the_upstream_4xx_status(upstream_status: int | None, status: int) -> None:
    error = from_upstream(ProviderError(ErrorClass.BAD_REQUEST, "bad field", upstream_status), "t")
    assert (error.status, error.type, error.message, error.headers) == (status, "invalid_request_error",
                                                                        "t: bad field", {})
