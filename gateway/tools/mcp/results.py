"""A ``tools/call`` result as the model sees it.

Text blocks are the text. ``structuredContent`` is added as JSON text unless a text block already
says exactly that (servers are asked to include it for older clients), so the model always reads
it. Images (PNG, JPEG, GIF, WebP up to :data:`MAX_IMAGE_BYTES` each, at most
:data:`MAX_IMAGES` per result) become image parts: a :class:`ToolContent` whose text view
describes them for targets that take text only. Other images, audio, resource links and embedded
resources are text: a link's name, URI and type, an embedded text resource's text, a blob's type
and size. ``isError`` raises :class:`ToolFailure` with the result's text (the model reads it).
"""

from __future__ import annotations

import base64
import binascii

import mcp_types as types
import orjson

from gateway.canonical_tool_results import (
    IMAGE_TYPES,
    MAX_IMAGE_BYTES,
    MAX_IMAGES,
    ContentPart,
    describe_image,
    image_part,
    part_text,
    size_text,
)
from gateway.canonical_tool_results import image_bytes as _blob_size
from gateway.tools.base import ToolContent, ToolFailure


def _image(block: types.ImageContent, images: int) -> ContentPart | str:
    """An image part, or (a str) its description when it cannot go as an image."""
    reason = None
    if block.mime_type not in IMAGE_TYPES:
        reason = "not an image type models take"
    elif images >= MAX_IMAGES:
        reason = f"more than {MAX_IMAGES} images"
    elif _blob_size(block.data) > MAX_IMAGE_BYTES:
        reason = f"larger than {size_text(MAX_IMAGE_BYTES)}"
    else:
        try:
            base64.b64decode(block.data, validate=True)
        except (binascii.Error, ValueError):
            reason = "not valid base64"
    if reason is None:
        return image_part(block.mime_type, block.data)
    return describe_image(block.mime_type, block.data)[:-1] + f", omitted: {reason}]"


def _resource_text(block: types.EmbeddedResource) -> str:
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}"
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource {resource.uri}: {mime}, {size_text(_blob_size(resource.blob))}]"


def _link_text(block: types.ResourceLink) -> str:
    label = block.title or block.name
    details = ", ".join(x for x in (block.mime_type, block.description) if x)
    return f"[resource link: {label} <{block.uri}>" + (f" ({details})]" if details else "]")


def _block(block: types.ContentBlock, images: int) -> ContentPart | str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return _image(block, images)
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}, {size_text(_blob_size(block.data))}]"
    if isinstance(block, types.ResourceLink):
        return _link_text(block)
    return _resource_text(block)


def _structured_text(structured: object, texts: list[str]) -> str | None:
    """``structuredContent`` as JSON, unless a text block already carries the same value."""
    if structured is None:
        return None
    for text in texts:
        if text[:1] in ("{", "["):
            try:
                if orjson.loads(text) == structured:
                    return None
            except orjson.JSONDecodeError:
                continue
    return orjson.dumps(structured).decode()


def render_result(tool: str, result: types.CallToolResult) -> str | ToolContent:
    """The model's view of a result: a str for text only, else a ToolContent; ``isError`` raises."""
    pieces: list[ContentPart | str] = []
    images = 0
    for block in result.content:
        piece = _block(block, images)
        images += not isinstance(piece, str)
        pieces.append(piece)
    texts = [p for p in pieces if isinstance(p, str)]
    structured = _structured_text(result.structured_content, texts)
    if structured is not None:
        pieces.append(structured)
    text = "\n".join(p if isinstance(p, str) else part_text(p) for p in pieces)
    if result.is_error:
        raise ToolFailure(text or f"Tool {tool} reported an error")
    if not images:
        return text
    parts: list[ContentPart] = []
    for piece in pieces:
        if not isinstance(piece, str):
            parts.append(piece)
        elif parts and parts[-1]["type"] == "text":
            parts[-1]["text"] += "\n" + piece
        else:
            parts.append({"type": "text", "text": piece})
    return ToolContent(text, tuple(parts))
