"""``/v1/responses`` end to end: the official SDK over real HTTP against the gateway process and fake upstreams."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.e2e.conftest import HEADLESS_KEY, OTHER_KEY, PROVIDER_MODELS, Gateway
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
                                                                    ("explode", {})], usage=(10, 3)),
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
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 7)  # summed over both calls
    assert response.usage.total_tokens == 37
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


@pytest.mark.parametrize(("approve", "stream"), [(True, False), (False, False), (True, True)],
                         ids=["approve", "deny", "approve-stream"])
def test_approval_round_trip(gateway: Gateway, fakes: dict[str, FakeUpstream], tool_server: ToolServer,
                             approve: bool, stream: bool) -> None:
    tool_server.calls.clear()
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "42"})]))
    first = create(gateway, stream, model="agent", input="Delete record 42")
    assert kinds(first) == ["mcp_approval_request"]
    request = first.output[0]
    assert request.name == "delete_remote" and request.server_label == "loopgate" and '"42"' in request.arguments

    fakes["primary"].queue(Reply(text="Done." if approve else "Not deleted."))
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": approve}
    if not approve:
        answer["reason"] = "keep it"
    second = create(gateway, stream, model="agent", previous_response_id=first.id, input=[answer])
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
    assert [i["content"] for i in raw["data"]] == [[{"type": "input_text", "text": f"message {n}"}] for n in (0, 1)]
    assert raw["has_more"] is True
    after = client.get(f"/responses/{response.id}/input_items", cast_to=object, options={"params": {
        "limit": 10, "order": "asc", "after": raw["last_id"]}})
    assert [i["content"][0]["text"] for i in after["data"]] == ["message 2", "message 3", "message 4"]
    assert after["has_more"] is False
    desc = client.get(f"/responses/{response.id}/input_items", cast_to=object)
    assert desc["data"][0]["content"][0]["text"] == "message 4" and desc["first_id"] == desc["data"][0]["id"]

    # Another tenant's id is an unknown one, on every endpoint, with one error.
    for call in (lambda c: c.responses.retrieve(response.id), lambda c: c.responses.cancel(response.id),
                 lambda c: c.responses.delete(response.id), lambda c: c.responses.input_items.list(response.id)):
        with pytest.raises(openai.NotFoundError) as unknown:
            call(gateway.client(OTHER_KEY))
        assert unknown.value.code == "response_not_found" and response.id in unknown.value.message
    with pytest.raises(openai.BadRequestError) as other:
        gateway.client(OTHER_KEY).responses.create(model="plain", input="hi", previous_response_id=response.id)
    assert other.value.code == "previous_response_not_found"

    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as gone:
        client.responses.create(model="plain", input="hi", previous_response_id=response.id)
    assert gone.value.code == "previous_response_not_found" and gone.value.param == "previous_response_id"


def test_input_items_list_message_content_as_parts(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """OpenAI's shape: a message's string content is listed as parts (``output_text`` for the assistant's)."""
    client = gateway.client()
    fakes["primary"].queue(Reply(text="ok"))
    response = client.responses.create(model="plain", input=[
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": [{"type": "input_text", "text": "And?"}]}])
    items = client.responses.input_items.list(response.id, order="asc").data
    assert [(i.role, i.content[0].type, i.content[0].text) for i in items] == [  # type: ignore[union-attr]
        ("user", "input_text", "Hi"), ("assistant", "output_text", "Hello!"), ("user", "input_text", "And?")]
    raw = client.get(f"/responses/{response.id}/input_items", cast_to=object, options={"params": {"order": "asc"}})
    assert raw["data"][1]["content"] == [{"type": "output_text", "text": "Hello!", "annotations": []}]
    assert raw["data"][1]["status"] == "completed" and raw["data"][1]["type"] == "message"


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
def test_hosted_tools_a_target_cannot_run_are_dropped_with_a_warning(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                     tool: str) -> None:
    """Never a 400 for a tool a client always sends: a Chat Completions target runs none
    (tests/e2e/test_responses_tools.py has the mapped ones and the route option that refuses instead)."""
    fakes["primary"].queue(Reply(text="Without it."))
    response = gateway.post("/v1/responses", {"model": "plain", "input": "hi", "tools": [
        {"type": "function", "name": "f"}, {"type": tool, "server_label": "x", "server_url": "http://x"}]})
    assert response.status_code == 200
    (warning,) = response.json()["gateway"]["warnings"]
    assert warning["tools"] == [tool] and warning["target"] == "primary:up-model"
    assert [t["function"]["name"] for t in fakes["primary"].requests[-1].body["tools"]] == ["f"]


def test_conversation_is_refused(gateway: Gateway) -> None:
    response = gateway.post("/v1/responses", {"model": "plain", "input": "hi", "conversation": "conv_1"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "conversation"


def test_whole_conversation_resend_resumes_then_replays_mcp_calls(gateway: Gateway,
                                                                   fakes: dict[str, FakeUpstream]) -> None:
    """The ``store: false`` / Agents SDK style: every output item comes back as input, no previous_response_id."""
    client = gateway.client()
    user = {"role": "user", "content": "Weather, then record 42"}
    fakes["primary"].queue(Reply(text="Checking.", tool_calls=[("get_weather", {"city": "Oslo"})]),
                           Reply(tool_calls=[("lookup", {"q": "42"})]))
    first = client.responses.create(model="agent", input=[user], tools=LOOKUP, store=False)
    assert kinds(first) == ["message", "mcp_call", "function_call"]
    with pytest.raises(openai.BadRequestError):  # store: false keeps no response record
        client.responses.create(model="agent", input="x", previous_response_id=first.id)
    history = [user, *[item.model_dump(exclude_none=True) for item in first.output]]
    call = first.output[-1]

    fakes["primary"].queue(Reply(text="Oslo is mild; record 42 exists."))
    second = client.responses.create(model="agent", tools=LOOKUP, store=False, input=[
        *history, {"type": "function_call_output", "call_id": call.call_id, "output": "exists"}])
    assert second.output_text == "Oslo is mild; record 42 exists."
    assert second.model_extra["gateway"]["status"] == "completed"
    resumed = fakes["primary"].requests[-1].body["messages"]
    assert resumed[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "exists"}
    sent_so_far = len(fakes["primary"].requests)
    with pytest.raises(openai.ConflictError):  # the same resend again (its answer lost): refused, not stateless
        client.responses.create(model="agent", tools=LOOKUP, store=False, input=[
            *history, {"type": "function_call_output", "call_id": call.call_id, "output": "exists"}])
    assert len(fakes["primary"].requests) == sent_so_far

    fakes["primary"].queue(Reply(text="You are welcome."))
    history = [*history, {"type": "function_call_output", "call_id": call.call_id, "output": "exists"},
               *[item.model_dump(exclude_none=True) for item in second.output], {"role": "user", "content": "Thanks"}]
    third = client.responses.create(model="agent", tools=LOOKUP, store=False, input=history)
    assert third.output_text == "You are welcome."
    sent = fakes["primary"].requests[-1].body["messages"]
    # Items carry no turn boundaries: the server call and the client call come back as one turn.
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert sent[1]["content"] == "Checking."
    assert [c["function"]["name"] for c in sent[1]["tool_calls"]] == ["get_weather", "lookup"]
    assert sent[2]["content"] == "Oslo: 18C, sunny"  # the mcp_call item's recorded output
    assert sent[3]["content"] == "exists" and sent[4]["content"] == "Oslo is mild; record 42 exists."


def test_resend_of_an_approval_resumes_the_paused_loop(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                       tool_server: ToolServer) -> None:
    tool_server.calls.clear()
    client = gateway.client()
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "9"})]))
    first = client.responses.create(model="agent", input="Delete 9", store=False)
    fakes["primary"].queue(Reply(text="Deleted 9."))
    history = ["Delete 9", *[i.model_dump(exclude_none=True) for i in first.output]]
    items = [{"role": "user", "content": history[0]}, *history[1:],
             {"type": "mcp_approval_response", "approval_request_id": first.output[0].id, "approve": True}]
    second = client.responses.create(model="agent", input=items, store=False)
    assert kinds(second) == ["mcp_call", "message"] and len(tool_server.calls) == 1
    with pytest.raises(openai.ConflictError, match="already answered"):  # a repeated resume: the contract's 409
        client.responses.create(model="agent", input=items, store=False)
    assert len(tool_server.calls) == 1


