"""An OpenAI Responses upstream (``type: openai_responses``) behind every surface, in the tool loop and in failover.

The fakes speak HTTP (tests/fakes/openai_responses.py for the Responses API, OpenAI's and Azure's),
and each checks every request it receives by its provider's strict rules: a Responses fake refuses
encrypted reasoning another account issued, a reasoning item without its following item, an
unanswered call; the chat and Anthropic fakes refuse any field of another format.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import KEY, TOOLS_YAML, Gateway, serving
from tests.e2e.test_providers import run
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.openai_responses import FakeResponsesUpstream, ResponsesReply, encrypted, input_count_of
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.upstream import FakeUpstream, Reply

WEATHER = "What is the weather in Paris? Use get_weather."
LOOKUP = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]


#: what no upstream request may carry (checked after every test: tests/e2e/conftest.py)
FORBIDDEN_UPSTREAM = (b"openai_output", "the canonical artifact")


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started: dict[str, FakeUpstream] = {
        "resp": FakeResponsesUpstream().start(),
        "other_resp": FakeResponsesUpstream().start(),  # another OpenAI account: cannot read resp's reasoning
        "azure": FakeResponsesUpstream().start(),
        "chat": FakeUpstream("openai", openai_request_problems).start(),
        "claude": FakeUpstream("anthropic", lambda body, model: anthropic_request_problems(body)).start(),
    }
    yield from serving(started)


def config(fakes: dict[str, FakeUpstream]) -> str:
    def provider(name: str, extra: str = "") -> str:
        return (f"  {name}: {{type: {fakes[name].wire}, base_url: '{fakes[name].url}', api_key: key-{name}, "
                f"timeout_s: 5, connect_timeout_s: 1{extra}}}")

    return f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: team-a}}]}}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, request_timeout_s: 30}}
providers:
{provider("resp")}
{provider("other_resp")}
{provider("azure", ", azure: true, api_version: preview")}
{provider("chat")}
{provider("claude")}
{TOOLS_YAML}
models:
  agent: {{targets: [{{provider: resp, model: gpt-5.2}}], tools: [get_weather, add]}}
  claude_then_resp:
    targets: [{{provider: claude, model: claude-sonnet-4-5}}, {{provider: resp, model: gpt-5.2}}]
    tools: [get_weather, add]
    retries: 0
  resp_then_chat:
    targets: [{{provider: resp, model: gpt-5.2}}, {{provider: chat, model: gpt-4.1}}]
    tools: [get_weather, add]
    retries: 0
  resp_then_other:
    targets: [{{provider: resp, model: gpt-5.2}}, {{provider: other_resp, model: gpt-5.2}}]
    tools: [get_weather, add]
    retries: 0
  on_azure: {{targets: [{{provider: azure, model: my-gpt5-deployment}}], tools: [get_weather]}}
"""


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    gw = Gateway(config(fakes)).start()
    yield gw
    gw.stop()


def tool_round(fake: FakeResponsesUpstream) -> None:
    """The model thinks and calls the server tool, then answers from its result."""
    fake.queue(ResponsesReply(reasoning="The user wants Paris weather; call get_weather.",
                              tool_calls=[("get_weather", {"city": "Paris"})]),
               Reply(text="It is 18C and sunny in Paris."))


def input_types(body: dict[str, Any]) -> list[str]:
    return [item.get("type", "message") for item in body["input"]]


def assert_reasoning_went_back(fake: FakeResponsesUpstream) -> None:
    """Iteration 2 carried iteration 1's reasoning, encrypted as the fake issued it, before the call it led to."""
    first, second = fake.bodies
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    assert first["tools"][0] == {"type": "function", "name": "get_weather", "description": "Current weather for a city",
                                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                "required": ["city"]}, "strict": False}
    assert input_types(second) == ["message", "reasoning", "function_call", "function_call_output"]
    assert [item["encrypted_content"] for item in fake.received_reasoning(second)] == [encrypted(fake.issuer, 1)]
    output = second["input"][3]
    assert output["call_id"] == second["input"][2]["call_id"] and output["output"] == "Paris: 18C, sunny"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_completions_tool_loop(gateway: Gateway, fakes: dict[str, Any], stream: bool) -> None:
    tool_round(fakes["resp"])
    seen = run(gateway, stream, model="agent", messages=[{"role": "user", "content": WEATHER}])
    assert seen["text"] == "It is 18C and sunny in Paris." and seen["finish"] == "stop"
    assert seen["gateway"]["iterations"] == 2 and seen["gateway"]["answered_by"] == ["resp:gpt-5.2"] * 2
    assert seen["gateway"]["tool_calls"][0]["name"] == "get_weather"
    assert seen["reasoning"] == "The user wants Paris weather; call get_weather."
    assert_reasoning_went_back(fakes["resp"])
    assert all(body.get("stream", False) is stream for body in fakes["resp"].bodies)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_responses_surface_tool_loop(gateway: Gateway, fakes: dict[str, Any], stream: bool) -> None:
    tool_round(fakes["resp"])
    client = gateway.client()
    if stream:
        events = list(client.responses.create(model="agent", input=WEATHER, stream=True))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].type == "response.completed"
    else:
        text = client.responses.create(model="agent", input=WEATHER).output_text
    assert text == "It is 18C and sunny in Paris."
    assert_reasoning_went_back(fakes["resp"])


