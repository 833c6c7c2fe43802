"""Anthropic Messages, the transcript: canonical messages -> ``system`` and ``messages``, translated or verbatim.

Translated (a chat-completions or Responses caller): system and developer messages move to the
top-level ``system``; tool calls become ``tool_use`` blocks; each run of ``tool`` messages becomes
ONE user message of ``tool_result`` blocks (any user text that follows goes after them, as
Anthropic requires); thinking blocks an earlier Anthropic turn produced are replayed verbatim in
front of the calls they belong to (also when this request does not think: the API drops them
itself, and keeping them keeps the turn intact). Foreign artifacts (``reasoning_content``,
``extra_content``) never reach the wire because only known fields are copied.

Verbatim: a message carrying ``anthropic_content`` (gateway/canonical/types.py) is sent with exactly those
blocks, so thinking signatures, ``cache_control`` and citations reach Anthropic as they were
written and the prompt cache keeps hitting. An assistant turn Anthropic answered earlier is sent
that way on every path; a ``/v1/messages`` caller's (native) request has every message sent that
way (``translate_native_messages``). The blocks are used only while they still describe the
message: an assistant's ``tool_use`` ids must be its tool calls' ids, a tool result's
``tool_use_id`` its ``tool_call_id``, as the translation would send them; otherwise the message is
translated (both sides then carry the same sanitised ids).

Tool-call ids: a valid id (``^[a-zA-Z0-9_-]+$``) is kept; any other has each invalid character
replaced by ``_`` and ``_`` + 8 hex digits of blake2b(original) appended, so two ids differing
only in invalid characters stay distinct. The same function rewrites ``tool_use.id`` and
``tool_result.tool_use_id``, so pairs keep matching; responses carry Anthropic's own ids.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.canonical import Message, history_arguments, text_of
from gateway.providers.anthropic_stream import THINKING_TYPES
from gateway.providers.base import ErrorClass, ProviderError

_VALID_ID = re.compile(r"[a-zA-Z0-9_-]+")
_INVALID_ID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")


def bad_request(message: str) -> ProviderError:
    return ProviderError(ErrorClass.BAD_REQUEST, message, status=400)


def sanitize_tool_id(tool_id: str) -> str:
    """Deterministic, collision-resistant rewrite of an id to Anthropic's ``^[a-zA-Z0-9_-]+$``."""
    if _VALID_ID.fullmatch(tool_id):
        return tool_id
    digest = hashlib.blake2b(tool_id.encode(), digest_size=4).hexdigest()
    return f"{_INVALID_ID_CHAR.sub('_', tool_id)}_{digest}"

# --- messages ---------------------------------------------------------------------------


