"""The context guard end to end: compress, prune, skip, per-result caps, smaller fallback windows."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest

from gateway.context import SUMMARY_PREFIX, count_messages, get_encoding
from tests.e2e.conftest import ROOT, Gateway
from tests.fakes.upstream import FakeUpstream, Reply

LIMIT = int(0.8 * 4000)


def o200k() -> Any:
    """The encoding the routes count with, loaded at first use (not at collection: a second of CPU in each worker)."""
    return get_encoding("o200k_base")


def filler(tag: str, words: int = 330) -> str:
    return " ".join(f"{tag}-{i % 50} detail" for i in range(words // 2))


def long_history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(4):
        messages.append({"role": "user", "content": f"old question {n}: " + filler(f"q{n}")})
        messages.append({"role": "assistant", "content": f"old answer {n}: " + filler(f"a{n}")})
    messages.append({"role": "user", "content": "NEW QUESTION: what now?"})
    return messages


def prompt_tokens(body: dict[str, Any]) -> int:
    return count_messages(body["messages"], o200k())


def run(gateway: Gateway, stream: bool, **kwargs: Any) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    client = gateway.client()
    if not stream:
        completion = client.chat.completions.create(**kwargs)
        return completion.choices[0].message.content or "", completion.model_extra["gateway"], []
    text, extension, events = "", {}, []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        extra = chunk.model_extra.get("gateway") or {}
        if "event" in extra:
            events.append(extra)
        elif extra:
            extension = extra
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text, extension, events


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_compression_summarises_the_old_part(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    history = long_history()
    assert count_messages(history, o200k()) > LIMIT - 300
    fakes["secondary"].queue(Reply(text="User asked four old questions; all answered."))
    fakes["primary"].queue(Reply(text="Here is what now."))
    text, extension, events = run(gateway, stream, model="ctx_compress", messages=history, max_tokens=300)
    assert text == "Here is what now."
    summariser_prompt = str(fakes["secondary"].bodies[0]["messages"])
    assert "old question 0" in summariser_prompt and "old answer 3" in summariser_prompt
    assert "NEW QUESTION" not in summariser_prompt, "the recent exchange is never summarised"
    sent = fakes["primary"].bodies[0]["messages"]
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert sent[1]["content"].startswith(SUMMARY_PREFIX) and "four old questions" in sent[1]["content"]
    assert sent[2]["content"] == "NEW QUESTION: what now?" and len(sent) == 3
    assert prompt_tokens(fakes["primary"].bodies[0]) + 300 <= LIMIT
    assert extension["context"]["compressions"] == 1
    if stream:
        assert "context_compressed" in [e["event"] for e in events]


def test_summariser_failure_falls_back_to_prune(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["secondary"].queue(Reply(status=500))
    fakes["primary"].queue(Reply(text="pruned answer"))
    text, extension, _ = run(gateway, False, model="ctx_compress", messages=long_history(), max_tokens=300)
    assert text == "pruned answer"
    sent = fakes["primary"].bodies[0]["messages"]
    contents = " ".join(m["content"] for m in sent)
    assert "old question 0" not in contents, "the oldest exchange goes first"
    assert sent[0]["role"] == "system" and sent[-1]["content"] == "NEW QUESTION: what now?"
    assert extension["context"]["pruned_messages"] >= 2 and extension["context"]["compressions"] == 0
    assert prompt_tokens(fakes["primary"].bodies[0]) + 300 <= LIMIT


def test_tool_results_are_capped_in_the_middle(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("big", {"kb": 12})]), Reply(text="done"))
    run(gateway, False, model="ctx_prune", messages=[{"role": "user", "content": "fetch"}])
    result = next(m for m in fakes["primary"].bodies[1]["messages"] if m["role"] == "tool")["content"]
    assert "tokens truncated by the gateway" in result
    assert result.startswith("row 0:") and "value=" in result.splitlines()[-1]
    assert len(o200k().encode_ordinary(result)) <= 500


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_no_room_skips_the_rest_of_the_batch_and_finalizes(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                            stream: bool) -> None:
    calls = [("big", {"kb": 12, "tag": f"t{i}"}) for i in range(8)]
    fakes["primary"].queue(Reply(tool_calls=calls), Reply(text="Answer from what fit."))
    text, extension, events = run(gateway, stream, model="ctx_prune", messages=[{"role": "user", "content": "go"}],
                                  max_tokens=200)
    assert text == "Answer from what fit."
    statuses = [c["status"] for c in extension["tool_calls"]]
    assert 0 < statuses.count("skipped") < 8 and statuses.count("ok") == 8 - statuses.count("skipped")
    assert extension["context"]["skipped_tools"] == statuses.count("skipped")
    final = fakes["primary"].bodies[-1]
    assert final["tool_choice"] == "none"
    results = [m["content"] for m in final["messages"] if m["role"] == "tool"]
    kinds = ["skipped" if r.startswith("Skipped") else "ok" for r in results]
    assert kinds == ["ok"] * statuses.count("ok") + ["skipped"] * statuses.count("skipped"), "cut at the batch's end"
    assert prompt_tokens(final) + 200 <= LIMIT
    if stream:
        assert "tools_skipped" in [e["event"] for e in events]


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_twenty_iterations_far_beyond_the_window(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                 stream: bool) -> None:
    fakes["primary"].queue(*[Reply(tool_calls=[("big", {"kb": 6, "tag": f"step{i}"})]) for i in range(20)],
                           Reply(text="All twenty steps done."))
    fakes["secondary"].default = Reply(text="Steps so far fetched rows; nothing unusual.")
    try:
        text, extension, _ = run(gateway, stream, model="ctx_compress",
                                 messages=[{"role": "user", "content": "Run the 20 steps."}], max_tokens=200)
    finally:
        fakes["secondary"].default = Reply(text="ok")
    assert text == "All twenty steps done."
    assert extension["iterations"] == 21
    assert [c["status"] for c in extension["tool_calls"]] == ["ok"] * 20
    assert extension["context"]["compressions"] >= 3
    total_results = 20 * 6 * 1024
    assert total_results > 20 * 4000, "the results total several times the window"
    for body in fakes["primary"].bodies:
        assert prompt_tokens(body) + 200 <= LIMIT, "every upstream request fits the window"


def test_a_smaller_fallback_window_triggers_the_guard(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    history = [{"role": "user", "content": f"q{n} " + filler(f"x{n}", 900)} for n in range(5)]
    for n in range(4):
        history.insert(2 * n + 1, {"role": "assistant", "content": f"a{n}"})
    assert count_messages(history, o200k()) > 8192 * 0.8  # fine for gpt-4.1 (1M), too big for gpt-4 (8K)
    fakes["primary"].queue(Reply(status=503))
    fakes["secondary"].queue(Reply(text="fits the small one"))
    text, extension, _ = run(gateway, False, model="ctx_small_fallback", messages=history, max_tokens=100)
    assert text == "fits the small one"
    assert extension["context"]["pruned_messages"] > 0
    assert count_messages(fakes["secondary"].bodies[0]["messages"], o200k()) + 100 <= 8192 * 0.8


def test_token_counting_works_without_network() -> None:
    """A fresh interpreter with every socket connection refused still counts tokens from the shipped files."""
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n    raise OSError('network disabled for this test')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\n"
        "import os; os.environ['TIKTOKEN_CACHE_DIR'] = '/nonexistent-cache'\n"
        "from gateway.context import get_encoding, count_messages\n"
        "enc = get_encoding('o200k_base')\n"
        "print(len(enc.encode_ordinary('hello world')), count_messages([{'role': 'user', 'content': 'hi'}], enc))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "8"]
    assert socket.socket.connect is not None


def test_unknown_window_leaves_the_clients_own_request_alone(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """A model the table does not know (a self-hosted one) gets the client's request as sent, however long."""
    history = [{"role": "user", "content": f"q{n} " + filler(f"x{n}", 900)} for n in range(5)]
    for n in range(4):
        history.insert(2 * n + 1, {"role": "assistant", "content": f"a{n}"})
    assert count_messages(history, o200k()) > 8192  # beyond the conservative default window
    fakes["primary"].queue(Reply(text="long context ok"))
    text, extension, _ = run(gateway, False, model="plain", messages=history)
    assert text == "long context ok"
    assert fakes["primary"].bodies[0]["messages"] == history
    assert extension.get("context", {}).get("pruned_messages", 0) == 0
