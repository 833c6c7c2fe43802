"""The note a turn's hosted tool items leave for a target that cannot take them: the text a model can use, bounded."""

from __future__ import annotations

from typing import Any

from gateway.api.responses.hosted_items import MAX_NOTE_CHARS, MAX_PIECE_CHARS, NOTE_HEAD, hosted_note
from gateway.api.responses.items import to_messages
from gateway.providers.openai_responses_input import translate_input


def test_each_kind_says_what_it_did() -> None:
    note = hosted_note([
        {"type": "web_search_call", "action": {"type": "search", "queries": ["a", "b"]}},
        {"type": "web_search_call", "action": {"type": "open_page", "url": "https://example.com"}},
        {"type": "file_search_call", "queries": ["q"], "results": [{"text": "found text", "filename": "f"}]},
        {"type": "shell_call", "action": {"commands": ["make", "test"]}},
        {"type": "shell_call_output", "output": [{"stdout": "ok", "stderr": "warn", "outcome": {"type": "exit"}}]},
        {"type": "apply_patch_call", "operation": {"type": "update_file", "path": "a.py", "diff": "-x\n+y"}},
        {"type": "apply_patch_call_output", "output": "done"},
        {"type": "computer_call", "action": {"type": "click", "x": 1, "y": 2}},
        {"type": "computer_call_output", "output": {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}},
        {"type": "mcp_list_tools", "tools": [{"name": "t"}]},
    ])
    assert note.splitlines() == [
        NOTE_HEAD, "- web search: a b", "- web search opened page: https://example.com", "- file search: q",
        "  found: found text", "- shell ran `make test`", "- output: ok", "warn", "- apply_patch update_file a.py:",
        "-x", "+y", "- output: done"]
    assert "data:image" not in note


def test_nothing_textual_is_no_note() -> None:
    assert hosted_note([{"type": "computer_call"}, {"type": "mcp_list_tools"}, {"type": "tool_search_call"}]) == ""


def test_hostile_shapes_and_sizes_are_bounded() -> None:
    wrong: list[dict[str, Any]] = [
        {"type": "web_search_call", "action": "not an object"}, {"type": "local_shell_call", "action": [1, 2]},
        {"type": "code_interpreter_call", "code": {"x": 1}, "outputs": "logs"},
        {"type": "local_shell_call_output", "output": 42}, {"type": "file_search_call", "results": [None, 3]}]
    assert hosted_note(wrong) == f"{NOTE_HEAD}\n- web search"  # nothing raised, nothing made up
    huge = [{"type": "local_shell_call_output", "output": "x" * 10**6} for _ in range(50)]
    note = hosted_note(huge)
    assert len(note) <= MAX_NOTE_CHARS + 10 and "x" * (MAX_PIECE_CHARS + 1) not in note


def test_the_responses_adapter_takes_the_note_off_and_sends_the_items() -> None:
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search",
                                                                                         "query": "q"}}
    messages = to_messages([{"type": "message", "role": "user", "content": "hi"}, search,
                            {"type": "message", "role": "assistant", "content": "Answer."}]).messages
    assert messages[1]["content"].startswith(NOTE_HEAD) and messages[1]["content"].endswith("\n\nAnswer.")
    sent = translate_input(messages, "resp")
    assert sent[1] == search and sent[2]["content"] == [{"type": "output_text", "text": "Answer."}]
    # A content rewritten since (the note gone): the items still go, the text as it now is.
    messages[1]["content"] = "Shorter."
    assert translate_input(messages, "resp")[2]["content"][0]["text"] == "Shorter."
