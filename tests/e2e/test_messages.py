"""``/v1/messages`` end to end: the official Anthropic SDK against a real gateway and fake providers of every format.

Every request a fake receives is checked against its provider's rules (conftest), so each test
also proves the Messages surface never sent an invalid request to any of them.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway
from tests.fakes.upstream import FakeUpstream, Reply, count_of
from tests.lazy import lazy_import

anthropic = lazy_import("anthropic")  # imported by the worker that runs these tests (tests/lazy.py)

PROVIDERS = ["primary", "claude", "gemini"]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
BASH = {"name": "run_bash", "description": "Run a shell command on the user's machine",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


def client(gateway: Gateway, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("api_key", KEY)
    return anthropic.Anthropic(base_url=gateway.url, max_retries=0, timeout=20, **kwargs)


GATEWAY_OBJECTS: dict[str, dict[str, Any]] = {}


def ask(gateway: Gateway, stream: bool, **kwargs: Any) -> anthropic.types.Message:
    """One request in either mode; a stream's ``gateway`` object (on ``message_delta``) is kept for ``gateway_of``."""
    kwargs.setdefault("max_tokens", 1024)
    kwargs.setdefault("messages", ASK)
    sdk = client(gateway)
    if not stream:
        return sdk.messages.create(**kwargs)
    with sdk.messages.stream(**kwargs) as events:
        for event in events:
            if event.type == "message_delta":
                GATEWAY_OBJECTS[events.current_message_snapshot.id] = dict((event.model_extra or {})["gateway"])
        return events.get_final_message()


def gateway_of(message: anthropic.types.Message) -> dict[str, Any]:
    extra = message.model_extra or {}
    if message.id in GATEWAY_OBJECTS:
        return GATEWAY_OBJECTS[message.id]
    assert "gateway" in extra, "the message carries the gateway object"
    return dict(extra["gateway"])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_server_tool_loop_on_every_target_format(gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str,
                                                 stream: bool) -> None:
    fakes[provider].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})], usage=(10, 3)),
                          Reply(text="It is 18C and sunny in Paris.", usage=(20, 8)))
    message = ask(gateway, stream, model=f"solo_{provider}")
    assert [block.type for block in message.content] == ["text"], "a server tool never reaches the caller"
    assert message.content[0].text == "It is 18C and sunny in Paris."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 11
    extension = gateway_of(message)
    assert extension["status"] == "completed" and extension["route"] == f"solo_{provider}"
    assert [(c["name"], c["status"]) for c in extension["tool_calls"]] == [("get_weather", "ok")]
    assert len(fakes[provider].requests) == 2


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_caller_tool_pauses_and_the_tool_result_resumes_the_stored_loop(
        gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, stream: bool) -> None:
    """A turn mixing a server tool and the caller's: the caller sees only its own call; its result resumes
    the loop from the stored transcript, which holds the server tool's exchange the caller never saw."""
    fake = fakes[provider]
    fake.queue(Reply(text="Checking.", tool_calls=[("get_weather", {"city": "Paris"}),
                                                   ("run_bash", {"command": "ls /tmp"})]),
               Reply(text="Paris is sunny and /tmp holds notes.txt."))
    first = ask(gateway, stream, model=f"solo_{provider}", tools=[BASH])
    assert first.stop_reason == "tool_use"
    uses = [block for block in first.content if block.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("run_bash", {"command": "ls /tmp"})]  # type: ignore[union-attr]
    assert gateway_of(first)["status"] == "paused"
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": uses[0].id, "content": "notes.txt", "is_error": False},
                   {"type": "text", "text": "<system-reminder>be brief</system-reminder>"}]}]
    final = ask(gateway, stream, model=f"solo_{provider}", tools=[BASH], messages=history)
    assert final.stop_reason == "end_turn"
    assert "".join(b.text for b in final.content if b.type == "text").endswith(  # type: ignore[union-attr]
        "Paris is sunny and /tmp holds notes.txt.")
    resumed = fake.requests[-1].body
    sent = orjson.dumps(resumed).decode()
    assert "Paris: 18C, sunny" in sent, "the stored server-tool result went with the resume"
    assert "notes.txt" in sent and sent.index("notes.txt") < sent.index("be brief"), "the text after the results"
    assert len(fake.requests) == 2


