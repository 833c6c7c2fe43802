"""The WebSocket mode's messages: a client's message checked, ``response.create`` as a POST body, the ``error``
event's shape (the SDK's ``ResponseWsError`` reads it), and an SSE body cut into the socket's messages."""

from __future__ import annotations

import orjson
import pytest
from openai.types.responses.responses_server_event import ResponseWsError

from gateway.api.responses.ws_messages import (
    SSEEvents,
    create_body,
    error_event,
    gateway_error_event,
    parse_message,
)
from gateway.errors import GatewayError
from gateway.http.sse_response import event_frame


@pytest.mark.parametrize(("text", "code"), [
    ("not json", "invalid_json"),
    ("[1, 2]", "invalid_message"),
    ('{"model": "m"}', "invalid_message"),
    ('{"type": 7}', "invalid_message"),
    ("[" * 5000 + "]" * 5000, "invalid_json"),
])
def test_bad_messages_are_400s_with_a_code(text: str, code: str) -> None:
    with pytest.raises(GatewayError) as info:
        parse_message(text)
    assert (info.value.status, info.value.code) == (400, code)


def test_a_create_message_is_the_post_body_streamed() -> None:
    body = create_body(parse_message('{"type": "response.create", "model": "m", "input": "hi", "stream": false}'))
    assert body == ({"model": "m", "input": "hi", "stream": True}, True)
    assert create_body({"type": "response.create", "background": False, "stream_id": None, "generate": True}) == (
        {"stream": True}, True)
    assert create_body({"type": "response.create", "model": "m", "generate": False}) == (
        {"model": "m", "stream": True}, False)


@pytest.mark.parametrize(("field", "value"), [("background", True), ("stream_id", "lane-2"), ("generate", "no")])
def test_background_and_lanes_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(GatewayError) as info:
        create_body({"type": "response.create", "model": "m", field: value})
    assert info.value.param == field


def test_an_error_event_carries_the_status_the_error_and_its_limit_headers() -> None:
    error = GatewayError(429, "slow down", "rate_limit_error", None, "rate_limit_exceeded")
    headers = [(b"content-type", b"application/json"), (b"x-request-id", b"req_1"), (b"retry-after", b"2"),
               (b"x-ratelimit-remaining-requests", b"0")]
    event = orjson.loads(error_event(429, error.body(), headers))
    wanted = {"x-request-id": "req_1", "retry-after": "2", "x-ratelimit-remaining-requests": "0"}
    assert event == {"type": "error", "status": 429, "headers": wanted, "error": {
        "message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded",
        "headers": wanted}}
    parsed = ResponseWsError.model_validate(event)  # the SDK's own type
    assert parsed.status == 429 and parsed.error.code == "rate_limit_exceeded"
    retry = orjson.loads(gateway_error_event(GatewayError(429, "x", headers={"Retry-After": "1"})))
    assert retry["headers"] == {"retry-after": "1"}


def test_an_error_body_that_is_not_openai_shaped_still_makes_an_error_event() -> None:
    event = orjson.loads(error_event(502, b"<html>bad gateway</html>"))
    assert event["status"] == 502 and event["error"]["type"] == "server_error"
    assert "bad gateway" in event["error"]["message"]


def test_an_sse_body_becomes_one_message_per_event_whatever_its_pieces() -> None:
    frames = [event_frame("response.created", b'{"type":"response.created","n":1}'),
              event_frame("response.output_text.delta", b'{"type":"d","delta":"a\\n\\nb"}'),
              event_frame("response.completed", b'{"type":"response.completed"}')]
    whole = b"".join(frames)
    expected = [b'{"type":"response.created","n":1}', b'{"type":"d","delta":"a\\n\\nb"}',
                b'{"type":"response.completed"}']
    assert SSEEvents().feed(whole) == expected
    for size in (1, 7, 50):  # a large frame is written in slices
        events, out = SSEEvents(), []
        for start in range(0, len(whole), size):
            out.extend(events.feed(whole[start:start + size]))
        assert out == expected
