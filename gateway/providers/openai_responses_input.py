"""OpenAI Responses, the transcript: canonical (chat-shaped) messages -> the ``input`` items.

* ``system`` / ``developer`` / ``user`` messages -> ``message`` items of that role; text parts
  become ``input_text``, ``image_url`` parts ``input_image``, ``file`` parts ``input_file``;
* an assistant turn -> its text as an assistant ``message`` (``output_text``), then one
  ``function_call`` per tool call (``call_id``, arguments as JSON object text);
* a ``tool`` message -> a ``function_call_output`` (text, or ``input_text`` / ``input_image`` parts);
* with custom tools sent natively, a custom tool's call (``type: "custom"``) and its output are
  ``custom_tool_call`` / ``custom_tool_call_output`` items.

An assistant turn this provider answered earlier carries its ``output`` items (``openai_output``,
gateway/canonical/types.py): they go back verbatim and in order (reasoning with its
``encrypted_content``, hosted tool calls, the message, the function calls), as OpenAI's own
stateless guides do (``store: false``), so the model keeps its reasoning across the loop's
iterations and the prompt cache sees the history it produced. Only while they still describe the
message (the same function-call ids, the same text) and only to the provider that issued them: the
items of another provider, of another OpenAI account or of no known origin are dropped, never sent
(the turn is translated from its canonical fields). A reasoning item without ``encrypted_content``
is dropped too (with ``store: false`` the API cannot look it up), and so is one that ends the turn
(an answer cut after its reasoning: the API wants the item a reasoning item led to after it).

A turn a Responses caller sent back with hosted tools' items (``openai_hosted``: Codex's
``web_search_call``, ``local_shell_call``, ...) is sent them verbatim, in order, before its message
and calls, and its content without the note that says them as text for other targets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.canonical import Message, custom_input, history_arguments_text, text_of
from gateway.providers.openai_responses_output import answer_text
from gateway.providers.openai_responses_params import bad_request

_TEXT_PARTS = ("text", "input_text", "output_text")


def _image(part: dict[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise bad_request(f"{where}: image_url has no url")
    detail = image.get("detail") if isinstance(image, dict) else None
    return {"type": "input_image", "image_url": url, "detail": detail if isinstance(detail, str) else "auto"}


def _file(part: dict[str, Any], where: str) -> dict[str, Any]:
    file = part.get("file")
    if not isinstance(file, dict):
        raise bad_request(f"{where}: a file part needs a 'file' object")
    native: dict[str, Any] = {"type": "input_file"}
    for key in ("file_id", "file_data", "filename"):
        if isinstance(file.get(key), str):
            native[key] = file[key]
    if "file_id" not in native and "file_data" not in native:
        raise bad_request(f"{where}: a file part needs file_id or file_data")
    return native


def _parts(content: Any, where: str) -> Any:
    """User, system, developer or tool content: a string stays a string; parts become input parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}: content must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            parts.append({"type": "input_text", "text": part})
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            text = part.get("text")
            parts.append({"type": "input_text", "text": text if isinstance(text, str) else ""})
        elif kind == "image_url":
            parts.append(_image(part, f"{where}.content[{index}]"))
        elif kind == "file":
            parts.append(_file(part, f"{where}.content[{index}]"))
        else:
            raise bad_request(f"{where}.content[{index}]: content part type '{kind}' is not supported by the "
                              "OpenAI Responses API")
    return parts


def _call_ids(message: Message) -> list[Any]:
    return [call.get("id") if isinstance(call, dict) else None for call in message.get("tool_calls") or ()]


def _message_text(message: Message) -> str:
    """The turn's text as ``answer_text`` reads it off its items (a refusal is the content when there is no text)."""
    text = text_of(message.get("content"))
    refusal = message.get("refusal")
    return text or (refusal if isinstance(refusal, str) else "")