def test_the_same_tool_result_sent_again_after_the_resume_is_a_409_in_anthropic_shape(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """A client retrying a follow-up whose answer it lost is refused, never answered without the hidden exchange."""
    fake = fakes["claude"]
    fake.queue(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("run_bash", {"command": "ls"})]),
               Reply(text="Sunny; notes.txt."))
    first = ask(gateway, False, model="solo_claude", tools=[BASH])
    use = next(block for block in first.content if block.type == "tool_use")
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "notes.txt"}]}]
    assert ask(gateway, False, model="solo_claude", tools=[BASH], messages=history).stop_reason == "end_turn"
    sent = len(fake.requests)
    response = httpx.post(f"{gateway.url}/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                          json={"model": "solo_claude", "max_tokens": 64, "tools": [BASH], "messages": history})
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["type"] == "error" and "resumed already" in body["error"]["message"]
    assert len(fake.requests) == sent


def test_anthropic_target_gets_the_tool_result_block_verbatim(gateway: Gateway,
                                                              fakes: dict[str, FakeUpstream]) -> None:
    fake = fakes["claude"]
    fake.queue(Reply(tool_calls=[("run_bash", {"command": "false"})]), Reply(text="It failed."))
    first = ask(gateway, False, model="solo_claude", tools=[BASH])
    call = next(b for b in first.content if b.type == "tool_use")
    failed = {"type": "tool_result", "tool_use_id": call.id, "is_error": True,  # type: ignore[union-attr]
              "content": [{"type": "text", "text": "exit status 1"}]}
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": [failed]}]
    ask(gateway, False, model="solo_claude", tools=[BASH], messages=history)
    last_user = fake.requests[-1].body["messages"][-1]
    assert last_user["content"] == [failed]


def test_reasoning_of_another_format_comes_back_as_a_signed_thinking_block(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(reasoning="Paris is in France.", text="Sunny."))
    message = ask(gateway, False, model="solo_primary")
    thinking = message.content[0]
    assert thinking.type == "thinking" and thinking.thinking == "Paris is in France."
    assert thinking.signature.startswith("loopgate.v1.")
    # Sent back to an Anthropic model, the gateway's block never reaches Anthropic (it would reject it).
    fakes["claude"].queue(Reply(text="Still sunny."))
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
               {"role": "user", "content": "And tomorrow?"}]
    ask(gateway, False, model="solo_claude", messages=history)
    assistant = fakes["claude"].requests[-1].body["messages"][1]
    assert [block["type"] for block in assistant["content"]] == ["text"]


def test_streamed_thinking_and_text_blocks_follow_anthropics_event_order(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(reasoning="Let me think about Paris.", text="Sunny."))
    sdk = client(gateway)
    with sdk.messages.stream(model="solo_claude", max_tokens=2048, messages=ASK,
                             thinking={"type": "enabled", "budget_tokens": 1024}) as events:
        kinds = [event.type for event in events]
        message = events.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].signature.startswith("sig-")  # type: ignore[union-attr]  # Anthropic's own
    assert message.content[0].thinking == "Let me think about Paris."  # type: ignore[union-attr]


def test_errors_are_anthropic_errors(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    with pytest.raises(anthropic.AuthenticationError) as unauthorised:
        client(gateway, api_key="wrong").messages.create(model="solo_primary", max_tokens=10, messages=ASK)
    assert unauthorised.value.body["type"] == "error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client(gateway).messages.create(model="no-such-route", max_tokens=10, messages=ASK)
    missing = httpx.post(f"{gateway.url}/v1/messages", headers={"x-api-key": KEY},
                         json={"model": "solo_primary", "messages": ASK})  # the SDK would refuse to send it
    assert missing.status_code == 400 and missing.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in missing.json()["error"]["message"] and missing.headers["request-id"]
    with pytest.raises(anthropic.BadRequestError) as clash:
        client(gateway).messages.create(model="solo_primary", max_tokens=10, messages=ASK, tools=[
            {**BASH, "name": "get_weather"}])
    assert "server tool" in str(clash.value)
    fakes["claude"].queue(Reply(status=529), Reply(status=529))
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client(gateway).messages.create(model="solo_claude", max_tokens=10, messages=ASK)
    assert overloaded.value.response.headers["request-id"] == overloaded.value.response.headers["x-request-id"]


def test_a_failure_after_the_first_byte_is_an_error_event(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="The weather in Paris is", fault="cut"))
    with pytest.raises(anthropic.APIStatusError), client(gateway).messages.stream(
            model="solo_primary", max_tokens=100, messages=ASK) as events:
        for _ in events:
            pass


