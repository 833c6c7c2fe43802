"""Tool results with more than text, in the canonical transcript.

A tool message's ``content`` is a string (nearly always) or a list of OpenAI-style content parts:
``{"type": "text", "text": ...}`` and ``{"type": "image_url", "image_url": {"url":
"data:<mime>;base64,<data>"}}`` (an image an MCP tool returned). Whether a target can take an
image inside a tool result is capability data of its adapter (``images`` below): Anthropic's
``tool_result`` holds image blocks and Gemini 3's ``functionResponse`` holds ``inlineData`` parts;
OpenAI chat ``tool`` messages hold text only. A target that cannot gets the result as text, each
image described in a few words (its type and size), never its bytes.
"""

from __future__ import annotations

from typing import Any

ContentPart = dict[str, Any]

#: the image types every target that takes images accepts
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: the largest image (decoded) passed to the model as an image; larger ones are described
MAX_IMAGE_BYTES = 4 * 1024 * 1024
#: images per tool result passed as images; later ones are described
MAX_IMAGES = 8


def image_part(mime_type: str, data: str) -> ContentPart:
    """An image (base64 ``data``) as a canonical content part."""
    return {"type": "image_url", "image_url": {"url": f"data:{mime_type};base64,{data}"}}


def image_of(part: ContentPart) -> tuple[str, str] | None:
    """``(mime type, base64 data)`` of an image part with a data URL, else None."""
    if part.get("type") != "image_url":
        return None
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    mime, _, encoding = head.partition(";")
    if not sep or encoding != "base64":
        return None
    return mime, data


def size_text(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def image_bytes(data: str) -> int:
    """The decoded size of base64 ``data``, without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")


def describe_image(mime_type: str, data: str) -> str:
    """The few words a text-only target reads instead of an image."""
    return f"[image: {mime_type}, {size_text(image_bytes(data))}]"


def part_text(part: ContentPart) -> str:
    image = image_of(part)
    if image is not None:
        return describe_image(*image)
    text = part.get("text")
    return text if isinstance(text, str) else ""


def tool_result_text(content: Any) -> str:
    """A tool message's content as text (images described); a string stays as it is."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    return "\n".join(part_text(part) for part in content if isinstance(part, dict))


#: which targets take images inside a tool result: wire format -> the model-name prefixes that do
#: ("" is every model). Anthropic's ``tool_result`` holds image blocks; Gemini 3 models take
#: ``inlineData`` parts in a ``functionResponse`` (multimodal function responses, not Gemini 2.x);
#: the Responses API's ``function_call_output`` holds ``input_image`` parts; OpenAI-format (chat) ``tool``
#: messages hold text only.
TOOL_RESULT_IMAGES: dict[str, tuple[str, ...]] = {"anthropic": ("",), "gemini": ("gemini-3",),
                                                  "openai_responses": ("",)}


def takes_tool_result_images(wire_format: str, model: str) -> bool:
    return model.removeprefix("models/").startswith(TOOL_RESULT_IMAGES.get(wire_format, ()))


def _has_image(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content)


def tool_messages_for(messages: list[Any], images: bool) -> list[Any]:
    """``messages`` as a target takes them: tool results with images as text unless it takes ``images``.

    The same list when nothing changes (a transcript without image results costs one pass).
    """
    if images:
        return messages
    out: list[Any] | None = None
    for index, message in enumerate(messages):
        if message.get("role") == "tool" and _has_image(message.get("content")):
            if out is None:
                out = list(messages)
            out[index] = {**message, "content": tool_result_text(message["content"])}
    return messages if out is None else out


def bounded_parts(content: Any) -> list[ContentPart] | None:
    """A tool message's content parts as they may be stored (a paused turn's results, the tool ledger).

    Only text parts and image parts within the bounds a result is made with (:data:`IMAGE_TYPES`, at
    most :data:`MAX_IMAGE_BYTES` each and :data:`MAX_IMAGES` per result) are kept as they are; any other
    part becomes its text. None when ``content`` is not a list of parts (a plain text result).
    """
    if not isinstance(content, list) or not content:
        return None
    out: list[ContentPart] = []
    images = 0
    for part in content:
        if not isinstance(part, dict):
            continue
        image = image_of(part)
        if image is not None and image[0] in IMAGE_TYPES and images < MAX_IMAGES \
                and image_bytes(image[1]) <= MAX_IMAGE_BYTES:
            images += 1
            out.append(image_part(*image))
        else:
            out.append({"type": "text", "text": part_text(part)})
    return out or None
