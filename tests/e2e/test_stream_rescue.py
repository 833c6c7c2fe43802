"""Streams that finish (issue 31): a stream that fails after text reached the caller is continued on the
next target, by prefill or by a restart whose already-sent prefix is swallowed, or ends with a clean
``stream_interrupted`` naming the first failure; first-token deadlines and stalls fail over in time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.context.encodings import get_encoding
from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply
from tests.lazy import lazy_import

anthropic = lazy_import("anthropic")  # imported by the worker that runs these tests (tests/lazy.py)

FULL = "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
PIECES = 8
CUT_AFTER = 5


def sent_part() -> str:
    """What the cut upstream sent before it failed (``CUT_AFTER`` of ``PIECES`` pieces of ``FULL``)."""
    return "".join(FakeUpstream._split(FULL, PIECES)[:CUT_AFTER])


def cut(fault: str = "cut", **changes: Any) -> Reply:
    return Reply(text=FULL, fault=fault, pieces=PIECES, cut_after=CUT_AFTER, **changes)


ROUTES = """
  rescue_prefill: {targets: [{provider: primary, model: gpt-x}, {provider: claude, model: claude-sonnet-4-5}]}
  rescue_gemini: {targets: [{provider: primary, model: gpt-x}, {provider: gemini, model: gemini-3-pro-preview}]}
  rescue_restart: {targets: [{provider: primary, model: gpt-x}, {provider: secondary, model: gpt-y}]}
  rescue_refused: {targets: [{provider: primary, model: gpt-x}, {provider: refuser, model: claude-sonnet-4-5}]}
  rescue_billed:
    targets: [{provider: claude, model: claude-sonnet-4-5}, {provider: gemini, model: gemini-3-pro-preview}]
  rescue_tools:
    targets: [{provider: primary, model: gpt-x}, {provider: claude, model: claude-sonnet-4-5}]
    tools: [add]
  rescue_off:
    targets: [{provider: primary, model: gpt-x}, {provider: claude, model: claude-sonnet-4-5}]
    stream_rescue: off
  rescue_stall:
    targets: [{provider: patient, model: gpt-x}, {provider: claude, model: claude-sonnet-4-5}]
    stream_idle_timeout_s: 1
  rescue_first_token:
    targets: [{provider: patient, model: gpt-x}, {provider: secondary, model: gpt-y}]
    first_token_timeout_s: 5
"""


@pytest.fixture(scope="module")
def rescue_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    # ``patient``: the primary fake with a long read timeout (30 s), so only the stream's own deadlines
    # (stall, first token) can end its waits early. ``refuser``: the Claude fake under another name.
    config = gateway_config({**fakes, "patient": fakes["primary"], "refuser": fakes["claude"]}, extra_models=ROUTES)
    config = config.replace(f"base_url: '{fakes['primary'].url}', api_key: upstream-patient, timeout_s: 1.5",
                            f"base_url: '{fakes['primary'].url}', api_key: upstream-patient, timeout_s: 30")
    gw = Gateway(config).start()
    yield gw
    gw.stop()


def stream_chat(gw: Gateway, model: str, **extra: Any) -> tuple[str, list[dict[str, Any]], dict[str, Any] | None]:
    """The streamed text, the error events and the gateway extension of one chat completion stream."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    events: list[Any] = []
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": "Bearer test-key"}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line[6:] == "[DONE]" else orjson.loads(line[6:]))
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    errors = [c["error"] for c in chunks if "error" in c]
    extension = next((c["gateway"] for c in chunks if "attempts" in c.get("gateway", {})), None)
    usage = next((c["usage"] for c in chunks if c.get("usage")), None)
    if extension is not None and usage is not None:
        extension = {**extension, "_usage": usage}
    return text, errors, extension


