"""``max_tool_calls`` on ``/v1/responses``: it caps the server tool calls of the whole response, as OpenAI's caps
built-in tool calls (the caller's own function tools are not counted), a pause and its resume included. A call past
the cap is not run: the model gets a "limit reached" result for it, and a round with nothing but such calls makes
the next call the finalize call."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Gateway
from tests.fakes.upstream import FakeUpstream, Reply

LOOKUP = [{"type": "function", "name": "lookup", "description": "client-side lookup",
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


def tool_messages(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def statuses(response: Any) -> list[str]:
    return [record["status"] for record in response.model_extra["gateway"]["tool_calls"]]


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_calls_past_the_cap_in_one_round_are_not_run(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                     stream: bool) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}),
                                             ("get_weather", {"city": "Oslo"})]),
                           Reply(text="Paris is sunny; the rest I could not look up."))
    client = gateway.client()
    if stream:
        with client.responses.stream(model="agent", input="Weather?", max_tool_calls=2) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="agent", input="Weather?", max_tool_calls=2)
    assert response.status == "completed" and response.max_tool_calls == 2
    assert response.output_text.endswith("could not look up.")
    assert sorted(statuses(response)) == ["ok", "ok", "skipped"]  # a refused call is recorded at once, first
    last = fakes["primary"].requests[-1].body
    results = list(tool_messages(last).values())
    assert results[:2] == ["Paris: 18C, sunny", "Rome: 18C, sunny"]  # in call order: the first two ran
    assert "limit of 2 server tool calls (max_tool_calls) has been reached" in results[2]
    # Some calls ran: the model goes on as usual (tools offered, its own choice), no finalize call.
    assert last.get("tool_choice") != "none" and response.model_extra["gateway"]["iteration_limit_reached"] is False


def test_a_round_of_only_refused_calls_makes_the_next_call_the_finalize_call(gateway: Gateway,
                                                                            fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(tool_calls=[("get_weather", {"city": "Rome"})]),
                           Reply(text="Paris is sunny."))
    response = gateway.client().responses.create(model="agent", input="Weather?", max_tool_calls=1)
    assert response.status == "completed" and response.output_text == "Paris is sunny."
    assert statuses(response) == ["ok", "skipped"]
    assert len(fakes["primary"].requests) == 3
    second, final = fakes["primary"].requests[1].body, fakes["primary"].requests[2].body
    assert second.get("tool_choice") != "none"  # the one call ran: the model was asked as usual
    assert final["tool_choice"] == "none" and "limit" in final["messages"][-1]["content"]
    assert response.model_extra["gateway"]["iteration_limit_reached"] is True


def test_zero_runs_no_server_tool(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(text="I cannot check."))
    response = gateway.client().responses.create(model="agent", input="Weather?", max_tool_calls=0)
    assert response.output_text == "I cannot check." and statuses(response) == ["skipped"]
    assert "limit of 0 server tool calls" in next(iter(tool_messages(fakes["primary"].requests[-1].body).values()))


def test_client_function_calls_are_not_counted_and_a_resume_spends_what_is_left(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    # Round 1: one server call (the whole cap) and the caller's own function: the loop pauses for the latter.
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("lookup", {"q": "x"})]))
    first = client.responses.create(model="agent", input="Weather and record?", tools=LOOKUP, max_tool_calls=1)
    assert first.model_extra["gateway"]["status"] == "paused"
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "lookup"
    # The resume: the cap the paused loop had holds, its one call spent.
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Rome"}), ("lookup", {"q": "y"})]))
    second = client.responses.create(model="agent", previous_response_id=first.id, tools=LOOKUP, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "archived"}])
    assert second.model_extra["gateway"]["status"] == "paused"  # a client call is never capped
    assert second.output[-1].type == "function_call" and second.output[-1].name == "lookup"
    refused = [r for r in second.model_extra["gateway"]["tool_calls"] if r["status"] == "skipped"]
    assert [r["name"] for r in refused] == ["get_weather"]
    # And across a second pause too.
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Done."))
    third = client.responses.create(model="agent", previous_response_id=second.id, tools=LOOKUP, input=[
        {"type": "function_call_output", "call_id": second.output[-1].call_id, "output": "kept"}])
    assert third.output_text == "Done." and statuses(third)[-1] == "skipped"
    assert fakes["primary"].requests[-1].body["tool_choice"] == "none"


def test_without_the_field_nothing_is_capped(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": c}) for c in ("A", "B", "C", "D")]),
                           Reply(text="All four."))
    response = gateway.client().responses.create(model="agent", input="Weather?")
    assert statuses(response) == ["ok"] * 4 and response.max_tool_calls is None


@pytest.mark.parametrize("value", [-1, 2**31 + 1, 2**63, True, "3", 1.5])
def test_hostile_values_are_400s_naming_the_field(gateway: Gateway, value: Any) -> None:
    answer = gateway.post("/v1/responses", {"model": "agent", "input": "x", "max_tool_calls": value})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "max_tool_calls"
