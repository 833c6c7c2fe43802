"""Tokenising never raises out of a request: a million spaces make tiktoken panic (a BaseException).

Issue 45: o200k's regex overflows its backtracking stack on a whitespace run of ~1M characters and
the Rust side panics (``pyo3_runtime.PanicException``, not an ``Exception``). ``context/encode.py``
cuts such runs before the encoder sees them, and sizes by bytes whatever the encoder still raises.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tiktoken

from gateway.context import encode as encode_module
from gateway.context.encode import RUN_LIMIT, RUN_PIECE, count, encode
from gateway.context.encodings import get_encoding
from gateway.context.tokens import count_message, count_text
from gateway.context.truncate import cap_tool_result

MILLION = 1_000_000
# Unicode White_Space: what Rust's ``\s`` (the encoder's regex) matches.
WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
               + "\u2028\u2029\u202f\u205f\u3000")


@pytest.fixture(scope="module")
def o200k() -> tiktoken.Encoding:
    return get_encoding("o200k_base")


def test_a_million_spaces_make_the_bare_encoder_panic(o200k: tiktoken.Encoding) -> None:
    """The hazard itself (tiktoken 0.14): if this stops failing, the cut is still harmless."""
    with pytest.raises(BaseException) as raised:
        o200k.encode_ordinary(" " * MILLION)
    assert not isinstance(raised.value, Exception)  # what ``except Exception`` lets through


@pytest.mark.parametrize("run", [" " * MILLION, "\t" * MILLION, "\u3000" * MILLION, " \t" * MILLION,
                                 "\u2028" * (2 * MILLION)])
def test_a_million_whitespace_characters_count_and_encode(o200k: tiktoken.Encoding, run: str) -> None:
    text = "before" + run + "after"
    tokens = encode(o200k, text)
    assert o200k.decode(tokens) == text  # the pieces' tokens are the text, cut nowhere else
    assert count(o200k, text) == len(tokens) == count_text(text, o200k)
    assert len(tokens) < len(text.encode())  # counted, not sized by bytes: no fallback was needed


def test_counts_through_a_message_and_a_cap(o200k: tiktoken.Encoding) -> None:
    spaces = " " * MILLION
    assert count_message({"role": "tool", "tool_call_id": "c", "content": spaces}, o200k) > 7000
    capped = cap_tool_result("head" + spaces + "tail", 100, o200k)
    assert capped.startswith("head") and capped.endswith("tail") and count(o200k, capped) <= 100


def test_no_stderr_noise_from_a_panic() -> None:
    """The cut means no panic at all: Rust prints nothing (with RUST_BACKTRACE=1 it would print a backtrace)."""
    code = ("from gateway.context.encodings import get_encoding; from gateway.context.encode import count;"
            "print(count(get_encoding(), ' ' * 1_000_000))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RUST_BACKTRACE": "1"}, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "7813"
    assert "panicked" not in done.stderr and done.stderr == ""


def test_ordinary_text_is_counted_exactly_as_before(o200k: tiktoken.Encoding) -> None:
    rng = random.Random(45)
    for _ in range(60):
        text = "".join(rng.choice(["word ", "x", "\n", "  ", "\t", "東京 ", "🙂"]) for _ in range(rng.randint(0, 4000)))
        text += " " * rng.randint(0, RUN_LIMIT - 1)  # a run just below the limit is not cut
        assert count(o200k, text) == len(o200k.encode_ordinary(text))
        assert encode(o200k, text) == o200k.encode_ordinary(text)


def test_every_long_run_is_found_wherever_it_sits() -> None:
    """Exactly the whitespace runs of RUN_LIMIT or more, at any alignment to the probes."""
    rng = random.Random(7)
    for _ in range(200):
        parts = []
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.5:
                parts.append(rng.choice(WHITE_SPACE) * rng.randint(1, 3 * RUN_LIMIT))
            else:
                parts.append("ab"[rng.randint(0, 1)] * rng.randint(1, RUN_PIECE + 5))
        text = "".join(parts)
        want = [(m.start(), m.end()) for m in re.finditer(r"\s+", text) if m.end() - m.start() >= RUN_LIMIT]
        assert list(encode_module._long_runs(text)) == want


def test_python_whitespace_holds_the_encoders() -> None:
    """Every character the encoder's ``\\s`` matches is one Python's ``\\s`` matches, so no run hides from the cut."""
    assert all(re.fullmatch(r"\s", char) for char in WHITE_SPACE)


class FakePanic(BaseException):
    """Stands in for ``pyo3_runtime.PanicException`` (its module cannot be imported)."""


class Panicking:
    """An encoding whose every call panics, as tiktoken does on input it cannot handle."""

    real = get_encoding("o200k_base")

    def encode_ordinary(self, text: str) -> list[int]:
        raise FakePanic("called `Result::unwrap()` on an `Err` value")


def test_a_panic_counts_the_text_as_its_utf8_size(caplog: pytest.LogCaptureFixture) -> None:
    text = "héllo wörld " * 10
    assert count(Panicking(), text) == len(text.encode())  # type: ignore[arg-type]
    assert "FakePanic" in caplog.text and "héllo" not in caplog.text  # the caller's text is not logged


def test_a_panic_while_encoding_falls_back_to_fixed_pieces() -> None:
    text = "word " * 5000

    class PanicsOnLong(Panicking):
        def encode_ordinary(self, text: str) -> list[int]:
            if len(text) > RUN_PIECE:
                raise FakePanic("long")
            return self.real.encode_ordinary(text)

    assert Panicking.real.decode(encode(PanicsOnLong(), text)) == text  # type: ignore[arg-type]


@pytest.mark.parametrize("exit_", [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(1), GeneratorExit()])
def test_exits_pass_through(exit_: BaseException) -> None:
    class Exiting:
        def encode_ordinary(self, text: str) -> list[int]:
            raise exit_

    with pytest.raises(type(exit_)):
        count(Exiting(), "text")  # type: ignore[arg-type]
    with pytest.raises(type(exit_)):
        encode(Exiting(), "text")  # type: ignore[arg-type]


def _prose(size: int, seed: int) -> str:
    """Text of words, numbers, punctuation, code and newlines, about ``size`` characters."""
    rng = random.Random(seed)
    words = ["the", "Quick", "brown", "fox's", "jumps", "über", "naïve", "日本語", "x=1;", "(a,", "b)",
             "3.14159", "—", "don't", "HTTP/1.1", "\n", "\n\n", "def f():\n    return", "{\"k\": [1, 2]}"]
    parts: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(words)
        parts.append(word)
        total += len(word) + 1
    return " ".join(parts)


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_a_long_text_is_encoded_in_segments_with_the_same_tokens(name: str) -> None:
    """Cut before a lone space between two non-spaces, the segments give the whole text's tokens exactly."""
    encoding = get_encoding(name)
    text = _prose(5 * encode_module.SEGMENT, seed=7)
    assert encode(encoding, text) == encoding.encode_ordinary(text)
    assert count(encoding, text) == len(encoding.encode_ordinary(text))


def test_no_encoder_call_takes_more_than_a_segment(o200k: tiktoken.Encoding, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GIL is held while tiktoken builds its token list: a 3 MB text never goes in as one call."""
    seen: list[int] = []

    class Spy:
        name = o200k.name

        def encode_ordinary(self, text: str) -> list[int]:
            seen.append(len(text))
            return o200k.encode_ordinary(text)

    text = _prose(3_000_000, seed=3) + " " * MILLION + "a" * 200_000  # prose, a run, a blob with no spaces
    count(Spy(), text)  # type: ignore[arg-type]
    assert sum(seen) == len(text)
    assert max(seen) <= encode_module.SEGMENT + RUN_PIECE