def test_overloaded_anthropic_target_fails_over_to_an_openai_one(gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(status=529))
    fakes["primary"].queue(Reply(tool_calls=[("run_bash", {"command": "pwd"})]), Reply(text="You are in /work."))
    first = ask(gateway, True, model="chain_claude_primary", tools=[BASH])
    call = next(b for b in first.content if b.type == "tool_use")
    assert gateway_of(first)["answered_by"] == ["primary:gpt-x"]
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,  # type: ignore[union-attr]
                                             "content": "/work"}]}]
    fakes["claude"].queue(Reply(text="You are in /work."))
    final = ask(gateway, True, model="chain_claude_primary", tools=[BASH], messages=history)
    assert final.content[-1].text == "You are in /work."  # type: ignore[union-attr]


def test_count_tokens_exact_on_anthropic_and_estimated_elsewhere(gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    sdk = client(gateway)
    exact = sdk.messages.count_tokens(model="solo_claude", messages=ASK, system="Be brief.", tools=[BASH])
    sent = fakes["claude"].requests[-1]
    assert sent.path.endswith("/v1/messages/count_tokens") and exact.input_tokens == count_of(sent.body)
    assert [t["name"] for t in sent.body["tools"]] == ["run_bash", "get_weather", "add"], "server tools counted"
    assert "max_tokens" not in sent.body
    assert (exact.model_extra or {})["gateway"]["method"] == "exact"
    estimate = sdk.messages.count_tokens(model="solo_primary", messages=ASK, tools=[BASH])
    assert (estimate.model_extra or {})["gateway"]["method"] == "estimate"
    longer = sdk.messages.count_tokens(model="solo_primary", messages=[{"role": "user", "content": "word " * 500}])
    assert longer.input_tokens > estimate.input_tokens > 0


def test_approval_pause_is_decided_through_the_continuation_api(gateway: Gateway,
                                                                fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "7"})]), Reply(text="Record 7 deleted."))
    paused = ask(gateway, False, model="agent")
    extension = gateway_of(paused)
    assert extension["status"] == "paused" and extension["pending"][0]["reason"] == "approval"
    assert not [b for b in paused.content if b.type == "tool_use"], "an approval is the inbox's, not the caller's"
    decided = gateway.post(f"/v1/continuations/{extension['continuation_id']}",
                           {"decisions": [{"tool_call_id": extension["pending"][0]["tool_call_id"], "approve": True}]})
    assert decided.status_code == 200
    body = decided.json()
    assert body["type"] == "message" and body["content"][-1]["text"] == "Record 7 deleted."
    assert body["gateway"]["status"] == "completed"


def test_server_tools_shown_under_the_mcp_client_beta_and_accepted_back(gateway: Gateway,
                                                                        fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(text="Sunny."))
    sdk = client(gateway, default_headers={"anthropic-beta": "mcp-client-2025-11-20"})
    message = sdk.messages.create(model="solo_claude", max_tokens=100, messages=ASK)
    kinds = [b.type for b in message.content]
    assert kinds == ["mcp_tool_use", "mcp_tool_result", "text"]
    fakes["claude"].queue(Reply(text="Still sunny."))
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
               {"role": "user", "content": "thanks"}]
    sdk.messages.create(model="solo_claude", max_tokens=100, messages=history)
    assistant = fakes["claude"].requests[-1].body["messages"][1]
    assert [b["type"] for b in assistant["content"]] == ["text"], "the gateway's own report is not sent on"


