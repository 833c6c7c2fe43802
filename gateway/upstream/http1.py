"""A lean HTTP/1.1 client for calls to model providers: pooling and connecting.

The exchange on one socket (an asyncio protocol over llhttp) is ``http1_connection.py``.
Why not aiohttp on this path: a gateway makes one upstream call per model call, and aiohttp's
client spent a large share of each request in its own machinery (request and response objects,
multidicts, trace hooks, stream readers, per-call timers; bench/README.md). Calls to an LLM API
need much less: a POST whose body is already bytes, keep-alive connections per origin, a response
framed by Content-Length, chunked encoding or connection close, gzip/deflate, connect and read
timeouts, TLS. That is what this module does, with the response parsed by ``httptools``
(llhttp, the parser uvicorn and Node use). Bifrost makes the same choice in Go (fasthttp instead of net/http).

Every exchange runs under a deadline (an absolute ``time.monotonic()`` instant, the request's):
the wait for a pooled connection, connecting, and every wait for the response end by it, each
also bounded by its own timeout. Failures surface as canonical ``ProviderError``s. POSTs are never resent on another
connection: a request that fails after it was written may have reached the model, and the
router decides about retries (as aiohttp does for non-idempotent methods).
"""

from __future__ import annotations

import asyncio
import math
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast
from urllib.parse import urlsplit

import aiohappyeyeballs

from gateway.config.transport import PoolLimits, Timeouts
from gateway.upstream.connection import Connection
from gateway.upstream.errors import ErrorClass, ProviderError
from gateway.upstream.headers import ResponseHeaders
from gateway.upstream.proxy import Proxy, open_tunnel, proxy_for

DNS_TTL_S = 300.0
_URL_CACHE_SIZE = 1024

AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a URL's request goes, and the first lines of its request head."""

    key: tuple[str, int, bool]
    host: str
    port: int
    tls: bool
    authority: str  # host[:port] as in the Host header
    path: str
    head: str  # "POST <path> HTTP/1.1\r\nHost: <authority>\r\n"
    proxy: Proxy | None = None


def parse_url(url: str) -> Origin:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderError(ErrorClass.CONNECTION, f"unsupported upstream URL: {url!r}")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError:
        raise ProviderError(ErrorClass.CONNECTION, f"invalid port in upstream URL: {url!r}") from None
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    host = parts.hostname
    authority = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        authority = f"{authority}:{port}"
    return Origin((host, port, tls), host, port, tls, authority, path,
                  f"POST {path} HTTP/1.1\r\nHost: {authority}\r\n")


def through_proxy(origin: Origin, proxy: Proxy) -> Origin:
    """An HTTPS origin keeps its head (the proxy only tunnels); a plain-HTTP one is sent to the
    proxy in absolute form, with the proxy's credentials."""
    if origin.tls:
        return replace(origin, proxy=proxy)
    auth = f"Proxy-Authorization: {proxy.authorization}\r\n" if proxy.authorization else ""
    head = f"POST http://{origin.authority}{origin.path} HTTP/1.1\r\nHost: {origin.authority}\r\n{auth}"
    return replace(origin, proxy=proxy, head=head)


