"""The upstream HTTP client: one pooled aiohttp session per provider.

aiohttp, not httpx, because on this hot path the client's own bookkeeping dominates: measured
here, a pass-through spends ~0.26 ms CPU per request with aiohttp against ~1.6 ms with httpx
(bench/README.md). The rest of the gateway sees only ``post``/``stream`` and canonical
``ProviderError``s, so the client can be swapped without touching routing or adapters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp

from gateway.config.model import ProviderConfig
from gateway.providers.base import ErrorClass, ProviderError, UpstreamRequest


@dataclass(slots=True)
class UpstreamReply:
    status: int
    headers: Mapping[str, str]  # case-insensitive (aiohttp's CIMultiDictProxy): read only on errors
    body: bytes


class UpstreamStream:
    """An open streaming response; ``chunks()`` yields body bytes as they arrive."""

    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _transport_error(exc) from None

    def chunks(self) -> _Chunks:
        """Body bytes as they arrive, with transport failures already in canonical form."""
        return _Chunks(self._response.content)


class _Chunks:
    """An async iterator over a streaming body: a plain ``__anext__``, no generator frame per read."""

    __slots__ = ("_content",)

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _transport_error(exc) from None
        if not chunk:
            raise StopAsyncIteration
        return chunk


def _transport_error(exc: BaseException) -> ProviderError:
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return ProviderError(ErrorClass.TIMEOUT, "upstream did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ProviderError(ErrorClass.CONNECTION, f"cannot connect to upstream: {exc.os_error or exc}")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return ProviderError(ErrorClass.CONNECTION, "upstream connection broke while sending the body")
    return ProviderError(ErrorClass.CONNECTION, f"upstream connection failed: {type(exc).__name__}: {exc}")


class UpstreamPool:
    """Sessions are created lazily inside the running loop and closed with the app."""

    def __init__(self, providers: dict[str, ProviderConfig]) -> None:
        self._providers = providers
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def _session(self, provider: ProviderConfig) -> aiohttp.ClientSession:
        session = self._sessions.get(provider.name)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=provider.max_connections, limit_per_host=0,
                                             keepalive_timeout=60, ttl_dns_cache=300)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=provider.connect_timeout_s,
                                            sock_read=provider.timeout_s)
            session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=True)
            self._sessions[provider.name] = session
        return session

    async def post(self, provider: ProviderConfig, request: UpstreamRequest) -> UpstreamReply:
        session = self._session(provider)
        try:
            async with session.post(request.url, data=request.body, headers=request.headers) as response:
                body = await response.read()
                return UpstreamReply(response.status, response.headers, body)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _transport_error(exc) from None

    @asynccontextmanager
    async def stream(self, provider: ProviderConfig, request: UpstreamRequest,
                     headers_timeout_s: float) -> AsyncIterator[UpstreamStream]:
        """Open a streaming POST; leaving the block (or being cancelled) releases the connection."""
        session = self._session(provider)
        try:
            if headers_timeout_s >= provider.timeout_s:
                # The read timeout fires first: no extra timer on the common path.
                response = await session.post(request.url, data=request.body, headers=request.headers)
            else:
                async with asyncio.timeout(headers_timeout_s):
                    response = await session.post(request.url, data=request.body, headers=request.headers)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _transport_error(exc) from None
        try:
            yield UpstreamStream(response)
        finally:
            # A response abandoned mid-body cannot be reused; close() drops the connection so
            # the upstream stops generating (and billing) for a client that went away.
            if response.content.at_eof():
                response.release()
            else:
                response.close()

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
