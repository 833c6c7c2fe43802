"""``/v1/responses`` end to end: the official SDK over real HTTP against the gateway process and fake upstreams."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e.conftest import HEADLESS_KEY, OTHER_KEY, Gateway
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

LOOKUP = [{"type": "function", "name": "lookup", "description": "client-side lookup",
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


def create(gateway: Gateway, stream: bool, key: str | None = None, **kwargs: Any) -> Any:
    """One response in either mode; the stream goes through the SDK's ``responses.stream`` helper."""
    client = gateway.client(key) if key else gateway.client()
    if not stream:
        return client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as events:
        seen = [event.type for event in events]
        final = events.get_final_response()
    assert seen[:2] == ["response.created", "response.in_progress"]
    assert seen[-1] in ("response.completed", "response.incomplete")
    final.__dict__["_events"] = seen
    return final


def kinds(response: Any) -> list[str]:
    return [item.type for item in response.output]


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_text(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["primary"].queue(Reply(text="Hello there, friend.", usage=(11, 5)))
    response = create(gateway, stream, model="plain", input="Say hello", instructions="Be brief.")
    assert response.status == "completed"
    assert response.output_text == "Hello there, friend."
    assert kinds(response) == ["message"]
    assert response.usage.input_tokens == 11 and response.usage.output_tokens == 5
    assert response.usage.total_tokens == 16
    assert response.model_extra["gateway"]["route"] == "plain"
    assert response.model_extra["gateway"]["status"] == "completed"
    body = fakes["primary"].requests[0].body
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    if stream:
        events = response.__dict__["_events"]
        assert "response.output_text.delta" in events and events.count("response.completed") == 1


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_server_tool_loop_is_rendered_as_mcp_calls(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                   stream: bool) -> None:
    fakes["primary"].queue(Reply(text="Let me check.", tool_calls=[("get_weather", {"city": "Paris"}),
                                                                    ("explode", {})]),
                           Reply(text="Paris is sunny.", usage=(20, 4)))
    response = create(gateway, stream, model="agent", input="Weather in Paris?")
    assert kinds(response) == ["message", "mcp_call", "mcp_call", "message"]
    weather = next(i for i in response.output if i.type == "mcp_call" and i.name == "get_weather")
    assert weather.server_label == "loopgate" and weather.output == "Paris: 18C, sunny"
    assert weather.arguments == '{"city": "Paris"}' or '"Paris"' in weather.arguments
    failed = next(i for i in response.output if i.type == "mcp_call" and i.name == "explode")
    assert failed.status == "failed" and failed.error is not None
    assert response.output_text == "Let me check.Paris is sunny."
    assert response.output[-1].content[0].text == "Paris is sunny."
    assert response.model_extra["gateway"]["iterations"] == 2
    assert response.usage.output_tokens >= 4
    if stream:
        events = response.__dict__["_events"]
        assert events.count("response.mcp_call.in_progress") == 2
        assert "response.mcp_call.completed" in events and "response.mcp_call.failed" in events


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_client_function_round_trip(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Rome"})]),
                           Reply(text="Looking up.", tool_calls=[("lookup", {"q": "record 42"})]))
    first = create(gateway, stream, model="agent", input="Find record 42", tools=LOOKUP)
    assert first.status == "completed"
    assert kinds(first) == ["mcp_call", "message", "function_call"]
    call = first.output[-1]
    assert call.name == "lookup" and call.arguments and call.call_id
    assert first.model_extra["gateway"]["status"] == "paused"

    fakes["primary"].queue(Reply(text="Record 42 is archived."))
    second = create(gateway, stream, model="agent", previous_response_id=first.id, tools=LOOKUP,
                    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "archived"}])
    assert second.status == "completed" and second.output_text == "Record 42 is archived."
    sent = fakes["primary"].requests[-1].body["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "archived"}
    assert any(m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "get_weather" for m in sent)

    with pytest.raises(openai.ConflictError):  # the same pending call answered twice
        gateway.client().responses.create(model="agent", previous_response_id=first.id, tools=LOOKUP, input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "again"}])


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "deny"])
def test_approval_round_trip(gateway: Gateway, fakes: dict[str, FakeUpstream], tool_server: ToolServer,
                             approve: bool) -> None:
    tool_server.calls.clear()
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "42"})]))
    first = gateway.client().responses.create(model="agent", input="Delete record 42")
    assert kinds(first) == ["mcp_approval_request"]
    request = first.output[0]
    assert request.name == "delete_remote" and request.server_label == "loopgate" and '"42"' in request.arguments

    fakes["primary"].queue(Reply(text="Done." if approve else "Not deleted."))
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": approve}
    if not approve:
        answer["reason"] = "keep it"
    second = gateway.client().responses.create(model="agent", previous_response_id=first.id, input=[answer])
    assert second.status == "completed"
    if approve:
        assert kinds(second) == ["mcp_call", "message"]
        assert second.output[0].approval_request_id == request.id and second.output[0].status == "completed"
        assert len(tool_server.calls) == 1
    else:
        assert kinds(second) == ["message"] and tool_server.calls == []
        tool = fakes["primary"].requests[-1].body["messages"][-1]
        assert tool["role"] == "tool" and "declined" in tool["content"] and "keep it" in tool["content"]
    with pytest.raises(openai.ConflictError):
        gateway.client().responses.create(model="agent", previous_response_id=first.id, input=[answer])
    assert len(tool_server.calls) == (1 if approve else 0)  # never twice