def test_anthropic_529_fails_over_to_the_responses_target_keeping_the_transcript(
        gateway: Gateway, fakes: dict[str, Any]) -> None:
    claude, resp = fakes["claude"], fakes["resp"]
    claude.queue(Reply(reasoning="Use the tool.", tool_calls=[("get_weather", {"city": "Paris"})]), Reply(status=529))
    resp.queue(Reply(text="Paris: 18C and sunny."))
    seen = run(gateway, False, model="claude_then_resp", messages=[{"role": "user", "content": WEATHER}])
    assert seen["text"] == "Paris: 18C and sunny."
    assert seen["gateway"]["answered_by"] == ["claude:claude-sonnet-4-5", "resp:gpt-5.2"]
    (body,) = resp.bodies
    assert input_types(body) == ["message", "function_call", "function_call_output"]
    call_id = body["input"][1]["call_id"]
    assert call_id.startswith("toolu_") and body["input"][2] == {"type": "function_call_output", "call_id": call_id,
                                                                  "output": "Paris: 18C, sunny"}
    assert "sig-" not in orjson.dumps(body).decode(), "Anthropic's thinking signature reached OpenAI"


def test_responses_target_fails_over_to_chat_completions_keeping_the_transcript(
        gateway: Gateway, fakes: dict[str, Any]) -> None:
    resp, chat = fakes["resp"], fakes["chat"]
    resp.queue(ResponsesReply(reasoning="Call the tool.", tool_calls=[("get_weather", {"city": "Paris"})]),
               Reply(status=500))
    chat.queue(Reply(text="Sunny, 18C."))
    seen = run(gateway, True, model="resp_then_chat", messages=[{"role": "user", "content": WEATHER}])
    assert seen["text"] == "Sunny, 18C."
    assert seen["gateway"]["answered_by"] == ["resp:gpt-5.2", "chat:gpt-4.1"]
    (body,) = chat.bodies
    user, assistant, result = body["messages"]
    assert user == {"role": "user", "content": WEATHER}
    assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert result == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": "Paris: 18C, sunny"}
    assert set(assistant) == {"role", "content", "tool_calls"}, "no reasoning of another provider goes along"


def test_another_accounts_reasoning_is_dropped_never_sent(gateway: Gateway, fakes: dict[str, Any]) -> None:
    resp, other = fakes["resp"], fakes["other_resp"]
    resp.queue(ResponsesReply(reasoning="Call the tool.", tool_calls=[("get_weather", {"city": "Paris"})]),
               Reply(status=503))
    other.queue(Reply(text="Sunny."))
    assert run(gateway, False, model="resp_then_other", messages=[{"role": "user", "content": WEATHER}])["text"] \
        == "Sunny."
    (body,) = other.bodies
    assert input_types(body) == ["message", "function_call", "function_call_output"]  # its rules would refuse it


def test_a_paused_turns_reasoning_goes_back_after_the_client_answers(gateway: Gateway, fakes: dict[str, Any]) -> None:
    resp = fakes["resp"]
    resp.queue(ResponsesReply(reasoning="Ask the client's lookup.", tool_calls=[("lookup", {"q": "paris"})]),
               Reply(text="Found: paris facts."))
    client = gateway.client()
    messages: list[Any] = [{"role": "user", "content": "Look up paris."}]
    paused = client.chat.completions.create(model="agent", messages=messages, tools=LOOKUP)
    assert paused.choices[0].finish_reason == "tool_calls"
    call = paused.choices[0].message.tool_calls[0]
    messages += [paused.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "paris facts"}]
    done = client.chat.completions.create(model="agent", messages=messages, tools=LOOKUP)
    assert done.choices[0].message.content == "Found: paris facts."
    second = resp.bodies[1]
    assert input_types(second) == ["message", "reasoning", "function_call", "function_call_output"]
    assert resp.received_reasoning(second)[0]["encrypted_content"] == encrypted(resp.issuer, 1)


