"""MCP servers from config as tool sources, listed at start-up, re-listed periodically and when they say so.

A server that cannot be reached at start-up does not stop the gateway: its routes simply have
none of its tools until a refresh reaches it (logged), which is what an operator expects from a
dependency that may restart independently. A server that announces a changed tool list
(``notifications/tools/list_changed``, e.g. one registering tools once it knows the client's
capabilities) is re-listed at once, alone, and at most once per ``LIST_CHANGED_MIN_GAP_S``: a
server sending a stream of notifications costs one listing per gap, not one per notification.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.config.mcp_section import McpServerConfig
from gateway.tools.base import ToolTimeouts
from gateway.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from gateway.tools.mcp.connection import McpSource

log = logging.getLogger("loopgate.tools")

LIST_CHANGED_MIN_GAP_S = 1.0


def mcp_sources(servers: dict[str, McpServerConfig]) -> list[McpSource]:
    if not servers:
        return []
    # Imported only when servers are configured: the SDK pulls in opentelemetry-api at import,
    # which a gateway without MCP servers (and without tracing) must not load.
    from gateway.tools.mcp.source import McpHttpSource, McpStdioSource

    sources: list[McpSource] = []
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
    """Adds the MCP sources to the registry, lists them once, then re-lists them on the shortest interval
    and whenever a server announces that its tools changed."""

    def __init__(self, registry: ToolRegistry, servers: dict[str, McpServerConfig],
                 min_gap_s: float = LIST_CHANGED_MIN_GAP_S) -> None:
        self._registry = registry
        self._interval = min((s.refresh_s for s in servers.values()), default=0.0)
        self._min_gap_s = min_gap_s
        self._changed: set[str] = set()  # sources that announced a change since their last listing
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        for source in mcp_sources(servers):
            source.watch_tools(functools.partial(self._note_change, source.name))
            registry.add_source(source)

    def _note_change(self, source: str) -> None:
        self._changed.add(source)
        self._wake.set()

    async def start(self) -> None:
        if not self._interval:
            return
        await self._registry.refresh()  # not strict: an unreachable server keeps its (empty) tool list
        self._task = asyncio.create_task(self._loop(), name="loopgate-mcp-refresh")

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        every_source_at = loop.time() + self._interval
        while True:
            check_cancelled()
            try:
                async with asyncio.timeout_at(every_source_at):
                    await self._wake.wait()
            except TimeoutError:
                await self._refresh(None)
                every_source_at = loop.time() + self._interval
                continue
            self._wake.clear()
            changed, self._changed = self._changed, set()
            log.info("MCP tool list changed on %s; listing again", ", ".join(sorted(changed)))
            await self._refresh(changed)
            await asyncio.sleep(self._min_gap_s)

    async def _refresh(self, only: Collection[str] | None) -> None:
        try:
            await self._registry.refresh(only=only)
        except Exception:
            log.exception("refreshing MCP tool lists failed")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_tasks([self._task], "MCP refresh")
