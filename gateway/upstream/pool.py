"""The upstream HTTP client as the rest of the gateway sees it: ``post`` and ``stream``.

One ``Http1Client`` (a lean keep-alive HTTP/1.1 client, ``http1.py``) per provider, because the
upstream client's own machinery was a large share of a proxied request's CPU (bench/README.md).
Routing and the adapters see only this module's small surface and canonical ``ProviderError``s,
so the client can be swapped without touching them. The pool knows an upstream by name and by the
plain values of ``Upstream`` (never a provider's config), so the transport depends on no provider
code and config on no transport code (gateway/providers/upstreams.py makes one from the other).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.config.transport import PoolLimits, Timeouts
from gateway.observability import tracing
from gateway.upstream.connection import Connection
from gateway.upstream.headers import ResponseHeaders
from gateway.upstream.http1 import Http1Client, default_tls_context
from gateway.upstream.proxy import environment_proxies

_USER_AGENT = "loopgate/0.1"


@dataclass(frozen=True, slots=True)
class Upstream:
    """What the pool needs to know of one upstream to open its client."""

    timeouts: Timeouts
    limits: PoolLimits
    #: its base URL is https: the pool loads the trust store (once) only if some upstream needs it
    https: bool = False
    #: the request headers it sets itself, lower-cased: the pool adds no User-Agent/Accept-Encoding of its own then
    header_names: frozenset[str] = frozenset()


@dataclass(slots=True)
class UpstreamRequest:
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class UpstreamReply:
    status: int
    headers: Mapping[str, str]  # case-insensitive; read only on errors
    body: bytes


class UpstreamStream:
    """An open streaming response; ``chunks()`` yields body bytes as they arrive."""

    __slots__ = ("_conn", "headers", "status")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.status = conn.status
        self.headers: Mapping[str, str] = ResponseHeaders(conn.raw_headers)

    async def read(self) -> bytes:
        return await self._conn.read_all()

    def content_by(self, deadline: float, message: str) -> None:
        """No content by ``deadline`` (``time.monotonic()``): the next read fails with a TIMEOUT saying ``message``."""
        self._conn.content_by(deadline, message)

    def idle_after(self, seconds: float | None) -> None:
        """Content flows: lift ``content_by``; a silence longer than ``seconds`` (None: the read timeout) fails."""
        self._conn.idle_after(seconds)

    def chunks(self) -> _Chunks:
        """Body bytes as they arrive; transport failures are already ``ProviderError``s."""
        return _Chunks(self._conn)


class _Chunks:
    """An async iterator over a streaming body: a plain ``__anext__``, no generator frame per read."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._conn.read_some()
        if not chunk:
            raise StopAsyncIteration
        return chunk


class UpstreamPool:
    """One client per upstream, created on first use; all closed with the app."""

    def __init__(self, upstreams: Mapping[str, Upstream]) -> None:
        self._upstreams = dict(upstreams)
        self._clients: dict[str, Http1Client] = {}
        # Loading the trust store reads files: once, at start-up, and only if an upstream needs it.
        needs_tls = any(upstream.https for upstream in upstreams.values())
        self._tls: ssl.SSLContext | None = default_tls_context() if needs_tls else None
        self._proxies = environment_proxies()  # HTTPS_PROXY / HTTP_PROXY / NO_PROXY, read once

    def _client(self, name: str) -> Http1Client:
        client = self._clients.get(name)
        if client is None:
            upstream = self._upstreams[name]
            custom = upstream.header_names
            extra = "" if "user-agent" in custom else f"User-Agent: {_USER_AGENT}\r\n"
            if "accept-encoding" not in custom:
                extra += "Accept-Encoding: gzip, deflate\r\n"
            client = Http1Client(timeouts=upstream.timeouts, limits=upstream.limits, extra_head=extra, tls=self._tls,
                                 proxies=self._proxies)
            self._clients[name] = client
        return client

    async def post(self, upstream: str, request: UpstreamRequest, deadline: float) -> UpstreamReply:
        """The whole exchange with the upstream named ``upstream``, ended by ``deadline`` (a
        ``time.monotonic()`` instant): the wait for a connection, connecting, sending and every
        read; past it, a ``TIMEOUT`` error."""
        sent = request.headers
        if tracing.OUTGOING.get() is not None:
            sent = _traced(sent)
        status, headers, body = await self._client(upstream).post(request.url, sent, request.body, deadline)
        return UpstreamReply(status, headers, body)

    @asynccontextmanager
    async def stream(self, upstream: str, request: UpstreamRequest, deadline: float) -> AsyncIterator[UpstreamStream]:
        """Open a streaming POST to the upstream named ``upstream``; leaving the block (or being
        cancelled) releases the connection.

        Opening and every later read end by ``deadline`` (a ``time.monotonic()`` instant). A
        response abandoned mid-body closes its connection, so the upstream stops generating
        (and billing) for a client that went away."""
        client = self._client(upstream)
        sent = request.headers
        if tracing.OUTGOING.get() is not None:
            sent = _traced(sent)
        conn = await client.open_stream(request.url, sent, request.body, deadline)
        try:
            yield UpstreamStream(conn)
        finally:
            client.release(conn)

    def stats(self) -> dict[str, tuple[int, int, int]]:
        """Per provider that was called: connections (in use, idle, waiting)."""
        return {name: client.stats() for name, client in self._clients.items()}

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


def _traced(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus the model call's ``traceparent`` when ``observability.propagate_to_providers`` is on."""
    traceparent = tracing.OUTGOING.get()
    return headers if traceparent is None else {**headers, "traceparent": traceparent}