def test_gemini_signature_survives_previous_response_id(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fake = fakes["gemini"]
    fake.queue(Reply(reasoning="Look it up.", tool_calls=[("lookup", {"q": "Paris"})]))
    client = gateway.client()
    first = client.responses.create(model="gemini/gemini-3-pro-preview", input="Paris?", tools=LOOKUP)
    call = first.output[-1]
    assert call.type == "function_call"
    fake.queue(Reply(text="Sunny in Paris."))
    second = client.responses.create(model="gemini/gemini-3-pro-preview", previous_response_id=first.id, tools=LOOKUP,
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "sunny"}])
    assert second.output_text == "Sunny in Paris."
    model_turn = [c for c in fake.requests[-1].body["contents"] if c["role"] == "model"][-1]
    assert next(p for p in model_turn["parts"] if "functionCall" in p)["thoughtSignature"] == "gsig-1"


def test_gemini_signature_survives_a_chain_after_server_tools(gateway: Gateway,
                                                              fakes: dict[str, FakeUpstream]) -> None:
    fake = fakes["gemini"]
    fake.queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(text="Sunny."), Reply(text="Mild."))
    client = gateway.client()
    first = client.responses.create(model="solo_gemini", input="Paris?")
    assert kinds(first) == ["mcp_call", "message"]
    second = client.responses.create(model="solo_gemini", previous_response_id=first.id, input="And tomorrow?")
    assert second.output_text == "Mild."
    model_turn = next(c for c in fake.requests[-1].body["contents"] if c["role"] == "model")
    assert next(p for p in model_turn["parts"] if "functionCall" in p)["thoughtSignature"] == "gsig-1"