def test_bearer_token_x_api_key_and_the_anthropic_model_list(gateway: Gateway) -> None:
    models = client(gateway, api_key=None, auth_token=KEY).models.list()
    assert "solo_claude" in [m.id for m in models.data]
    response = httpx.get(f"{gateway.url}/v1/models", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert response.status_code == 200 and response.json()["data"][0]["type"] == "model"
    twice = httpx.post(f"{gateway.url}/v1/messages?beta=true",
                       headers=[("x-api-key", KEY), ("x-api-key", "other"), ("anthropic-version", "2023-06-01")],
                       json={"model": "solo_primary", "max_tokens": 5, "messages": ASK})
    assert twice.status_code == 400 and "x-api-key" in twice.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_pause_turn_is_continued_in_the_gateway(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                             stream: bool) -> None:
    fakes["claude"].queue(Reply(text="Searching the web.", finish="pause_turn"), Reply(text="Found it."))
    message = ask(gateway, stream, model="solo_claude")
    assert message.stop_reason == "end_turn"
    assert message.content[-1].text == "Searching the web.\n\nFound it."  # type: ignore[union-attr]
    second = fakes["claude"].requests[1].body["messages"]
    assert second[-1]["role"] == "assistant" and "Searching the web." in orjson.dumps(second[-1]).decode()


@pytest.mark.parametrize("stream", [False, True])
def test_top_k_reaches_gemini_as_top_k_and_no_openai_format_target(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                   stream: bool) -> None:
    fakes["gemini"].queue(Reply(text="Sunny."))
    fakes["primary"].queue(Reply(text="Sunny."))
    answer = ask(gateway, stream, model="solo_gemini", extra_body={"top_k": 7, "temperature": 0.5})
    assert answer.stop_reason == "end_turn"
    config = fakes["gemini"].requests[-1].body["generationConfig"]
    assert (config["topK"], config["temperature"]) == (7, 0.5)
    assert ask(gateway, stream, model="solo_primary", extra_body={"top_k": 7}).stop_reason == "end_turn"
    assert "top_k" not in fakes["primary"].requests[-1].body, "OpenAI answers 400 to top_k: no counterpart there"


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_stop_sequence_is_reported_as_such(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                         stream: bool) -> None:
    fakes["claude"].queue(Reply(text="It is sunny", finish="stop_sequence", stop_sequence="###"))
    message = ask(gateway, stream, model="solo_claude", stop_sequences=["END", "###"])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "###")
    assert fakes["claude"].requests[-1].body["stop_sequences"] == ["END", "###"]
    fakes["claude"].queue(Reply(text="It is sunny."))
    message = ask(gateway, stream, model="solo_claude", stop_sequences=["###"])
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", ["primary", "gemini"])
def test_a_stop_on_another_format_stays_end_turn(gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str,
                                                 stream: bool) -> None:
    """OpenAI's finish_reason ``stop`` and Gemini's ``STOP`` do not say which sequence matched, nor whether one did
    (the sequence is not in the text): ``end_turn``, never a guessed ``stop_sequence``."""
    fakes[provider].queue(Reply(text="It is sunny"))
    message = ask(gateway, stream, model=f"solo_{provider}", stop_sequences=["###"])
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
# Routes without server tools: the caller's typed tool is the request's only tool.
BARE = {"primary": "plain", "gemini": "gemini/gemini-3-pro-preview", "claude": "claude/claude-sonnet-4-5"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", ["primary", "gemini"])
def test_a_forced_choice_of_a_typed_tool_another_format_cannot_get_is_a_400_naming_tool_choice(
        gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, stream: bool) -> None:
    sent = len(fakes[provider].requests)
    for model in (BARE[provider], f"solo_{provider}"):  # the typed tool alone, and beside server tools
        with pytest.raises(anthropic.BadRequestError) as caught:
            ask(gateway, stream, model=model, tools=[WEB_SEARCH], tool_choice={"type": "tool", "name": "web_search"})
        error = caught.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error"
        assert "tool_choice" in error["message"] and "web_search" in error["message"]
    with pytest.raises(anthropic.BadRequestError) as caught:  # ``any`` with no tool left to call
        ask(gateway, stream, model=BARE[provider], tools=[WEB_SEARCH], tool_choice={"type": "any"})
    assert "tool_choice" in caught.value.body["error"]["message"]  # type: ignore[index]
    assert len(fakes[provider].requests) == sent, "nothing the target would misread was sent"
    for choice in ("auto", "none"):
        fakes[provider].queue(Reply(text="Sunny."))
        message = ask(gateway, stream, model=BARE[provider], tools=[WEB_SEARCH], tool_choice={"type": choice})
        assert message.stop_reason == "end_turn"
    fakes[provider].queue(Reply(text="Sunny."))  # ``any`` with a server tool left: that one may be called
    assert ask(gateway, stream, model=f"solo_{provider}", tools=[WEB_SEARCH],
               tool_choice={"type": "any"}).stop_reason == "end_turn"


def test_an_anthropic_target_gets_a_forced_choice_of_a_typed_tool(gateway: Gateway,
                                                                  fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(text="Searched."))
    ask(gateway, False, model=BARE["claude"], tools=[WEB_SEARCH], tool_choice={"type": "tool", "name": "web_search"})
    body = fakes["claude"].requests[-1].body
    assert body["tools"] == [WEB_SEARCH] and body["tool_choice"] == {"type": "tool", "name": "web_search"}
