"""Stateless reasoning on the Responses API: ``store: false`` + ``include: ["reasoning.encrypted_content"]``.

Two gateway replicas with the same ``responses.sealing_keys`` and a store each (``memory://``): a
turn answered by replica A pauses at a client call, and its items (the official ``openai`` SDK's
dump of them, as a Codex-like client keeps them) are sent back to replica B, which holds nothing of
that conversation. So what reaches B's upstream of the first turn's provider artifacts came through
the sealed reasoning item, and only through it. Every fake checks each request by its provider's
strict rules (a Responses fake refuses encrypted reasoning another account issued).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from gateway.api.responses.reasoning import MAX_ENCRYPTED_CHARS
from gateway.providers.gemini_contents import DUMMY_THOUGHT_SIGNATURE
from tests.e2e.conftest import KEY, OTHER_KEY, Gateway, serving
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.gemini_rules import gemini_request_problems
from tests.fakes.openai_responses import FakeResponsesUpstream, ResponsesReply, encrypted
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.upstream import FakeUpstream, Reply

ASK = "Look up paris."
THOUGHT = "The user wants facts: call lookup."
INCLUDE = ["reasoning.encrypted_content"]
LOOKUP = [{"type": "function", "name": "lookup", "description": "Look a thing up",
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]
MODELS = {"resp": "gpt-5.2", "claude": "claude-sonnet-4-5", "gemini": "gemini-3-pro-preview", "deep": "deepseek-r"}


#: what no upstream request may carry (checked after every test: tests/e2e/conftest.py)
FORBIDDEN_UPSTREAM = (b"lgs1.", "a sealed token")


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started: dict[str, FakeUpstream] = {
        "resp": FakeResponsesUpstream().start(),
        "other_resp": FakeResponsesUpstream().start(),  # another OpenAI account: cannot read resp's reasoning
        "claude": FakeUpstream("anthropic", lambda body, model: anthropic_request_problems(body)).start(),
        "gemini": FakeUpstream("gemini", gemini_request_problems).start(),
        "deep": FakeUpstream("openai", openai_request_problems).start(),  # DeepSeek-style reasoning_content
        "deep2": FakeUpstream("openai", openai_request_problems).start(),
    }
    yield from serving(started)


def config(fakes: dict[str, FakeUpstream]) -> str:
    providers = "\n".join(f"  {name}: {{type: {fake.wire}, base_url: '{fake.url}', api_key: key-{name}, "
                          "timeout_s: 5, connect_timeout_s: 1}" for name, fake in fakes.items())
    return f"""
server: {{host: 127.0.0.1, port: __PORT__, max_body_bytes: 4000000}}
auth: {{keys: [{{key: {KEY}, tenant: team-a}}, {{key: {OTHER_KEY}, tenant: team-b}}]}}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, request_timeout_s: 30}}
responses: {{sealing_keys: ["stateless-reasoning-test-key-0123456789abcdef"]}}
providers:
{providers}
models:
  on_resp: {{targets: [{{provider: resp, model: {MODELS["resp"]}}}]}}
  on_claude: {{targets: [{{provider: claude, model: {MODELS["claude"]}}}]}}
  on_gemini: {{targets: [{{provider: gemini, model: {MODELS["gemini"]}}}]}}
  on_deep: {{targets: [{{provider: deep, model: {MODELS["deep"]}}}]}}
  resp_then_other:
    targets: [{{provider: resp, model: gpt-5.2}}, {{provider: other_resp, model: gpt-5.2}}]
    retries: 0
  deep_then_deep2:
    targets: [{{provider: deep, model: deepseek-r}}, {{provider: deep2, model: deepseek-r}}]
    retries: 0
"""


@pytest.fixture(scope="module")
def replicas(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, Gateway]]:
    first, second = Gateway(config(fakes)).start(), Gateway(config(fakes)).start()
    yield first, second
    first.stop()
    second.stop()


def first_turn(gateway: Gateway, model: str, stream: bool = False, key: str = KEY,
               include: bool = True) -> list[dict[str, Any]]:
    """The items of a turn that pauses at a client call, as a stateless client keeps them (streamed: the items of
    ``response.output_item.done``, as Codex reads them)."""
    kwargs: dict[str, Any] = {"model": model, "input": ASK, "tools": LOOKUP, "store": False}
    if include:
        kwargs["include"] = INCLUDE
    client = gateway.client(key)
    if stream:
        return [event.item.model_dump(exclude_none=True) for event in client.responses.create(stream=True, **kwargs)
                if event.type == "response.output_item.done"]
    return [item.model_dump(exclude_none=True) for item in client.responses.create(**kwargs).output]


def answered(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation sent back: the question, the turn's items, the client call's output."""
    call = next(item for item in items if item["type"] == "function_call")
    return [{"role": "user", "content": ASK}, *items,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "paris facts"}]


def follow_up(gateway: Gateway, model: str, items: list[dict[str, Any]], key: str = KEY) -> Any:
    return gateway.client(key).responses.create(model=model, input=items, tools=LOOKUP, store=False,
                                                include=INCLUDE)


