"""Google Gemini, the transcript: canonical messages -> ``systemInstruction`` parts and ``contents``.

Translation is structural: OpenAI messages become ``contents`` of ``user``/``model`` parts, tool
results become ``functionResponse`` parts in the user content after the call, and the opaque
state Gemini needs back rides on the canonical transcript (see ``gemini_stream``):

* thought signatures go back on the part they came on; a model step whose first functionCall has
  no signature of Gemini's own (history from another provider, hand-built, compacted) gets the
  documented dummy value, because Gemini 3 rejects an unsigned function-call step with 400;
* a ``functionCall.id`` is echoed only when Gemini minted it (the ``function_call_id`` marker);
* a built-in tool's ``toolCall`` / ``toolResponse`` parts (Google Search beside functions) go back
  verbatim at the head of their model turn;
* ``reasoning_content`` and ``thinking_blocks`` are never sent: Gemini cannot read another
  provider's reasoning and its own thought summaries carry no state (the signature does).
"""

from __future__ import annotations

import base64
import mimetypes
import urllib.parse
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import Message, ToolCall, history_arguments, load_json, text_of
from gateway.canonical_tool_results import image_of, tool_result_text
from gateway.providers.base import ErrorClass, ProviderError

# The dummy value the Gemini and Vertex AI docs allow for function calls Gemini did not produce.
DUMMY_THOUGHT_SIGNATURE = "skip_thought_signature_validator"


def _bad_request(message: str) -> ProviderError:
    return ProviderError(ErrorClass.BAD_REQUEST, message, status=400)


def _media_part(url: str) -> dict[str, Any]:
    if url.startswith("data:"):
        header, _, data = url[5:].partition(",")
        mime, _, encoding = header.partition(";")
        if "base64" not in encoding:
            data = base64.b64encode(urllib.parse.unquote_to_bytes(data)).decode()
        return {"inlineData": {"mimeType": mime or "application/octet-stream", "data": data}}
    file_data = {"fileUri": url}
    guessed = mimetypes.guess_type(urllib.parse.urlsplit(url).path)[0]
    if guessed:
        file_data = {"mimeType": guessed, "fileUri": url}
    return {"fileData": file_data}


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for item in content or ():
        if isinstance(item, str):
            item = {"type": "text", "text": item}
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in ("text", "input_text") and item.get("text"):
            parts.append({"text": item["text"]})
        elif kind == "image_url":
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str) and url:
                parts.append(_media_part(url))
        elif kind == "input_audio" and isinstance(item.get("input_audio"), dict):
            audio = item["input_audio"]
            parts.append({"inlineData": {"mimeType": f"audio/{audio.get('format') or 'wav'}",
                                         "data": audio.get("data") or ""}})
        elif kind == "file" and isinstance(item.get("file"), dict) and item["file"].get("file_data"):
            parts.append(_media_part(str(item["file"]["file_data"])))
    return parts


def _google(holder: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = holder.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    return google if isinstance(google, dict) else {}


def _call_part(call: ToolCall) -> dict[str, Any]:
    function = call.get("function") or {}
    name = function.get("name") or ""
    google = _google(call)
    function_call: dict[str, Any] = {"name": name, "args": history_arguments(function.get("arguments"))}
    if google.get("function_call_id"):
        function_call = {"id": google["function_call_id"], **function_call}
    part: dict[str, Any] = {"functionCall": function_call}
    if google.get("thought_signature"):
        part["thoughtSignature"] = google["thought_signature"]
    return part


def _model_parts(message: Message) -> list[dict[str, Any]]:
    server = _google(message).get("server_parts")  # a built-in tool's calls and responses: first, verbatim
    parts: list[dict[str, Any]] = [part for part in server if isinstance(part, dict)] if isinstance(server, list) \
        else []
    text = text_of(message.get("content"))
    if text:
        part: dict[str, Any] = {"text": text}
        signature = _google(message).get("thought_signature")
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    calls = [_call_part(call) for call in message.get("tool_calls") or ()]
    if calls and "thoughtSignature" not in calls[0]:
        calls[0]["thoughtSignature"] = DUMMY_THOUGHT_SIGNATURE
    return parts + calls


def _tool_output(content: Any) -> Any:
    text = text_of(content)
    try:
        return load_json(text)
    except orjson.JSONDecodeError:  # JSONTooDeep included: sent as the text it is
        return text


def _function_responses(calls: list[ToolCall], results: dict[str, Message], where: str) -> list[dict[str, Any]]:
    """One functionResponse per call, in call order: Gemini pairs them by count and position."""
    parts = []
    for call in calls:
        result = results.pop(call.get("id") or "", None)
        name = (call.get("function") or {}).get("name") or ""
        if result is None:
            raise _bad_request(f"{where}: tool call '{name}' ({call.get('id')}) has no tool message answering it")
        content = result.get("content")
        response: dict[str, Any] = {"name": name, "response": {"output": _tool_output(tool_result_text(content))}}
        images = [image for part in content if isinstance(part, dict) and (image := image_of(part)) is not None] \
            if isinstance(content, list) else []
        if images:  # a Gemini 3 model (``tool_messages_for`` left them): multimodal function response parts
            response["parts"] = [{"inlineData": {"mimeType": mime, "data": data}} for mime, data in images]
        gemini_id = _google(call).get("function_call_id")
        if gemini_id:
            response = {"id": gemini_id, **response}
        parts.append({"functionResponse": response})
    if results:
        raise _bad_request(f"{where}: tool message(s) {sorted(results)} answer no call of that assistant message")
    return parts


def build_contents(messages: list[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(systemInstruction parts, contents)."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    results_content: dict[str, Any] | None = None  # the user content user text may join
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role")
        where = f"messages[{i}]"
        i += 1
        if role in ("system", "developer"):
            text = text_of(message.get("content"))
            if text:
                system.append({"text": text})
            continue
        if role == "user":
            parts = _user_parts(message.get("content"))
            if results_content is not None:
                results_content["parts"].extend(parts)
            elif parts:
                contents.append({"role": "user", "parts": parts})
            continue
        results_content = None
        if role == "tool":
            raise _bad_request(f"{where}: tool message does not follow an assistant message with tool_calls")
        if role != "assistant":
            raise _bad_request(f"{where}: unsupported role '{role}'")
        parts = _model_parts(message)
        if parts:
            contents.append({"role": "model", "parts": parts})
        calls = message.get("tool_calls") or []
        if not calls:
            continue
        results: dict[str, Message] = {}
        while i < len(messages) and messages[i].get("role") == "tool":
            results.setdefault(str(messages[i].get("tool_call_id") or ""), messages[i])
            i += 1
        results_content = {"role": "user", "parts": _function_responses(calls, results, where)}
        contents.append(results_content)
    return system, contents