def test_claude_thinking_survives_previous_response_id(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fake = fakes["claude"]
    fake.queue(Reply(reasoning="I will look it up.", tool_calls=[("lookup", {"q": "Paris"})]))
    client = gateway.client()
    options: dict[str, Any] = {"reasoning": {"effort": "high"}, "max_output_tokens": 20000, "tools": LOOKUP}
    first = create(gateway, True, model="claude/claude-sonnet-4-5", input="Paris?", **options)
    assert kinds(first) == ["reasoning", "function_call"]
    assert first.output[0].summary[0].text == "I will look it up."
    assert "response.reasoning_summary_text.delta" in first.__dict__["_events"]
    call = first.output[-1]
    fake.queue(Reply(text="Sunny in Paris."))
    second = client.responses.create(model="claude/claude-sonnet-4-5", previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}], **options)
    assert second.output_text == "Sunny in Paris."
    body = fake.requests[-1].body
    assert body.get("thinking"), "thinking stays on because the blocks came back"
    assistant = [m for m in body["messages"] if m["role"] == "assistant"][-1]
    assert assistant["content"][0]["type"] == "thinking" and assistant["content"][0]["signature"] == "sig-1"


def test_upstream_failure_mid_stream_is_a_clean_response_failed(gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Partial answer that breaks", fault="cut"))
    with gateway.client().responses.stream(model="plain", input="Tell me") as stream:
        events = list(stream)
    types = [e.type for e in events]
    assert types[-1] == "response.failed" and "response.completed" not in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and "Partial answer that breaks".startswith(deltas)
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.message
    assert failed.output[0].status == "incomplete"
    stored = gateway.client().responses.retrieve(failed.id)
    assert stored.status == "failed"


def test_failure_before_output_is_an_http_error(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=400, error_body={"error": {"message": "bad thing", "type": "invalid"}}))
    with pytest.raises(openai.BadRequestError), gateway.client().responses.stream(model="plain", input="x") as stream:
        list(stream)


