"""Hearing that a stateless (2026-07-28) server's tools changed: a ``subscriptions/listen`` stream.

A server of the handshake era pushes ``notifications/tools/list_changed`` on its session (the
source's message handler hears it). A stateless server has no session to push on: the client
opens a ``subscriptions/listen`` request asking for tool-list changes, and the server answers it
with a stream of events. The stream has no replay, so each time it opens (the first time too: the
start-up listing came before it) the server's tools are listed again, since a change may have
happened while no stream was open. A server that does not
offer the stream (an error, or an acknowledgment without tool-list changes) is not asked again
for this session: the periodic ``refresh_s`` listing still covers it. Re-opening after a loss
backs off from ``RELISTEN_MIN_S`` to ``RELISTEN_MAX_S``, so a flapping server costs at most one
request (and one listing) per backoff step.

The stream lives on its session: a failed request (a listing, or the stream's own re-opening, while
the server is away) ends a stateless session in the SDK, and the stream with it. Nothing else would
open a new session until a call or ``refresh_s`` came, so the source connects again by itself
(:func:`reconnect`, on the same backoff) and the new session's stream lists on opening.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from mcp.client import Client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError

log = logging.getLogger("loopgate.tools.mcp")

RELISTEN_MIN_S = 1.0
RELISTEN_MAX_S = 60.0


async def follow_tool_changes(client: Client, server: str, changed: Callable[[], None]) -> None:
    """Call ``changed`` for every tool-list change the server announces, until cancelled or not offered."""
    backoff = RELISTEN_MIN_S
    while True:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                if not subscription.honored.tools_list_changed:
                    log.info("MCP server %s does not announce tool-list changes; refresh_s alone re-lists it", server)
                    return
                changed()  # no replay: whatever changed before the stream was open is listed now
                backoff = RELISTEN_MIN_S
                async for _ in subscription:
                    changed()
            reason = "closed by the server"
        except ListenNotSupportedError:
            return
        except MCPError as exc:  # its message is the server's text: logged escaped
            log.info("MCP server %s refused to announce tool-list changes (%r); refresh_s alone re-lists it",
                     server, exc.message)
            return
        except Exception as exc:  # SubscriptionLost, a transport failure: the session may still serve calls
            reason = f"lost ({type(exc).__name__})"
        log.info("MCP server %s: tool-list change stream %s; opening it again in %g s", server, reason, backoff)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, RELISTEN_MAX_S)


async def reconnect(connect: Callable[[], Awaitable[object]], server: str) -> None:
    """Open a new session (backing off while the server is away) for a stream that died with its session."""
    backoff = RELISTEN_MIN_S
    while True:
        log.info("MCP server %s: session with a tool-list change stream ended; connecting again in %g s",
                 server, backoff)
        await asyncio.sleep(backoff)
        try:
            await connect()
            return
        except Exception as exc:  # a ToolFailure that names the cause; the next step tries again
            log.info("MCP server %s: connecting again failed (%s)", server, exc)
        backoff = min(backoff * 2, RELISTEN_MAX_S)