def test_cut_stream_is_continued_by_prefill(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    sent = sent_part()
    fakes["primary"].queue(cut())
    fakes["claude"].queue(Reply(text=FULL[len(sent.rstrip()):]))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_prefill")
    assert not errors
    assert text == FULL, "the caller receives the whole answer, once"
    last = fakes["claude"].bodies[-1]["messages"][-1]
    assert last["role"] == "assistant"
    prefilled = last["content"] if isinstance(last["content"], str) else last["content"][0]["text"]
    assert prefilled == sent.rstrip(), "the prefill is what the caller already has (no trailing whitespace)"
    assert extension is not None
    attempts = extension["attempts"]
    assert [a["error_class"] for a in attempts] == ["connection", None]
    assert attempts[1]["rescued"] == {"after_chars": len(sent), "how": "prefill", "by": "claude:claude-sonnet-4-5"}
    assert extension["answered_by"] == ["claude:claude-sonnet-4-5"]
    metrics = httpx.get(f"{rescue_gateway.url}/metrics").text
    assert 'loopgate_stream_rescues_total{outcome="prefill"}' in metrics


def test_gemini_continues_with_a_final_model_turn(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    sent = sent_part()
    fakes["primary"].queue(cut())
    fakes["gemini"].queue(Reply(text=FULL[len(sent.rstrip()):]))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_gemini")
    assert not errors and text == FULL
    last = fakes["gemini"].bodies[-1]["contents"][-1]
    assert last["role"] == "model" and last["parts"][0]["text"] == sent.rstrip()
    assert extension is not None and extension["attempts"][-1]["rescued"]["how"] == "prefill"


def test_prefill_refused_is_learned_then_restarted(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].reject_prefill = True
    fakes["primary"].queue(cut())
    fakes["claude"].queue(Reply(text="never sent"), Reply(text=FULL))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_refused")
    assert not errors
    assert text == FULL, "the restart's reproduction of the sent text is swallowed, the rest forwarded"
    assert extension is not None
    attempts = extension["attempts"]
    assert [(a["target"], a["error_class"]) for a in attempts] == [
        ("primary:gpt-x", "connection"), ("refuser:claude-sonnet-4-5", "prefill_rejected"),
        ("refuser:claude-sonnet-4-5", None)]
    assert attempts[-1]["rescued"]["how"] == "restart"
    bodies = fakes["claude"].bodies
    assert bodies[0]["messages"][-1]["role"] == "assistant" and bodies[1]["messages"][-1]["role"] == "user"
    # Learned: the next rescue on that target is a restart from the start, no prefill sent again.
    fakes["claude"].reset()
    fakes["claude"].reject_prefill = True
    fakes["primary"].queue(cut())
    fakes["claude"].queue(Reply(text=FULL))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_refused")
    assert not errors and text == FULL
    assert [b["messages"][-1]["role"] for b in fakes["claude"].bodies] == ["user"]
    assert extension is not None and extension["attempts"][-1]["rescued"]["how"] == "restart"


def test_diverging_restart_ends_with_the_first_failure(rescue_gateway: Gateway,
                                                      fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(cut())
    fakes["secondary"].queue(Reply(text="A different answer altogether, which must never be spliced on."))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_restart")
    assert text == sent_part(), "nothing of the diverging restart reaches the caller"
    assert len(errors) == 1 and errors[0]["code"] == "stream_interrupted"
    assert "primary:gpt-x" in errors[0]["message"] and "connection" in errors[0]["message"]
    assert "secondary" not in errors[0]["message"]
    assert extension is None
    assert 'loopgate_stream_rescues_total{outcome="diverged"}' in httpx.get(f"{rescue_gateway.url}/metrics").text


def test_restart_that_reproduces_the_prefix_is_forwarded_past_it(rescue_gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(cut())
    fakes["secondary"].queue(Reply(text=FULL, pieces=3))  # other piece boundaries than the cut stream's
    text, errors, extension = stream_chat(rescue_gateway, "rescue_restart")
    assert not errors and text == FULL
    assert extension is not None and extension["attempts"][-1]["rescued"]["how"] == "restart"


def test_stall_is_rescued_after_the_idle_timeout(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    sent = sent_part()
    fakes["primary"].queue(cut("stall"))
    fakes["claude"].queue(Reply(text=FULL[len(sent.rstrip()):]))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_stall")
    assert not errors and text == FULL
    assert extension is not None
    stalled = extension["attempts"][0]
    assert stalled["error_class"] == "timeout"
    # The provider's read timeout is 30 s: only stream_idle_timeout_s (1 s) ends the stall this early.
    assert stalled["elapsed_ms"] < 15_000


def test_late_first_token_fails_over_before_anything_was_sent(rescue_gateway: Gateway,
                                                              fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="late answer", first_delay_s=20))
    fakes["secondary"].queue(Reply(text="Answer from the fallback."))
    started = time.monotonic()
    text, errors, extension = stream_chat(rescue_gateway, "rescue_first_token")
    assert time.monotonic() - started < 15
    assert not errors and text == "Answer from the fallback."
    assert extension is not None
    assert [a["error_class"] for a in extension["attempts"]] == ["timeout", None]
    assert "rescued" not in extension["attempts"][-1], "nothing had reached the caller: a plain failover"


def test_rescue_off_keeps_the_clean_error(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(cut())
    text, errors, _ = stream_chat(rescue_gateway, "rescue_off")
    assert text == sent_part()
    assert len(errors) == 1 and errors[0]["code"] == "stream_interrupted"
    assert not fakes["claude"].requests
    # The request's own option turns it on for a route that has it off.
    fakes["primary"].queue(cut())
    fakes["claude"].queue(Reply(text=FULL[len(sent_part().rstrip()):]))
    text, errors, _ = stream_chat(rescue_gateway, "rescue_off", gateway={"stream_rescue": "continue"})
    assert not errors and text == FULL


def test_usage_and_billing_count_both_attempts(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    sent = sent_part()
    fakes["claude"].queue(cut(usage=(100, 40)))  # Anthropic reports the prompt's tokens as the stream starts
    fakes["gemini"].queue(Reply(text=FULL[len(sent.rstrip()):], usage=(130, 20)))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_billed")
    assert not errors and text == FULL
    assert extension is not None
    usage = extension["_usage"]
    assert usage["prompt_tokens"] == 100 + 130
    assert usage["completion_tokens"] == 1 + 20  # the cut attempt had reported 1 output token


def test_a_cut_openai_stream_is_billed_by_an_estimate_of_what_it_read_and_sent(
        rescue_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    # An OpenAI-format stream reports usage in its last chunk, which a cut stream never sends: the
    # cut attempt is billed by the gateway's own count (prompt and sent text) rather than for free.
    fakes["primary"].queue(cut())
    fakes["secondary"].queue(Reply(text=FULL, usage=(130, 20)))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_restart")
    assert not errors and text == FULL
    assert extension is not None
    usage = extension["_usage"]
    encoding = get_encoding()
    sent_tokens = len(encoding.encode(sent_part()))
    assert usage["completion_tokens"] == sent_tokens + 20
    # "hi" as one user message: a handful of tokens with the message framing, never zero.
    assert 130 < usage["prompt_tokens"] <= 130 + 16


def test_openai_sdk_accumulators_see_one_well_formed_stream(rescue_gateway: Gateway,
                                                           fakes: dict[str, FakeUpstream]) -> None:
    client = rescue_gateway.client()
    sent = sent_part()
    for route, fallback, reply in (("rescue_prefill", "claude", Reply(text=FULL[len(sent.rstrip()):])),
                                   ("rescue_restart", "secondary", Reply(text=FULL))):
        fakes["primary"].queue(cut())
        fakes[fallback].queue(reply)
        with client.chat.completions.stream(model=route, messages=[{"role": "user", "content": "hi"}]) as stream:
            for _ in stream:
                pass
            completion = stream.get_final_completion()
        assert completion.choices[0].message.content == FULL
        assert completion.choices[0].finish_reason == "stop"

        fakes["primary"].queue(cut())
        fakes[fallback].queue(reply)
        with client.responses.stream(model=route, input="hi") as responses:
            for _ in responses:
                pass
            final = responses.get_final_response()
        assert final.status == "completed"
        assert final.output_text == FULL


def test_tool_call_cut_mid_arguments_is_asked_for_again(rescue_gateway: Gateway,
                                                        fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text=FULL, pieces=PIECES, tool_calls=[("add", {"a": 2, "b": 3})],
                                 fault="cut_in_call"), Reply(text="The sum is 5."))  # the next model call: primary
    fakes["claude"].queue(Reply(tool_calls=[("add", {"a": 2, "b": 3})]))
    text, errors, extension = stream_chat(rescue_gateway, "rescue_tools")
    assert not errors
    assert text.startswith(FULL) and text.count(FULL) == 1 and text.endswith("The sum is 5.")
    assert extension is not None
    assert [(t["name"], t["status"]) for t in extension["tool_calls"]] == [("add", "ok")], "run once, whole"
    first = fakes["claude"].bodies[0]["messages"][-1]
    assert first["role"] == "assistant", "the continuation was asked for the call again, after the sent text"
    assert extension["attempts"][1]["rescued"]["how"] == "prefill"
    assert extension["answered_by"] == ["claude:claude-sonnet-4-5", "primary:gpt-x"]


def test_messages_stream_is_rescued_for_the_anthropic_sdk(rescue_gateway: Gateway,
                                                          fakes: dict[str, FakeUpstream]) -> None:
    sent = sent_part()
    fakes["primary"].queue(cut())
    fakes["claude"].queue(Reply(text=FULL[len(sent.rstrip()):]))
    client = anthropic.Anthropic(base_url=rescue_gateway.url, api_key=KEY, max_retries=0, timeout=20)
    with client.messages.stream(model="rescue_prefill", max_tokens=200,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        for _ in stream:
            pass
        message = stream.get_final_message()
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == FULL  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"


def test_reasoning_and_text_are_continued_by_a_restart(rescue_gateway: Gateway,
                                                       fakes: dict[str, FakeUpstream]) -> None:
    thinking = "First I consider the fox, then the dog."
    fakes["primary"].queue(cut(reasoning=thinking))
    fakes["secondary"].queue(Reply(text=FULL, reasoning=thinking, pieces=3))
    body = {"model": "rescue_restart", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", f"{rescue_gateway.url}/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": "Bearer test-key"}) as response:
        chunks = [orjson.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    assert not [c for c in chunks if "error" in c]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == thinking, "reasoning once, whole"
    assert "".join(d.get("content") or "" for d in deltas) == FULL
    extension = next(c["gateway"] for c in chunks if "attempts" in c.get("gateway", {}))
    assert extension["attempts"][-1]["rescued"] == {"after_chars": len(thinking) + len(sent_part()),
                                                    "how": "restart", "by": "secondary:gpt-y"}


def test_the_requests_own_option_holds_for_its_resumed_loop(rescue_gateway: Gateway,
                                                            fakes: dict[str, FakeUpstream]) -> None:
    """A pause stores ``gateway.stream_rescue``: the loop resumed by a decision (way B) is rescued by it."""
    lookup = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
    paused = httpx.post(f"{rescue_gateway.url}/v1/chat/completions", timeout=30,
                        headers={"authorization": "Bearer test-key"},
                        json={"model": "rescue_off", "messages": [{"role": "user", "content": "hi"}],
                              "tools": [lookup], "gateway": {"stream_rescue": "continue"}})
    assert paused.status_code == 200, paused.text
    extension = paused.json()["gateway"]
    assert extension["status"] == "paused"
    call_id = extension["pending"][0]["tool_call_id"]
    fakes["primary"].queue(cut())
    fakes["claude"].queue(Reply(text=FULL[len(sent_part().rstrip()):]))
    events: list[Any] = []
    with httpx.stream("POST", f"{rescue_gateway.url}/v1/continuations/{extension['continuation_id']}",
                      json={"decisions": [{"tool_call_id": call_id, "output": "found"}], "stream": True},
                      headers={"authorization": "Bearer test-key"}, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line[6:] != "[DONE]":
                events.append(orjson.loads(line[6:]))
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert [e for e in events if "error" in e] == []
    assert text == FULL, "the route has stream_rescue off; the paused request's own option turned it on"


FOX = "The quick brown fox jumps over the lazy dog."
FOX_SENT = "The quick brown fox "


def fox_cut() -> Reply:
    """A stream that sends ``FOX_SENT`` (in two pieces) and dies after its commit point."""
    return Reply(text=FOX_SENT, fault="cut", pieces=2, cut_after=2)


def read_answer(gw: Gateway, surface: str, model: str) -> tuple[str, list[Any]]:
    """The text a client reads from one stream of ``surface``, and the stream's error events."""
    if surface == "chat":
        text, errors, _ = stream_chat(gw, model)
        return text, errors
    if surface == "responses":
        body: dict[str, Any] = {"model": model, "input": "hi", "stream": True}
        path, kind = "/v1/responses", "response.output_text.delta"
    else:
        body = {"model": model, "max_tokens": 200, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        path, kind = "/v1/messages", "content_block_delta"
    text, errors = [], []
    with httpx.stream("POST", f"{gw.url}{path}", json=body, timeout=30,
                      headers={"authorization": f"Bearer {KEY}", "x-api-key": KEY}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = orjson.loads(line[6:])
            if event.get("type") == kind:
                text.append(event["delta"] if surface == "responses" else event["delta"].get("text", ""))
            elif event.get("type") in ("error", "response.failed"):
                errors.append(event)
    return "".join(text), errors


@pytest.mark.parametrize("surface", ["chat", "responses", "messages"])
def test_a_prefill_the_target_ignored_is_not_repeated(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                      surface: str) -> None:
    """The continuing target answers from the start (DeepSeek's prefix completion without its beta URL): the
    repeat of what the caller already has is dropped, the answer reads once."""
    assert FakeUpstream._split(FOX_SENT, 2) == ["The quick ", "brown fox "]
    fakes["primary"].queue(fox_cut())
    fakes["claude"].queue(Reply(text=FOX, pieces=5))  # other piece boundaries than the cut stream's
    text, errors = read_answer(rescue_gateway, surface, "rescue_prefill")
    assert not errors
    assert text == FOX
    last = fakes["claude"].bodies[-1]["messages"][-1]
    assert last["role"] == "assistant", "the rescue asked for a continuation (prefill)"


@pytest.mark.parametrize("surface", ["chat", "responses", "messages"])
def test_a_prefill_the_target_honoured_is_continued_once(rescue_gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                         surface: str) -> None:
    fakes["primary"].queue(fox_cut())
    fakes["claude"].queue(Reply(text=FOX[len(FOX_SENT.rstrip()):], pieces=3))
    text, errors = read_answer(rescue_gateway, surface, "rescue_prefill")
    assert not errors
    assert text == FOX


def test_a_repeat_that_leaves_the_sent_text_ends_with_the_first_failure(rescue_gateway: Gateway,
                                                                       fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(fox_cut())
    fakes["claude"].queue(Reply(text="The quick red fox naps.", pieces=3))
    text, errors = read_answer(rescue_gateway, "chat", "rescue_prefill")
    assert text == FOX_SENT, "nothing of a restart that diverged is spliced on"
    assert len(errors) == 1 and errors[0]["code"] == "stream_interrupted"
    assert "primary:gpt-x" in errors[0]["message"]