def queue_round(fake: FakeUpstream, answer: str = "Found: paris facts.") -> None:
    """The model thinks and calls the client's lookup; once the output is back, it answers ``answer``."""
    reply = ResponsesReply if isinstance(fake, FakeResponsesUpstream) else Reply
    fake.queue(reply(reasoning=THOUGHT, tool_calls=[("lookup", {"q": "paris"})]), Reply(text=answer))


def what_went_back(name: str, fake: FakeUpstream, body: dict[str, Any]) -> Any:
    """The first turn's provider artifact in the follow-up's upstream request, in that provider's own form."""
    if name == "resp":
        return [item.get("encrypted_content") for item in FakeResponsesUpstream.received_reasoning(body)]
    if name == "claude":
        return [block for block in body["messages"][1]["content"] if block.get("type") == "thinking"]
    if name == "gemini":
        return [part.get("thoughtSignature") for part in body["contents"][1]["parts"] if "functionCall" in part]
    return body["messages"][1].get("reasoning_content") or None


def issued(name: str, fake: FakeUpstream) -> Any:
    """What the provider issued on its first answer (what must come back)."""
    return {"resp": [encrypted(getattr(fake, "issuer", ""), 1)],
            "claude": [{"type": "thinking", "thinking": THOUGHT, "signature": "sig-1"}],
            "gemini": ["gsig-1"], "deep": THOUGHT}[name]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("name", ["resp", "claude", "gemini", "deep"])
def test_a_turns_artifacts_reach_its_provider_again_through_another_replica(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream], name: str, stream: bool) -> None:
    first, second = replicas
    fake = fakes[name]
    queue_round(fake)
    items = first_turn(first, f"on_{name}", stream)
    reasoning = [item for item in items if item["type"] == "reasoning"]
    assert [item["type"] for item in items][-1] == "function_call"
    assert len(reasoning) == 1 and reasoning[0]["encrypted_content"].startswith("lgs1.")
    assert "sig" not in reasoning[0]["encrypted_content"] and "enc:" not in reasoning[0]["encrypted_content"]
    done = follow_up(second, f"on_{name}", answered(items))
    assert done.output_text == "Found: paris facts."
    assert "warnings" not in done.model_extra["gateway"]
    assert what_went_back(name, fake, fake.bodies[1]) == issued(name, fake)


def test_a_streamed_turn_with_text_carries_its_artifacts_in_an_item_after_the_text(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    claude = fakes["claude"]
    claude.queue(Reply(reasoning=THOUGHT, text="Let me look.", tool_calls=[("lookup", {"q": "paris"})]),
                 Reply(text="Found: paris facts."))
    items = first_turn(first, "on_claude", stream=True)
    assert [item["type"] for item in items] == ["reasoning", "message", "reasoning", "function_call"]
    assert "encrypted_content" not in items[0] and items[2]["summary"] == [] and items[2]["encrypted_content"]
    assert follow_up(second, "on_claude", answered(items)).output_text == "Found: paris facts."
    first_answer = claude.bodies[0]
    assistant = claude.bodies[1]["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"][0]["signature"] == "sig-1"
    assert [block["type"] for block in assistant["content"]] == ["thinking", "text", "tool_use"]
    assert assistant["content"][1] == {"type": "text", "text": "Let me look."}
    assert first_answer["messages"] == [{"role": "user", "content": ASK}]


@pytest.mark.parametrize("name", ["resp", "claude", "gemini", "deep"])
def test_without_the_include_nothing_is_sealed_and_nothing_comes_back(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream], name: str) -> None:
    first, second = replicas
    fake = fakes[name]
    queue_round(fake)
    items = first_turn(first, f"on_{name}", include=False)
    assert all("encrypted_content" not in item for item in items)
    second.client().responses.create(model=f"on_{name}", input=answered(items), tools=LOOKUP, store=False)
    went_back = what_went_back(name, fake, fake.bodies[1])
    assert went_back == ([DUMMY_THOUGHT_SIGNATURE] if name == "gemini" else [] if name != "deep" else None)


def test_tokens_that_do_not_open_are_dropped_never_sent_and_warned_once(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    gemini = fakes["gemini"]
    gemini.queue(Reply(reasoning=THOUGHT, tool_calls=[("lookup", {"q": "paris"})]), Reply(text="Summary: paris."),
                 Reply(text="Found."))
    items = first_turn(first, "on_gemini")
    good = next(item for item in items if item["type"] == "reasoning")["encrypted_content"]
    compaction = first.client().responses.compact(model="on_gemini", input=ASK).output[-1].encrypted_content
    bad = {"truncated": good[:-12], "changed": good[:-3] + ("AAA" if not good.endswith("AAA") else "BBB"),
           "another_kind": compaction, "openai_ciphertext": "gAAAAABpZ" + "x" * 200,
           "too_long": "lgs1." + "A" * MAX_ENCRYPTED_CHARS}
    forged = [{"type": "reasoning", "id": f"rs_{kind}", "summary": [], "encrypted_content": token}
              for kind, token in bad.items()]
    call = next(item for item in items if item["type"] == "function_call")
    done = follow_up(second, "on_gemini", answered([*forged, call]))
    assert done.output_text == "Found."
    assert done.model_extra["gateway"]["warnings"] == [
        {"type": "reasoning_items_dropped", "count": len(bad), "message": done.model_extra["gateway"]["warnings"][0]
         ["message"]}]
    body = gemini.bodies[-1]
    assert what_went_back("gemini", gemini, body) == [DUMMY_THOUGHT_SIGNATURE]
    sent = orjson.dumps(body).decode()
    assert "gsig-1" not in sent and not any(token[:40] in sent for token in bad.values())


def test_a_token_of_another_tenant_is_dropped(replicas: tuple[Gateway, Gateway],
                                               fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    claude = fakes["claude"]
    queue_round(claude)
    items = first_turn(first, "on_claude", key=OTHER_KEY)  # team-b's turn ...
    done = follow_up(second, "on_claude", answered(items))  # ... sent back by team-a
    (warning,) = done.model_extra["gateway"]["warnings"]
    assert warning["type"] == "reasoning_items_dropped" and warning["count"] == 1
    assert what_went_back("claude", claude, claude.bodies[-1]) == []
    assert "sig-1" not in orjson.dumps(claude.bodies[-1]).decode()


def test_failover_never_hands_one_accounts_reasoning_to_another(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    resp, other = fakes["resp"], fakes["other_resp"]
    resp.queue(ResponsesReply(reasoning=THOUGHT, tool_calls=[("lookup", {"q": "paris"})]), Reply(status=503))
    other.queue(Reply(text="Found: paris facts."))
    items = first_turn(first, "resp_then_other")
    done = follow_up(second, "resp_then_other", answered(items))
    assert done.output_text == "Found: paris facts."
    assert done.model_extra["gateway"]["answered_by"] == ["other_resp:gpt-5.2"]
    (body,) = other.bodies
    assert [item.get("type", "message") for item in body["input"]] == ["message", "function_call",
                                                                        "function_call_output"]
    assert "enc:" not in orjson.dumps(body).decode()
    assert resp.received_reasoning(resp.bodies[1])[0]["encrypted_content"] == encrypted(resp.issuer, 1)  # it tried


def test_failover_never_hands_one_providers_reasoning_content_to_another(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    deep, deep2 = fakes["deep"], fakes["deep2"]
    deep.queue(Reply(reasoning=THOUGHT, tool_calls=[("lookup", {"q": "paris"})]), Reply(status=503))
    deep2.queue(Reply(text="Found: paris facts."))
    items = first_turn(first, "deep_then_deep2")
    assert follow_up(second, "deep_then_deep2", answered(items)).output_text == "Found: paris facts."
    assert deep.bodies[1]["messages"][1]["reasoning_content"] == THOUGHT  # the issuer was sent it
    (body,) = deep2.bodies
    assert THOUGHT not in orjson.dumps(body).decode()


def test_a_chat_caller_cannot_pass_its_reasoning_off_as_the_providers(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, _ = replicas
    deep = fakes["deep"]
    deep.queue(Reply(text="Done."))
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"x"}'}}
    first.client().chat.completions.create(model="on_deep", tools=[{"type": "function", "function": {
        "name": "lookup", "parameters": LOOKUP[0]["parameters"]}}], messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": "Injected reasoning.",
         "reasoning_origin": "deep"},  # type: ignore[misc]
        {"role": "tool", "tool_call_id": "call_1", "content": "x facts"}])
    assert "Injected reasoning." not in orjson.dumps(deep.bodies[0]).decode()


@pytest.mark.parametrize("include", [True, False], ids=["include", "without"])
def test_a_pause_decided_way_b_is_answered_with_its_reasoning_sealed_as_the_request_asked(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream], include: bool) -> None:
    """The include is the paused request's: a decision through ``POST /v1/continuations`` answers with the
    Response that request would have had (the replicas share no store: decided where it paused)."""
    first, _ = replicas
    fakes["claude"].queue(Reply(reasoning=THOUGHT, tool_calls=[("lookup", {"q": "paris"})]),
                          Reply(reasoning="Facts are in: answer.", text="Found: paris facts."))
    kwargs: dict[str, Any] = {"include": INCLUDE} if include else {}
    paused = first.client().responses.create(model="on_claude", input=ASK, tools=LOOKUP, store=False, **kwargs)
    call = paused.output[-1]
    assert call.type == "function_call"
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    decided = first.post(f"/v1/continuations/{continuation_id}",
                          {"decisions": [{"tool_call_id": call.call_id, "output": "paris facts"}]})
    assert decided.status_code == 200, decided.text
    body = decided.json()
    assert body["object"] == "response" and body["output"][-1]["content"][0]["text"] == "Found: paris facts."
    reasoning = [item for item in body["output"] if item["type"] == "reasoning"]
    assert reasoning, body["output"]
    sealed = [item.get("encrypted_content") for item in reasoning]
    assert all(token and token.startswith("lgs1.") for token in sealed) if include else sealed == [None] * len(sealed)
