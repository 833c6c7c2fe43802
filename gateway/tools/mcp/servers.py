"""MCP servers from config as tool sources, listed at start-up and re-listed periodically.

A server that cannot be reached at start-up does not stop the gateway: its routes simply have
none of its tools until a refresh reaches it (logged), which is what an operator expects from a
dependency that may restart independently.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.config.mcp_section import McpServerConfig
from gateway.tools.base import ToolSource, ToolTimeouts
from gateway.tools.registry import ToolRegistry

log = logging.getLogger("loopgate.tools")


def mcp_sources(servers: dict[str, McpServerConfig]) -> list[ToolSource]:
    if not servers:
        return []
    # Imported only when servers are configured: the SDK pulls in opentelemetry-api at import,
    # which a gateway without MCP servers (and without tracing) must not load.
    from gateway.tools.mcp.source import McpHttpSource, McpStdioSource

    sources: list[ToolSource] = []
    for server in servers.values():
        name = f"mcp:{server.name}"
        timeouts = ToolTimeouts(call=server.timeout_s, approval=server.approval_timeout_s)
        if server.url is not None:
            sources.append(McpHttpSource(name, server.url, headers=server.headers, timeouts=timeouts,
                                         approval=server.approval, elicitation=server.elicitation,
                                         sampling_route=server.sampling_route,
                                         sampling_max_tokens=server.sampling_max_tokens))
        else:
            sources.append(McpStdioSource(name, list(server.command), env=server.env, env_inherit=server.env_inherit,
                                          timeouts=timeouts,
                                          approval=server.approval, elicitation=server.elicitation,
                                          sampling_route=server.sampling_route,
                                          sampling_max_tokens=server.sampling_max_tokens))
    return sources


class McpRefresher:
    """Adds the MCP sources to the registry, lists them once, then refreshes on the shortest interval."""

    def __init__(self, registry: ToolRegistry, servers: dict[str, McpServerConfig]) -> None:
        self._registry = registry
        self._interval = min((s.refresh_s for s in servers.values()), default=0.0)
        self._task: asyncio.Task[None] | None = None
        for source in mcp_sources(servers):
            registry.add_source(source)

    async def start(self) -> None:
        if not self._interval:
            return
        await self._registry.refresh()  # not strict: an unreachable server keeps its (empty) tool list
        self._task = asyncio.create_task(self._loop(), name="loopgate-mcp-refresh")

    async def _loop(self) -> None:
        while True:
            check_cancelled()
            await asyncio.sleep(self._interval)
            try:
                await self._registry.refresh()
            except Exception:
                log.exception("refreshing MCP tool lists failed")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_tasks([self._task], "MCP refresh")
