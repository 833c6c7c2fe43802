"""A server that announces a changed tool list (``notifications/tools/list_changed``) is listed again.

Against the stdio fake (a real subprocess): its ``grow`` tool adds a tool and sends the
notification, ``listings`` says how many ``tools/list`` requests it served (two per listing: the
fake pages its tools); and over Streamable HTTP against a server built with the SDK's own server
side. ``refresh_s`` is 300 s throughout, so only the notification can explain a new tool showing up
within the test.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gateway.config.mcp_section import McpServerConfig
from gateway.tools import ToolRegistry
from gateway.tools.mcp.listening import RELISTEN_MAX_S
from gateway.tools.mcp.servers import McpRefresher
from tests.fakes.sdk_mcp import GrowingServer

STDIO_SERVER = (sys.executable, str(Path(__file__).resolve().parents[1] / "fakes" / "mcp_stdio_server.py"))
PAGES_PER_LISTING = 2
BOUND_S = 30.0  # generous: a busy machine is slow, never wrong


@asynccontextmanager
async def _refreshed(config: McpServerConfig) -> AsyncIterator[ToolRegistry]:
    """A registry with the one server, listed at start-up and kept fresh by its refresher."""
    registry = ToolRegistry()
    refresher = McpRefresher(registry, {config.name: config}, min_gap_s=1.0)
    await refresher.start()
    try:
        yield registry
    finally:
        await refresher.stop()
        await registry.aclose()


@pytest.fixture
async def refreshed() -> AsyncIterator[ToolRegistry]:
    async with _refreshed(McpServerConfig("local", command=STDIO_SERVER, refresh_s=300.0)) as registry:
        yield registry


@pytest.fixture
async def growing() -> AsyncIterator[list[GrowingServer]]:
    """The HTTP server (a one-item list: a test may replace it with a restarted one, stopped all the same)."""
    servers = [GrowingServer()]
    try:
        yield servers
    finally:
        await asyncio.to_thread(servers[0].stop)


async def _until_listed(registry: ToolRegistry, name: str, bound_s: float = BOUND_S) -> None:
    async with asyncio.timeout(bound_s):
        while name not in registry:
            await asyncio.sleep(0.02)


async def _call(registry: ToolRegistry, tool: str, arguments: dict[str, int] | None = None) -> str:
    result = await registry.sources[0].call(tool, arguments or {})
    assert isinstance(result, str)
    return result


async def test_a_new_tool_is_listed_when_the_server_says_so(refreshed: ToolRegistry) -> None:
    registry = refreshed
    assert "add" in registry and "grown1" not in registry
    assert await _call(registry, "grow") == "grown1"
    await _until_listed(registry, "grown1")
    assert "grown1" in registry.source_tools("mcp:local") and "add" in registry


async def test_a_new_tool_is_listed_when_an_http_server_says_so(growing: list[GrowingServer]) -> None:
    async with _refreshed(McpServerConfig("web", url=growing[0].url, refresh_s=300.0)) as registry:
        assert "grow" in registry and "grown1" not in registry
        assert (await _call(registry, "grow")).startswith("grown1")  # the text, then the structured result
        await _until_listed(registry, "grown1")
        assert (await _call(registry, "grown1")).startswith("grown1")


async def test_a_change_made_before_the_stream_opened_is_listed_once_it_opens() -> None:
    """The start-up listing comes before the listen stream: a change in between is found by listing again."""
    server = await asyncio.to_thread(GrowingServer, hold_listen=True)
    try:
        async with _refreshed(McpServerConfig("web", url=server.url, refresh_s=300.0)) as registry:
            assert "grow" in registry and "grown1" not in registry
            async with asyncio.timeout(BOUND_S):
                while not server.listen_requests_held:  # the stream is being opened: held at the server
                    await asyncio.sleep(0.02)
            server.add()  # a change nobody hears of: no stream is open yet
            server.release_listen()
            await _until_listed(registry, "grown1")
    finally:
        await asyncio.to_thread(server.stop, True)


@pytest.mark.slow
async def test_a_server_whose_stream_was_lost_is_listed_again_when_it_is_back(growing: list[GrowingServer]) -> None:
    """The listen stream has no replay: a tool added while it was down is found by listing on re-opening."""
    async with _refreshed(McpServerConfig("web", url=growing[0].url, refresh_s=300.0)) as registry:
        assert "grow" in registry and "grown1" not in registry
        port = growing[0].port
        await asyncio.to_thread(growing.pop().stop, True)
        growing.append(await asyncio.to_thread(GrowingServer, port, 1))  # back, with a tool added meanwhile
        # Re-opening backs off while the server is away (1 s, doubling, at most RELISTEN_MAX_S): a restart that a
        # busy machine makes slow can cost one whole step more.
        await _until_listed(registry, "grown1", RELISTEN_MAX_S + BOUND_S)


@pytest.mark.slow
async def test_a_server_away_long_enough_to_end_the_session_is_listed_again_when_it_is_back(
        growing: list[GrowingServer]) -> None:
    """A stateless session dies with a failed request (the listen stream's re-opening, a listing): its
    stream dies with it, so the source connects again by itself, and the new stream's opening lists."""
    async with _refreshed(McpServerConfig("web", url=growing[0].url, refresh_s=300.0)) as registry:
        source = registry.sources[0]
        assert "grow" in registry and source.protocol_version is not None  # type: ignore[attr-defined]
        port = growing[0].port
        await asyncio.to_thread(growing.pop().stop, True)
        await registry.refresh(only={"mcp:web"})  # fails to connect: the SDK ends the session
        async with asyncio.timeout(BOUND_S):
            while source.protocol_version is not None:  # type: ignore[attr-defined]
                await asyncio.sleep(0.02)
        growing.append(await asyncio.to_thread(GrowingServer, port, 1))  # back, with a tool added meanwhile
        await _until_listed(registry, "grown1", RELISTEN_MAX_S + BOUND_S)


async def test_a_stream_of_notifications_costs_one_listing_per_gap(refreshed: ToolRegistry) -> None:
    registry = refreshed
    assert await _call(registry, "listings") == str(PAGES_PER_LISTING)  # the start-up listing
    await _call(registry, "grow", {"times": 300})
    await _until_listed(registry, "grown1")
    # Notifications arrive in order: once the next one's tool is listed, all 300 were seen.
    await _call(registry, "grow")
    await _until_listed(registry, "grown2")
    listings = int(await _call(registry, "listings")) // PAGES_PER_LISTING
    assert 2 <= listings <= 5, f"{listings} listings for 301 notifications"


async def test_a_refresh_of_one_source_keeps_the_others_tools() -> None:
    registry = ToolRegistry()
    one = McpRefresher(registry, {"a": McpServerConfig("a", command=STDIO_SERVER),
                                  "b": McpServerConfig("b", command=STDIO_SERVER)})
    try:
        await registry.refresh()  # both list "add": the first configured source serves it
        assert registry.get("add").source.name == "mcp:a"  # type: ignore[union-attr]
        await registry.sources[1].call("grow", {})
        await registry.refresh(only={"mcp:b"})
        assert registry.get("grown1").source.name == "mcp:b"  # type: ignore[union-attr]
        assert registry.get("add").source.name == "mcp:a"  # type: ignore[union-attr]
        assert "grown1" not in registry.source_tools("mcp:a")
    finally:
        await one.stop()
        await registry.aclose()
