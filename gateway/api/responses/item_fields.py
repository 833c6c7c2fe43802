"""Responses input item fields read as the canonical transcript takes them: strings, content parts, output parts.

Each check raises a 400 naming the field (``param``), so a client learns which item and part was wrong.
"""

from __future__ import annotations

from typing import Any

from gateway.api.chat.request import type_name
from gateway.errors import bad_request, quoted


def string_field(item: dict[str, Any], key: str, param: str, required: bool = True) -> str:
    value = item.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value and key != "arguments"):
        raise bad_request(f"'{param}.{key}' must be a non-empty string, not {type_name(value)}", f"{param}.{key}")
    return value


def content_parts(content: Any, param: str, role: str) -> Any:
    """Message content as chat content: a string stays; parts become chat parts (text and images only)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{param}.content' must be a string or an array of parts", f"{param}.content")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        where = f"{param}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": string_field(part, "text", where, required=False)})
        elif kind == "refusal":
            parts.append({"type": "text", "text": string_field(part, "refusal", where, required=False)})
        elif kind == "input_image" and role != "assistant":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise bad_request("only input_image parts with an 'image_url' (URL or data URL) are supported",
                                  f"{where}.image_url")
            image: dict[str, Any] = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise bad_request(f"content part type {quoted(kind)} is not supported here", f"{where}.type")
    return parts


def output_text(parts: list[Any], param: str) -> str:
    """A function call's output given as content parts: their text, joined.

    The engine hands tool results to every provider as text, so an image or file part would be
    lost on the way: it is refused, naming the part, rather than dropped.
    """
    texts = []
    for index, part in enumerate(parts):
        where = f"{param}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text"):
            raise bad_request(f"function_call_output part type {quoted(kind)} is not supported by this gateway: a "
                              "tool's output reaches the model as text (send a string or 'input_text' parts)",
                              f"{where}.type")
        texts.append(string_field(part, "text", where, required=False))
    return "".join(texts)
