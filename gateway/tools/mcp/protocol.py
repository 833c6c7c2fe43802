"""What both transports share above the SDK: tool listings mapped to ToolSpecs (every page, a page
bound), the client's identity, and SDK errors turned into the short reasons the model reads.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import mcp_types as types
import orjson
from mcp.client import InputRequiredRoundsExceededError
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolFailure, ToolSpec, ToolTimeouts, resolve_approval

log = logging.getLogger("loopgate.tools.mcp")

CLIENT_INFO = types.Implementation(name="loopgate", version="0.1.0")
MAX_PAGES = 1000  # a server that keeps returning cursors must not hang a refresh forever
#: tools one server may list (each one's schema has its own bound, ``json_schemas``); past it the listing fails
MAX_TOOLS = 1000
#: an ``outputSchema`` longer than this (serialised) is not added to the tool's description
MAX_OUTPUT_SCHEMA_CHARS = 4000
CLOSE_GRACE_S = 2.0
BODY_EXCERPT = 300

ListPage = Callable[[str | None], Awaitable[types.ListToolsResult]]


def excerpt(text: str) -> str:
    return text if len(text) <= BODY_EXCERPT else text[:BODY_EXCERPT] + "…"


def to_spec(source: str, tool: types.Tool, approval: str, timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS) -> ToolSpec:
    """One listed tool as a ToolSpec; its ``outputSchema`` (when short) is part of the description,
    so the model knows the shape of the JSON its results carry."""
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
    description = tool.description or tool.title or ""
    if tool.output_schema:
        output = orjson.dumps(tool.output_schema).decode()
        if len(output) <= MAX_OUTPUT_SCHEMA_CHARS:
            description = f"{description}\n\nIts result includes JSON matching this schema: {output}".lstrip()
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    return ToolSpec(tool.name, description, schema, resolve_approval(approval, annotations), timeouts.call, source,
                    timeouts.approval)


async def list_all(source: str, page: ListPage, approval: str,
                   timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS) -> list[ToolSpec]:
    """Every page of ``tools/list``; ``page(cursor)`` is the session's round trip."""
    specs: list[ToolSpec] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        result = await page(cursor)
        for tool in result.tools:
            if tool.name:
                specs.append(to_spec(source, tool, approval, timeouts))
            else:
                log.warning("MCP server %s listed a tool without a name; skipped", source)
        if len(specs) > MAX_TOOLS:
            raise ToolFailure(f"MCP server {source} lists more than {MAX_TOOLS} tools")
        cursor = result.next_cursor
        if not cursor:
            return specs
        if cursor in seen:
            raise ToolFailure(f"MCP server {source} sent an invalid or repeated tools/list cursor")
        seen.add(cursor)
    raise ToolFailure(f"MCP server {source} sent more than {MAX_PAGES} tools/list pages")


def sdk_failure(source: str, method: str, exc: Exception) -> ToolFailure | None:
    """An SDK error as the reason the model reads; None for an exception that is not the SDK's."""
    if isinstance(exc, MCPError):
        return ToolFailure(f"MCP error {exc.code}: {exc.message}")
    if isinstance(exc, ValidationError):
        return ToolFailure(f"MCP server {source} sent an invalid {method} result")
    if isinstance(exc, InputRequiredRoundsExceededError):
        return ToolFailure(f"MCP server {source} asked for input more than {exc.max_rounds} times in one call")
    if isinstance(exc, RuntimeError) and str(exc).startswith(("Invalid structured content", "Tool ", "Invalid schema")):
        return ToolFailure(f"MCP server {source}: {exc}")  # the result broke the tool's own outputSchema
    return None
