"""The stream rescue's own rules (routing/rescue.py): what a continuation forwards, and each target's prefill."""

from __future__ import annotations

import orjson
import pytest

from gateway.canonical import (
    Answering,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    Usage,
)
from gateway.config.checks import ConfigError
from gateway.config.loader import parse_config as load_config_text
from gateway.config.providers_section import ProviderConfig
from gateway.providers.openai import OpenAIAdapter
from gateway.routing.rescue import Diverged, Rescue, prefill_kind, sent_so_far
from gateway.upstream.errors import ErrorClass, ProviderError

CUT = ProviderError(ErrorClass.CONNECTION, "upstream connection lost")
REQUEST = ModelRequest(messages=[{"role": "user", "content": "hi"}], params={"temperature": 0})


def texts(deltas: list) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


def test_sent_so_far_reads_text_and_reasoning() -> None:
    batches = [[Answering("m"), ReasoningDelta("think ")], [ReasoningDelta("more"), TextDelta("Hel")],
               [TextDelta("lo")]]
    assert sent_so_far(batches) == ("Hello", "think more")


def test_restart_swallows_the_reproduced_prefix_whatever_the_piece_boundaries() -> None:
    rescue = Rescue(CUT, "a", "a", "Hello wor", "")
    assert rescue.request_for(REQUEST, None) is REQUEST and rescue.how == "restart"
    out = rescue.pass_on([Answering("b"), TextDelta("Hel")])
    assert out == []
    out = rescue.pass_on([TextDelta("lo w")])
    assert out == []
    out = rescue.pass_on([TextDelta("orld"), TextDelta("!")])
    assert out[0] == Answering("b"), "the rescuer is named before its first forwarded delta"
    assert texts(out) == "ld!"
    answer = ModelResponse({"role": "assistant", "content": "Hello world!"}, "stop", Usage())
    assert rescue.complete(answer) is answer


@pytest.mark.parametrize("pieces", [["Help"], ["Hello", " there"], ["Hxllo wor"]])
def test_restart_that_diverges_is_never_spliced(pieces: list[str]) -> None:
    rescue = Rescue(CUT, "a", "a", "Hello wor", "")
    rescue.request_for(REQUEST, None)
    with pytest.raises(Diverged):
        for piece in pieces:
            rescue.pass_on([TextDelta(piece)])


def test_restart_that_ends_inside_the_sent_text_diverged() -> None:
    rescue = Rescue(CUT, "a", "a", "Hello wor", "")
    rescue.request_for(REQUEST, None)
    rescue.pass_on([TextDelta("Hello")])
    with pytest.raises(Diverged):
        rescue.complete(ModelResponse({"role": "assistant", "content": "Hello"}, "stop", Usage()))


def test_restart_reproduces_reasoning_then_text() -> None:
    rescue = Rescue(CUT, "a", "a", "", "Let me th")
    rescue.request_for(REQUEST, "native")
    assert rescue.how == "restart", "reasoning already shown cannot be prefilled"
    out = rescue.pass_on([ReasoningDelta("Let me "), ReasoningDelta("think."), ReasoningSignature("sig"),
                          TextDelta("Answer")])
    assert [type(d).__name__ for d in out] == ["ReasoningDelta", "ReasoningSignature", "TextDelta"]
    assert out[0].text == "ink."


def test_prefill_request_per_kind() -> None:
    rescue = Rescue(CUT, "a", "a", "Hello wor ", "")
    native = rescue.request_for(REQUEST, "native")
    assert rescue.how == "prefill"
    assert native.messages[-1] == {"role": "assistant", "content": "Hello wor"}, "no trailing whitespace"
    assert REQUEST.messages == [{"role": "user", "content": "hi"}], "the call's own request is untouched"
    prefix = rescue.request_for(REQUEST, "prefix")
    assert prefix.messages[-1] == {"role": "assistant", "content": "Hello wor", "prefix": True}
    vllm = rescue.request_for(REQUEST, "continue_final_message")
    assert vllm.params == {"temperature": 0, "continue_final_message": True, "add_generation_prompt": False}


def test_prefill_continuation_swallows_the_held_back_whitespace_and_completes_the_answer() -> None:
    rescue = Rescue(CUT, "a", "a", "Hello ", "")
    rescue.request_for(REQUEST, "native")
    out = rescue.pass_on([Answering("b"), TextDelta(" world"), ReasoningDelta("not shown")])
    assert texts(out) == "world"
    answer = rescue.complete(ModelResponse({"role": "assistant", "content": " world", "reasoning_content": "x"},
                                           "stop", Usage()))
    assert answer.message["content"] == "Hello world"
    assert "reasoning_content" not in answer.message


@pytest.mark.parametrize("pieces", [["Hello world"], ["\n\nHel", "lo", " wor", "ld"], ["Hello", "", " world"],
                                    ["H", "e", "l", "l", "o", " ", "w", "o", "r", "l", "d"]])
def test_prefill_continuation_that_repeats_the_prefill_has_the_repeat_dropped(pieces: list[str]) -> None:
    rescue = Rescue(CUT, "a", "a", "Hello ", "")
    rescue.request_for(REQUEST, "prefix")
    out = [delta for piece in pieces for delta in rescue.pass_on([TextDelta(piece)])]
    out += rescue.flush()
    assert texts(out) == "world"
    answer = rescue.complete(ModelResponse({"role": "assistant", "content": "Hello world"}, "stop", Usage()))
    assert answer.message["content"] == "Hello world"