def test_unknown_model_and_bad_input_are_400s(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError):
        gateway.client().responses.create(model="nope", input="hi")
    bad = gateway.post("/v1/responses", {"model": "plain", "input": [{"type": "item_reference", "id": "x"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input[0].type"
    orphan = gateway.post("/v1/responses", {"model": "plain", "input": [
        {"type": "function_call_output", "call_id": "call_zz", "output": "x"}]})
    assert orphan.status_code == 400 and orphan.json()["error"]["param"] == "input[0]"
    background = gateway.post("/v1/responses", {"model": "plain", "input": "hi", "background": True, "store": False})
    assert background.status_code == 400 and background.json()["error"]["param"] == "background"


def test_iteration_cap_still_ends_in_a_final_answer(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply(text="It is 3."))
    response = gateway.client().responses.create(model="agent", input="1+2?",
                                                 extra_body={"gateway": {"max_tool_iterations": 1}})
    assert response.status == "completed" and response.output_text == "It is 3."
    assert response.model_extra["gateway"]["iteration_limit_reached"] is True
    assert fakes["primary"].requests[-1].body["tool_choice"] == "none"


def test_deleting_a_paused_response_cancels_its_pending_calls(gateway: Gateway,
                                                             fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
    paused = client.responses.create(model="agent", input="look", tools=LOOKUP)
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    client.responses.delete(paused.id)
    with pytest.raises(openai.BadRequestError) as gone:
        client.responses.create(model="agent", previous_response_id=paused.id, tools=LOOKUP, input=[
            {"type": "function_call_output", "call_id": paused.output[-1].call_id, "output": "x"}])
    assert gone.value.code == "previous_response_not_found"
    assert gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": []}).status_code == 404


def test_answering_a_paused_response_with_anything_else_is_400(gateway: Gateway,
                                                               fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
    paused = client.responses.create(model="agent", input="look", tools=LOOKUP)
    with pytest.raises(openai.BadRequestError) as wrong:
        client.responses.create(model="agent", previous_response_id=paused.id, tools=LOOKUP, input="never mind")
    assert wrong.value.param == "input[0]"
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model="agent", previous_response_id=paused.id, tools=LOOKUP, input=[])
    assert missing.value.param == "input"
    fakes["primary"].queue(Reply(text="Found."))
    done = client.responses.create(model="agent", previous_response_id=paused.id, tools=LOOKUP, input=[
        {"type": "function_call_output", "call_id": paused.output[-1].call_id, "output": "x"}])
    assert done.output_text == "Found."  # the refused answers left it pending


def test_answering_with_new_instructions_replaces_the_old_ones(gateway: Gateway,
                                                               fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]), Reply(text="Done."), Reply(text="Bye."))
    paused = client.responses.create(model="agent", input="look", tools=LOOKUP, instructions="Old.")
    assert fakes["primary"].requests[0].body["messages"][0] == {"role": "system", "content": "Old."}
    done = client.responses.create(model="agent", previous_response_id=paused.id, tools=LOOKUP, instructions="New.",
                                   input=[{"type": "function_call_output", "call_id": paused.output[-1].call_id,
                                           "output": "x"}])
    sent = fakes["primary"].requests[1].body["messages"]
    assert sent[0] == {"role": "system", "content": "New."} and not any(m["content"] == "Old." for m in sent)
    client.responses.create(model="agent", previous_response_id=done.id, tools=LOOKUP, input="bye")
    last = fakes["primary"].requests[2].body["messages"]
    assert last[0] == {"role": "user", "content": "look"}  # no instructions given: none carried over
    assert not any(m["role"] == "system" for m in last)


def test_the_raw_stream_names_every_event_and_numbers_it(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Checking.", tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(text="Sunny in Paris."))
    events = []
    with httpx.stream("POST", f"{gateway.url}/v1/responses", timeout=20, headers={"authorization": "Bearer test-key"},
                      json={"model": "agent", "input": "Weather?", "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for block in response.read().decode().split("\n\n"):
            if block:
                name, data = block.split("\n")
                event = orjson.loads(data.removeprefix("data: "))
                assert name == f"event: {event['type']}"
                events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-1] == "response.completed" and types.count("response.completed") == 1
    assert types.index("response.content_part.added") < types.index("response.output_text.delta")
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == events[-1]["response"]["output"]  # the stream and the final object agree
    assert [i["type"] for i in done] == ["message", "mcp_call", "message"]


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/responses"), ("GET", "/v1/responses/resp_x"),
                                              ("DELETE", "/v1/responses/resp_x"),
                                              ("GET", "/v1/responses/resp_x/input_items")])
def test_every_endpoint_needs_a_key(gateway: Gateway, method: str, path: str) -> None:
    response = httpx.request(method, f"{gateway.url}{path}", json={"model": "plain", "input": "hi"}, timeout=10)
    assert response.status_code == 401 and response.json()["error"]["type"]


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("provider", list(PROVIDER_MODELS))
class TestWireFormats:
    """Each wire format (OpenAI-compatible, Anthropic, Gemini) behind the Responses renderer, both modes."""

    def test_text_with_reasoning(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str,
                                 stream: bool) -> None:
        fakes[provider].queue(Reply(reasoning="Both are in Europe.", text="Sunny in both.", usage=(11, 6)))
        response = create(gateway, stream, model=f"{provider}/{PROVIDER_MODELS[provider]}",
                          input="Weather in Paris and Rome?", max_output_tokens=200)
        assert response.status == "completed" and response.output_text == "Sunny in both."
        assert kinds(response) == ["reasoning", "message"]
        assert response.output[0].summary[0].text == "Both are in Europe."
        assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 6)
        assert response.model_extra["gateway"]["answered_by"] == [f"{provider}:{PROVIDER_MODELS[provider]}"]

    def test_server_tools_then_a_client_call_then_its_answer(self, gateway: Gateway,
                                                             fakes: dict[str, FakeUpstream], provider: str,
                                                             stream: bool) -> None:
        fakes[provider].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("add", {"a": 2, "b": 3})]),
                              Reply(text="Checking the record.", tool_calls=[("lookup", {"q": "42"})]))
        first = create(gateway, stream, model=f"solo_{provider}", input="Weather, a sum, then record 42",
                       tools=LOOKUP)
        assert kinds(first) == ["mcp_call", "mcp_call", "message", "function_call"]
        assert [item.status for item in first.output if item.type == "mcp_call"] == ["completed", "completed"]
        assert first.model_extra["gateway"]["status"] == "paused"
        call = first.output[-1]
        fakes[provider].queue(Reply(text="Record 42 is archived."))
        second = create(gateway, stream, model=f"solo_{provider}", previous_response_id=first.id, tools=LOOKUP,
                        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "archived"}])
        assert second.status == "completed" and second.output_text == "Record 42 is archived."
        assert len(fakes[provider].requests) == 3  # the strict fakes accepted every transcript sent


