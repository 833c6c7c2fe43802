"""Context windows: the built-in table, the route's override and the min rule for fallback targets."""

from __future__ import annotations

import pytest

from gateway.context.windows import DEFAULT_WINDOW, context_window, effective_window, known_window


@pytest.mark.parametrize(("provider", "model", "window"), [
    ("openai", "gpt-4.1", 1_047_576),
    ("openai", "gpt-4.1-mini-2025-04-14", 1_047_576),
    ("openai", "gpt-4o", 128_000),
    ("openai", "gpt-4o-mini", 128_000),
    ("openai", "o3", 200_000),
    ("openai", "o3-mini", 200_000),
    ("openai", "o4-mini", 200_000),
    ("openai", "o1-mini", 128_000),
    ("openai", "gpt-5", 400_000),
    ("openai", "gpt-5-mini", 400_000),
    ("openai", "gpt-5-chat-latest", 128_000),
    ("openai", "gpt-4-turbo-2024-04-09", 128_000),
    ("openai", "gpt-4", 8_192),
    ("openai", "gpt-4-32k", 32_768),
    ("openai", "gpt-3.5-turbo", 16_385),
    ("anthropic", "claude-sonnet-4-5", 200_000),
    ("anthropic", "claude-3-5-haiku-latest", 200_000),
    ("litellm", "anthropic/claude-opus-4-1", 200_000),
    ("litellm", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", 200_000),
    ("gemini", "gemini-2.5-pro", 1_048_576),
    ("gemini", "models/gemini-2.5-flash", 1_048_576),
    ("gemini", "gemini-3-pro-preview", 1_048_576),
    ("gemini", "gemini-1.5-pro", 2_097_152),
    ("openai", "deepseek-chat", 128_000),
    ("openai", "deepseek-reasoner", 128_000),
    ("openai", "meta-llama/Llama-3.3-70B-Instruct", 128_000),
    ("openai", "llama-3.1-8b-instant", 128_000),
    ("openai", "llama-3-8b", 8_192),
    ("openai", "mistral-large-latest", 128_000),
    ("openai", "GPT-4o", 128_000),
])
def test_known_models(provider: str, model: str, window: int) -> None:
    assert known_window(provider, model) == window
    assert context_window(None, provider, model) == window


def test_longest_prefix_wins() -> None:
    assert known_window("openai", "gpt-4") == 8_192
    assert known_window("openai", "gpt-4o") == 128_000  # "gpt-4o" beats "gpt-4"
    assert known_window("openai", "gpt-4.1") == 1_047_576  # "gpt-4.1" beats "gpt-4"
    assert known_window("anthropic", "claude-2.0") == 100_000  # beats "claude-"


def test_unknown_models() -> None:
    assert known_window("openai", "my-local-model") is None
    assert context_window(None, "openai", "my-local-model") == DEFAULT_WINDOW == 8_192
    # Every model on an Anthropic endpoint has at least 200K.
    assert context_window(None, "anthropic", "some-future-model") == 200_000


def test_route_window_overrides_the_table() -> None:
    assert context_window(32_000, "openai", "gpt-4.1") == 32_000
    assert context_window(500_000, "openai", "my-local-model") == 500_000
    assert context_window(None, "openai", "gpt-4.1") == 1_047_576


def test_effective_window_is_the_smaller_of_route_and_table() -> None:
    # A 1M-token route whose fallback is gpt-4o: gpt-4o still has only 128K.
    assert effective_window(1_000_000, "openai", "gpt-4o") == 128_000
    assert effective_window(1_000_000, "openai", "gpt-4.1") == 1_000_000
    assert effective_window(64_000, "openai", "gpt-4.1") == 64_000
    assert effective_window(300_000, "openai", "my-local-model") == 300_000  # the table does not know it
    assert effective_window(None, "openai", "gpt-4o") == 128_000
    assert effective_window(None, "openai", "my-local-model") == DEFAULT_WINDOW
