"""Capping a tool result: head and tail kept, the middle replaced by a marker, idempotent."""

from __future__ import annotations

import re

import pytest
import tiktoken

from gateway.context.tokens import get_encoding
from gateway.context.truncate import cap_tool_messages, cap_tool_result


@pytest.fixture(params=["o200k_base", "cl100k_base"])
def enc(request: pytest.FixtureRequest) -> tiktoken.Encoding:
    return get_encoding(request.param)


def long_text() -> str:
    rows = "\n".join(f"row {i}: value={i * 37 % 1000} status={'ok' if i % 7 else 'error'}" for i in range(3000))
    return f"HEAD-START report of 3000 rows\n{rows}\nTAIL-END total=3000 errors=428"


def test_short_text_is_unchanged(enc: tiktoken.Encoding) -> None:
    text = "21C and clear in Paris."
    assert cap_tool_result(text, 100, enc) is text
    assert cap_tool_result("", 100, enc) == ""
    exact = "word " * 50
    n = len(enc.encode_ordinary(exact))
    assert cap_tool_result(exact, n, enc) is exact


def test_long_text_keeps_head_tail_and_marker(enc: tiktoken.Encoding) -> None:
    text = long_text()
    total = len(enc.encode_ordinary(text))
    capped = cap_tool_result(text, 500, enc)
    assert len(enc.encode_ordinary(capped)) <= 500
    assert capped.startswith("HEAD-START report of 3000 rows\nrow 0:")
    assert capped.endswith("TAIL-END total=3000 errors=428")
    marker = re.search(r"\n\[\.\.\. (\d+) tokens truncated by the gateway \.\.\.\]\n", capped)
    assert marker is not None
    removed = int(marker.group(1))
    head, tail = capped[:marker.start()], capped[marker.end():]
    kept = len(enc.encode_ordinary(head)) + len(enc.encode_ordinary(tail))
    assert abs(kept + removed - total) <= 2
    assert 0.4 < len(enc.encode_ordinary(head)) / max(1, kept) < 0.6  # head and tail share the budget


def test_capping_is_idempotent(enc: tiktoken.Encoding) -> None:
    text = long_text()
    for limit in (40, 100, 777, 2000):
        once = cap_tool_result(text, limit, enc)
        assert cap_tool_result(once, limit, enc) == once


def test_multibyte_characters_are_not_split_into_replacement_chars(enc: tiktoken.Encoding) -> None:
    text = "東京タワー🙂👍🏽 " * 2000
    capped = cap_tool_result(text, 301, enc)
    assert "\ufffd" not in capped
    assert len(enc.encode_ordinary(capped)) <= 301
    assert "tokens truncated by the gateway" in capped


def test_cap_tool_messages_caps_only_long_tool_results(enc: tiktoken.Encoding) -> None:
    big = {"role": "tool", "tool_call_id": "call_1", "content": long_text()}
    small = {"role": "tool", "tool_call_id": "call_2", "content": "21C"}
    assistant = {"role": "assistant", "content": long_text()}
    turn = [assistant, big, small]
    capped = cap_tool_messages(turn, 200, enc)
    assert capped[0] is assistant and capped[2] is small
    assert capped[1] is not big and big["content"] == long_text()  # the original is not modified
    assert capped[1]["tool_call_id"] == "call_1"
    assert len(enc.encode_ordinary(capped[1]["content"])) <= 200
    assert cap_tool_messages(turn, None, enc) is turn
