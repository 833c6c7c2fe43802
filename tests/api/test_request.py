"""Chat-body validation: a wrong type anywhere is a 400 naming the parameter, with caller values quoted short."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.chat.request import parse_chat_request
from gateway.api.messages.request import parse_messages_request
from gateway.api.responses.request import parse_responses_request
from gateway.errors import GatewayError, quoted

USER = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
PAIR = [{"role": "assistant", "content": None, "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "c1",
                                                                      "content": "r"}]


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **fields}


@pytest.mark.parametrize(("given", "param"), [
    (body(messages=[{"role": ["user"], "content": "x"}]), "messages[0].role"),
    (body(messages=[{"role": {"a": 1}, "content": "x"}]), "messages[0].role"),
    (body(functions=[1]), "functions[0]"),
    (body(functions=[{"name": 5}]), "functions[0].name"),
    (body(messages=[USER, PAIR[0], {**PAIR[1], "content": 5}]), "messages[2].content"),
    (body(n=True), "n"),
    (body(n=2), "n"),
    (body(messages={"role": "user"}), "messages"),
    (body(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]), "tools[0].function.parameters"),
    (body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"properties": True}}}]),
     "tools[0].function.parameters.properties"),
    (body(tools=[{"type": ["function"]}]), "tools[0].type"),
    (body(stream="yes"), "stream"),
    (body(gateway=[]), "gateway"),
    (body(stream_options=[]), "stream_options"),
    (body(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (body(temperature="hot"), "temperature"),
    (body(max_tokens=1.5), "max_tokens"),
    (body(stop=[1]), "stop"),
    (body(response_format="json"), "response_format"),
    (body(messages=[{"role": "user", "content": "x", "name": 5}]), "messages[0].name"),
    (body(messages=[{"role": "user", "content": [1]}]), "messages[0].content[0]"),
    (body(messages=[{"role": "user", "content": [{"type": ["text"]}]}]), "messages[0].content[0].type"),
    (body(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]), "messages[0].content[0].text"),
    (body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}]),
     "messages[0].content[0].image_url.url"),
    (body(messages=[USER, {**PAIR[0], "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}]},
                    PAIR[1]]), "messages[1].tool_calls[0].function.arguments"),
    (body(messages=[USER, {**PAIR[0], "thinking_blocks": [{"type": ["thinking"]}]}, PAIR[1]]),
     "messages[1].thinking_blocks[0]"),
    (body(tool_choice={"type": "function", "function": [1]}), "tool_choice.function"),
    (body(tool_choice=5), "tool_choice"),
])
def test_wrong_types_are_a_400_naming_the_parameter(given: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_chat_request(given)
    assert (caught.value.status, caught.value.param) == (400, param), caught.value.message


def test_caller_values_are_quoted_truncated() -> None:
    with pytest.raises(GatewayError) as caught:
        parse_chat_request(body(messages=[{"role": "x" * 60_000, "content": "hi"}]))
    assert len(caught.value.message) < 300 and "xxx…" in caught.value.message
    assert quoted("a\nb") == "'a\\nb'" and quoted("é" * 150).endswith("…'") and len(quoted("é" * 150)) == 103
    assert (quoted([1]), quoted({"a": 1}), quoted(None), quoted(True), quoted(1.5)) == (
        "an array", "an object", "null", "true", "1.5")


def test_valid_bodies_still_pass() -> None:
    request = parse_chat_request(body(
        messages=[{"role": "system", "content": "s"}, USER, *PAIR,
                  {"role": "user", "content": [{"type": "text", "text": "t"}, "plain",
                                               {"type": "image_url", "image_url": "https://x/a.png"},
                                               {"type": "some_extension", "x": [1]}]},
                  {"role": "assistant", "content": "ok", "name": "bot", "refusal": None}],
        stream=None, stream_options=None, gateway=None, n=1, temperature=1, stop=["a"], tool_choice="auto",
        functions=[{"name": "g", "parameters": {"type": "object", "properties": {}, "required": []}}],
        unknown_extension={"kept": True}))
    assert request.stream is False and request.params["unknown_extension"] == {"kept": True}
    assert [t["function"]["name"] for t in request.tools] == ["g"]


@pytest.mark.parametrize(("value", "expected"), [("continue", True), ("off", False), (True, True), (False, False),
                                                 (None, None)])
def test_stream_rescue_option_overrides_the_route(value: Any, expected: bool | None) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "gateway": {"stream_rescue": value}}
    assert parse_chat_request(body).stream_rescue is expected


@pytest.mark.parametrize("value", ["on", 1, [], "OFF"])
def test_stream_rescue_option_rejects_other_values(value: Any) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "gateway": {"stream_rescue": value}}
    with pytest.raises(GatewayError) as caught:
        parse_chat_request(body)
    assert caught.value.status == 400 and caught.value.param == "gateway.stream_rescue"


def test_stream_rescue_option_on_responses_and_messages() -> None:
    assert parse_responses_request({"model": "m", "input": "hi", "gateway": {"stream_rescue": "off"}}).stream_rescue \
        is False
    messages = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert parse_messages_request({**messages, "gateway": {"stream_rescue": "off"}}).stream_rescue is False
    assert parse_messages_request(messages).stream_rescue is None
    with pytest.raises(GatewayError):
        parse_messages_request({**messages, "gateway": {"stream_rescue": "sometimes"}})
