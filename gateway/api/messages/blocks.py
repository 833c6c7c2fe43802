"""A Messages API conversation in the canonical transcript, each message keeping its blocks verbatim.

Every target gets the canonical form (text, image and file parts, tool calls, tool messages);
an Anthropic target gets the caller's own blocks from ``anthropic_content`` (thinking signatures,
``cache_control``, citations, block types the gateway does not know), so its prompt cache sees
exactly what the caller sent. The rules follow both formats' pairing rules at once:

* a user message's ``tool_result`` blocks become ``tool`` messages, placed before the rest of the
  message (Anthropic requires them first; OpenAI requires them right after the calls);
* a ``thinking`` block the gateway signed (reasoning of a non-Anthropic answer, see ``signature``)
  becomes ``reasoning_content`` and never reaches Anthropic; one it did not sign is Anthropic's and
  is kept verbatim (``thinking_blocks``);
* ``mcp_tool_use`` / ``mcp_tool_result`` blocks of server ``loopgate`` are the gateway's own
  report of its server tools (the ``mcp-client`` beta): the stored transcript holds the real
  exchange, so they are dropped;
* blocks with no counterpart elsewhere (server tool results, search results without text, new
  types) stay in ``anthropic_content`` only; a user block of that kind is named in the canonical
  text, so other models know something was there.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api.messages import signature
from gateway.canonical import Message
from gateway.errors import bad_request, quoted

#: the server name the gateway's own ``mcp_tool_use`` blocks carry (``render``)
SERVER_NAME = "loopgate"


def kind_of(value: Any) -> str:
    """A JSON value's kind for an error message (``an object``, ``null``): never the value itself."""
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _block(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise bad_request(f"{where}: each content block must be an object with a string 'type'", where)
    return value


def _text(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise bad_request(f"{where}.text: a text block needs a string 'text', not {kind_of(text)}", f"{where}.text")
    return text


def _system_text(blocks: list[Any], where: str) -> str:
    """The text of system blocks (text blocks only, as Anthropic requires)."""
    texts = []
    for index, block in enumerate(blocks):
        at = f"{where}.{index}"
        if _block(block, at)["type"] != "text":
            raise bad_request(f"{at}.type: system content holds text blocks only, not {quoted(block['type'])}", at)
        texts.append(_text(block, at))
    return "\n\n".join(texts)


def system_message(system: Any) -> Message | None:
    """The top-level ``system`` (a string or text blocks) as the leading canonical message."""
    if system is None or system == "" or system == []:
        return None
    if not isinstance(system, str | list):
        raise bad_request(f"system: must be a string or an array of text blocks, not {kind_of(system)}", "system")
    text = system if isinstance(system, str) else _system_text(system, "system")
    return {"role": "system", "content": text, "anthropic_content": system}


def _media_part(block: dict[str, Any], where: str) -> dict[str, Any] | None:
    """An ``image`` or ``document`` block as an OpenAI content part; None when it has no counterpart."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise bad_request(f"{where}.source: an {block['type']} block needs a 'source' object", f"{where}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise bad_request(f"{where}.source: base64 sources need string 'media_type' and 'data'", f"{where}.source")
        url = f"data:{media};base64,{data}"
        if block["type"] == "image":
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "file", "file": {"filename": str(block.get("title") or "document"), "file_data": url}}
    if kind == "url":
        link = source.get("url")
        if not isinstance(link, str):
            raise bad_request(f"{where}.source.url: must be a string", f"{where}.source.url")
        if block["type"] == "image":
            return {"type": "image_url", "image_url": {"url": link}}
        return {"type": "text", "text": f"[document: {link}]"}
    if kind == "text" and block["type"] == "document":
        data = source.get("data")
        if not isinstance(data, str):
            raise bad_request(f"{where}.source.data: a text source needs string 'data'", f"{where}.source.data")
        title = block.get("title")
        return {"type": "text", "text": f"{title}\n\n{data}" if isinstance(title, str) and title else data}
    return None


def _user_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": _text(block, where)}
    if kind in ("image", "document"):
        part = _media_part(block, where)
        if part is not None:
            return part
    elif kind == "search_result":
        texts = [b.get("text") for b in block.get("content") or () if isinstance(b, dict)]
        body = "\n".join(t for t in texts if isinstance(t, str))
        return {"type": "text", "text": f"{block.get('title') or ''}\n{block.get('source') or ''}\n{body}".strip()}
    return {"type": "text", "text": f"[a {kind} block this model cannot read was left out]"}


def _canonical_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts) if len(parts) == 1 else "\n\n".join(p["text"] for p in parts)
    return parts


def _tool_result(block: dict[str, Any], where: str) -> Message:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise bad_request(f"{where}.tool_use_id: a tool_result needs a string 'tool_use_id'", f"{where}.tool_use_id")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise bad_request(f"{where}.is_error: must be a boolean", f"{where}.is_error")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for index, inner in enumerate(content):
            part = _user_part(_block(inner, f"{where}.content.{index}"), f"{where}.content.{index}")
            # Tool messages are text for OpenAI-format models: an image is named, not sent.
            texts.append(part["text"] if part["type"] == "text" else "[an image this model cannot see was left out]")
        text = "\n".join(texts)
    else:
        raise bad_request(f"{where}.content: must be a string or an array of blocks, not {kind_of(content)}",
                          f"{where}.content")
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text, "anthropic_content": [block]}


def _user(content: Any, where: str) -> list[Message]:
    if isinstance(content, str):
        return [{"role": "user", "content": content, "anthropic_content": content}]
    results: list[Message] = []
    rest: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, raw in enumerate(content):
        block = _block(raw, f"{where}.{index}")
        if block["type"] == "tool_result":
            results.append(_tool_result(block, f"{where}.{index}"))
        else:
            rest.append(block)
            parts.append(_user_part(block, f"{where}.{index}"))
    if rest:
        results.append({"role": "user", "content": _canonical_content(parts), "anthropic_content": rest})
    return results


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name, tool_input = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"{where}.id: a tool_use block needs a string 'id'", f"{where}.id")
    if not isinstance(name, str) or not name:
        raise bad_request(f"{where}.name: a tool_use block needs a string 'name'", f"{where}.name")
    if not isinstance(tool_input, dict):
        raise bad_request(f"{where}.input: must be an object, not {kind_of(tool_input)}", f"{where}.input")
    arguments = orjson.dumps(tool_input).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _assistant(content: Any, where: str) -> Message:
    if isinstance(content, str):
        return {"role": "assistant", "content": content, "anthropic_content": content}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    ours: set[str] = set()
    for index, raw in enumerate(content):
        at = f"{where}.{index}"
        block = _block(raw, at)
        kind = block["type"]
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind == "thinking":
            text, signed = block.get("thinking"), block.get("signature")
            if not isinstance(text, str):
                raise bad_request(f"{at}.thinking: a thinking block needs a string 'thinking'", f"{at}.thinking")
            if signature.is_ours(signed):
                if text and signature.intact(text, str(signed)):
                    reasoning.append(text)
                continue  # ours: never to Anthropic (an edited one is not passed on at all)
            thinking.append(block)
        elif kind == "redacted_thinking":
            thinking.append(block)
        elif kind == "mcp_tool_use" and block.get("server_name") == SERVER_NAME:
            ours.add(str(block.get("id")))
            continue  # the gateway's report of its own server tools
        elif kind == "mcp_tool_result" and block.get("tool_use_id") in ours:
            continue
        kept.append(block)
    message: Message = {"role": "assistant", "content": "".join(texts) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking_blocks"] = thinking
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    if kept:
        message["anthropic_content"] = kept
    return message


def _system_in_place(content: Any, where: str) -> Message:
    text = content if isinstance(content, str) else _system_text(content, where)
    return {"role": "system", "content": text, "anthropic_content": content}


def canonical_messages(messages: Any) -> list[Message]:
    """The caller's ``messages`` in canonical form (400 naming the first wrong field)."""
    if not isinstance(messages, list) or not messages:
        shown = "an empty array" if isinstance(messages, list) else kind_of(messages)
        raise bad_request(f"messages: must be a non-empty array, not {shown}", "messages")
    out: list[Message] = []
    for position, message in enumerate(messages):
        where = f"messages.{position}"
        if not isinstance(message, dict):
            raise bad_request(f"{where}: must be an object, not {kind_of(message)}", where)
        role, content = message.get("role"), message.get("content")
        if not isinstance(content, str | list):
            raise bad_request(f"{where}.content: must be a string or an array of content blocks, not "
                              f"{kind_of(content)}", f"{where}.content")
        if role == "user":
            out.extend(_user(content, f"{where}.content"))
        elif role == "assistant":
            out.append(_assistant(content, f"{where}.content"))
        elif role == "system":
            out.append(_system_in_place(content, f"{where}.content"))
        else:
            raise bad_request(f"{where}.role: must be 'user', 'assistant' or 'system', not {quoted(role)}",
                              f"{where}.role")
    return out