def _text_block(part: Mapping[str, Any], text: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


def _data_url(url: str) -> tuple[str, str] | None:
    """``data:<media type>;base64,<payload>`` -> (media type, payload)."""
    header, comma, payload = url[5:].partition(",")
    media_type, *options = header.split(";")
    if not comma or "base64" not in options or not media_type:
        return None
    return media_type, payload


def _image(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise bad_request(f"{where}: image_url has no url")
    if url.startswith("data:"):
        parsed = _data_url(url)
        if parsed is None:
            raise bad_request(f"{where}: only base64 data: URLs can be sent to Anthropic as images")
        source: dict[str, Any] = {"type": "base64", "media_type": parsed[0], "data": parsed[1]}
    elif url.startswith(("https://", "http://")):
        source = {"type": "url", "url": url}
    else:
        raise bad_request(f"{where}: image URL must be a data: or http(s) URL")
    block: dict[str, Any] = {"type": "image", "source": source}
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


def _document(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    file = part.get("file")
    data = file.get("file_data") if isinstance(file, dict) else None
    parsed = _data_url(data) if isinstance(data, str) and data.startswith("data:") else None
    if parsed is None or parsed[0] != "application/pdf":
        raise bad_request(f"{where}: only inline PDF files (file_data as a base64 data: URL) can be sent to "
                          "Anthropic")
    return {"type": "document", "source": {"type": "base64", "media_type": parsed[0], "data": parsed[1]}}


def _content_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """User / tool / system content -> blocks. Blank text is dropped: Anthropic rejects it."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        raise bad_request(f"{where}: content must be a string or a list of parts")
    blocks: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text"):
            text = str(part.get("text") or "")
            if text.strip():
                blocks.append(_text_block(part, text))
        elif kind == "image_url":
            blocks.append(_image(part, f"{where}.content[{index}]"))
        elif kind == "file":
            blocks.append(_document(part, f"{where}.content[{index}]"))
        else:
            raise bad_request(f"{where}.content[{index}]: content part type '{kind}' is not supported by Anthropic")
    return blocks


def _thinking_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = message.get("thinking_blocks")
    if not isinstance(blocks, list):
        return []
    return [block for block in blocks if isinstance(block, dict) and block.get("type") in THINKING_TYPES]


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not function.get("name") or not call.get("id"):
        raise bad_request(f"{where}: a tool call needs an id and a function name")
    return {"type": "tool_use", "id": sanitize_tool_id(str(call["id"])), "name": function["name"],
            "input": history_arguments(function.get("arguments"))}


def _assistant_blocks(message: Message, where: str) -> list[dict[str, Any]]:
    """Thinking blocks first (verbatim), then text, then tool_use: the order Anthropic produced."""
    thinking = _thinking_blocks(message)
    blocks: list[dict[str, Any]] = []
    text = text_of(message.get("content")) or str(message.get("refusal") or "")
    if text.strip():
        blocks.append({"type": "text", "text": text})
    for index, call in enumerate(message.get("tool_calls") or ()):
        blocks.append(_tool_use(call, f"{where}.tool_calls[{index}]"))
    return thinking + blocks if blocks else []  # nothing to say: skip the message


def _tool_result(message: Message, where: str) -> dict[str, Any]:
    tool_call_id = message.get("tool_call_id")
    if not tool_call_id:
        raise bad_request(f"{where}: tool message without tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": sanitize_tool_id(str(tool_call_id))}
    content = message.get("content")
    if isinstance(content, str):
        if content.strip():
            block["content"] = content
    elif content:
        parts = _content_blocks(content, where)
        if parts:
            block["content"] = parts
    return block


def _call_id(call: Any) -> str | None:
    value = call.get("id") if isinstance(call, dict) else None
    return sanitize_tool_id(str(value)) if value else None


def _verbatim_assistant(message: Message) -> Any:
    """The assistant's ``anthropic_content`` while its ``tool_use`` ids are its calls' ids, else None.

    Empty content is None too: translated, a turn with nothing to say is skipped rather than sent empty.
    """
    content = message.get("anthropic_content")
    if not content or not isinstance(content, (str, list)):
        return None
    ids = []
    if isinstance(content, list):
        ids = [block.get("id") for block in content if isinstance(block, dict) and block.get("type") == "tool_use"]
    return content if ids == [_call_id(call) for call in message.get("tool_calls") or ()] else None


def _verbatim_result(message: Message) -> list[dict[str, Any]] | None:
    """The tool message's ``anthropic_content`` while it answers the message's ``tool_call_id``, else None."""
    content = message.get("anthropic_content")
    if not content or not isinstance(content, list) or not message.get("tool_call_id"):
        return None
    expected = sanitize_tool_id(str(message["tool_call_id"]))
    for block in content:
        if not isinstance(block, dict) or (block.get("type") == "tool_result" and block.get("tool_use_id") != expected):
            return None
    return content


def _assistant(message: Message, where: str) -> dict[str, Any] | None:
    content = _verbatim_assistant(message)
    if content is None:
        content = _assistant_blocks(message, where)
    return {"role": "assistant", "content": content} if content else None


def _as_blocks(content: Any) -> list[Any]:
    """Anthropic content (a string or blocks) as blocks; a blank string is no block (Anthropic rejects it)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    return list(content)


def _joined(message: dict[str, Any], blocks: list[Any]) -> None:
    """Append ``blocks`` to an outgoing user message; a new list, never the caller's verbatim one."""
    if blocks:
        message["content"] = [*_as_blocks(message["content"]), *blocks]


def _results_only(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and all(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content)


def _leading_system(parts: list[Any]) -> Any:
    """One leading system message: its content as it came (a string stays a string); several: their blocks."""
    if len(parts) == 1:
        return parts[0] or None
    blocks = [block for part in parts for block in _as_blocks(part)]
    return blocks or None


def _transcript(messages: Sequence[Message], native: bool) -> tuple[list[Any], list[dict[str, Any]]]:
    """The one translation of both entry points: (the system parts, Anthropic messages).

    ``native`` (a ``/v1/messages`` caller's transcript) is the only switch: its messages' own
    ``anthropic_content`` is used (system, user and tool results as well as assistant turns), and a
    system message after the first other message stays where it is. Translated, every system
    message's blocks are the system parts. Either way, consecutive tool results and the user text
    after them are ONE user message, results first; a user message of one plain text block is a string.
    """
    system: list[Any] = []
    out: list[dict[str, Any]] = []
    for position, message in enumerate(messages):
        where = f"messages[{position}]"
        role = message.get("role")
        verbatim = message.get("anthropic_content") if native else None
        if role in ("system", "developer"):
            content = verbatim if isinstance(verbatim, (str, list)) else _content_blocks(message.get("content"), where)
            if not native:
                system.extend(content)
            elif not out:
                system.append(content)
            elif content:
                out.append({"role": "system", "content": content})
            continue
        if role == "assistant":
            turn = _assistant(message, where)
            if turn:
                out.append(turn)
            continue
        if role == "tool":
            blocks = (_verbatim_result(message) if native else None) or [_tool_result(message, where)]
        elif role == "user":
            if isinstance(verbatim, (str, list)):  # the caller's own user message, as it wrote it
                if not verbatim:
                    continue  # nothing left once its tool results became tool messages
                if out and out[-1]["role"] == "user" and _results_only(out[-1]):
                    _joined(out[-1], _as_blocks(verbatim))
                else:
                    out.append({"role": "user", "content": verbatim})
                continue
            blocks = _content_blocks(message.get("content"), where)
        else:
            raise bad_request(f"{where}: role '{role}' cannot be sent to Anthropic")
        if out and out[-1]["role"] == "user":
            _joined(out[-1], blocks)
        elif blocks:
            single = len(blocks) == 1 and blocks[0].keys() == {"type", "text"}
            out.append({"role": "user", "content": blocks[0]["text"] if single else list(blocks)})
    return system, out


def translate_messages(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Canonical transcript -> (top-level system blocks, Anthropic messages)."""
    return _transcript(messages, native=False)


def translate_native_messages(messages: Sequence[Message]) -> tuple[Any, list[dict[str, Any]]]:
    """A ``/v1/messages`` caller's transcript -> (top-level ``system`` or None, Anthropic messages).

    Every message with ``anthropic_content`` goes out as those blocks; the loop's own messages
    (server tool results, the finalize instruction, summaries) are translated. System messages
    before the first other message are the top-level ``system``; a later one stays where it is
    (a caller's mid-conversation system message). A caller's user message is its own message as it
    wrote it, joined only by the tool results it carried (placed before it by the parser): those,
    and the loop's tool results and user text, still form ONE user message, results first.
    """
    system, out = _transcript(messages, native=True)
    return _leading_system(system), out


def current_turn_lacks_thinking(messages: Sequence[Message]) -> bool:
    """A tool call since the last user message came back without its thinking blocks."""
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            return False
        if role == "assistant" and message.get("tool_calls") and not _thinking_blocks(message):
            return True
    return False

