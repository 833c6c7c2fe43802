"""The parts of MCP (revision 2025-06-18) both transports share: JSON-RPC framing, the handshake,
tool listings mapped to ToolSpecs, and ``tools/call`` results mapped to the executor's contract.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolFailure, ToolSpec, ToolTimeouts, resolve_approval

log = logging.getLogger("loopgate.tools.mcp")

PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "loopgate", "version": "0.1.0"}
NO_TIMEOUT = aiohttp.ClientTimeout()  # the executor (calls) and our own asyncio.timeout (listing) bound requests
BODY_EXCERPT = 300
MAX_PAGES = 1000  # a server that keeps returning cursors must not hang a refresh forever
STDIO_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; tool results can be large
CLOSE_GRACE_S = 2.0
OMITTED_CONTENT_KEYS = frozenset({"data", "blob", "text", "_meta", "annotations"})

Requester = Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]]




class SessionExpired(Exception):
    """The HTTP server answered 404 for our session id: re-initialize and retry once."""


def rpc_request(rpc_id: int, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def rpc_notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize_params() -> dict[str, Any]:
    # A tools-only client: no roots, sampling or elicitation to offer.
    return {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}


def is_response_to(message: Any, rpc_id: int) -> bool:
    """A response (not a server->client request that happens to reuse the number) for ``rpc_id``."""
    return (isinstance(message, dict) and message.get("id") == rpc_id and "method" not in message
            and ("result" in message or "error" in message))


def result_of(source: str, method: str, message: dict[str, Any]) -> dict[str, Any]:
    """The ``result`` object of a response, or ToolFailure carrying the JSON-RPC error's message."""
    error = message.get("error")
    if error is not None:
        if isinstance(error, dict):
            text = str(error.get("message") or "unknown error")
            code = error.get("code")
            raise ToolFailure(f"MCP error {code}: {text}" if code is not None else f"MCP error: {text}")
        raise ToolFailure(f"MCP error: {error}")
    result = message.get("result")
    if not isinstance(result, dict):
        raise ToolFailure(f"MCP server {source} sent an invalid {method} result")
    return result


def to_spec(source: str, item: Any, approval: str, timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS) -> ToolSpec | None:
    """One ``tools/list`` entry as a ToolSpec; None (logged) for an entry without a usable name."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        log.warning("MCP server %s listed a tool without a name; skipped: %.200r", source, item)
        return None
    schema = item.get("inputSchema")
    if not isinstance(schema, dict):
        schema = {"type": "object"}  # MCP requires an object schema; be lenient with servers that omit it
    description = item.get("description") or item.get("title") or ""
    return ToolSpec(item["name"], str(description), schema, resolve_approval(approval, item.get("annotations")),
                    timeouts.call, source, timeouts.approval)


async def list_all(source: str, request: Requester, approval: str,
                   timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS) -> list[ToolSpec]:
    """Every page of ``tools/list``; ``request(method, params)`` is the transport's round trip."""
    specs: list[ToolSpec] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        result = await request("tools/list", {"cursor": cursor} if cursor is not None else None)
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise ToolFailure(f"MCP server {source} sent a tools/list result without 'tools'")
        for item in tools:
            spec = to_spec(source, item, approval, timeouts)
            if spec is not None:
                specs.append(spec)
        cursor = result.get("nextCursor")
        if not cursor:
            return specs
        if not isinstance(cursor, str) or cursor in seen:
            raise ToolFailure(f"MCP server {source} sent an invalid or repeated tools/list cursor")
        seen.add(cursor)
    raise ToolFailure(f"MCP server {source} sent more than {MAX_PAGES} tools/list pages")


def call_params(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def render_call_result(tool: str, result: dict[str, Any]) -> str:
    """Text items joined by newlines; other items as a compact JSON description (no base64 blobs).

    A result with no content but ``structuredContent`` is rendered as that JSON, so a server that
    only fills the structured form still gives the model something to read.
    """
    parts: list[str] = []
    content = result.get("content")
    for item in content if isinstance(content, list) else ():
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item, dict):
            described = {k: v for k, v in item.items() if k not in OMITTED_CONTENT_KEYS}
            resource = item.get("resource")
            if isinstance(resource, dict):  # embedded resource: name it, do not inline it
                described["resource"] = {k: v for k, v in resource.items() if k not in OMITTED_CONTENT_KEYS}
            parts.append(orjson.dumps(described, default=str).decode())
        else:
            parts.append(orjson.dumps(item, default=str).decode())
    if not parts and result.get("structuredContent") is not None:
        parts.append(orjson.dumps(result["structuredContent"], default=str).decode())
    text = "\n".join(parts)
    if result.get("isError") is True:
        raise ToolFailure(text or f"Tool {tool} reported an error")
    return text


def excerpt(text: str) -> str:
    return text if len(text) <= BODY_EXCERPT else text[:BODY_EXCERPT] + "…"


def parse_messages(raw: bytes) -> list[Any]:
    """JSON-RPC messages in a body or event (a single message or a batch); garbage yields none."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else [value]
