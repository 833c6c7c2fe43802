"""A hosted tool's items sent back as input: kept verbatim for an OpenAI Responses target, as text for the others.

Codex (``store: false``) and the Agents SDK send every earlier output item back, the items of the
hosted tools an OpenAI Responses target ran among them (``web_search_call``, ``code_interpreter_call``,
``local_shell_call`` and its output, ...). The API that issued them takes them back as they are; no
other format has a place for them. So an assistant turn keeps them under ``openai_hosted``
(``canonical/types.py``): the Responses adapter sends them verbatim, every other adapter drops them.

What they did still matters to a model on another target (a failover from OpenAI to Anthropic in the
middle of a Codex session: the commands run and their output, the code and its logs). So the text
they carry opens the turn's content as a note (:func:`hosted_note`), which the Responses adapter
takes off again. Only text a model can use is kept: search queries and opened pages, file search
queries and the text found, code and its logs, shell commands and their output, patches and their
result; an image's bytes, a screenshot, a listing of tools are left out (an image is only mentioned).
Every piece is bounded, and so is the note.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: a piece of an item's text (a command's output, a patch, found text) is cut here
MAX_PIECE_CHARS = 4000
#: one turn's note is cut here, whatever its items
MAX_NOTE_CHARS = 16000
NOTE_HEAD = "[Earlier tool activity of this turn (hosted tools), as text:]"
_CUT = " …[cut]"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_PIECE_CHARS else text[:MAX_PIECE_CHARS] + _CUT


def _text(value: Any) -> str:
    """A piece of an item as text: a string as it is, a list of strings joined by spaces, else nothing."""
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return _cut(" ".join(value))
    return ""


def _object(item: dict[str, Any], key: str) -> dict[str, Any]:
    value = item.get(key)
    return value if isinstance(value, dict) else {}


def _web_search(item: dict[str, Any]) -> str:
    action = _object(item, "action")
    kind = action.get("type", "search")
    if kind == "search":
        queries = _text(action.get("queries")) or _text(action.get("query"))
        return f"web search: {queries}" if queries else "web search"
    if kind == "open_page":
        return f"web search opened page: {_text(action.get('url'))}"
    if kind == "find":
        return f"web search looked for {_text(action.get('pattern'))!r} in {_text(action.get('url'))}"
    return "web search"


def _file_search(item: dict[str, Any]) -> str:
    results = item.get("results")
    found = [_text(r.get("text")) for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    queries = _text(item.get("queries"))
    if not (queries or any(found)):
        return ""
    return f"file search: {queries}" + "".join(f"\n  found: {text}" for text in found if text)


def _code(item: dict[str, Any]) -> str:
    outputs = item.get("outputs")
    logs = [_text(o.get("logs")) for o in outputs if isinstance(o, dict) and o.get("type") == "logs"] \
        if isinstance(outputs, list) else []
    code = _text(item.get("code"))
    if not code:
        return ""
    return f"code interpreter ran:\n{code}" + "".join(f"\n  output: {text}" for text in logs if text)


def _local_shell(item: dict[str, Any]) -> str:
    action = _object(item, "action")
    command = _text(action.get("command"))
    return f"local shell ran `{command}`" if command else ""


def _shell(item: dict[str, Any]) -> str:
    action = _object(item, "action")
    commands = _text(action.get("commands"))
    return f"shell ran `{commands}`" if commands else ""


def _output(item: dict[str, Any]) -> str:
    """A client-run call's output (local shell, shell, apply_patch): a string, or shell's list of streams."""
    output = item.get("output")
    if isinstance(output, list):
        streams = [_text(o.get(key)) for o in output if isinstance(o, dict) for key in ("stdout", "stderr")]
        output = "\n".join(text for text in streams if text)
    text = _text(output)
    return f"output: {text}" if text else ""


def _patch(item: dict[str, Any]) -> str:
    operation = _object(item, "operation")
    path = _text(operation.get("path"))
    if not path:
        return ""
    line = f"apply_patch {_text(operation.get('type'))} {path}"
    diff = _text(operation.get("diff"))
    return f"{line}:\n{diff}" if diff else line


_READERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "web_search_call": _web_search, "file_search_call": _file_search, "code_interpreter_call": _code,
    "local_shell_call": _local_shell, "local_shell_call_output": _output, "shell_call": _shell,
    "shell_call_output": _output, "apply_patch_call": _patch, "apply_patch_call_output": _output,
    "image_generation_call": lambda item: "generated an image (not shown here)",
}


def hosted_note(items: list[dict[str, Any]]) -> str:
    """The text ``items`` carry for a model on another target ("" when none carries any), bounded."""
    lines = [line for item in items if (read := _READERS.get(item["type"])) is not None and (line := read(item))]
    if not lines:
        return ""
    note = "\n".join([NOTE_HEAD, *(f"- {line}" for line in lines)])
    return note if len(note) <= MAX_NOTE_CHARS else note[:MAX_NOTE_CHARS] + _CUT


def hosted_artifact(items: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """(the turn's ``openai_hosted`` artifact, its note): the items as the caller sent them, a copy of the list."""
    note = hosted_note(items)
    return {"items": list(items), "note": note}, note