class Http1Client:
    """The connections of one provider: keep-alive per origin, at most ``limits.max_connections`` in use at once."""

    def __init__(self, *, timeouts: Timeouts, limits: PoolLimits, extra_head: str, tls: ssl.SSLContext | None,
                 proxies: Mapping[str, str] | None = None) -> None:
        self.timeouts = timeouts
        self.limits = limits
        # Read on every request: kept as plain attributes (one look-up each, as before the two objects).
        self._limit = limits.max_connections
        self._pool_timeout_s = timeouts.pool
        # Idle keep-alive connections older than this are closed, never reused: below the
        # server's own idle timeout, so a request is not written into a socket it is closing.
        self._idle_timeout_s = limits.keepalive_expiry
        self._extra_head = extra_head  # constant header lines, e.g. User-Agent, Accept-Encoding
        self._tls = tls
        self._proxies = dict(proxies or {})  # as http1_proxy.environment_proxies() gives them
        self._origins: dict[str, Origin] = {}
        self._idle: dict[tuple[str, int, bool], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._in_use = 0
        self._queue: deque[asyncio.Future[None]] = deque()
        self._dns: dict[tuple[str, int], tuple[float, list[AddrInfo]]] = {}
        self._closed = False

    def origin(self, url: str) -> Origin:
        origin = self._origins.get(url)
        if origin is None:
            origin = parse_url(url)
            proxy = proxy_for(origin.host, origin.tls, self._proxies) if self._proxies else None
            if proxy is not None:
                origin = through_proxy(origin, proxy)
            if len(self._origins) >= _URL_CACHE_SIZE:
                self._origins.clear()
            self._origins[url] = origin
        return origin

    def head(self, origin: Origin, headers: Mapping[str, str], body_length: int) -> bytes:
        text = "".join([origin.head, self._extra_head, *[f"{k}: {v}\r\n" for k, v in headers.items()],
                        f"Content-Length: {body_length}\r\n\r\n"])
        # Every line ends in exactly one CRLF: a CR or LF inside a name or value (header
        # injection from a configured header) shows up as an extra one.
        lines = origin.head.count("\n") + self._extra_head.count("\n") + len(headers) + 2
        if text.count("\n") != lines or text.count("\r") != lines:
            # The provider's own configuration (its key, its headers) is unusable: a target fault.
            raise ProviderError(ErrorClass.AUTH, "a request header for this provider contains a line break")
        return text.encode()

    async def post(self, url: str, headers: Mapping[str, str], body: bytes,
                   deadline: float = math.inf) -> tuple[int, ResponseHeaders, bytes]:
        """One whole exchange, ended by ``deadline``: status, headers and the complete body."""
        conn = await self._send(url, headers, body, streaming=False, deadline=deadline)
        try:
            data = await conn.read_all()
        except BaseException:
            self.release(conn)
            raise
        self.release(conn)
        return conn.status, ResponseHeaders(conn.raw_headers), data

    async def open_stream(self, url: str, headers: Mapping[str, str], body: bytes,
                          deadline: float = math.inf) -> Connection:
        """Send a POST and wait for the response head; the caller reads the body (every read
        also ends by ``deadline``) and must ``release`` the connection (an unfinished body closes it)."""
        return await self._send(url, headers, body, streaming=True, deadline=deadline)

    async def _send(self, url: str, headers: Mapping[str, str], body: bytes, *, streaming: bool,
                    deadline: float) -> Connection:
        origin = self.origin(url)
        head = self.head(origin, headers, len(body))
        conn = await self.acquire(origin, deadline)
        try:
            conn.send(head, body, streaming, deadline)
            await conn.wait_headers()
        except BaseException:
            self.release(conn)
            raise
        return conn

    async def acquire(self, origin: Origin, deadline: float = math.inf) -> Connection:
        """A connection to ``origin`` (pooled or new), waiting for a free slot and connecting
        by ``deadline`` (a ``time.monotonic()`` instant)."""
        if self._closed:
            raise ProviderError(ErrorClass.CONNECTION, "the upstream client is shut down")
        if self._in_use >= self._limit or self._queue:
            # The slot is handed over already counted; waiting for it is bounded on its own too.
            loop = asyncio.get_running_loop()
            await self._wait_for_slot(min(on_loop_clock(deadline, loop), loop.time() + self._pool_timeout_s))
        else:
            self._in_use += 1
        try:
            idle = self._idle.get(origin.key)
            while idle:
                conn = idle.pop()
                # The connection's own loop clock: asyncio's running-loop look-up is a system call
                # (getpid) on Python 3.11, twice per request on this path.
                if not conn.closed and conn.loop.time() - conn.idle_since < self._idle_timeout_s:
                    return conn
                self._drop(conn)
            return await self._connect(origin, deadline)
        except BaseException:
            self._free_slot()
            raise

    def release(self, conn: Connection) -> None:
        """Back to the idle list when the exchange finished cleanly; otherwise closed (a
        response abandoned mid-body cannot be reused, and closing stops the upstream's work)."""
        if conn.reusable and not self._closed and self._idle_timeout_s > 0:
            now = conn.idle_since = conn.loop.time()
            idle = self._idle.setdefault(conn.origin_key, [])
            idle.append(conn)
            # Reuse is LIFO, so connections at the bottom may sit unused after a burst: drop
            # those the server closed or that idled past the keep-alive, oldest first.
            while idle[0].closed or now - idle[0].idle_since >= self._idle_timeout_s:
                self._drop(idle.pop(0))
        else:
            self._drop(conn)
        self._free_slot()

    def _drop(self, conn: Connection) -> None:
        conn.close()
        self._open.discard(conn)

    async def _connect(self, origin: Origin, deadline: float) -> Connection:
        loop = asyncio.get_running_loop()
        conn = Connection(loop, origin.key, self.timeouts, self.limits)
        tls = None
        if origin.tls:
            if self._tls is None:  # a client built without one: the system trust store, loaded once
                self._tls = default_tls_context()
            tls = self._tls
        proxy = origin.proxy
        host, port = (proxy.host, proxy.port) if proxy is not None else (origin.host, origin.port)
        try:
            async with asyncio.timeout_at(min(loop.time() + self.timeouts.connect, on_loop_clock(deadline, loop))):
                addresses = await self._resolve(host, port, loop)
                # Happy eyeballs (RFC 8305): a host whose IPv6 route is broken still connects
                # over IPv4 quickly, instead of hanging on the first address until the timeout.
                sock = await aiohappyeyeballs.start_connection(addresses, happy_eyeballs_delay=0.25, interleave=1)
                try:
                    if proxy is not None and tls is not None:
                        host_part = f"[{origin.host}]" if ":" in origin.host else origin.host
                        tunnel = await open_tunnel(loop, sock, f"{host_part}:{origin.port}", proxy)
                        secured = await loop.start_tls(tunnel, conn, tls, server_hostname=origin.host)
                        if secured is None:  # only when the loop has no TLS at all
                            raise OSError("TLS is not available on this event loop")
                        conn.connection_made(secured)
                    else:
                        await loop.create_connection(lambda: conn, sock=sock, ssl=tls,
                                                     server_hostname=origin.host if tls else None)
                except BaseException:
                    sock.close()
                    raise
        except (OSError, ValueError) as exc:  # timeout, refused, unreachable, DNS, TLS, an IDNA-invalid name
            conn.close()
            self._dns.pop((host, port), None)  # the address may have moved: resolve afresh next time
            if isinstance(exc, TimeoutError):
                raise ProviderError(ErrorClass.TIMEOUT, "upstream did not accept the connection in time") from None
            via = f" through the proxy {proxy.host}:{proxy.port}" if proxy is not None else ""
            raise ProviderError(ErrorClass.CONNECTION, f"cannot connect to upstream{via}: {exc}") from None
        except ProviderError:
            conn.close()
            raise
        self._open.add(conn)
        return conn

    async def _resolve(self, host: str, port: int, loop: asyncio.AbstractEventLoop) -> list[AddrInfo]:
        """Addresses cached for ``DNS_TTL_S`` (dropped at once when a connect fails): new
        connections are rare with keep-alive, but a burst after idle would otherwise queue on
        the resolver's thread pool."""
        key = (host, port)
        cached = self._dns.get(key)
        now = loop.time()
        if cached is not None and cached[0] > now:
            return cached[1]
        infos = cast(list[AddrInfo], await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        if not infos:
            raise OSError(f"no address for {host}")
        self._dns[key] = (now + DNS_TTL_S, infos)
        return infos

    async def _wait_for_slot(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._queue.append(waiter)
        timer = loop.call_at(deadline, _expire, waiter) if deadline != math.inf else None
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._free_slot()  # handed over just as we were cancelled: pass it on
            elif waiter in self._queue:  # a slot being freed may have skipped it already
                self._queue.remove(waiter)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _free_slot(self) -> None:
        # Waiters that timed out or were cancelled are done already and get skipped.
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands; the count stays
                return
        self._in_use -= 1

    def stats(self) -> tuple[int, int, int]:
        """(in use, idle, waiting): read at scrape time, so the hot path keeps no extra counters."""
        waiting = sum(1 for waiter in self._queue if not waiter.done())
        return self._in_use, sum(len(idle) for idle in self._idle.values()), waiting

    def close(self) -> None:
        self._closed = True
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()


def on_loop_clock(deadline: float, loop: asyncio.AbstractEventLoop) -> float:
    """A ``time.monotonic()`` instant on the loop's clock (uvloop keeps its own); inf stays inf."""
    return deadline + (loop.time() - time.monotonic())


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(ProviderError(ErrorClass.TIMEOUT, "no upstream connection became free in time "
                                                               "(all max_connections busy)"))


def default_tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context