def test_chain_of_three(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    fakes["primary"].queue(Reply(text="One."), Reply(text="Two."), Reply(text="Three."))
    first = client.responses.create(model="plain", input="first", instructions="Old instructions.")
    second = client.responses.create(model="plain", input="second", previous_response_id=first.id)
    third = client.responses.create(model="plain", input="third", previous_response_id=second.id,
                                    instructions="New instructions.")
    assert third.output_text == "Three." and third.previous_response_id == second.id
    bodies = [r.body["messages"] for r in fakes["primary"].requests]
    assert bodies[1] == [{"role": "user", "content": "first"}, {"role": "assistant", "content": "One."},
                         {"role": "user", "content": "second"}]  # instructions are not carried over
    assert bodies[2][0] == {"role": "system", "content": "New instructions."}
    assert [m["content"] for m in bodies[2][1:]] == ["first", "One.", "second", "Two.", "third"]


def test_failover_between_iterations(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 2, "b": 3})]), Reply(status=503))
    fakes["secondary"].queue(Reply(text="The sum is 5."))
    response = gateway.client().responses.create(model="agent_failover", input="2+3?")
    assert response.output_text == "The sum is 5." and kinds(response) == ["mcp_call", "message"]
    assert response.model_extra["gateway"]["answered_by"] == ["primary:m1", "secondary:m2"]
    assert response.model == "m2"


def test_structured_output(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text='{"city": "Paris"}'))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    response = gateway.client().responses.create(model="plain", input="Where?", text={"format": {
        "type": "json_schema", "name": "place", "schema": schema, "strict": True}})
    assert response.output_text == '{"city": "Paris"}'
    assert fakes["primary"].requests[0].body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}}


def test_get_delete_input_items_and_tenancy(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    fakes["primary"].queue(Reply(text="ok"))
    items = [{"role": "user", "content": f"message {n}"} for n in range(5)]
    response = client.responses.create(model="plain", input=items, metadata={"ticket": "7"})
    fetched = client.responses.retrieve(response.id)
    assert fetched.id == response.id and fetched.output_text == "ok" and fetched.metadata == {"ticket": "7"}

    page = client.responses.input_items.list(response.id, limit=2, order="asc")
    assert len(page.data) == 2 and page.has_more is True and page.data[0].role == "user"
    raw = client.get(f"/responses/{response.id}/input_items", cast_to=object, options={"params": {
        "limit": 2, "order": "asc"}})
    assert [i["content"] for i in raw["data"]] == ["message 0", "message 1"] and raw["has_more"] is True
    after = client.get(f"/responses/{response.id}/input_items", cast_to=object, options={"params": {
        "limit": 10, "order": "asc", "after": raw["last_id"]}})
    assert [i["content"] for i in after["data"]] == ["message 2", "message 3", "message 4"]
    assert after["has_more"] is False
    desc = client.get(f"/responses/{response.id}/input_items", cast_to=object)
    assert desc["data"][0]["content"] == "message 4" and desc["first_id"] == desc["data"][0]["id"]

    with pytest.raises(openai.NotFoundError):
        gateway.client(OTHER_KEY).responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as other:
        gateway.client(OTHER_KEY).responses.create(model="plain", input="hi", previous_response_id=response.id)
    assert other.value.code == "previous_response_not_found"

    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as gone:
        client.responses.create(model="plain", input="hi", previous_response_id=response.id)
    assert gone.value.code == "previous_response_not_found" and gone.value.param == "previous_response_id"


def test_headless_denies_instead_of_pausing(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "1"})]), Reply(text="Could not delete."))
    response = gateway.client(HEADLESS_KEY).responses.create(model="agent", input="Delete record 1")
    assert response.status == "completed" and kinds(response) == ["message"]
    assert response.model_extra["gateway"]["headless_denials"][0]["name"] == "delete_record"


def test_max_output_tokens_is_incomplete(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Cut", finish="length"))
    response = gateway.client().responses.create(model="plain", input="Long story", max_output_tokens=16)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert fakes["primary"].requests[0].body["max_completion_tokens"] == 16


@pytest.mark.parametrize("tool", ["web_search", "web_search_preview", "file_search", "code_interpreter",
                                  "computer_use_preview", "computer", "image_generation", "mcp"])
def test_hosted_tools_are_refused_naming_the_param(gateway: Gateway, tool: str) -> None:
    response = gateway.post("/v1/responses", {"model": "plain", "input": "hi", "tools": [
        {"type": "function", "name": "f"}, {"type": tool, "server_label": "x", "server_url": "http://x"}]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tools[1].type" and tool in error["message"]


def test_conversation_is_refused(gateway: Gateway) -> None:
    response = gateway.post("/v1/responses", {"model": "plain", "input": "hi", "conversation": "conv_1"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "conversation"