def own_output(message: Message, provider: str) -> list[dict[str, Any]] | None:
    """The turn's ``output`` items to send back verbatim, or None (not this provider's, or stale)."""
    output = message.get("openai_output")
    if output.__class__ is not dict or output.get("provider") != provider:
        return None
    items = output.get("items")
    if not isinstance(items, list):
        return None
    calls: list[Any] = []
    kept: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        kind = item.get("type")
        if kind == "function_call" or kind == "custom_tool_call":
            calls.append(item.get("call_id"))
        elif kind == "reasoning" and not item.get("encrypted_content"):
            continue  # with store: false the API could only look it up by id: it cannot
        kept.append(item)
    if calls != _call_ids(message) or answer_text(items) != _message_text(message):
        return None  # the message was changed since (a rescue's text, a pruned turn): its items no longer fit
    while kept and kept[-1].get("type") == "reasoning":
        kept.pop()  # the API refuses a reasoning item without the item it led to (an answer cut after it)
    return kept


def _hosted(message: Message, items: list[dict[str, Any]]) -> str:
    """The caller's hosted items of the turn into ``items``; the turn's text without their note."""
    text = _message_text(message)
    hosted = message.get("openai_hosted")
    if hosted.__class__ is not dict:
        return text
    items.extend(item for item in hosted.get("items") or () if isinstance(item, dict))
    note = hosted.get("note")
    if isinstance(note, str) and note and text.startswith(note):
        text = text[len(note):].removeprefix("\n\n")
    return text


def _assistant(message: Message, provider: str, where: str, custom: bool,
               members: Mapping[str, tuple[str, str]] | None) -> list[dict[str, Any]]:
    own = own_output(message, provider)
    if own is not None:
        return own
    items: list[dict[str, Any]] = []
    text = _hosted(message, items) if "openai_hosted" in message else _message_text(message)
    if text:
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not function.get("name") or not call.get("id"):
            raise bad_request(f"{where}.tool_calls[{index}]: a tool call needs an id and a function name")
        if custom and call.get("type") == "custom":
            item = {"type": "custom_tool_call", "call_id": str(call["id"]), "name": function["name"],
                    "input": custom_input(function.get("arguments"))}
        else:
            item = {"type": "function_call", "call_id": str(call["id"]), "name": function["name"],
                    "arguments": history_arguments_text(function.get("arguments"))}
        member = members.get(function["name"]) if members else None
        if member is not None:  # a native namespace's member: as the model called it
            item["namespace"], item["name"] = member
        items.append(item)
    return items


def _tool_output(message: Message, where: str, custom: set[str]) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not call_id:
        raise bad_request(f"{where}: tool message without tool_call_id")
    kind = "custom_tool_call_output" if str(call_id) in custom else "function_call_output"
    return {"type": kind, "call_id": str(call_id), "output": _parts(message.get("content"), where)}


def translate_input(messages: Sequence[Message], provider: str, custom: bool = False,
                    members: Mapping[str, tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """The canonical transcript as ``input`` items for ``provider`` (its name: whose ``openai_output`` goes back);
    ``custom``: custom tools are sent natively, so their calls (``type: "custom"``) and outputs are custom items;
    ``members``: the namespace members sent natively (``native_members``), whose calls carry their namespace."""
    items: list[dict[str, Any]] = []
    custom_calls: set[str] = set()
    for position, message in enumerate(messages):
        role = message.get("role")
        where = f"messages[{position}]"
        if role == "assistant":
            items.extend(_assistant(message, provider, where, custom, members))
            if custom:
                custom_calls.update(str(call.get("id")) for call in message.get("tool_calls") or ()
                                    if isinstance(call, dict) and call.get("type") == "custom")
        elif role == "tool":
            items.append(_tool_output(message, where, custom_calls))
        elif role in ("user", "system", "developer"):
            items.append({"type": "message", "role": role, "content": _parts(message.get("content"), where)})
        else:
            raise bad_request(f"{where}: role '{role}' cannot be sent to the OpenAI Responses API")
    return items
