"""MCP over Streamable HTTP: every message is a POST; the answer is one JSON body or an SSE stream
that carries the response among notifications. The server's ``Mcp-Session-Id`` is echoed on
every later request; a 404 for it means the session expired, so the source re-initializes once
and retries. Requests go through the egress proxy the environment names, as provider calls do.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict

from gateway.config.approval_section import ApprovalMode
from gateway.observability import tracing
from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolFailure, ToolSpec, ToolTimeouts
from gateway.tools.bounded import read_bounded, sse_data
from gateway.tools.mcp.protocol import (
    CLOSE_GRACE_S,
    NO_TIMEOUT,
    PROTOCOL_VERSION,
    SessionExpired,
    call_params,
    excerpt,
    initialize_params,
    is_response_to,
    list_all,
    parse_messages,
    render_call_result,
    result_of,
    rpc_notification,
    rpc_request,
)
from gateway.upstream.errors import ProviderError
from gateway.upstream.proxy import client_proxy, environment_proxies

log = logging.getLogger("loopgate.tools.mcp")


class McpHttpSource:
    """One MCP server reached over Streamable HTTP, behind the ToolSource interface.

    Calls are independent POSTs on a pooled session, so concurrent calls need no coordination
    beyond the shared session state (id counter, session id), which only the handshake writes.
    """

    def __init__(self, name: str, url: str, headers: dict[str, str] | None = None,
                 timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS, approval: ApprovalMode = "never",
                 session: aiohttp.ClientSession | None = None,
                 proxies: Mapping[str, str] | None = None) -> None:
        self._name = name
        self._url = url
        self._headers: CIMultiDict[str] = CIMultiDict(headers or {})
        # Required by the transport; set after the configured headers so they cannot be broken.
        self._headers["Content-Type"] = "application/json"
        self._headers["Accept"] = "application/json, text/event-stream"
        self._proxy: dict[str, Any] = {}
        self._proxy_error: str | None = None  # never sent direct when the environment demands a proxy
        try:
            route = client_proxy(url, environment_proxies() if proxies is None else proxies)
            self._proxy = route.options
            self._headers.update(route.headers)
        except ProviderError as exc:
            log.error("MCP server %s: %s", name, exc.message)
            self._proxy_error = exc.message
        self._timeouts = timeouts
        self._timeout_s = timeouts.call
        self._approval: ApprovalMode = approval
        self._session = session
        self._owns_session = session is None
        self._ids = itertools.count(1)
        self._init_lock = asyncio.Lock()
        self._initialized = False
        self._generation = 0  # bumped by each handshake, so concurrent 404s re-initialize only once
        self._session_id: str | None = None
        self._protocol_version: str | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def session_id(self) -> str | None:
        """The server's ``Mcp-Session-Id`` (None before the handshake or for a stateless server)."""
        return self._session_id

    async def list_tools(self) -> list[ToolSpec]:
        # A refresh has no deadline of its own; a hung server must not hold the registry lock.
        try:
            async with asyncio.timeout(self._timeout_s):
                return await list_all(self._name, self._call_method, self._approval, self._timeouts)
        except TimeoutError:
            raise ToolFailure(f"MCP server {self._name} did not list its tools within {self._timeout_s:g}s") from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        # No timeout here: the executor enforces the tool's, and cancellation aborts the POST.
        result = await self._call_method("tools/call", call_params(tool, arguments))
        return render_call_result(tool, result)

    async def aclose(self) -> None:
        """End the session (DELETE, best effort: a server may answer 405) and close an owned session."""
        session_id, self._session_id, self._initialized = self._session_id, None, False
        if session_id is not None and self._session is not None and not self._session.closed:
            try:
                async with asyncio.timeout(min(self._timeout_s, CLOSE_GRACE_S)):
                    async with self._session.delete(self._url, headers=self._request_headers(session_id),
                                                    timeout=NO_TIMEOUT, **self._proxy) as resp:
                        await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.debug("MCP server %s: ending session failed: %r", self._name, exc)
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()

    # -- internals -------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            self._session = aiohttp.ClientSession(timeout=NO_TIMEOUT)
            self._owns_session = True
        return self._session

    def _request_headers(self, session_id: str | None) -> CIMultiDict[str]:
        headers = self._headers.copy()
        if session_id is not None:
            headers["Mcp-Session-Id"] = session_id
        if self._protocol_version is not None:
            headers["MCP-Protocol-Version"] = self._protocol_version
        traceparent = tracing.OUTGOING.get()  # a tool call's span, when tracing is on
        if traceparent is not None:
            headers["traceparent"] = traceparent
        return headers

    async def _call_method(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Handshake if needed, send, and on an expired session re-initialize once and resend."""
        await self._ensure_initialized()
        generation = self._generation
        try:
            message = await self._post(method, params, self._session_id)
        except SessionExpired:
            log.info("MCP server %s: session expired, re-initializing", self._name)
            await self._ensure_initialized(expired=generation)
            try:
                message = await self._post(method, params, self._session_id)
            except SessionExpired:
                self._initialized = False
                raise ToolFailure(f"MCP server {self._name} rejected a freshly initialized session") from None
        assert message is not None  # a request (unlike a notification) always gets a message
        return result_of(self._name, method, message)

    async def _ensure_initialized(self, expired: int | None = None) -> None:
        """Run the handshake unless done; ``expired`` names the generation a 404 invalidated."""
        if self._initialized and (expired is None or expired != self._generation):
            return
        async with self._init_lock:
            if self._initialized and (expired is None or expired != self._generation):
                return  # another task did it while we waited
            self._initialized = False
            self._session_id = None
            self._protocol_version = None
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self._handshake()
            except TimeoutError:
                raise ToolFailure(f"MCP server {self._name} did not initialize within {self._timeout_s:g}s") from None
            self._generation += 1
            self._initialized = True

    async def _handshake(self) -> None:
        rpc_id = next(self._ids)
        body = orjson.dumps(rpc_request(rpc_id, "initialize", initialize_params()))
        async with self._send(body, None) as resp:
            if resp.status == 404:
                raise ToolFailure(f"MCP server {self._name} answered HTTP 404 to initialize")
            message = await self._read_response(resp, rpc_id, "initialize")
            session_id = resp.headers.get("Mcp-Session-Id")
        assert message is not None
        result = result_of(self._name, "initialize", message)
        version = result.get("protocolVersion")
        self._protocol_version = version if isinstance(version, str) and version else PROTOCOL_VERSION
        self._session_id = session_id
        body = orjson.dumps(rpc_notification("notifications/initialized"))
        async with self._send(body, session_id) as resp:
            await self._read_response(resp, None, "notifications/initialized")

    async def _post(self, method: str, params: dict[str, Any] | None, session_id: str | None) -> dict[str, Any] | None:
        rpc_id = next(self._ids)
        async with self._send(orjson.dumps(rpc_request(rpc_id, method, params)), session_id) as resp:
            if resp.status == 404 and session_id is not None:
                raise SessionExpired()
            return await self._read_response(resp, rpc_id, method)

    @contextlib.asynccontextmanager
    async def _send(self, body: bytes, session_id: str | None) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body``; connection problems become ToolFailure with a short reason."""
        if self._proxy_error is not None:
            raise ToolFailure(f"Cannot reach MCP server {self._name}: its egress proxy is misconfigured")
        try:
            async with self._client().post(self._url, data=body, headers=self._request_headers(session_id),
                                           timeout=NO_TIMEOUT, **self._proxy) as resp:
                yield resp
        except aiohttp.ClientConnectorError as exc:
            log.warning("MCP server %s: cannot connect to %s: %s", self._name, self._url, exc)
            raise ToolFailure(f"Could not connect to MCP server {self._name} ({_reason(exc)})") from None
        except aiohttp.ClientError as exc:
            log.warning("MCP server %s: request to %s failed: %r", self._name, self._url, exc)
            raise ToolFailure(f"Request to MCP server {self._name} failed ({type(exc).__name__}: {exc})") from None

    async def _read_response(self, resp: aiohttp.ClientResponse, rpc_id: int | None,
                             method: str) -> dict[str, Any] | None:
        """The JSON-RPC response for ``rpc_id`` from a JSON or SSE body (None for a notification)."""
        if not 200 <= resp.status < 300:
            text = (await read_bounded(resp, f"MCP server {self._name}")).decode("utf-8", "replace")
            detail = f": {excerpt(text)}" if text else ""
            raise ToolFailure(f"HTTP {resp.status} from MCP server {self._name} ({method}){detail}")
        if rpc_id is None:
            await resp.read()  # 202 Accepted, no body; drain so the connection is reused
            return None
        content_type = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type == "text/event-stream":
            async for data in sse_data(resp, f"MCP server {self._name}"):
                for message in parse_messages(data):
                    if is_response_to(message, rpc_id):
                        return message
                    log.debug("MCP server %s: ignoring message on %s stream: %.200r", self._name, method, message)
            raise ToolFailure(f"MCP server {self._name} closed the {method} stream without a response")
        raw = await read_bounded(resp, f"MCP server {self._name}")
        for message in parse_messages(raw):
            if is_response_to(message, rpc_id):
                return message
        raise ToolFailure(f"MCP server {self._name} sent no valid response to {method}: "
                          f"{excerpt(raw.decode('utf-8', 'replace'))}")


def _reason(exc: aiohttp.ClientConnectorError) -> str:
    """A short cause without host or port: "Connection refused", "Name or service not known"."""
    err = exc.os_error
    if err.errno is not None and err.errno > 0:
        return os.strerror(err.errno)
    return err.strerror or type(exc).__name__
