"""One MCP server behind the ToolSource interface, on the official SDK's ``Client``.

The SDK's session is an async context entered and left by one task, so each session is owned by a
task of its own, started on first use (a server that is down at start-up only costs a failed
listing) in a clean context: no call's handlers or trace leak into the requests a server sends
outside any call. A session that ended (a stdio process died, a transport failed) is replaced on
the next use (or at once, backing off, when it carried a tool-list change stream: ``listening.py``);
a call in flight when it ended fails, it is not retried (the tool may have acted).
An HTTP session the server no longer knows (404 for its id) is replaced once and the call resent.

The SDK negotiates the version: ``server/discover`` for the stateless 2026-07-28 revision, then
the ``initialize`` handshake offering 2025-11-25 and accepting the server's answer down to
2024-11-05. Each call's transport facts (an HTTP status, a body over the bound, a connection
error) are collected in an :class:`Exchange` that the transport's hooks reach through the
context the SDK carries to the request's own task, so a failure reads as its cause.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.cancellation import stop_tasks
from gateway.config.approval_section import ApprovalMode
from gateway.config.mcp_section import DEFAULT_SAMPLING_MAX_TOKENS, ElicitationPolicy
from gateway.observability.tracing import OUTGOING
from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolContent, ToolFailure, ToolSpec, ToolTimeouts
from gateway.tools.interaction import CALL_INTERACTIONS, CALL_RETRY, CallInteractions
from gateway.tools.mcp.listening import follow_tool_changes, reconnect
from gateway.tools.mcp.protocol import CLIENT_INFO, CLOSE_GRACE_S, list_all, sdk_failure
from gateway.tools.mcp.results import render_result
from gateway.tools.mcp.server_requests import ServerRequests
from gateway.tools.mcp.stateless import call_stateless, is_stateless

log = logging.getLogger("loopgate.tools.mcp")

Transport = AbstractAsyncContextManager[TransportStreams]


@dataclass(slots=True)
class Exchange:
    """What the transport saw while one call (or one session's start) ran; first cause wins."""

    http_status: int | None = None
    http_method: str = ""
    http_detail: str = ""
    session_gone: bool = False  # a 404 for the session id this request carried
    too_large: int | None = None  # the bound a body passed
    error: BaseException | None = None  # a connection failure


#: the exchange of the call (or session start) running in this context; the transport's hooks write it
EXCHANGE: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar("loopgate_mcp_exchange", default=None)


def first_leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups: what actually went wrong."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Session:
    """One SDK session: its owner task, the client once connected, and the event that ends it."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.stop = asyncio.Event()
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.exchange = Exchange()
        self.task: asyncio.Task[None] | None = None
        #: ended because the server no longer knew it: no request sent on it can have run
        self.expired = False

    @property
    def alive(self) -> bool:
        return self.ready.done() and not self.ready.cancelled() and self.ready.exception() is None \
            and not self.stop.is_set() and self.task is not None and not self.task.done()


class McpSource(ABC):
    """The transport-independent part of an MCP source; subclasses open transports and explain failures."""

    def __init__(self, name: str, timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS, approval: ApprovalMode = "never",
                 elicitation: ElicitationPolicy = "pause", sampling_route: str | None = None,
                 sampling_max_tokens: int = DEFAULT_SAMPLING_MAX_TOKENS) -> None:
        self._name = name
        self._timeouts = timeouts
        self._timeout_s = timeouts.call
        self._approval: ApprovalMode = approval
        self._calls: dict[int, CallInteractions] = {}
        self._call_ids = itertools.count()
        self._requests = ServerRequests(name, elicitation, sampling_route, sampling_max_tokens,
                                        lambda: list(self._calls.values()))
        self._lock = asyncio.Lock()
        self._session: _Session | None = None
        self._generations = itertools.count(1)
        self._closed = False
        # "auto" probes ``server/discover`` first; once a server answered, its era is known and a
        # new session (a restart, an expired session) goes straight to it.
        self._mode = "auto"
        self._tools_changed: Callable[[], None] | None = None
        self._reconnecting: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def protocol_version(self) -> str | None:
        """The version negotiated with the server (None before the first session)."""
        session = self._session
        if session is None or not session.alive:
            return None
        return session.ready.result().protocol_version

    def watch_tools(self, changed: Callable[[], None]) -> None:
        """Call ``changed`` when the server says its tool list changed (``notifications/tools/list_changed``).

        It runs inside the session's message handling, so it must only take note (set an event):
        the listing itself is the refresher's, which also bounds how often a chatty server is re-listed.
        """
        self._tools_changed = changed

    # -- ToolSource ------------------------------------------------------------------------

    async def list_tools(self) -> list[ToolSpec]:
        # A refresh has no deadline of its own; a hung server must not hold the registry lock.
        exchange = Exchange()
        token = EXCHANGE.set(exchange)
        try:
            async with asyncio.timeout(self._timeout_s):
                client, _session = await self._client()
                try:
                    return await list_all(self._name, lambda cursor: client.list_tools(cursor=cursor),
                                          self._approval, self._timeouts)
                except ToolFailure:
                    raise
                except Exception as exc:
                    raise self._failure(exc, exchange, "tools/list") from None
        except TimeoutError:
            raise ToolFailure(f"MCP server {self._name} did not list its tools within {self._timeout_s:g}s") from None
        finally:
            EXCHANGE.reset(token)

    async def call(self, tool: str, arguments: dict[str, Any]) -> str | ToolContent:
        # No timeout here: the executor enforces the tool's; cancelling the call cancels the request.
        interactions = CALL_INTERACTIONS.get()
        key = next(self._call_ids)
        if interactions is not None:
            self._calls[key] = interactions
        progress = interactions.progress if interactions is not None else None
        traceparent = OUTGOING.get()
        meta: Any = {"traceparent": traceparent} if traceparent is not None else None
        retry = CALL_RETRY.get()  # a stateless server's call retried with a user's answer (any replica)
        try:
            for attempt in range(2):
                exchange = Exchange()
                token = EXCHANGE.set(exchange)
                session: _Session | None = None
                try:
                    client, session = await self._client()
                    if is_stateless(client):
                        result = await call_stateless(client, self._name, tool, arguments, _progress(progress),
                                                      meta, retry)
                    elif retry is not None:
                        raise ToolFailure(f"MCP server {self._name} no longer speaks the stateless protocol; "
                                          "the call waiting for the user's answer cannot be retried")
                    else:
                        result = await client.call_tool(tool, arguments, progress_callback=_progress(progress),
                                                        meta=meta)
                except ToolFailure:
                    raise
                except Exception as exc:
                    # A 404 for the session, or the session closed under this call because another call
                    # saw that 404: the server never ran it, so it is sent again once on a new session.
                    if session is not None and attempt == 0 and (
                            exchange.session_gone or (session.expired and connection_closed(exc))):
                        log.info("MCP server %s: session expired, re-initializing", self._name)
                        await self._retire(session.generation)
                        continue
                    if exchange.session_gone:
                        raise ToolFailure(f"MCP server {self._name} rejected a freshly initialized session") \
                            from None
                    raise self._failure(exc, exchange, "tools/call") from None
                finally:
                    EXCHANGE.reset(token)
                return render_result(tool, result)
            raise AssertionError("unreachable")
        finally:
            self._calls.pop(key, None)

    async def aclose(self) -> None:
        self._closed = True
        await stop_tasks([self._reconnecting], f"MCP {self._name} reconnection")
        async with self._lock:
            session, self._session = self._session, None
        if session is not None:
            await self._end(session)

    # -- for subclasses --------------------------------------------------------------------

    @abstractmethod
    def _open_transport(self, on_closed: Callable[[], None]) -> Transport:
        """A new transport for a new session; ``on_closed`` when it ends by itself (a process exit).
        Each transport (``http.py``, ``stdio.py``) says how its sessions connect."""

    def _transport_failure(self, exc: BaseException) -> ToolFailure | None:
        """A transport's own explanation of a failure (a process exit, a connection error)."""
        return None

    # -- sessions --------------------------------------------------------------------------

    async def _client(self) -> tuple[Client, _Session]:
        session = self._session
        if session is not None and session.alive:
            return session.ready.result(), session
        async with self._lock:
            if self._closed:
                raise ToolFailure(f"MCP server {self._name} is closed")
            session = self._session
            if session is not None and session.alive:
                return session.ready.result(), session
            if session is not None:
                self._session = None
                await self._end(session)
            session = await self._start()
            self._session = session
            return session.ready.result(), session

    async def _start(self) -> _Session:
        session = _Session(next(self._generations))
        context = contextvars.copy_context()
        context.run(CALL_INTERACTIONS.set, None)
        context.run(OUTGOING.set, None)
        context.run(EXCHANGE.set, session.exchange)
        session.task = asyncio.get_running_loop().create_task(self._own(session), context=context,
                                                              name=f"mcp-session-{self._name}")
        try:
            async with asyncio.timeout(self._timeout_s):
                client = await asyncio.shield(session.ready)
        except TimeoutError:
            await self._end(session)
            raise ToolFailure(f"MCP server {self._name} did not initialize within {self._timeout_s:g}s") from None
        except asyncio.CancelledError:
            await self._end(session)
            raise
        except Exception as exc:
            await self._end(session)
            raise self._failure(exc, session.exchange, "initialize") from None
        version = client.protocol_version
        self._mode = "legacy" if version in HANDSHAKE_PROTOCOL_VERSIONS else version
        log.info("MCP server %s connected (protocol %s)", self._name, version)
        return session

    async def _own(self, session: _Session) -> None:
        requests = self._requests
        followed = False
        try:
            client = Client(self._open_transport(session.stop.set), mode=self._mode, cache=None,
                            client_info=CLIENT_INFO, elicitation_callback=requests.elicit,
                            sampling_callback=requests.sample if requests.sampling_route else None,
                            message_handler=self._on_message)
            async with client:
                session.ready.set_result(client)
                changed = self._tools_changed
                if changed is None or not is_stateless(client):
                    await session.stop.wait()  # a session server's changes come to _on_message
                    return
                followed = True
                follow = asyncio.create_task(follow_tool_changes(client, self._name, changed),
                                             name=f"mcp-tool-changes-{self._name}")
                try:
                    await session.stop.wait()
                finally:
                    await stop_tasks([follow], f"MCP {self._name} tool-list changes")
        except asyncio.CancelledError:
            if not session.ready.done():
                session.ready.cancel()
            raise
        except BaseException as exc:
            if not session.ready.done():
                session.ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                log.warning("MCP server %s: session ended: %r", self._name, first_leaf(exc))
                if followed:
                    self._reconnect()
        finally:
            session.stop.set()

    def _reconnect(self) -> None:
        """A session whose tool-list change stream was open failed: no use may come to replace it."""
        if self._closed or (self._reconnecting is not None and not self._reconnecting.done()):
            return
        self._reconnecting = asyncio.get_running_loop().create_task(
            reconnect(self._client, self._name), context=contextvars.Context(),
            name=f"mcp-reconnect-{self._name}")

    async def _on_message(self, message: Any) -> None:
        """The server's notifications (and transport faults) outside any request; only a changed tool list matters."""
        if isinstance(message, types.ToolListChangedNotification) and self._tools_changed is not None:
            self._tools_changed()

    async def _retire(self, generation: int) -> None:
        """End the session ``generation`` (unless another task already replaced it)."""
        async with self._lock:
            session = self._session
            if session is not None and session.generation == generation:
                session.expired = True
                self._session = None
                await self._end(session)

    async def _end(self, session: _Session) -> None:
        session.stop.set()
        task = session.task
        if task is None or task.done():
            return
        try:
            async with asyncio.timeout(3 * CLOSE_GRACE_S):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
        except BaseException as exc:  # the session's own failure was logged by its owner
            log.debug("MCP server %s: session ended with %r", self._name, exc)

    # -- failures --------------------------------------------------------------------------

    def _failure(self, exc: BaseException, exchange: Exchange, method: str) -> ToolFailure:
        if exchange.too_large is not None:
            return ToolFailure(f"The answer from MCP server {self._name} is larger than "
                               f"{exchange.too_large // (1024 * 1024)} MiB; it was not read")
        if exchange.http_status is not None:
            detail = f": {exchange.http_detail}" if exchange.http_detail else ""
            return ToolFailure(f"HTTP {exchange.http_status} from MCP server {self._name} "
                               f"({exchange.http_method or method}){detail}")
        leaf = first_leaf(exchange.error or exc)
        explained = self._transport_failure(leaf)
        if explained is None and exchange.error is not None:
            explained = self._transport_failure(first_leaf(exc))
        if explained is not None:
            return explained
        sdk = sdk_failure(self._name, method, leaf if isinstance(leaf, Exception) else MCPError(-1, repr(leaf)))
        if sdk is not None:
            return sdk
        log.warning("MCP server %s: %s failed: %r", self._name, method, leaf)
        return ToolFailure(f"Request to MCP server {self._name} failed ({type(leaf).__name__}: {leaf})")


def _progress(progress: Callable[[float, float | None, str | None], None] | None) -> Any:
    """The SDK's async progress callback around the loop's synchronous one (None: no progress asked)."""
    if progress is None:
        return None

    async def forward(value: float, total: float | None, message: str | None) -> None:
        progress(value, total, message)

    return forward


def connection_closed(exc: BaseException) -> bool:
    return isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED
