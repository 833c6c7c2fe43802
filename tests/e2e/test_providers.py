"""OpenAI SDK clients against OpenAI-, Anthropic- and Gemini-format upstreams, and transcripts crossing them.

Every request a fake receives is validated by that provider's strict rules (conftest), so a
pairing, signature, thinking-block or id-format mistake fails the test that caused it.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import openai
import pytest

from tests.e2e.conftest import PROVIDER_MODELS, ROOT, Gateway, require_litellm
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "Weather in Paris and Rome?"}]
LOOKUP = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
PROVIDERS = list(PROVIDER_MODELS)


def direct(provider: str) -> str:
    return f"{provider}/{PROVIDER_MODELS[provider]}"


def run(gateway: Gateway, stream: bool, **kwargs: Any) -> dict[str, Any]:
    """One request in either mode, reduced to what a client observes."""
    client = gateway.client()
    if not stream:
        completion = client.chat.completions.create(**kwargs)
        message = completion.choices[0].message
        return {"text": message.content or "", "reasoning": (message.model_extra or {}).get("reasoning_content"),
                "calls": [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []],
                "finish": completion.choices[0].finish_reason, "gateway": completion.model_extra["gateway"],
                "usage": completion.usage.total_tokens}
    text, reasoning, finish, extension, usage = "", "", None, {}, None
    calls: dict[int, list[str]] = {}
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
        if chunk.usage:
            usage = chunk.usage.total_tokens
        if chunk.model_extra.get("gateway", {}).get("status"):
            extension = chunk.model_extra["gateway"]
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, ["", "", ""])
            entry[0] += call.id or ""
            entry[1] += call.function.name or ""
            entry[2] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return {"text": text, "reasoning": reasoning or None, "calls": [tuple(c) for c in calls.values()],
            "finish": finish, "gateway": extension, "usage": usage}


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
class TestMatrix:
    def test_text(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, stream: bool) -> None:
        fakes[provider].queue(Reply(text="Sunny in both.", usage=(11, 6)))
        seen = run(gateway, stream, model=direct(provider), messages=USER, max_tokens=100, temperature=0.5,
                   stop=["END"])
        assert (seen["text"], seen["finish"], seen["calls"], seen["usage"]) == ("Sunny in both.", "stop", [], 17)
        assert seen["gateway"]["answered_by"] == [f"{provider}:{PROVIDER_MODELS[provider]}"]

    def test_tool_call(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, stream: bool) -> None:
        fakes[provider].queue(Reply(tool_calls=[("lookup", {"q": "Paris"})]))
        seen = run(gateway, stream, model=direct(provider), messages=USER, tools=LOOKUP)
        assert seen["finish"] == "tool_calls"
        assert [(name, args) for _, name, args in seen["calls"]] == [("lookup", '{"q":"Paris"}')]
        assert seen["calls"][0][0]

    def test_parallel_tool_calls(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str,
                                 stream: bool) -> None:
        fakes[provider].queue(Reply(text="Checking both.", tool_calls=[("lookup", {"q": "Paris"}),
                                                                        ("lookup", {"q": "Rome"})]))
        seen = run(gateway, stream, model=direct(provider), messages=USER, tools=LOOKUP)
        assert seen["text"] == "Checking both."
        assert [args for _, _, args in seen["calls"]] == ['{"q":"Paris"}', '{"q":"Rome"}']
        assert len({call_id for call_id, _, _ in seen["calls"]}) == 2

    def test_reasoning(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, stream: bool) -> None:
        fakes[provider].queue(Reply(reasoning="Both are in Europe.", text="Sunny."))
        seen = run(gateway, stream, model=direct(provider), messages=USER)
        assert seen["text"] == "Sunny."
        assert seen["reasoning"] == "Both are in Europe."

    def test_error(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, stream: bool) -> None:
        fakes[provider].queue(Reply(status=429, headers={"retry-after": "3"}))
        with pytest.raises(openai.RateLimitError) as caught:
            run(gateway, stream, model=direct(provider), messages=USER)
        assert caught.value.response.headers["retry-after"] == "3"
        assert f"{provider}:" in caught.value.message

    def test_server_tool_loop(self, gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str,
                              stream: bool) -> None:
        fakes[provider].queue(Reply(reasoning="Need data.", tool_calls=[("get_weather", {"city": "Paris"}),
                                                                         ("get_weather", {"city": "Rome"})]),
                              Reply(text="Paris and Rome: 18C."))
        seen = run(gateway, stream, model=f"solo_{provider}", messages=USER)
        assert seen["text"] == "Paris and Rome: 18C."
        assert [c["status"] for c in seen["gateway"]["tool_calls"]] == ["ok", "ok"]
        assert len(fakes[provider].requests) == 2


@pytest.mark.parametrize(("first", "second"), list(itertools.product(PROVIDERS, PROVIDERS)))
@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_transcript_crosses_providers(gateway: Gateway, fakes: dict[str, FakeUpstream], first: str, second: str,
                                      stream: bool) -> None:
    """Iteration 1 on ``first`` (with reasoning and two calls), iteration 2 fails over to ``second``."""
    fakes[first].queue(Reply(reasoning="Look both up.", tool_calls=[("get_weather", {"city": "Paris"}),
                                                                     ("get_weather", {"city": "Rome"})]),
                       Reply(status=500))
    fakes[second].queue(Reply(text="Both sunny."))
    seen = run(gateway, stream, model=f"chain_{first}_{second}", messages=USER)
    assert seen["text"] == "Both sunny."
    assert seen["gateway"]["answered_by"] == [f"{first}:{PROVIDER_MODELS[first]}",
                                              f"{second}:{PROVIDER_MODELS[second]}"]
    # The second provider received a transcript its strict rules accept (checked by the fixture)...
    assert fakes[second].requests, "the fallback target was never called"
    handed = fakes[second].requests[-1].body
    # ...holding both tool results.
    assert str(handed).count("18C, sunny") == 2


def test_claude_thinking_blocks_are_replayed(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(reasoning="Plan: call the tool.", tool_calls=[("get_weather", {"city": "Paris"})]),
                          Reply(text="Sunny."))
    seen = run(gateway, False, model="solo_claude", messages=USER, reasoning_effort="high", max_tokens=20000)
    assert seen["text"] == "Sunny."
    second = fakes["claude"].requests[1].body
    assert second.get("thinking"), "thinking stays enabled across the tool loop"
    assistant = [m for m in second["messages"] if m["role"] == "assistant"][-1]
    assert assistant["content"][0] == {"type": "thinking", "thinking": "Plan: call the tool.", "signature": "sig-1"}


def test_gemini_thought_signature_goes_back_on_its_call(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["gemini"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
                          Reply(text="Sunny."))
    run(gateway, True, model="solo_gemini", messages=USER)
    second = fakes["gemini"].requests[1].body
    model_turn = [c for c in second["contents"] if c["role"] == "model"][-1]
    calls = [p for p in model_turn["parts"] if "functionCall" in p]
    assert calls[0]["thoughtSignature"] == "gsig-1"
    assert "thoughtSignature" not in calls[1]


def test_deepseek_reasoning_is_passed_back(fakes: dict[str, FakeUpstream]) -> None:
    from tests.e2e.conftest import gateway_config

    config = gateway_config(fakes).replace("primary: {type: openai,",
                                           "primary: {type: openai, reasoning_passback: true,")
    gw = Gateway(config).start()
    try:
        fakes["primary"].queue(Reply(reasoning="I should call it.", tool_calls=[("get_weather", {"city": "Paris"})]),
                               Reply(text="Sunny."))
        gw.client().chat.completions.create(model="agent", messages=USER)
        assistant = [m for m in fakes["primary"].bodies[1]["messages"] if m["role"] == "assistant"][-1]
        assert assistant["reasoning_content"] == "I should call it."
    finally:
        gw.stop()


def test_reasoning_passback_false_never_sends_it(fakes: dict[str, FakeUpstream]) -> None:
    """A strict server that returns reasoning_content but rejects it back: ``reasoning_passback: false``."""
    from tests.e2e.conftest import gateway_config

    config = gateway_config(fakes).replace("primary: {type: openai,",
                                           "primary: {type: openai, reasoning_passback: false,")
    gw = Gateway(config).start()
    try:
        fakes["primary"].queue(Reply(reasoning="hmm", tool_calls=[("get_weather", {"city": "Paris"})]),
                               Reply(text="ok"))
        gw.client().chat.completions.create(model="agent", messages=USER)
        assert all("reasoning_content" not in m for m in fakes["primary"].bodies[1]["messages"])
    finally:
        gw.stop()


def _client_round_trip(gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str,
                       **kwargs: Any) -> FakeUpstream:
    """Pause on a client tool, cancel the continuation, then come back with a plain stateless follow-up."""
    fake = fakes[provider]
    fake.queue(Reply(reasoning="I will look it up.", tool_calls=[("lookup", {"q": "Paris"})]))
    client = gateway.client()
    paused = client.chat.completions.create(model=direct(provider), messages=USER, tools=LOOKUP, **kwargs)
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    client.delete(f"/continuations/{continuation_id}", cast_to=object)  # way A no longer applies
    message = paused.choices[0].message
    # What a typical client sends back: the standard fields only, every artifact dropped.
    history = [*USER, {"role": "assistant", "content": message.content,
                       "tool_calls": [{"id": c.id, "type": "function", "function": {
                           "name": c.function.name, "arguments": c.function.arguments}} for c in message.tool_calls]},
               {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"}]
    fake.queue(Reply(text="Sunny in Paris."))
    done = client.chat.completions.create(model=direct(provider), messages=history, tools=LOOKUP, **kwargs)
    assert done.choices[0].message.content == "Sunny in Paris."
    return fake


def test_gemini_signature_survives_the_client_round_trip(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fake = _client_round_trip(gateway, fakes, "gemini")
    model_turn = [c for c in fake.requests[-1].body["contents"] if c["role"] == "model"][-1]
    assert next(p for p in model_turn["parts"] if "functionCall" in p)["thoughtSignature"] == "gsig-1"


def test_claude_thinking_survives_the_client_round_trip(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fake = _client_round_trip(gateway, fakes, "claude", reasoning_effort="high", max_tokens=20000)
    body = fake.requests[-1].body
    assert body.get("thinking"), "thinking stays on because the blocks came back"
    assistant = [m for m in body["messages"] if m["role"] == "assistant"][-1]
    assert assistant["content"][0]["type"] == "thinking" and assistant["content"][0]["signature"] == "sig-1"


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_litellm_provider(litellm_gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    """``type: litellm`` (optional extra) through LiteLLM's OpenAI route to the fake, tool loop included."""
    fakes["secondary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Cold in Oslo."))
    seen = run(litellm_gateway, stream, model="tail", messages=USER)
    assert seen["text"] == "Cold in Oslo."
    assert seen["gateway"]["answered_by"] == ["tail:openai/tail-model", "tail:openai/tail-model"]
    second = fakes["secondary"].bodies[1]
    assert second["model"] == "tail-model"
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == ["Oslo: 18C, sunny"]


# A start-up in a fresh interpreter: is LiteLLM imported once the runtime has started?
_STARTED_WITH = """
import asyncio, sys
from gateway.api.runtime import Runtime
from gateway.config import parse_config

async def started(provider: str) -> bool:
    runtime = await Runtime.start(parse_config(
        "providers: {p: {type: " + provider + ", api_key: k, base_url: 'http://127.0.0.1:9/v1'}}\\n"
        "models: {m: {targets: [{provider: p, model: openai/x}]}}\\n", env={}))
    try:
        return "litellm" in sys.modules
    finally:
        await runtime.stop()

print(asyncio.run(started("openai")), asyncio.run(started("litellm")))
"""


@pytest.mark.slow
def test_litellm_is_imported_at_start_up_only_when_a_provider_needs_it() -> None:
    """Imported by a first request, it held that process's event loop, every request on it, for seconds."""
    require_litellm()
    done = subprocess.run([sys.executable, "-c", _STARTED_WITH], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
