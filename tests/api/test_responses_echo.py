"""The Response object's envelope: every field the Open Responses specification requires, on every path.

The e2e compliance checks (``tests/e2e/test_open_responses.py``) validate whole responses against the
specification's schemas; these pin down the values: what a request that leaves a field out shows, what
one that sends it shows, what it may not send, and ``completed_at`` through a response's life.
"""

from __future__ import annotations

from typing import Any

import openresponses_types as spec
import orjson
import pytest

from gateway.api.responses.echo import ECHO_DEFAULTS, ECHO_FIELDS, MAX_TOP_LOGPROBS
from gateway.api.responses.render import ResponseBuilder
from gateway.api.responses.request import parse_responses_request
from gateway.canonical import TextDelta, Usage
from gateway.errors import GatewayError
from gateway.loop.events import Finished, LoopResult

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def finished(finish_reason: str = "stop") -> Finished:
    return Finished(LoopResult("completed", finish_reason, Usage(10, 2), {}, [], "m"))


def answered(body: dict[str, Any], reason: str = "stop") -> ResponseBuilder:
    request = parse_responses_request(body)
    builder = ResponseBuilder("resp_1", request.model, request.echo, lambda name: "loopgate")
    builder.start()
    builder.feed([TextDelta("Hello.")])
    builder.feed(finished(reason))
    return builder


@pytest.mark.parametrize("body", [{"model": "m", "input": "x"}, {"model": "m", "input": "x", "temperature": 0.2}])
def test_a_request_that_leaves_the_fields_out_shows_their_defaults(body: dict[str, Any]) -> None:
    """Both parse paths (a plain request's and one with options) give every field, valid per the specification."""
    response = answered(body).response
    assert {name: response[name] for name in ECHO_DEFAULTS} == ECHO_DEFAULTS
    assert set(response) >= set(ECHO_FIELDS)
    spec.ResponseResource.model_validate_json(orjson.dumps(response), strict=True)


def test_the_fields_a_request_sends_are_echoed() -> None:
    sent = {"presence_penalty": 0.5, "frequency_penalty": -1, "top_logprobs": 3, "service_tier": "flex",
            "safety_identifier": "user-7f3a", "prompt_cache_key": "thread-01a2"}
    request = parse_responses_request({"model": "m", "input": "x", **sent})
    assert {name: request.echo[name] for name in sent} == sent
    passed = {name: value for name, value in sent.items() if name != "top_logprobs"}
    assert {name: request.params[name] for name in passed} == passed, "they still reach the model"
    assert "top_logprobs" not in request.params, "chat takes it only with logprobs: true, which Responses never sends"


@pytest.mark.parametrize(("field", "value"), [
    ("presence_penalty", "high"), ("frequency_penalty", [1]), ("top_logprobs", 1.5), ("top_logprobs", True),
    ("top_logprobs", -1), ("top_logprobs", MAX_TOP_LOGPROBS + 1), ("top_logprobs", 2**70), ("service_tier", 1),
    ("safety_identifier", {"id": 1}), ("prompt_cache_key", 7),
])
def test_a_wrong_value_is_the_callers_400_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_responses_request({"model": "m", "input": "x", field: value})
    assert caught.value.status == 400 and caught.value.param == field


def test_function_tools_show_description_parameters_and_strict() -> None:
    given = [WEATHER, {**WEATHER, "name": "strict_one", "description": "d", "strict": True}]
    tools = parse_responses_request({"model": "m", "input": "x", "tools": given}).echo["tools"]
    assert tools[0] == {**WEATHER, "description": None, "strict": None}
    assert tools[1] is given[1], "a complete tool is echoed as sent, not copied"
    assert given[0] == WEATHER, "the caller's tool is not changed"


def test_completed_at_is_set_when_the_response_completes() -> None:
    request = parse_responses_request({"model": "m", "input": "x"})
    builder = ResponseBuilder("resp_1", "m", request.echo, lambda name: "loopgate")
    started = builder.start()
    assert started[0]["response"]["completed_at"] is None, "a response in progress has none"
    builder.feed([TextDelta("Hi.")])
    builder.feed(finished())
    assert builder.response["completed_at"] >= builder.response["created_at"]


def test_an_incomplete_or_failed_response_has_no_completed_at() -> None:
    assert answered({"model": "m", "input": "x"}, reason="length").response["completed_at"] is None
    request = parse_responses_request({"model": "m", "input": "x"})
    builder = ResponseBuilder("resp_1", "m", request.echo, lambda name: "loopgate")
    builder.start()
    builder.fail(GatewayError(502, "upstream gone", "server_error"))
    assert builder.response["status"] == "failed" and builder.response["completed_at"] is None


def test_a_retracted_completion_takes_completed_at_back() -> None:
    request = parse_responses_request({"model": "m", "input": "x"})
    builder = ResponseBuilder("resp_1", "m", request.echo, lambda name: "loopgate")
    builder.start()
    events = builder.feed(finished())
    builder.retract_terminal(events)
    assert builder.response["completed_at"] is None


def test_an_echo_stored_by_an_earlier_version_shows_the_defaults_it_lacks() -> None:
    """A paused response stored before these fields existed is resumed with an echo that lacks them."""
    old_echo = {name: value for name, value in parse_responses_request({"model": "m", "input": "x"}).echo.items()
                if name not in ECHO_DEFAULTS}
    response = ResponseBuilder("resp_1", "m", old_echo, lambda name: "loopgate").response
    assert {name: response[name] for name in ECHO_DEFAULTS} == ECHO_DEFAULTS
