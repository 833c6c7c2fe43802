"""The Responses API's WebSocket mode end to end: the official SDK's client (``client.responses.connect()``) and a
raw one against a real gateway process and fake upstreams. Turns over one socket, the tool loop, pauses resumed
over the socket or over HTTP (both ways), ``previous_response_id`` with ``store: false`` within a connection (and
nowhere else), failover, and the 426 a client without WebSockets gets."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import KEY, OTHER_KEY, Gateway
from tests.e2e.websocket_client import (
    events_until_end,
    final,
    next_error,
    next_event,
    open_socket,
    refused_status,
    send,
    turn,
)
from tests.fakes.upstream import FakeUpstream, Reply

LOOKUP = [{"type": "function", "name": "lookup", "description": "client-side lookup",
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


def kinds(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


def test_the_sdk_runs_a_tool_loop_over_one_socket(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """Three turns on one connection, ``store: false`` throughout, each continuing the last by
    ``previous_response_id``: server tools between the model calls, a client tool paused and answered."""
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Rome"})]),
                           Reply(text="Looking up.", tool_calls=[("lookup", {"q": "record 42"})]),
                           Reply(tool_calls=[("add", {"a": 40, "b": 2})]),
                           Reply(text="Record 42 is archived."),
                           Reply(text="You are welcome."))
    client = gateway.client()
    seen: list[list[str]] = []
    with client.responses.connect() as connection:

        def create(**body: Any) -> Any:
            connection.response.create(model="agent", store=False, tools=LOOKUP, **body)  # type: ignore[arg-type]
            types = []
            for event in connection:
                types.append(event.type)
                if event.type in ("response.completed", "response.failed", "error"):
                    seen.append(types)
                    assert event.type == "response.completed", event
                    return event.response  # type: ignore[union-attr]
            raise AssertionError("the connection ended")

        first = create(input="Find record 42")
        assert [item.type for item in first.output] == ["mcp_call", "message", "function_call"]
        assert first.model_extra["gateway"]["status"] == "paused"
        call = first.output[-1]
        second = create(previous_response_id=first.id,
                        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "archived"}])
        assert second.output_text == "Record 42 is archived."
        assert [item.type for item in second.output] == ["mcp_call", "message"]
        third = create(previous_response_id=second.id, input="Thanks!")
        assert third.output_text == "You are welcome."
    assert all(types[:2] == ["response.created", "response.in_progress"] for types in seen)
    sent = fakes["primary"].requests[-1].body["messages"]
    # the whole conversation reached the model: the server-side exchanges the client never saw included
    names = [call["function"]["name"] for message in sent for call in message.get("tool_calls") or ()]
    assert names == ["get_weather", "lookup", "add"]
    assert {"role": "tool", "tool_call_id": call.call_id, "content": "archived"} in sent
    assert sent[-2] == {"role": "assistant", "content": "Record 42 is archived."}
    assert sent[-1] == {"role": "user", "content": "Thanks!"}
    # store: false: nothing of it can be read back over HTTP
    assert httpx.get(f"{gateway.url}/v1/responses/{third.id}", headers={"authorization": f"Bearer {KEY}"},
                     timeout=10).status_code == 404


def test_an_unstored_response_is_continued_only_on_its_own_connection(gateway: Gateway,
                                                                      fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="One."), Reply(text="Two."))
    with open_socket(gateway) as mine, open_socket(gateway) as other:
        first = final(turn(mine, model="plain", input="Count.", store=False))
        refused = turn(other, model="plain", input="Go on.", store=False, previous_response_id=first["id"])[-1]
        assert refused["type"] == "error" and refused["status"] == 400
        assert refused["error"]["code"] == "previous_response_not_found"
        assert refused["error"]["param"] == "previous_response_id"
        over_http = gateway.post("/v1/responses", {"model": "plain", "input": "Go on.",
                                                   "previous_response_id": first["id"]})
        assert over_http.status_code == 400 and over_http.json()["error"]["code"] == "previous_response_not_found"
        second = final(turn(mine, model="plain", input="Go on.", store=False, previous_response_id=first["id"]))
        assert second["output"][0]["content"][0]["text"] == "Two."
    assert fakes["primary"].requests[-1].body["messages"][-3:] == [
        {"role": "user", "content": "Count."}, {"role": "assistant", "content": "One."},
        {"role": "user", "content": "Go on."}]


def test_a_pause_over_the_socket_is_resumed_over_http(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Let me look.", tool_calls=[("lookup", {"q": "7"})]), Reply(text="Seven."))
    with open_socket(gateway) as socket:
        paused = final(turn(socket, model="agent", input="What is 7?", tools=LOOKUP))
    assert kinds(paused) == ["message", "function_call"] and paused["gateway"]["status"] == "paused"
    call_id = paused["output"][-1]["call_id"]
    answered = gateway.post("/v1/responses", {"model": "agent", "previous_response_id": paused["id"], "tools": LOOKUP,
                                              "input": [{"type": "function_call_output", "call_id": call_id,
                                                         "output": "seven"}]})
    assert answered.status_code == 200, answered.text
    assert answered.json()["output"][-1]["content"][0]["text"] == "Seven."


def test_a_pause_over_http_is_resumed_over_the_socket(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "8"})]), Reply(text="Eight."))
    paused = gateway.post("/v1/responses", {"model": "agent", "input": "What is 8?", "tools": LOOKUP}).json()
    call_id = paused["output"][-1]["call_id"]
    with open_socket(gateway) as socket:
        answered = final(turn(socket, model="agent", previous_response_id=paused["id"], tools=LOOKUP, input=[
            {"type": "function_call_output", "call_id": call_id, "output": "eight"}]))
        assert answered["output"][-1]["content"][0]["text"] == "Eight."
        # answered once: the same answer again is the conflict HTTP would give
        again = turn(socket, model="agent", previous_response_id=paused["id"], tools=LOOKUP, input=[
            {"type": "function_call_output", "call_id": call_id, "output": "eight"}])[-1]
        assert again["type"] == "error" and again["status"] == 409


def test_a_resent_conversation_resumes_its_pause_over_the_socket(gateway: Gateway,
                                                                  fakes: dict[str, FakeUpstream]) -> None:
    """Way A, as a stateless client (Codex) sends it: the whole conversation again, answers at its end."""
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]),
                           Reply(tool_calls=[("lookup", {"q": "9"})]), Reply(text="Nine, and it is sunny."))
    with open_socket(gateway) as socket:
        paused = final(turn(socket, model="agent", input="What is 9?", tools=LOOKUP, store=False))
        call = paused["output"][-1]
        resent = [{"type": "message", "role": "user", "content": "What is 9?"},
                  {"type": "function_call", "call_id": call["call_id"], "name": "lookup",
                   "arguments": call["arguments"]},
                  {"type": "function_call_output", "call_id": call["call_id"], "output": "nine"}]
        answered = final(turn(socket, model="agent", input=resent, tools=LOOKUP, store=False))
    assert answered["output"][-1]["content"][0]["text"] == "Nine, and it is sunny."
    sent = fakes["primary"].requests[-1].body["messages"]
    assert any(call["function"]["name"] == "get_weather" for m in sent for call in m.get("tool_calls") or ())


@pytest.mark.parametrize("store", [False, True], ids=["unstored", "stored"])
def test_a_prepared_response_is_continued_without_having_generated(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                   store: bool) -> None:
    """``generate: false`` (Codex's warm-up): the request prepared and recorded, no model call; the next turn
    continues from it with only its new input (none here), as Codex sends it."""
    fakes["primary"].queue(Reply(text="Warm and ready."))
    with open_socket(gateway) as socket:
        events = turn(socket, model="agent", instructions="Be brief.", input="Hello", tools=LOOKUP, store=store,
                      generate=False)
        assert [event["type"] for event in events] == ["response.created", "response.in_progress",
                                                       "response.completed"]
        prepared = final(events)
        assert prepared["output"] == [] and prepared["usage"]["total_tokens"] == 0
        assert not fakes["primary"].requests
        answered = final(turn(socket, model="agent", instructions="Be brief.", input=[], tools=LOOKUP, store=store,
                              previous_response_id=prepared["id"]))
        assert answered["output"][0]["content"][0]["text"] == "Warm and ready."
        refused = turn(socket, model="agent", input=[{"type": "function_call_output", "call_id": "call_1",
                                                      "output": "x"}], generate=False)[-1]
        assert refused["type"] == "error" and refused["error"]["param"] == "input[0]"
    assert fakes["primary"].requests[0].body["messages"] == [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Hello"}]


def test_a_long_answer_arrives_whole_and_the_socket_goes_on(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """Past 256 Ki characters the closing events are written in slices (responses/spliced.py): each still
    arrives as one message."""
    text = "a long answer " * 25_000  # 350,000 characters
    fakes["primary"].queue(Reply(text=text, pieces=5), Reply(text="After."))
    with open_socket(gateway) as socket:
        events = turn(socket, model="plain", input="Talk a lot.", store=False)
        assert "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta") == text
        assert next(event for event in events if event["type"] == "response.output_text.done")["text"] == text
        assert final(events)["output"][0]["content"][0]["text"] == text
        assert final(turn(socket, model="plain", input="And?"))["output"][0]["content"][0]["text"] == "After."


def test_failover_runs_unchanged_over_the_socket(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=500), Reply(status=500))
    fakes["secondary"].queue(Reply(text="From the second target."))
    with open_socket(gateway) as socket:
        answered = final(turn(socket, model="failover", input="Hello"))
    assert answered["output"][-1]["content"][0]["text"] == "From the second target."
    assert answered["gateway"]["answered_by"] == ["secondary:m2"]


def test_an_error_before_the_answer_is_an_error_event_and_the_socket_goes_on(gateway: Gateway,
                                                                              fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Still here."))
    with open_socket(gateway) as socket:
        unknown = turn(socket, model="no-such-route", input="Hi")
        assert [event["type"] for event in unknown] == ["error"]
        assert unknown[0]["status"] == 404 and unknown[0]["error"]["type"] == "invalid_request_error"
        assert unknown[0]["headers"]["x-request-id"]
        background = turn(socket, model="plain", input="Hi", background=True)[-1]
        assert background["error"]["param"] == "background"
        lanes = turn(socket, model="plain", input="Hi", stream_id="lane-2")[-1]
        assert lanes["error"]["param"] == "stream_id"
        answered = final(turn(socket, model="plain", input="Hi", stream=False))  # stream is implicit on a socket
        assert answered["output"][0]["content"][0]["text"] == "Still here."


def test_a_turn_sent_while_one_runs_waits_behind_it(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                    hold: Any) -> None:
    """In order, one at a time; past ``websocket.max_queued_turns`` (4 by default) a turn is refused at once."""
    released = hold()
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply(text="Turn 0.", hold=released),
                           *[Reply(text=f"Turn {n}.") for n in range(1, 5)])
    with open_socket(gateway) as socket:
        send(socket, model="agent", input="turn 0")
        while next_event(socket)["type"] != "response.mcp_call.completed":  # answering, its model call held
            pass
        for n in range(1, 6):
            send(socket, model="plain", input=f"turn {n}")
        refused = next_error(socket)  # the sixth, answered while the first still runs
        assert refused["type"] == "error" and refused["status"] == 409
        assert refused["error"]["code"] == "response_already_in_progress"
        released.set()
        texts = [final(events_until_end(socket))["output"][-1]["content"][0]["text"] for _ in range(5)]
    assert texts == [f"Turn {n}." for n in range(5)]
    assert [request.body["messages"][-1]["content"] for request in fakes["primary"].requests[2:]] == [
        f"turn {n}" for n in range(1, 5)]


def test_a_plain_get_is_told_to_upgrade_and_other_socket_paths_are_404(gateway: Gateway) -> None:
    answer = httpx.get(f"{gateway.url}/v1/responses", headers={"authorization": f"Bearer {KEY}"}, timeout=10)
    assert answer.status_code == 426 and answer.headers["upgrade"] == "websocket"
    assert answer.json()["error"]["code"] == "upgrade_required"
    assert answer.headers["x-request-id"]
    assert httpx.delete(f"{gateway.url}/v1/responses", timeout=10).status_code == 405
    status, body = refused_status(gateway, OTHER_KEY, "/v1/chat/completions")
    assert status == 404 and body["error"]["type"] == "not_found_error"


@pytest.fixture
def hold() -> Any:
    import threading

    made: list[threading.Event] = []

    def make() -> threading.Event:
        made.append(threading.Event())
        return made[-1]

    yield make
    for event in made:  # never leave a fake waiting on a test that failed
        event.set()


def test_events_match_the_http_stream(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """The same events as the SSE stream of ``POST /v1/responses``, each the data of its frame."""
    fakes["primary"].queue(Reply(text="Same words, same events.", pieces=3),
                           Reply(text="Same words, same events.", pieces=3))
    with open_socket(gateway) as socket:
        over_socket = turn(socket, model="plain", input="Say it", store=False)
    with httpx.stream("POST", f"{gateway.url}/v1/responses", headers={"authorization": f"Bearer {KEY}"},
                      json={"model": "plain", "input": "Say it", "store": False, "stream": True}, timeout=20) as sse:
        over_http = [orjson.loads(line[6:]) for line in sse.iter_lines() if line.startswith("data: ")]

    def shape(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
        return [(event["type"], event["sequence_number"]) for event in events]

    assert shape(over_socket) == shape(over_http)
    assert final(over_socket)["output"][0]["content"][0]["text"] == "Same words, same events."