def test_azure_v1_url_key_header_and_deployment(gateway: Gateway, fakes: dict[str, Any]) -> None:
    azure = fakes["azure"]
    azure.queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Oslo: mild."))
    assert run(gateway, True, model="on_azure", messages=[{"role": "user", "content": "Oslo?"}])["text"] \
        == "Oslo: mild."
    assert [r.path for r in azure.requests] == ["/openai/v1/responses"] * 2
    assert azure.queries == ["api-version=preview"] * 2
    headers = azure.requests[0].headers
    assert headers["api-key"] == "key-azure" and "authorization" not in headers
    assert azure.bodies[0]["model"] == "my-gpt5-deployment"


def test_a_failed_stream_before_any_output_fails_over(gateway: Gateway, fakes: dict[str, Any]) -> None:
    resp, chat = fakes["resp"], fakes["chat"]
    resp.queue(ResponsesReply(failed="server_error"))
    chat.queue(Reply(text="From chat."))
    seen = run(gateway, True, model="resp_then_chat", messages=[{"role": "user", "content": "hi"}])
    assert seen["text"] == "From chat."
    assert [a["error_class"] for a in seen["gateway"]["attempts"]] == ["server_error", None]


def test_input_tokens_are_counted_exactly_by_the_responses_target(gateway: Gateway, fakes: dict[str, Any]) -> None:
    resp, azure = fakes["resp"], fakes["azure"]
    client = gateway.client()
    counted = client.responses.input_tokens.count(model="agent", input=WEATHER, instructions="Be brief.")
    (sent,) = resp.requests
    assert sent.path == "/responses/input_tokens" and sent.headers["authorization"] == "Bearer key-resp"
    assert counted.input_tokens == input_count_of(sent.body) and counted.model_extra["gateway"]["method"] == "exact"
    assert [tool["name"] for tool in sent.body["tools"]] == ["get_weather", "add"]  # the route's server tools count
    on_azure = client.responses.input_tokens.count(model="on_azure", input="Oslo?")
    assert azure.requests[0].path == "/openai/v1/responses/input_tokens" and azure.queries == ["api-version=preview"]
    assert on_azure.input_tokens == input_count_of(azure.requests[0].body)
    resp.queue(Reply(status=503))  # the target cannot count: the gateway's estimate answers
    estimated = client.responses.input_tokens.count(model="agent", input=WEATHER)
    assert estimated.model_extra["gateway"]["method"] == "estimate" and estimated.input_tokens > 0


def test_a_deployment_that_does_not_reason_is_learned_once(gateway: Gateway, fakes: dict[str, Any]) -> None:
    azure = fakes["azure"]
    azure.plain_models.add("my-gpt5-deployment")  # in truth a gpt-4o deployment: it refuses reasoning fields
    azure.queue(Reply(text="(refused)"), Reply(text="First."), Reply(text="Second."))  # a refused request takes one
    client = gateway.client()
    for expected in ("First.", "Second."):
        reply = client.chat.completions.create(model="on_azure", messages=[{"role": "user", "content": "Hi"}],
                                               reasoning_effort="low")
        assert reply.choices[0].message.content == expected
    refused, answered, later = azure.requests
    assert refused.problems and "include" in refused.body and "reasoning" in refused.body
    refused.problems = []  # the refusal this test asked for
    assert "include" not in answered.body and "reasoning" not in answered.body
    assert "include" not in later.body, "the refusal is remembered: one 400, not one per request"


def test_reasoning_another_key_cannot_read_is_dropped_and_the_call_sent_again(
        gateway: Gateway, fakes: dict[str, Any]) -> None:
    resp = fakes["resp"]
    resp.queue(ResponsesReply(reasoning="Ask the client.", tool_calls=[("lookup", {"q": "x"})]),
               Reply(text="(refused)"), Reply(text="Done."))  # a refused request takes a reply too
    client = gateway.client()
    messages: list[Any] = [{"role": "user", "content": "Look up x."}]
    paused = client.chat.completions.create(model="agent", messages=messages, tools=LOOKUP)
    call = paused.choices[0].message.tool_calls[0]
    resp.issuer = "rotated-key"  # the provider's key now belongs to another account: the stored items are unreadable
    messages += [paused.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "x facts"}]
    assert client.chat.completions.create(model="agent", messages=messages, tools=LOOKUP).choices[0].message.content \
        == "Done."
    _, refused, resent = resp.requests
    assert any("could not be verified" in problem for problem in refused.problems)
    refused.problems = []  # the refusal this test caused
    assert input_types(resent.body) == ["message", "function_call", "function_call_output"]