@pytest.mark.parametrize(("pieces", "forwarded"), [([", friend"], ", friend"), (["  ", " ok"], "  ok"),
                                                   (["x", "Hello"], "xHello"), ([" \n"], "\n")])
def test_prefill_continuation_that_begins_otherwise_is_forwarded_from_its_start(pieces: list[str],
                                                                                forwarded: str) -> None:
    rescue = Rescue(CUT, "a", "a", "Hello ", "")
    rescue.request_for(REQUEST, "native")
    out = [delta for piece in pieces for delta in rescue.pass_on([Answering("b"), TextDelta(piece)])]
    out += rescue.flush()
    assert texts(out) == forwarded
    assert out[0] == Answering("b")


@pytest.mark.parametrize("pieces", [["Help"], ["Hel", "p me"], ["Hel"], ["  He"]])
def test_prefill_continuation_that_starts_repeating_and_leaves_or_stops_diverged(pieces: list[str]) -> None:
    rescue = Rescue(CUT, "a", "a", "Hello ", "")
    rescue.request_for(REQUEST, "native")
    with pytest.raises(Diverged):
        for piece in pieces:
            assert rescue.pass_on([TextDelta(piece)]) == [], "nothing is forwarded while it may be a repeat"
        rescue.flush()


def test_prefill_hold_is_bounded_by_the_prefill() -> None:
    """Whitespace alone is held no longer than the prefill is long: then it is the continuation."""
    rescue = Rescue(CUT, "a", "a", "Hi", "")
    rescue.request_for(REQUEST, "native")
    assert rescue.pass_on([TextDelta(" ")]) == []
    assert texts(rescue.pass_on([TextDelta("  ")])) == "   "


@pytest.mark.parametrize(("kind", "url", "model", "expected"), [
    ("anthropic", "https://api.anthropic.com", "claude-sonnet-4-5", "native"),
    ("anthropic", "https://api.anthropic.com", "claude-opus-4-6", None),
    ("anthropic", "https://api.anthropic.com", "claude-3-7-sonnet-latest", "native"),
    ("gemini", "https://generativelanguage.googleapis.com", "gemini-2.5-pro", "native"),
    ("openai", "https://api.openai.com/v1", "gpt-4.1", None),
    ("openai", "https://api.deepseek.com/beta", "deepseek-chat", "prefix"),
    ("openai", "https://api.mistral.ai/v1", "mistral-large-latest", "prefix"),
    ("mock", "", "m", None),
])
def test_prefill_defaults_by_provider_and_family(kind: str, url: str, model: str, expected: str | None) -> None:
    assert prefill_kind("auto", kind, url, model) == expected


def test_prefill_is_overridable() -> None:
    assert prefill_kind("off", "anthropic", "", "claude-sonnet-4-5") is None
    assert prefill_kind("continue_final_message", "openai", "http://vllm:8000/v1", "qwen") == "continue_final_message"


BASE = """
providers:
  up: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key: k}
models:
  r:
    targets: [%s]
%s
"""


def test_config_keys_and_defaults() -> None:
    config = load_config_text(BASE % ("{provider: up, model: m}", ""))
    route = config.models["r"]
    assert route.stream_rescue == "continue" and route.stream_idle_timeout_s is None
    assert route.targets[0].first_token_timeout_s is None and route.targets[0].prefill == "auto"
    config = load_config_text(BASE % ("{provider: up, model: m}, {provider: up, model: n, first_token_timeout_s: 2, "
                                      "prefill: continue_final_message}",
                                      "    stream_rescue: off\n    first_token_timeout_s: 5\n"
                                      "    stream_idle_timeout_s: 30"))
    route = config.models["r"]
    assert route.stream_rescue == "off" and route.stream_idle_timeout_s == 30
    assert [t.first_token_timeout_s for t in route.targets] == [5, 2], "a target's own wins over the route's"
    assert route.targets[1].prefill == "continue_final_message"


@pytest.mark.parametrize("extra", ["    stream_rescue: always", "    first_token_timeout_s: 0",
                                   "    stream_idle_timeout_s: -1"])
def test_config_rejects_bad_values(extra: str) -> None:
    with pytest.raises(ConfigError):
        load_config_text(BASE % ("{provider: up, model: m}", extra))


def test_config_rejects_an_unknown_prefill() -> None:
    with pytest.raises(ConfigError, match="prefill"):
        load_config_text(BASE % ("{provider: up, model: m, prefill: maybe}", ""))


def test_openai_format_prefill_reaches_the_wire() -> None:
    provider = ProviderConfig(name="ds", type="openai", base_url="https://api.deepseek.com/beta", api_key="k")
    rescue = Rescue(CUT, "a", "a", "Hello wor", "")
    for kind, check in (("prefix", lambda body: body["messages"][-1] == {"role": "assistant", "content": "Hello wor",
                                                                         "prefix": True}),
                        ("continue_final_message", lambda body: body["continue_final_message"] is True
                         and body["add_generation_prompt"] is False)):
        native = OpenAIAdapter().build_request(rescue.request_for(REQUEST, kind), provider, "deepseek-chat", True)
        body = orjson.loads(native.body)
        assert check(body), body
