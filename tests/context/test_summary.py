"""The summariser's prompt, and rebuilt transcripts accepted by every adapter's strict-server rules."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.canonical import Message, ModelRequest
from gateway.config.model import ProviderConfig
from gateway.context.guard import ContextGuard
from gateway.context.summary import SUMMARY_INSTRUCTION, is_summary, summary_message, summary_prompt
from gateway.context.tokens import TokenEstimator
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter
from tests.context.transcripts import SYSTEM, TOOLS, current_turn, exchange
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.gemini_rules import gemini_request_problems
from tests.fakes.openai_rules import openai_request_problems


def test_summary_prompt_renders_calls_and_results_as_text_in_one_user_message() -> None:
    old = [summary_message("Earlier: the user lives in Berlin."), *exchange("a", 5, cities=("Paris", "Lyon"))]
    prompt = summary_prompt(old)
    assert len(prompt) == 1 and prompt[0]["role"] == "user"
    text = prompt[0]["content"]
    assert isinstance(text, str) and text.startswith(SUMMARY_INSTRUCTION)
    assert "[earlier summary]\nEarlier: the user lives in Berlin." in text
    assert "[user]\nQuestion a: what is the weather in Paris, Lyon?" in text
    assert '[assistant called get_weather (call_a_0)] {"city": "Paris"}' in text
    assert '[assistant called get_weather (call_a_1)] {"city": "Lyon"}' in text
    assert "[tool result of get_weather (call_a_0)]\nParis: 21C, clear." in text
    assert "[tool result of get_weather (call_a_1)]\nLyon: 21C, clear." in text
    assert "[assistant]\nAnswer a: it is 21C and clear." in text
    # No structure an upstream without tools would reject, no provider artifacts.
    assert "tool_calls" not in prompt[0] and "thought_signature" not in text and "anthropic-sig" not in text


def test_summary_prompt_clips_huge_items() -> None:
    old = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "HEAD " + "x" * 100_000 + " TAIL"}]
    text = summary_prompt(old, max_chars_per_message=1000)[0]["content"]
    assert len(text) < 3000
    assert "HEAD" in text and "TAIL" in text and "characters omitted" in text


def test_summary_messages_are_recognised_by_their_prefix_only() -> None:
    assert is_summary(summary_message("facts"))
    assert not is_summary({"role": "user", "content": "facts"})
    assert not is_summary({"role": "system", "content": summary_message("facts")["content"]})
    assert not is_summary({"role": "user", "content": [{"type": "text", "text": "x"}]})


OPENAI = ProviderConfig(name="oai", type="openai", base_url="https://api.openai.com/v1", api_key="k")
ANTHROPIC = ProviderConfig(name="claude", type="anthropic", base_url="https://api.anthropic.com", api_key="k")
GEMINI = ProviderConfig(name="google", type="gemini", base_url="https://generativelanguage.googleapis.com",
                        api_key="k")


def body_problems(messages: list[Message]) -> dict[str, list[str]]:
    request = ModelRequest(messages=messages, tools=TOOLS, params={"max_tokens": 1024})
    openai_body = orjson.loads(OpenAIAdapter().build_request(request, OPENAI, "gpt-4o", False).body)
    anthropic_body = orjson.loads(AnthropicAdapter().build_request(request, ANTHROPIC, "claude-sonnet-4-5",
                                                                   False).body)
    gemini_body = orjson.loads(GeminiAdapter().build_request(request, GEMINI, "gemini-3-flash-preview",
                                                             False).body)
    return {"openai": openai_request_problems(openai_body, "gpt-4o"),
            "anthropic": anthropic_request_problems(anthropic_body),
            "gemini": gemini_request_problems(gemini_body, "gemini-3-flash-preview")}


@pytest.mark.parametrize("summarize_ok", [True, False])
async def test_rebuilt_transcripts_are_accepted_by_every_provider(summarize_ok: bool) -> None:
    old_summary = summary_message("Earlier: the user lives in Berlin.")
    cur = current_turn("now", rounds=2, result_tokens=40)
    transcript = [SYSTEM, old_summary, *exchange("a", 300), *exchange("b", 300), *cur]
    assert body_problems(transcript) == {"openai": [], "anthropic": [], "gemini": []}

    async def summarize(old: list[Message]) -> str:
        if not summarize_ok:
            raise RuntimeError("down")
        return "They asked about Paris twice."

    limit = TokenEstimator().count([SYSTEM, old_summary, *cur], TOOLS, model="gpt-4o") + 80
    outcome: Any = await ContextGuard().fit(transcript, TOOLS, window=limit, threshold=1.0, reserve_output=0,
                                            target_label="openai:gpt-4o", summarize=summarize)
    assert outcome.action == ("compressed" if summarize_ok else "pruned")
    assert body_problems(outcome.transcript) == {"openai": [], "anthropic": [], "gemini": []}
