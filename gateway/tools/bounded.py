"""Reading a tool service's HTTP answer with a size bound.

HTTP tools and MCP servers are upstreams too: a broken or hostile one must not make the gateway
buffer an endless body. Results this large would be cut by the context guard anyway
(``context.max_tool_result_tokens``), so the bound only decides when to stop reading.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from gateway.tools.base import ToolFailure

if TYPE_CHECKING:
    import aiohttp

#: The most a tool answer (an HTTP tool's body, one MCP JSON body or SSE stream) may be, decoded.
MAX_TOOL_RESPONSE_BYTES = 16 * 1024 * 1024
_CHUNK = 64 * 1024


def _too_large(who: str, limit: int) -> ToolFailure:
    return ToolFailure(f"The answer from {who} is larger than {limit // (1024 * 1024)} MiB; it was not read")


async def read_bounded(resp: aiohttp.ClientResponse, who: str, limit: int | None = None) -> bytes:
    """The whole (decompressed) body, or ``ToolFailure`` once it passes ``limit`` (the module's bound)."""
    limit = MAX_TOOL_RESPONSE_BYTES if limit is None else limit
    if resp.content_length is not None and resp.content_length > limit:
        raise _too_large(who, limit)
    body = bytearray()
    async for chunk in resp.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > limit:
            raise _too_large(who, limit)
    return bytes(body)


async def sse_data(resp: aiohttp.ClientResponse, who: str, limit: int | None = None) -> AsyncIterator[bytes]:
    """The ``data`` of each SSE event (multi-line data joined by newlines), as it arrives.

    The whole stream counts against ``limit``; lines are split here rather than by aiohttp's
    ``readline``, whose own cap (128 KiB) would fail a legitimately large event.
    """
    limit = MAX_TOOL_RESPONSE_BYTES if limit is None else limit
    data: list[bytes] = []
    pending = b""
    received = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        received += len(chunk)
        if received > limit:
            raise _too_large(who, limit)
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for raw_line in lines:
            event = _line(raw_line.rstrip(b"\r"), data)
            if event is not None:
                yield event
    for raw_line in ([pending.rstrip(b"\r")] if pending else []):
        _line(raw_line, data)
    if data:
        yield b"\n".join(data)


def _line(line: bytes, data: list[bytes]) -> bytes | None:
    """Consume one SSE line; an empty line ends an event and returns its data."""
    if not line:
        if data:
            event = b"\n".join(data)
            data.clear()
            return event
        return None
    if line.startswith(b":"):
        return None  # comment / keep-alive
    field, _, value = line.partition(b":")
    if field == b"data":
        data.append(value[1:] if value.startswith(b" ") else value)
    return None
