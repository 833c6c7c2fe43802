"""Offline encodings, message counting, the count cache and per-target calibration."""

from __future__ import annotations

import hashlib
import math
import socket
import threading
import time
from importlib import resources
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public

from gateway.context import encodings
from gateway.context.tokens import (
    COUNT_CACHE,
    TOKENS_PER_MEDIA_PART,
    TokenEstimator,
    count_message,
    count_messages,
    count_tools,
    encoding_for_model,
    encoding_name_for_model,
    get_encoding,
)
from tests.context.transcripts import SYSTEM, TOOLS, current_turn, exchange

ASSETS = Path(str(resources.files("gateway") / "assets"))
SAMPLES = [
    "hello world",
    "Hello, World! 12345 6789",
    "def f(x):\n    return x ** 2  # squared\n\n\n",
    "Übergrößenträger — naïve café, 東京タワー, Привет мир, 🙂👍🏽",
    '{"city": "Paris", "units": "metric", "days": [1, 2, 3]}',
    "text with <|endoftext|> inside, as data",
    "   leading and trailing spaces   \t\r\n",
]


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    # tiktoken's own loader (download + cache directory) must not be involved at all.
    monkeypatch.setattr(tiktoken.load, "read_file_cached", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file", refuse)


def reference_encoding(name: str, monkeypatch: pytest.MonkeyPatch) -> tiktoken.Encoding:
    """tiktoken's own definition of ``name`` (openai_public), its BPE file read from the shipped copy."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # "" disables tiktoken's cache: read the path directly
    real = tiktoken.load.load_tiktoken_bpe

    def shipped(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        return real(str(ASSETS / url.rsplit("/", 1)[-1]), expected_hash=expected_hash)

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", shipped)
    spec = openai_public.ENCODING_CONSTRUCTORS[name]()
    return tiktoken.Encoding(spec["name"], pat_str=spec["pat_str"], mergeable_ranks=spec["mergeable_ranks"],
                             special_tokens=spec["special_tokens"])


def test_shipped_files_match_the_pinned_hashes() -> None:
    for name, expected in (("o200k_base", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
                           ("cl100k_base", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7")):
        assert hashlib.sha256((ASSETS / f"{name}.tiktoken").read_bytes()).hexdigest() == expected
        assert hashlib.sha256(encodings.asset_bytes(name)).hexdigest() == expected


def test_encodings_load_cold_with_the_network_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_network(monkeypatch)
    encodings.clear_loaded()
    o200k = get_encoding("o200k_base")
    cl100k = get_encoding("cl100k_base")
    assert o200k.encode_ordinary("hello world") == [24912, 2375]
    assert len(o200k.encode_ordinary("hello world")) == 2
    assert len(cl100k.encode_ordinary("hello world")) == 2
    assert get_encoding("o200k_base") is o200k  # loaded once


def test_encodings_equal_tiktoken_own_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("o200k_base", "cl100k_base"):
        ours = get_encoding(name)
        reference = reference_encoding(name, monkeypatch)
        assert ours._pat_str == reference._pat_str
        assert ours._special_tokens == reference._special_tokens
        assert ours.n_vocab == reference.n_vocab
        for text in SAMPLES:
            assert ours.encode_ordinary(text) == reference.encode_ordinary(text), (name, text)
            assert ours.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")


def test_a_corrupt_asset_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = encodings._SPECS["cl100k_base"]
    monkeypatch.setitem(encodings._SPECS, "cl100k_base", encodings._Spec(spec.file, "0" * 64, spec.pat_str,
                                                                         spec.special_tokens))
    with pytest.raises(ValueError, match="corrupt"):
        encodings.asset_bytes("cl100k_base")


def test_concurrent_first_use_builds_once(monkeypatch: pytest.MonkeyPatch) -> None:
    encodings.clear_loaded()
    builds: list[str] = []
    real_build = encodings._build

    def counted(name: str) -> tiktoken.Encoding:
        builds.append(name)
        time.sleep(0.05)  # widen the race window
        return real_build(name)

    monkeypatch.setattr(encodings, "_build", counted)
    seen: list[tiktoken.Encoding] = []
    threads = [threading.Thread(target=lambda: seen.append(get_encoding("cl100k_base"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == ["cl100k_base"]
    assert len(seen) == 8 and all(encoding is seen[0] for encoding in seen)


@pytest.mark.parametrize(("model", "expected"), [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini-2024-07-18", "o200k_base"), ("gpt-4.1-nano", "o200k_base"),
    ("o1", "o200k_base"), ("o3-mini", "o200k_base"), ("o4-mini", "o200k_base"), ("gpt-5", "o200k_base"),
    ("openai/gpt-5-mini", "o200k_base"), ("gpt-4", "cl100k_base"), ("gpt-4-turbo", "cl100k_base"),
    ("gpt-4-0613", "cl100k_base"), ("gpt-3.5-turbo", "cl100k_base"), ("gpt-35-turbo", "cl100k_base"),
    ("claude-sonnet-4-5", "o200k_base"), ("gemini-2.5-pro", "o200k_base"), ("deepseek-chat", "o200k_base"),
])
def test_encoding_by_model(model: str, expected: str) -> None:
    assert encoding_name_for_model(model) == expected
    assert encoding_for_model(model).name == expected


def test_count_messages_follows_openai_rules_on_a_tool_transcript() -> None:
    enc = get_encoding("o200k_base")
    messages = [SYSTEM, *exchange("a"), *current_turn("b")]

    def tokens(text: str) -> int:
        return len(enc.encode_ordinary(text))

    expected = 3  # reply priming
    for message in messages:
        expected += 3 + tokens(message["role"])
        content = message.get("content")
        expected += tokens(content) if isinstance(content, str) else 0
        for call in message.get("tool_calls") or ():
            expected += 3 + tokens(call["function"]["name"]) + tokens(call["function"]["arguments"])
        expected += tokens(message.get("reasoning_content") or "")
        expected += sum(tokens(block["thinking"]) for block in message.get("thinking_blocks") or ())
    assert count_messages(messages, enc) == expected
    # The classic OpenAI rule for a plain message: 3 + role + content, plus 1 + name for a name.
    assert count_message({"role": "user", "content": "hello world"}, enc) == 3 + 1 + 2
    assert count_message({"role": "user", "name": "bob", "content": "hello world"}, enc) == 3 + 1 + 2 + 1 + 1


def test_the_openai_cookbook_example_counts_what_the_api_reported() -> None:
    """OpenAI's "How to count tokens with tiktoken" example: 129 prompt tokens (gpt-4), 124 (gpt-4o)."""
    messages = [
        {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate "
                                      "jargon into plain English."},
        {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
        {"role": "system", "name": "example_assistant",
         "content": "Things working well together will increase revenue."},
        {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to "
                                                              "touch base on opportunities for increased leverage."},
        {"role": "system", "name": "example_assistant",
         "content": "Let's talk later when we're less busy about how to do better."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
                                    "deliverable."},
    ]
    assert count_messages(messages, encoding_for_model("gpt-4")) == 129
    assert count_messages(messages, encoding_for_model("gpt-4o")) == 124


def test_content_parts_artifacts_and_special_text_count() -> None:
    enc = get_encoding("o200k_base")
    parts = {"role": "user", "content": [{"type": "text", "text": "hello world"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
    assert count_message(parts, enc) == 3 + 1 + 2 + TOKENS_PER_MEDIA_PART
    plain = {"role": "assistant", "content": "ok"}
    with_reasoning = {**plain, "reasoning_content": "hello world"}
    with_thinking = {**plain, "thinking_blocks": [{"type": "thinking", "thinking": "hello world", "signature": "s"}]}
    assert count_message(with_reasoning, enc) == count_message(plain, enc) + 2
    assert count_message(with_thinking, enc) == count_message(plain, enc) + 2
    # Special-token strings inside content are data, not an error.
    assert count_message({"role": "tool", "tool_call_id": "c", "content": "<|endoftext|>"}, enc) > 3


def test_count_tools_is_the_json_of_the_definitions() -> None:
    enc = get_encoding("o200k_base")
    assert count_tools([], enc) == 0
    assert 60 < count_tools(TOOLS, enc) < 200
    assert count_tools(TOOLS) == count_tools(TOOLS, enc)


def test_counts_are_cached_across_loop_iterations_and_safe_against_mutation() -> None:
    enc = get_encoding("o200k_base")
    COUNT_CACHE.clear()
    transcript = [SYSTEM, *current_turn("c", rounds=1)]
    for iteration in range(20):
        count_messages(transcript, enc)
        transcript.extend(current_turn(f"i{iteration}", rounds=1)[1:])  # one more tool round
    distinct = len(transcript) - 3  # the last round added was never counted
    assert COUNT_CACHE.misses == distinct
    assert COUNT_CACHE.hits > 5 * distinct
    # A message mutated in place is recounted, not served stale.
    before = count_messages(transcript, enc)
    transcript[-1]["content"] += " and a much longer tail " * 20
    assert count_messages(transcript, enc) > before


def test_calibration_converges_to_the_provider_ratio() -> None:
    estimator = TokenEstimator(alpha=0.3)
    label = "claude:claude-sonnet-4-5"
    messages = [SYSTEM, *exchange("a"), *current_turn("b")]
    raw = estimator.count(messages, TOOLS, model="claude-sonnet-4-5")
    assert estimator.ratio(label) == 1.0
    assert estimator.estimate(label, messages, TOOLS, 1000) == raw + 1000
    # The provider reports 15% more, with noise; after a few calls the ratio is close to 1.15.
    for noise in (0.05, -0.04, 0.03, -0.02, 0.01, 0.0, 0.02, -0.01, 0.0, 0.0):
        estimator.observe(label, raw, round(raw * (1.15 + noise)))
    assert estimator.ratio(label) == pytest.approx(1.15, abs=0.02)
    assert estimator.estimate(label, messages, TOOLS, 1000) == math.ceil(raw * estimator.ratio(label)) + 1000
    # A change in the provider's counting is followed.
    for _ in range(15):
        estimator.observe(label, raw, round(raw * 1.4))
    assert estimator.ratio(label) == pytest.approx(1.4, abs=0.01)
    # Targets are independent; the model comes from the label by default.
    assert estimator.ratio("openai:gpt-4o") == 1.0
    assert estimator.estimate("openai:gpt-4", messages, []) == estimator.count(messages, [], model="gpt-4")


def test_calibration_is_clamped_and_ignores_missing_usage() -> None:
    estimator = TokenEstimator()
    assert estimator.observe("a:m", 1000, 0) == 1.0
    assert estimator.observe("a:m", 0, 1000) == 1.0
    assert estimator.observe("a:m", 1000, 50_000) == 3.0
    for _ in range(30):
        estimator.observe("b:m", 1000, 10)
    assert estimator.ratio("b:m") == 0.5