@pytest.mark.parametrize("fault", [None, "cut"], ids=["completed", "failed"])
def test_a_long_answer_streams_whole_through_the_sdk(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                     fault: str | None) -> None:
    """Past 256 Ki characters the events carrying the whole text are written in slices (responses/spliced.py):
    the SDK reads the same events, escapes and multi-byte characters across slice boundaries included."""
    text = ('A "long" answer \\ with\nlines,\ttabs, é, \u2028 and 🙂. ' * 16_000)[:700_001]
    fakes["primary"].queue(Reply(text=text, fault=fault, pieces=10, cut_after=5))  # a failure after 350 Ki
    with gateway.client().responses.stream(model="plain", input="Tell me everything") as stream:
        events = list(stream)
    by_type = {event.type: event for event in events}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    sent = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert by_type["response.output_text.done"].text == sent
    assert by_type["response.content_part.done"].part.text == sent
    assert by_type["response.output_item.done"].item.content[0].text == sent
    final = events[-1].response
    assert final.output[0].content[0].text == sent
    if fault is None:
        assert events[-1].type == "response.completed" and sent == text
    else:
        assert events[-1].type == "response.failed" and text.startswith(sent) and len(sent) > 300_000
        assert by_type["response.output_item.done"].item.status == "incomplete"
    assert gateway.client().responses.retrieve(final.id).output[0].content[0].text == sent
