"""MCP over Streamable HTTP: the SDK's transport on an HTTP client configured here.

The client carries what the gateway promises for every tool service: the configured headers, the
egress proxy the environment names (``client_proxy``'s rules: loopback direct, ``NO_PROXY``,
credentials on the CONNECT or the request), a size bound on every answer (a JSON body or an SSE
stream, :data:`~gateway.tools.bounded.MAX_TOOL_RESPONSE_BYTES`), and the ``traceparent`` of the
tool call a request belongs to. Its hooks also note, for the call running in the request's
context, an HTTP error status with an excerpt of its body and a 404 for the session id (the
session expired: the source re-initializes once and resends).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from urllib.parse import urlsplit

import httpx2
import orjson
from mcp.client.streamable_http import streamable_http_client

from gateway.config.approval_section import ApprovalMode
from gateway.config.mcp_section import DEFAULT_SAMPLING_MAX_TOKENS, ElicitationPolicy
from gateway.observability.tracing import OUTGOING
from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolFailure, ToolTimeouts
from gateway.tools.bounded import MAX_TOOL_RESPONSE_BYTES
from gateway.tools.mcp.connection import EXCHANGE, Exchange, McpSource, Transport
from gateway.tools.mcp.protocol import excerpt
from gateway.upstream.errors import ProviderError
from gateway.upstream.proxy import environment_proxies, proxy_for

log = logging.getLogger("loopgate.tools.mcp")


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that stops (``ReadError``) once it passes ``limit`` bytes."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, exchange: Exchange | None) -> None:
        self._inner = inner
        self._limit = limit
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                if self._exchange is not None and self._exchange.too_large is None:
                    self._exchange.too_large = self._limit
                raise httpx2.ReadError(f"the answer is larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedTransport(httpx2.AsyncBaseTransport):
    """Bounds every body and notes a connection failure for the call whose request it was."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = EXCHANGE.get()
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            if exchange is not None and exchange.error is None:
                exchange.error = exc
            raise
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _BoundedStream(response.stream, self._limit, exchange)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _proxy(url: str, proxies: Mapping[str, str]) -> httpx2.Proxy | None:
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    proxy = proxy_for(parts.hostname, parts.scheme == "https", proxies)
    if proxy is None:
        return None
    host = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
    headers = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
    return httpx2.Proxy(f"http://{host}:{proxy.port}", headers=headers)


def _method_of(request: httpx2.Request) -> str:
    if request.method != "POST":
        return request.method
    try:
        message = orjson.loads(request.content)
    except (orjson.JSONDecodeError, httpx2.RequestNotRead):
        return ""
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else ""


def _reason(exc: BaseException) -> str:
    """A short cause without host or port: "Connection refused", "Name or service not known"."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno)
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    if "Connection refused" in text or f"[Errno {errno.ECONNREFUSED}]" in text:
        return "Connection refused"
    return text or type(exc).__name__


class McpHttpSource(McpSource):
    """One MCP server reached over Streamable HTTP, behind the ToolSource interface."""

    def __init__(self, name: str, url: str, headers: dict[str, str] | None = None,
                 timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS, approval: ApprovalMode = "never",
                 proxies: Mapping[str, str] | None = None, elicitation: ElicitationPolicy = "pause",
                 sampling_route: str | None = None, sampling_max_tokens: int = DEFAULT_SAMPLING_MAX_TOKENS) -> None:
        super().__init__(name, timeouts, approval, elicitation, sampling_route, sampling_max_tokens)
        self._url = url
        self._session_id: str | None = None
        self._proxy_error: str | None = None  # never sent direct when the environment demands a proxy
        proxy = None
        try:
            proxy = _proxy(url, environment_proxies() if proxies is None else proxies)
        except ProviderError as exc:
            log.error("MCP server %s: %s", name, exc.message)
            self._proxy_error = exc.message
        inner = httpx2.AsyncHTTPTransport(proxy=proxy)
        self._http = httpx2.AsyncClient(
            headers=headers or {}, transport=_BoundedTransport(inner, MAX_TOOL_RESPONSE_BYTES), trust_env=False,
            timeout=httpx2.Timeout(timeouts.call, read=None),
            event_hooks={"request": [self._on_request], "response": [self._on_response]})

    @property
    def session_id(self) -> str | None:
        """The server's ``Mcp-Session-Id`` (None before the handshake or for a stateless server)."""
        return self._session_id

    async def aclose(self) -> None:
        await super().aclose()
        await self._http.aclose()

    def _open_transport(self, on_closed: Callable[[], None]) -> Transport:
        if self._proxy_error is not None:
            raise ToolFailure(f"Cannot reach MCP server {self.name}: its egress proxy is misconfigured")
        self._session_id = None
        return streamable_http_client(self._url, http_client=self._http)

    def _transport_failure(self, exc: BaseException) -> ToolFailure | None:
        if isinstance(exc, ToolFailure):
            return exc
        if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
            log.warning("MCP server %s: cannot connect to %s: %s", self.name, self._url, exc)
            return ToolFailure(f"Could not connect to MCP server {self.name} ({_reason(exc)})")
        if isinstance(exc, httpx2.TransportError):
            log.warning("MCP server %s: request to %s failed: %r", self.name, self._url, exc)
            return ToolFailure(f"Request to MCP server {self.name} failed ({type(exc).__name__}: {exc})")
        return None

    async def _on_request(self, request: httpx2.Request) -> None:
        traceparent = OUTGOING.get()  # a tool call's span, when tracing is on
        if traceparent is not None:
            request.headers["traceparent"] = traceparent

    async def _on_response(self, response: httpx2.Response) -> None:
        request = response.request
        exchange = EXCHANGE.get()
        session_id = response.headers.get("mcp-session-id")
        if session_id and "mcp-session-id" not in request.headers:
            self._session_id = session_id
        if exchange is None:
            return
        if response.status_code < 400:
            # An error the SDK got past (the stateless probe a handshake-era server refuses, a GET
            # stream it does not offer) is not what a later failure of this exchange is about.
            exchange.http_status = None
            return
        if response.status_code == 404 and "mcp-session-id" in request.headers:
            exchange.session_gone = True
            return
        await response.aread()  # an error body: small, and bounded by the transport
        exchange.http_status = response.status_code
        exchange.http_method = _method_of(request)
        exchange.http_detail = excerpt(response.text) if response.content else ""
